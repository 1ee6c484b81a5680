"""``bench.namenode_ops``'s run-queue wait per role: read from each thread's
``/proc/<pid>/task/<tid>/schedstat``, it rises for a process that shares its one CPU with
another busy one and stays near zero for one that sleeps."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.namenode.shared import RoleTimes, run_queue_wait_seconds

SPIN = "while True: pass"


@pytest.fixture
def spinners() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Three busy processes pinned to the same CPU: each is runnable all the time and gets
    the CPU about a third of it."""
    cpu = min(os.sched_getaffinity(0))
    procs = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(3)]
    try:
        for proc in procs:
            os.sched_setaffinity(proc.pid, {cpu})
        yield procs
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def test_a_process_sharing_its_cpu_waits_in_the_run_queue(
    spinners: list[subprocess.Popen[bytes]],
) -> None:
    sleeper = subprocess.Popen(
        [sys.executable, "-c", "import time; print('asleep', flush=True); time.sleep(30)"],
        stdout=subprocess.PIPE,
    )
    try:
        pids: dict[str, list[int | None]] = {
            "busy": [p.pid for p in spinners],
            "sleeping": [sleeper.pid],
        }
        # Measure only once the sleeper has started: on a loaded machine an interpreter's
        # start can take longer than any fixed pause, and its start is CPU and waiting.
        assert sleeper.stdout is not None and sleeper.stdout.readline() == b"asleep\n"
        time.sleep(0.05)
        before, began = RoleTimes.read(pids), time.monotonic()
        time.sleep(1.5)
        times = RoleTimes.read(pids).per_second_since(before, time.monotonic() - began)
    finally:
        sleeper.kill()
        sleeper.wait()
    # Three spinners on one CPU: at most 1 s/s of CPU between them, and about twice as much
    # waiting (more if anything else runs there: at load 10 the CPU's other tasks left the
    # three less than 0.3 s/s, so the floor only says that they ran).
    assert 0.05 < times.cpu["busy"] <= 1.05, times
    assert times.wait["busy"] > 1.5 * times.cpu["busy"], times
    assert times.cpu["sleeping"] < 0.05, times
    assert times.wait["sleeping"] < 0.05, times


def test_run_queue_wait_of_this_process_counts_every_thread() -> None:
    waited = run_queue_wait_seconds()
    assert waited >= 0.0
    assert run_queue_wait_seconds(os.getpid()) >= waited


def test_per_second_since_divides_the_difference_by_the_time_elapsed() -> None:
    before = RoleTimes({"a": 1.0, "b": 2.0}, {"a": 0.5, "b": 0.0})
    after = RoleTimes({"a": 3.0, "b": 2.5}, {"a": 4.5, "b": 1.0})
    got = after.per_second_since(before, 2.0)
    assert got == RoleTimes({"a": 1.0, "b": 0.25}, {"a": 2.0, "b": 0.5})



class _EndingThread:
    """A thread whose schedstat file is opened while it lives and read once it is gone."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.thread = threading.Thread(target=self.release.wait)
        self.thread.start()
        self.path = Path(f"/proc/self/task/{self.thread.native_id}/schedstat")

    def read_after_the_end(self) -> str:
        with self.path.open() as handle:  # opened while the thread lives
            self.release.set()
            self.thread.join()
            deadline = time.monotonic() + 5.0
            while self.path.parent.exists():  # the kernel's thread outlives join() briefly
                assert time.monotonic() < deadline, "the thread's task never went away"
                time.sleep(0.001)
            return handle.read()


def test_a_thread_that_ends_while_its_schedstat_is_read_is_left_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A thread of a busy daemon can end between the listing of its process's tasks and the
    read of its schedstat. Opened before and read after, the read fails with ESRCH
    (ProcessLookupError), not ENOENT; the bench crashed on it in a lag series."""
    with pytest.raises(ProcessLookupError):
        _EndingThread().read_after_the_end()  # what the kernel does
    ending = _EndingThread()
    read_text = Path.read_text

    def read(self: Path, *args: Any, **kwargs: Any) -> str:
        return ending.read_after_the_end() if self == ending.path else read_text(self)

    monkeypatch.setattr(Path, "read_text", read)
    assert run_queue_wait_seconds() >= 0.0
    assert not ending.thread.is_alive()
