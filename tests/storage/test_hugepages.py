"""The checkpoint's heap in transparent huge pages (``hanamenode.hugepages``, issue 27,
docs/architecture.md §5.7): which mappings a collapse takes, as a table; a real collapse, and
one stopped between two steps, in a fresh interpreter; a checkpoint that forks a heap in
huge pages; and its image, the namespace at its txid while the loop goes on changing the
namespace (and so splitting the huge pages it shares with the child).
"""

from __future__ import annotations

import asyncio
import json
import random
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from hadev.daemon import child_environment
from hanamenode import fsimage, hugepages
from hanamenode.checkpointer import StandbyCheckpointer
from hanamenode.errors import CheckpointCancelledError
from hanamenode.hugepages import (
    HUGE_PAGE_BYTES,
    Mapping,
    Range,
    huge_page_bytes,
    parse_smaps,
    plan_collapse,
    steps,
)
from hanamenode.loop import NameNodeLoop
from hanamenode.namespace import Namespace
from hanamenode.storage import NameDirectory
from proto import edits_pb2
from proto.values import NamespaceInfo

NS_INFO = NamespaceInfo("CID-hugepages-test", 2727)
MB = 1 << 20
HP = HUGE_PAGE_BYTES

# (what the row says, the mapping, the ranges collapsed)
PLAN_ROWS: list[tuple[str, Mapping, list[Range]]] = [
    (
        "a dense anonymous mapping: the whole huge pages inside it",
        Mapping(0x7F0000001000, 0x7F0000001000 + 9 * MB, "rw-p", "", 9 * MB, 0),
        [Range(0x7F0000200000, 0x7F0000800000)],
    ),
    (
        "malloc's heap is anonymous too",
        Mapping(4 * MB, 12 * MB, "rw-p", "[heap]", 8 * MB, 0),
        [Range(4 * MB, 12 * MB)],
    ),
    (
        "a named anonymous mapping ([anon:...]) is anonymous",
        Mapping(4 * MB, 12 * MB, "rw-p", "[anon:glibc: malloc arena]", 7 * MB, 0),
        [Range(4 * MB, 12 * MB)],
    ),
    (
        "a file mapped privately is not the heap",
        Mapping(4 * MB, 12 * MB, "rw-p", "/usr/lib/libpython3.11.so", 8 * MB, 0),
        [],
    ),
    (
        "shared memory is left alone (a collapse would not be private to us)",
        Mapping(4 * MB, 12 * MB, "rw-s", "", 8 * MB, 0),
        [],
    ),
    ("read-only memory is left alone", Mapping(4 * MB, 12 * MB, "r--p", "", 8 * MB, 0), []),
    (
        "the main thread's stack is left alone",
        Mapping(4 * MB, 12 * MB, "rw-p", "[stack]", 8 * MB, 0),
        [],
    ),
    (
        "a mapping less than three quarters resident (a thread's stack, a reservation) is not "
        "filled",
        Mapping(4 * MB, 12 * MB, "rw-p", "", 6 * MB - 4096, 0),
        [],
    ),
    (
        "three quarters resident is enough",
        Mapping(4 * MB, 12 * MB, "rw-p", "", 6 * MB, 0),
        [Range(4 * MB, 12 * MB)],
    ),
    (
        "a mapping already in huge pages but for less than one huge page is left alone",
        Mapping(4 * MB, 12 * MB, "rw-p", "", 8 * MB, 6 * MB + 4096),
        [],
    ),
    (
        "a mapping with no whole huge page inside it is left alone (MADV_COLLAPSE refuses it)",
        Mapping(3 * MB, 6 * MB - 4096, "rw-p", "", 3 * MB - 4096, 0),
        [],
    ),
]


@pytest.mark.parametrize(
    ("mapping", "expected"), [row[1:] for row in PLAN_ROWS], ids=[row[0] for row in PLAN_ROWS]
)
def test_which_mappings_a_collapse_takes(mapping: Mapping, expected: list[Range]) -> None:
    assert plan_collapse([mapping], HP) == expected


