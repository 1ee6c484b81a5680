"""``conf.clock``: the clock the NameNode and the QJM decide by is the system's unless a
context hands in another (``use_clock``), and only that context sees it: the code of the
block, and the asyncio tasks created inside it; not another thread, not the code after the
block (docs/architecture.md §8.2: how nnsim runs NameNodes on virtual time)."""

from __future__ import annotations

import asyncio
import threading
import time

from conf import clock


class FixedClock:
    """A clock stopped at ``at`` seconds (wall clock: a day later)."""

    def __init__(self, at: float) -> None:
        self.at = at

    def monotonic(self) -> float:
        return self.at

    def time(self) -> float:
        return self.at + 86_400.0

    def time_ns(self) -> int:
        return int((self.at + 86_400.0) * 1e9)


def test_the_default_is_the_system_clock() -> None:
    before = time.monotonic()
    assert before <= clock.monotonic() <= time.monotonic()
    assert abs(clock.time() - time.time()) < 5.0
    assert abs(clock.time_ns() - time.time_ns()) < 5_000_000_000


def test_a_clock_handed_in_holds_for_the_block_only_and_blocks_nest() -> None:
    with clock.use_clock(FixedClock(5.0)):
        assert (clock.monotonic(), clock.time(), clock.time_ns()) == (5.0, 86_405.0, 86_405 * 10**9)
        with clock.use_clock(FixedClock(7.0)):
            assert clock.monotonic() == 7.0
        assert clock.monotonic() == 5.0
    after = time.monotonic()
    assert after <= clock.monotonic() <= time.monotonic()
    assert abs(clock.time() - time.time()) < 5.0


def test_tasks_created_in_the_block_see_the_clock_and_other_threads_do_not() -> None:
    seen: dict[str, float] = {}

    async def task_reads() -> None:
        await asyncio.sleep(0)
        seen["task"] = clock.monotonic()

    def thread_reads() -> None:
        seen["thread"] = clock.time()

    async def main() -> None:
        with clock.use_clock(FixedClock(3.0)):
            task = asyncio.get_running_loop().create_task(task_reads())
            other = threading.Thread(target=thread_reads)
            other.start()
            other.join()
        await task  # runs after the block ended: its context was copied at creation
        seen["after"] = clock.time()

    asyncio.run(main())
    assert seen["task"] == 3.0
    assert abs(seen["thread"] - time.time()) < 5.0
    assert abs(seen["after"] - time.time()) < 5.0
