"""Who uses a dev cluster's directory besides what its pid files say (``hadev down``): a
daemon started by hand on its configuration, or one whose pid file is gone, still holds the
``in_use.lock`` of its storage (``durable.files``) and keeps the next ``hadev up`` from
starting. Read from ``/proc``: each process's command line, and the kernel's table of file
locks (``/proc/locks``)::

    for holder in holders(directory, DAEMON_WORDS):
        print(holder.pid, holder.why, holder.is_daemon)
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from durable.files import LOCK_FILE

__all__ = ["Holder", "holders", "lock_holders"]


@dataclass(frozen=True, slots=True)
class Holder:
    """A process that uses the directory: ``why`` says how (the lock it holds, or that its
    command line names the directory); ``is_daemon`` when it runs one of the dev cluster's
    daemons, which ``hadev down`` may stop, rather than anything else, which it only names."""

    pid: int
    command: str
    why: str
    is_daemon: bool


def _cmdline(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None  # gone, or not ours to read
    args = [a.decode(errors="replace") for a in raw.split(b"\0") if a]
    return args or None  # a zombie or a kernel thread has none


def lock_holders(paths: Sequence[Path]) -> dict[int, Path]:
    """pid -> the path of ``paths`` it holds a lock on, from ``/proc/locks`` (matched by
    device and inode: a lock names no path)."""
    wanted: dict[tuple[int, int, int], Path] = {}
    for path in paths:
        try:
            st = path.stat()
        except OSError:
            continue
        wanted[(os.major(st.st_dev), os.minor(st.st_dev), st.st_ino)] = path
    found: dict[int, Path] = {}
    try:
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return found
    for line in lines:
        # "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF"; a waiter's line has "->".
        fields = line.split()
        if len(fields) < 6 or "->" in fields:
            continue
        try:
            pid = int(fields[4])
            major, minor, inode = fields[5].split(":")
            key = (int(major, 16), int(minor, 16), int(inode))
        except ValueError:
            continue
        if key in wanted:
            found[pid] = wanted[key]
    return found


def holders(
    directory: Path, daemons: Sequence[Sequence[str]], *, exclude: Sequence[int] = ()
) -> Iterator[Holder]:
    """Every process that holds a lock under ``directory`` or runs a daemon (one of
    ``daemons``: the words its command line holds) whose command line names ``directory``.
    ``exclude`` leaves pids out (the caller itself)."""
    directory = directory.absolute()
    marker = f"{directory}{os.sep}"
    locks = lock_holders(sorted(directory.rglob(LOCK_FILE)))
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in exclude:
            continue
        pid = int(entry.name)
        args = _cmdline(pid)
        if args is None:
            continue
        is_daemon = any(all(word in args for word in words) for words in daemons)
        names_dir = any(marker in arg or arg == str(directory) for arg in args)
        if pid in locks:
            yield Holder(pid, " ".join(args), f"holds {locks[pid]}", is_daemon)
        elif is_daemon and names_dir:
            yield Holder(pid, " ".join(args), f"runs on {directory}", is_daemon)