SMAPS = """\
55d0c8a00000-55d0c8c21000 rw-p 00000000 00:00 0                          [heap]
Size:               2180 kB
Rss:                2100 kB
AnonHugePages:         0 kB
VmFlags: rd wr mr mw me ac
7f2b40000000-7f2b4a000000 rw-p 00000000 00:00 0
Size:             163840 kB
Rss:              163000 kB
Pss:              163000 kB
AnonHugePages:    四 kB
VmFlags: rd wr mr mw me ac
7f2b4c000000-7f2b4c001000 r--p 00000000 fd:01 1234                       /tmp/a name (deleted)
Size:                  4 kB
Rss:                   4 kB
AnonHugePages:         0 kB
"""


def test_smaps_are_read_mapping_by_mapping() -> None:
    text = SMAPS.replace("四", "131072")
    assert parse_smaps(text) == [
        Mapping(0x55D0C8A00000, 0x55D0C8C21000, "rw-p", "[heap]", 2100 * 1024, 0),
        Mapping(0x7F2B40000000, 0x7F2B4A000000, "rw-p", "", 163000 * 1024, 128 * MB),
        Mapping(0x7F2B4C000000, 0x7F2B4C001000, "r--p", "/tmp/a name (deleted)", 4096, 0),
    ]
    with pytest.raises(ValueError, match="invalid literal"):
        parse_smaps(SMAPS)


def test_a_collapse_goes_in_steps_a_stop_can_fall_between() -> None:
    assert steps([Range(0, 2 * HP), Range(10 * HP, 11 * HP)]) == [
        Range(0, HP), Range(HP, 2 * HP), Range(10 * HP, 11 * HP)
    ]
    assert steps([Range(0, 5 * HP)], 2 * HP) == [
        Range(0, 2 * HP), Range(2 * HP, 4 * HP), Range(4 * HP, 5 * HP)
    ]


def _thp_mode() -> str:
    """The selected word of /sys/kernel/mm/transparent_hugepage/enabled ('never' without)."""
    try:
        text = Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text()
    except OSError:
        return "never"
    return text.split("[", 1)[1].split("]", 1)[0]


def _run_child(script: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        capture_output=True, text=True, timeout=120, env=child_environment(),
    )
    assert done.returncode == 0, done.stderr
    answer: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return answer


COLLAPSE_SCRIPT = """
import dataclasses, json
from hanamenode import hugepages
heap = b"\\x01" * (160 << 20)  # written, so resident
asked = []
stopped = hugepages.collapse_heap(lambda: asked.append(1) or len(asked) > 1)
whole = hugepages.collapse_heap()
print(json.dumps({"stopped": dataclasses.asdict(stopped), "whole": dataclasses.asdict(whole)}))
"""


def test_a_real_collapse_puts_the_heap_in_huge_pages_and_stops_between_steps() -> None:
    """In a fresh interpreter with 160 MB written: a collapse asked to stop after its first
    step did that one step; the next collapse takes the rest, and the heap is then in huge
    pages (or, where the machine has them off, each step failed with EINVAL, reported)."""
    answer = _run_child(COLLAPSE_SCRIPT)
    stopped, whole = answer["stopped"], answer["whole"]
    assert stopped["stopped"] and stopped["asked_bytes"] == huge_page_bytes()
    assert not whole["stopped"] and whole["asked_bytes"] >= 100 * MB
    if _thp_mode() == "never":
        assert whole["errors"] == ["EINVAL"] and whole["failed_bytes"] == whole["asked_bytes"]
    else:
        assert whole["failed_bytes"] < 16 * MB, whole
        assert whole["huge_bytes"] >= 150 * MB, whole


