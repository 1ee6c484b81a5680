"""Deterministic event loops for the NameNode-layer simulation (docs/architecture.md §8.2).

Every simulated process (each NameNode incarnation, the clients) gets its own ``SimEventLoop``:
a plain asyncio event loop with no I/O whose clock is the simulation's ``VirtualClock``.
Nothing runs on its own: the scheduler (``nnsim.runner``) picks, with the run's seeded RNG,
which loop runs its next iteration (``run_once``), and moves the shared clock to the next
timer of any loop when none has work. A paused process is a loop the scheduler leaves alone;
a crashed one is a loop it drops. Timers, ``asyncio.sleep``, ``asyncio.timeout`` and
``wait_for`` all run on virtual time, so a 30-second write timeout costs no wall time.

``SimNameNodeLoop`` is ``hanamenode.loop.NameNodeLoop`` over such a loop, with the two bridges
made inline: the simulation has one thread, so ``blocking`` runs its function on the spot
(the standby's reader QJM has direct loggers and never waits) and ``call`` is a plain call.

    clock = VirtualClock()
    loop = SimEventLoop(clock, "nn1")
    loop.create_task(work())
    while loop.has_ready():
        loop.run_once()
    clock.advance_to(loop.next_deadline())
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import warnings
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from hanamenode.loop import NameNodeLoop

T = TypeVar("T")


WALL_BASE = 1_700_000_000.0
"""Virtual wall clock at time 0 (mtimes in edits come from it, so they replay exactly)."""


class VirtualClock:
    """Seconds since the start of the run; only the scheduler moves it, and only forward.

    It is a ``conf.clock.Clock``: the runner hands it to the NameNodes' code with
    ``conf.clock.use_clock`` (monotonic time is ``now``, wall-clock time ``WALL_BASE + now``).
    """

    def __init__(self) -> None:
        self.now = 0.0

    def advance_to(self, when: float) -> None:
        if when > self.now:
            self.now = when

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return WALL_BASE + self.now

    def time_ns(self) -> int:
        return int((WALL_BASE + self.now) * 1e9)


class _NoSelector:
    """The selector of a loop without I/O: never waits (time moves only by the scheduler)."""

    def select(self, timeout: float | None = None) -> list[Any]:
        return []

    def close(self) -> None:
        pass


class SimEventLoop(asyncio.BaseEventLoop):
    """An asyncio loop on virtual time, run one iteration at a time by the scheduler."""

    def __init__(self, clock: VirtualClock, name: str) -> None:
        super().__init__()
        self.clock = clock
        self.name = name
        self._selector = _NoSelector()
        self.errors: list[str] = []
        """Exceptions no task retrieved (the scheduler reports them)."""
        self.set_exception_handler(self._on_error)

    def time(self) -> float:
        return self.clock.now

    def _process_events(self, event_list: list[Any]) -> None:
        pass

    def _write_to_self(self) -> None:
        pass  # one thread: nothing to wake

    def run_in_executor(  # type: ignore[override]
        self, executor: Any, func: Callable[..., T], *args: Any
    ) -> asyncio.Future[T]:
        """Run ``func`` now, in the one thread (a pool thread would finish at a moment the
        machine picks, and the run would no longer follow its seed)."""
        future: asyncio.Future[T] = self.create_future()
        try:
            future.set_result(func(*args))
        except BaseException as exc:  # delivered to the awaiting coroutine
            future.set_exception(exc)
        return future

    def _on_error(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        message = str(context.get("message", ""))
        if exc is None or "destroyed but it is pending" in message:
            return
        self.errors.append(f"{message}: {type(exc).__name__}: {exc}")

    # -- the scheduler's view ------------------------------------------------------------------

    def has_ready(self) -> bool:
        """Callbacks to run now (ready ones, or timers due at the current virtual time)."""
        if self._ready:  # type: ignore[attr-defined]
            return True
        scheduled = self._scheduled  # type: ignore[attr-defined]
        return any(not h.cancelled() and h.when() <= self.clock.now for h in scheduled)

    def next_deadline(self) -> float:
        """When the earliest live timer fires (inf: none)."""
        scheduled = self._scheduled  # type: ignore[attr-defined]
        return min((h.when() for h in scheduled if not h.cancelled()), default=math.inf)

    def run_once(self) -> None:
        """One iteration: due timers become ready, and every ready callback runs once."""
        self.stop()
        self.run_forever()

    def abandon(self) -> None:
        """The process died: its tasks never run again.

        Their coroutines are closed here, at a point the seed fixes, rather than by the
        garbage collector later, at a point the machine picks (and closing a coroutine
        suspended in ``asyncio.timeout`` from inside a collection crashed CPython 3.11).
        Closing runs the ``finally`` blocks of a process that, really, just vanished: they
        only touch this process's own objects and this loop, which never runs again."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            for task in sorted(asyncio.all_tasks(self), key=lambda t: t.get_name()):
                coro = task.get_coro()
                close = getattr(coro, "close", None)
                if close is None:
                    continue
                # RuntimeError: a coroutine that awaited again in a ``finally``.
                with contextlib.suppress(Exception):
                    close()
            self._ready.clear()  # type: ignore[attr-defined]
            self._scheduled.clear()  # type: ignore[attr-defined]


class SimNameNodeLoop(NameNodeLoop):
    """``NameNodeLoop`` over a ``SimEventLoop``: no thread, the bridges inline."""

    def __init__(
        self, nn_id: str, loop: SimEventLoop, for_blocking: Callable[[Any], Any] = lambda a: a
    ) -> None:
        """``for_blocking`` maps each argument of a ``blocking`` call (the transition's
        catch-up gets the writer's QJM, whose loggers need the loop: it swaps in a reader
        over the same JournalNodes whose calls return at once)."""
        super().__init__(nn_id, use_uvloop=False)
        self.loop.close()
        self.loop = loop
        self.use_uvloop = False
        self._executor.shutdown(wait=False)
        self._for_blocking = for_blocking
        self.in_blocking = False
        """True while a ``blocking`` call runs (the QJM factory then makes a reader)."""

    def start(self) -> NameNodeLoop:
        return self

    @property
    def running(self) -> bool:
        return not self.loop.is_closed()

    def in_loop(self) -> bool:
        return True

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        coro.close()
        raise RuntimeError("a simulated NameNode is driven by the scheduler, not by run()")

    def call(self, fn: Callable[..., T], *args: Any, timeout: float | None = None) -> T:
        return fn(*args)

    def call_soon(self, fn: Callable[..., object], *args: Any) -> None:
        self.loop.call_soon(fn, *args)

    async def blocking(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn`` now, inline: it takes no virtual time (the reads of the standby's
        tailer, the catch-up of a transition, image files)."""
        self.in_blocking = True
        try:
            return fn(*(self._for_blocking(a) for a in args))
        finally:
            self.in_blocking = False

    def stop(self, timeout: float = 10.0) -> None:
        pass
