"""``hadev.crashfs`` against plain files: after a cut the backing directory holds exactly
what was made durable (file data by fsync of the file, names by fsync of their directory),
and a remount shows it."""

from __future__ import annotations

import errno
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

from durable.files import atomic_write, ensure_dir, fsync_dir, is_temp_name
from hadev.crashfs import CrashMount, cut_power
from hadev.daemon import CODE_ROOT, child_environment


def write_file(path: Path, data: bytes, *, sync: bool) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def power_cycle(mount: CrashMount, **cut: object) -> None:
    mount.cut(**cut)  # type: ignore[arg-type]
    mount.remount()


def test_a_file_never_fsynced_comes_back_empty_or_absent(mount: CrashMount) -> None:
    root = mount.mountpoint
    write_file(root / "named", b"data never synced", sync=False)
    fsync_dir(root)  # the name is durable, the data is not
    write_file(root / "unnamed", b"neither", sync=False)
    power_cycle(mount)
    assert (root / "named").read_bytes() == b""
    assert not (root / "unnamed").exists()


def test_a_fsynced_file_needs_its_directory_fsynced(mount: CrashMount) -> None:
    root = mount.mountpoint
    (root / "d").mkdir()
    fsync_dir(root)
    write_file(root / "d" / "lost", b"synced data, unsynced name", sync=True)
    write_file(root / "kept", b"synced data and name", sync=True)
    fsync_dir(root)
    power_cycle(mount)
    assert os.listdir(root / "d") == []
    assert (root / "kept").read_bytes() == b"synced data and name"


def test_unsynced_appends_truncations_and_unlinks_are_undone(mount: CrashMount) -> None:
    root = mount.mountpoint
    write_file(root / "log", b"0123456789", sync=True)
    write_file(root / "gone", b"still here", sync=True)
    fsync_dir(root)
    with open(root / "log", "r+b") as f:
        f.seek(0, os.SEEK_END)
        f.write(b"appended")
        f.flush()
        os.truncate(f.fileno(), 4)
        f.seek(2)
        f.write(b"XYZW")
    os.unlink(root / "gone")
    os.rename(root / "log", root / "renamed")
    assert (root / "renamed").read_bytes() == b"01XYZW"
    power_cycle(mount)
    assert sorted(os.listdir(root)) == ["gone", "log"]
    assert (root / "log").read_bytes() == b"0123456789"
    assert (root / "gone").read_bytes() == b"still here"


def test_a_renamed_over_file_is_old_or_new_never_a_mix(mount: CrashMount) -> None:
    root = mount.mountpoint
    atomic_write(root / "f", b"old" * 1000)
    # new data fsynced and renamed over, directory not fsynced: the old file comes back
    tmp = root / "f.tmp"
    write_file(tmp, b"new" * 1000, sync=True)
    os.replace(tmp, root / "f")
    power_cycle(mount)
    assert (root / "f").read_bytes() == b"old" * 1000
    assert not tmp.exists()
    # atomic_write fsyncs the directory too: the new one
    atomic_write(root / "f", b"new" * 1000)
    power_cycle(mount)
    assert (root / "f").read_bytes() == b"new" * 1000


def test_ensure_dir_makes_a_directory_that_exists_durable(mount: CrashMount) -> None:
    """A directory whose maker died before fsyncing its parent (here: a plain mkdir) is
    made durable by ensure_dir, so a file made durable inside it survives the cut."""
    root = mount.mountpoint
    (root / "made-by-a-killed-process").mkdir()
    ensure_dir(root / "made-by-a-killed-process" / "journal")
    atomic_write(root / "made-by-a-killed-process" / "journal" / "VERSION", b"v1")
    power_cycle(mount)
    assert (root / "made-by-a-killed-process" / "journal" / "VERSION").read_bytes() == b"v1"


def test_a_mount_answers_eio_after_the_cut(mount: CrashMount) -> None:
    write_file(mount.mountpoint / "x", b"x", sync=True)
    mount.cut()
    with pytest.raises(OSError) as info:
        (mount.mountpoint / "x").read_bytes()
    assert info.value.errno == errno.EIO