CHECKPOINT_SCRIPT = """
import json, sys
from pathlib import Path
from hanamenode.checkpointer import StandbyCheckpointer
from hanamenode.errors import CheckpointCancelledError
from hanamenode.loop import NameNodeLoop
from hanamenode.namespace import Namespace
from hanamenode.storage import NameDirectory
from proto.values import NamespaceInfo

def rollup():
    found = {}
    for line in Path("/proc/self/smaps_rollup").read_text().splitlines()[1:]:
        key, value = line.split(":", 1)
        found[key] = int(value.split()[0]) * 1024
    return found

before = rollup()
ns = Namespace()
for d in range(200):
    ns.mkdir(f"/d{d:03d}")
    for f in range(1000):
        ns.create(f"/d{d:03d}/f{f:04d}")
nn_loop = NameNodeLoop("hp").start()
try:
    name_dir = NameDirectory(Path(sys.argv[1]))
    result = StandbyCheckpointer(
        lambda: ns, name_dir, NamespaceInfo("c", 1), checkpoint_txns=1, checkpoint_period=60,
        checkpoints_retained=1, nn_id="hp", nn_loop=nn_loop,
    ).do_checkpoint()
finally:
    nn_loop.stop()
after = rollup()
print(json.dumps({
    "collapsed": result.heap.asked_bytes, "errors": result.heap.errors,
    "grew": after["Anonymous"] - before["Anonymous"],
    "huge": after["AnonHugePages"] - before["AnonHugePages"],
}))
"""


def test_a_checkpoint_forks_a_heap_in_huge_pages(tmp_path: Path) -> None:
    """A standby's checkpoint collapses its heap before the fork, so that the fork copies an
    entry a 2 MiB rather than one a 4 KiB page: after a checkpoint of 200,000 inodes, most of
    the memory the namespace added is in huge pages (before, none: a kernel whose
    ``transparent_hugepage/enabled`` is ``madvise``, as here, gives huge pages only to memory
    that asks for them)."""
    answer = _run_child(CHECKPOINT_SCRIPT.replace("sys.argv[1]", repr(str(tmp_path))))
    assert answer["collapsed"] > 0
    if _thp_mode() == "never":
        assert answer["errors"] == ["EINVAL"]
    else:
        assert answer["huge"] >= 0.5 * answer["grew"], answer


def test_the_image_is_the_namespace_at_its_txid_while_the_loop_changes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While the child writes, the loop renames, deletes and creates across the whole tree
    (each write to a huge page the child shares splits it and copies 4 KiB): the image holds
    the namespace at its txid, and the image plus every op after that txid is the live
    namespace. Seeded; a failure prints ``seed=N``."""
    seed = random.randrange(1 << 30)
    print(f"seed={seed}")
    rng = random.Random(seed)
    ns = Namespace()
    for d in range(60):
        ns.mkdir(f"/d{d:02d}")
        for f in range(500):
            ns.create(f"/d{d:02d}/f{f:03d}")
    sections = fsimage._sections
    child_started = tmp_path / "child-started"

    def slowly(*args: Any) -> Iterator[dict[str, Any]]:
        child_started.touch()
        time.sleep(1.0)  # in the child only: the parent's ops land while it waits
        yield from sections(*args)

    monkeypatch.setattr(fsimage, "_sections", slowly)
    logged: list[edits_pb2.EditOp] = []

    files = [f"/d{d:02d}/f{f:03d}" for d in range(60) for f in range(500)]

    def one_op() -> None:
        at = rng.randrange(len(files))
        kind = rng.randrange(3)
        if kind == 0:  # anywhere in the tree: a write to pages the child shares
            op = ns.prepare_rename(files[at], files[at] + "r")
            files[at] += "r"
        elif kind == 1:
            op = ns.prepare_delete(files[at])
            files[at] = files[-1]
            files.pop()
        else:
            files.append(f"/d{rng.randrange(60):02d}/n{len(logged):05d}")
            op = ns.prepare_create(files[-1])
        op.txid = ns.last_applied_txid + 1
        ns.apply(op)
        logged.append(op)

    async def play(stop: asyncio.Event) -> None:
        while not stop.is_set():
            if not ns.frozen:
                one_op()
            await asyncio.sleep(0.001)

    name_dir = NameDirectory(tmp_path / "name")
    name_dir.path.mkdir()
    nn_loop = NameNodeLoop("hp-test").start()
    try:
        checkpointer = StandbyCheckpointer(
            lambda: ns, name_dir, NS_INFO, checkpoint_txns=1, checkpoint_period=60,
            checkpoints_retained=1, nn_id="hp-test", nn_loop=nn_loop,
        )

        async def start() -> tuple[asyncio.Event, asyncio.Task[None]]:
            stop = asyncio.Event()
            return stop, asyncio.get_running_loop().create_task(play(stop))

        async def finish(stop: asyncio.Event, task: asyncio.Task[None]) -> None:
            stop.set()
            await task

        stop, task = nn_loop.run(start())
        time.sleep(0.1)
        result = checkpointer.do_checkpoint()
        nn_loop.run(finish(stop, task))
    finally:
        nn_loop.stop()
    assert result is not None and result.heap is not None
    assert child_started.exists()
    after = [op for op in logged if op.txid > result.txid]
    assert len(after) >= 100, "the loop applied too few ops while the child wrote"
    loaded, txid, _ = fsimage.load_image(result.image)
    assert txid == result.txid and loaded.last_applied_txid == result.txid
    for op in after:
        loaded.apply(op)
    assert loaded.digest() == ns.digest()


def test_a_heap_that_cannot_be_collapsed_is_logged_and_still_checkpointed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The collapse is an optimisation: when it cannot read the mappings, the checkpoint
    says so in a warning and writes its image from a fork of the heap as it is."""

    def unreadable(text: str) -> list[Mapping]:
        raise ValueError("smaps: Rss in 'MB', not kB")

    monkeypatch.setattr(hugepages, "parse_smaps", unreadable)
    ns = Namespace()
    ns.mkdir("/a/b", parents=True)
    name_dir = NameDirectory(tmp_path)
    nn_loop = NameNodeLoop("hp-test").start()
    try:
        with capture_logs() as logs:
            result = StandbyCheckpointer(
                lambda: ns, name_dir, NS_INFO, checkpoint_txns=1, checkpoint_period=60,
                checkpoints_retained=1, nn_id="hp-test", nn_loop=nn_loop,
            ).do_checkpoint()
    finally:
        nn_loop.stop()
    assert result is not None and result.heap is not None
    assert result.heap.asked_bytes == 0
    [warning] = [e for e in logs if e["event"].startswith("heap not all in huge pages")]
    assert warning["log_level"] == "warning"
    assert "cannot read /proc/self/smaps: ValueError: smaps: Rss in 'MB'" in warning["errors"]
    loaded, txid, _ = fsimage.load_image(result.image)
    assert txid == ns.last_applied_txid and loaded.digest() == ns.digest()


