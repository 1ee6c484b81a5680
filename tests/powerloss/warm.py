"""Daemon starts without the wait for imports: a spare interpreter per daemon that has
imported the daemon's modules ahead of its next start, and runs it when told to.

A daemon process that starts spends a second or more (on a loaded machine) importing gRPC,
protobuf and the project before it does anything of its own; a power-cut series restarts
daemons after every cut, and those imports were most of a cut's cost. ``WarmStarts`` keeps a
spare ``python`` per daemon, started with the daemon's working directory, environment and
log, that imports the modules and then waits on its stdin. The daemon's launcher
(``hadev.daemon.DaemonProcess.popen``, set to ``WarmStarts.popen_for(name)``) hands the
daemon's command line to the spare instead of starting a cold process: the spare becomes
the daemon (its pid, its exit status, its signals), a fresh process that shares nothing
with the run before. Anything that does not match the spare (another command, directory,
environment or log, or a spare that died) is started cold, as ``subprocess.Popen`` would.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SPARE = r"""
import importlib, json, os, runpy, sys
for name in sys.argv[1:]:
    importlib.import_module(name)
line = sys.stdin.readline()
if not line:
    sys.exit(0)  # never used: the pool was closed
argv = json.loads(line)
null = os.open(os.devnull, os.O_RDONLY)
os.dup2(null, 0)  # as a cold start's stdin (DEVNULL)
os.close(null)
sys.argv = argv
runpy.run_module(argv[0], run_name="__main__", alter_sys=True)
"""

PRELOAD: Mapping[str, tuple[str, ...]] = {
    "journalnode": ("journalnode.cli", "journalnode.server", "journalnode.file_storage"),
    "namenoded": ("namenoded.cli", "hanamenode.cli", "hanamenode.server",
                  "hanamenode.namesystem", "hanamenode.fsimage", "qjm.journal_manager"),
}
"""What a spare of each daemon module (``python -m <module>``) imports ahead."""


@dataclass(frozen=True)
class _Key:
    """What a spare was made for; a start that asks for anything else is started cold."""

    module: str
    cwd: str
    log: str
    env: tuple[tuple[str, str], ...]


class WarmStarts:
    """One spare interpreter per daemon name (module docstring); ``close`` ends the unused
    ones."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._spares: dict[str, tuple[_Key, subprocess.Popen[bytes]]] = {}
        self.warm = 0
        self.cold = 0

    def prepare(self, name: str, module: str, cwd: Path, log: Path, env: dict[str, str]) -> None:
        """Start a spare for daemon ``name`` (``python -m module``) unless one waits."""
        key = _Key(module, str(cwd), str(log), tuple(sorted(env.items())))
        with self._lock:
            held = self._spares.get(name)
            if held is not None and held[0] == key and held[1].poll() is None:
                return
        with open(log, "ab") as out:
            spare = subprocess.Popen(
                [sys.executable, "-c", SPARE, *PRELOAD[module]],
                stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT, cwd=cwd,
                env=env, start_new_session=True,
            )
        with self._lock:
            old = self._spares.get(name)
            self._spares[name] = (key, spare)
        if old is not None:
            _end(old[1])

    def popen_for(self, name: str) -> Callable[..., subprocess.Popen[bytes]]:
        """The ``popen`` of daemon ``name``'s launcher: its spare when one fits."""

        def popen(args: Sequence[str], **kwargs: Any) -> subprocess.Popen[bytes]:
            spare = self._take(name, args, kwargs)
            if spare is None:
                self.cold += 1
                return subprocess.Popen(args, **kwargs)
            assert spare.stdin is not None
            spare.stdin.write(json.dumps([args[2], *args[3:]]).encode() + b"\n")
            spare.stdin.close()
            self.warm += 1
            return spare

        return popen

    def _take(
        self, name: str, args: Sequence[str], kwargs: dict[str, Any]
    ) -> subprocess.Popen[bytes] | None:
        with self._lock:
            held = self._spares.pop(name, None)
        if held is None:
            return None
        key, spare = held
        out = kwargs.get("stdout")
        wanted = _Key(
            args[2] if len(args) > 2 and list(args[:2]) == [sys.executable, "-m"] else "",
            str(kwargs.get("cwd")),
            str(getattr(out, "name", "")),
            tuple(sorted((kwargs.get("env") or {}).items())),
        )
        if wanted != key or spare.poll() is not None or not kwargs.get("start_new_session"):
            _end(spare)
            return None
        return spare

    def close(self) -> None:
        with self._lock:
            spares, self._spares = list(self._spares.values()), {}
        for _, spare in spares:
            _end(spare)


def _end(spare: subprocess.Popen[bytes]) -> None:
    """An unused spare exits when its stdin closes; SIGKILL if it does not at once."""
    if spare.stdin is not None and not spare.stdin.closed:
        spare.stdin.close()
    try:
        spare.wait(5)
    except subprocess.TimeoutExpired:
        spare.kill()
        spare.wait(5)