def test_a_torn_write_leaves_a_proper_prefix(mount: CrashMount) -> None:
    root = mount.mountpoint
    write_file(root / "seg", b"H" * 12, sync=True)
    fsync_dir(root)
    record = bytes(range(256)) * 8
    with open(root / "seg", "ab") as f:
        f.write(record)
    report = mount.cut(torn=True, seed=3)
    mount.remount()
    data = (root / "seg").read_bytes()
    assert report.torn is not None and report.torn["offset"] == 12
    kept = report.torn["kept"]
    assert 0 < kept < len(record)
    assert (12 + kept) % 512 == 0, "a write is torn at a sector boundary"
    assert data == b"H" * 12 + record[:kept]


def test_a_write_within_one_sector_is_never_torn(mount: CrashMount) -> None:
    root = mount.mountpoint
    write_file(root / "counter", (1).to_bytes(8, "big"), sync=True)
    fsync_dir(root)
    with open(root / "counter", "r+b") as f:
        f.write((2**40 - 1).to_bytes(8, "big"))
    report = mount.cut(torn=True, seed=1)
    mount.remount()
    assert report.torn is None
    assert (root / "counter").read_bytes() == (1).to_bytes(8, "big")


WRITER = """
import sys
from pathlib import Path
from durable.files import atomic_write
path = Path(sys.argv[1])
n = 0
while True:
    n += 1
    atomic_write(path, (f"{n:08d}" * 512).encode())
    print(n, flush=True)
"""


def test_atomic_write_under_power_cuts(mount: CrashMount) -> None:
    """A process replaces one file with durable.files.atomic_write in a loop and is cut at
    random points: the file is always one whole version, at least the last acknowledged."""
    seed = int(os.environ.get("POWERLOSS_SEED") or time.time_ns() % 1_000_000_007)
    print(f"seed {seed} (POWERLOSS_SEED={seed} replays it)")
    rng = random.Random(seed)
    target = mount.mountpoint / "value"
    for cut_no in range(5):
        writer = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(target)], stdout=subprocess.PIPE, text=True,
            cwd=CODE_ROOT, env=child_environment(),
        )
        assert writer.stdout is not None
        acked = int(writer.stdout.readline())  # at least one version is durable
        time.sleep(rng.uniform(0.0, 0.3))
        cut_power([mount], [writer.pid], torn=rng.random() < 0.5, seed=rng.randrange(1 << 30))
        writer.wait(10)
        acked = max([acked, *(int(line) for line in writer.stdout.read().split())])
        writer.stdout.close()
        mount.remount()
        data = target.read_bytes()
        version = int(data[:8])
        assert data == (f"{version:08d}" * 512).encode(), f"cut {cut_no}: a torn file ({seed=})"
        assert version >= acked, f"cut {cut_no}: acknowledged {acked}, found {version} ({seed=})"
        leftovers = [name for name in os.listdir(mount.mountpoint) if name != "value"]
        assert all(is_temp_name(name) for name in leftovers), leftovers


def test_a_held_write_is_torn_by_the_cut(mount: CrashMount) -> None:
    """``hold_next_write``: a write that crosses a sector stays unanswered until the cut, so
    its writer cannot fsync it, and a torn cut keeps a sector-aligned prefix of it."""
    root = mount.mountpoint
    write_file(root / "seg", b"H" * 100, sync=True)
    fsync_dir(root)
    mount.hold_next_write("seg")
    writer = subprocess.Popen(
        [sys.executable, "-c", "import os, sys; fd = os.open(sys.argv[1], os.O_WRONLY | "
         "os.O_APPEND); os.write(fd, bytes(range(256)) * 4); os.fsync(fd); print('synced')",
         str(root / "seg")], stdout=subprocess.PIPE, text=True,
    )
    assert mount.wait_held(10.0), "the write never came"
    report = cut_power([mount], [writer.pid], torn=True, seed=5)[0]
    assert writer.wait(10) == -9 and writer.stdout is not None and writer.stdout.read() == ""
    writer.stdout.close()
    mount.remount()
    assert report.torn is not None and report.torn["offset"] == 100
    kept = report.torn["kept"]
    assert (100 + kept) % 512 == 0 and 0 < kept < 1024
    assert (root / "seg").read_bytes() == b"H" * 100 + (bytes(range(256)) * 4)[:kept]