def test_a_failover_during_the_collapse_cancels_the_checkpoint_before_its_fork(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The NameNode leaves the standby state (``stop``) while its checkpoint collapses a
    heap that is not yet in huge pages: the collapse stops at the next huge page, the
    checkpoint raises CheckpointCancelledError, nothing is forked and no file is left."""
    fresh = b"\x02" * (64 << 20)  # written, so resident: a mapping the collapse takes
    ns = Namespace()
    ns.mkdir("/a")
    name_dir = NameDirectory(tmp_path)
    nn_loop = NameNodeLoop("hp-test").start()
    checkpointer = StandbyCheckpointer(
        lambda: ns, name_dir, NS_INFO, checkpoint_txns=1, checkpoint_period=60,
        checkpoints_retained=1, nn_id="hp-test", nn_loop=nn_loop,
    )
    real_madvise = hugepages._madvise()
    calls: list[int] = []

    def madvise_then_fail_over(start: int, size: int, advice: int) -> int:
        calls.append(start)
        if len(calls) == 1:
            assert nn_loop.run(checkpointer.stop())  # what a transition to active does
        return real_madvise(start, size, advice)

    def no_fork(*args: Any, **kwargs: Any) -> fsimage.ForkedImageSave:
        raise AssertionError("the checkpoint forked after its stop")

    monkeypatch.setattr(hugepages, "_madvise", lambda: madvise_then_fail_over)
    monkeypatch.setattr(fsimage, "fork_save_image", no_fork)
    try:
        with pytest.raises(CheckpointCancelledError, match="collapsed into huge pages"):
            checkpointer.do_checkpoint()
    finally:
        nn_loop.stop()
    assert len(calls) == 1 and len(fresh) == 64 << 20
    assert list(tmp_path.iterdir()) == []
