"""The NameNode's event loop: one asyncio loop owns the namesystem (docs/architecture.md
§4.7, issue 12; HDFS-7964's asynchronous edit logging).

Everything that reads or changes the namespace, the edit log or the HA state runs on this
loop, in its thread ``namenode-loop-<nn>``: the gRPC servers (grpc.aio), the edit log's
syncer, the transitions. Ordering comes from the loop: a coroutine is never interrupted
between two awaits, so "decide, give a txid, apply" needs no lock.

Two bridges cross the loop's boundary, and nothing else does:

- *into* the loop, from threads that are not the loop's (kazoo's and the elector's threads,
  the status page's HTTP thread, tests): ``run`` (a coroutine, through
  ``asyncio.run_coroutine_threadsafe``) and ``call`` (a plain function, through
  ``call_soon_threadsafe``); both block the calling thread, never the loop;
- *out of* the loop, for the blocking QuorumJournalManager (until the QJM client is awaitable
  itself): ``await loop.blocking(fn, ...)`` runs ``fn`` on the ``qjm-bridge`` executor and
  suspends the coroutine meanwhile, so the loop keeps serving.

The loop runs on uvloop when the optional package is installed (``default_uvloop``;
``HANAMENODE_UVLOOP=0`` turns it off), as ``bench.namenode_ops``'s figures chose.

    nn_loop = NameNodeLoop("nn1").start()
    nn_loop.run(fsn.transition_to_active_async())   # from any other thread
    nn_loop.stop()
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import importlib.util
import os
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import structlog

from conf.rpc import UVLOOP_ENV, new_event_loop

log = structlog.get_logger(__name__)

T = TypeVar("T")

BRIDGE_WORKERS = 8
"""Threads of the blocking bridge: one sync, one read-index round, a transition or roll, the
tailer's reads and a checkpoint can each be in flight at once."""


class LoopStoppedError(RuntimeError):
    """The loop is not running (the NameNode is stopping or stopped)."""


def default_uvloop() -> bool:
    """Whether a NameNode's loop runs on uvloop: as ``HANAMENODE_UVLOOP`` says (``1`` or
    ``0``), else whenever the ``uvloop`` package is installed. The NameNode's default differs
    from the JournalNode's (asyncio unless ``HANAMENODE_UVLOOP=1``) because the figures do:
    ``bench.namenode_ops`` measured 18-38% more confirmed stats and 24-29% more creates at 128
    in flight on uvloop, and 10-20% less NameNode CPU per call (docs/operations.md §15.2)."""
    chosen = os.environ.get(UVLOOP_ENV, "")
    if chosen in ("0", "1"):
        return chosen == "1"
    return importlib.util.find_spec("uvloop") is not None


class NameNodeLoop:
    """An asyncio loop in its own thread, with the two bridges of the module docstring."""

    def __init__(self, nn_id: str, *, use_uvloop: bool | None = None) -> None:
        """``use_uvloop`` None: ``default_uvloop()``."""
        self.nn_id = nn_id
        self.loop = new_event_loop(default_uvloop() if use_uvloop is None else use_uvloop)
        self.use_uvloop = type(self.loop).__module__.startswith("uvloop")
        self._thread: threading.Thread | None = None
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=BRIDGE_WORKERS, thread_name_prefix=f"qjm-bridge-{nn_id}"
        )
        self._started = threading.Event()

    def start(self) -> NameNodeLoop:
        if self._thread is not None:
            return self
        self._thread = threading.Thread(
            target=self._run, name=f"namenode-loop-{self.nn_id}", daemon=True
        )
        self._thread.start()
        self._started.wait()
        return self

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(self._started.set)
        try:
            self.loop.run_forever()
        finally:
            self._cancel_remaining()
            self.loop.close()

    def _cancel_remaining(self) -> None:
        tasks = [t for t in asyncio.all_tasks(self.loop) if not t.done()]
        for task in tasks:
            task.cancel()
        if tasks:
            self.loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        self.loop.run_until_complete(self.loop.shutdown_asyncgens())

    @property
    def running(self) -> bool:
        return self._thread is not None and self.loop.is_running()

    def in_loop(self) -> bool:
        """True when called from the loop's own thread."""
        return threading.current_thread() is self._thread

    # -- into the loop (from other threads) ------------------------------------------------

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the loop and wait for its result in the calling thread."""
        if self.in_loop():
            coro.close()
            raise RuntimeError("NameNodeLoop.run called from the loop itself: await instead")
        if not self.running:
            coro.close()
            raise LoopStoppedError(f"the event loop of NameNode {self.nn_id} is not running")
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise

    def call(self, fn: Callable[..., T], *args: Any, timeout: float | None = None) -> T:
        """Run the plain function ``fn(*args)`` on the loop and return its result here."""
        if self.in_loop():
            return fn(*args)
        if not self.running:
            raise LoopStoppedError(f"the event loop of NameNode {self.nn_id} is not running")
        future: concurrent.futures.Future[T] = concurrent.futures.Future()

        def call() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                future.set_result(fn(*args))
            except BaseException as exc:
                future.set_exception(exc)

        self.loop.call_soon_threadsafe(call)
        return future.result(timeout)

    def call_soon(self, fn: Callable[..., object], *args: Any) -> None:
        """Schedule ``fn(*args)`` on the loop without waiting (any thread; a no-op once the
        loop has stopped)."""
        if self.in_loop():
            self.loop.call_soon(fn, *args)
            return
        try:
            self.loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:  # loop closed: the NameNode is gone
            log.debug("dropped a call into a stopped loop", nn=self.nn_id)

    # -- out of the loop (blocking calls) ---------------------------------------------------

    async def blocking(self, fn: Callable[..., T], *args: Any) -> T:
        """Await ``fn(*args)`` run on the bridge executor (the blocking QJM client)."""
        return await self.loop.run_in_executor(self._executor, fn, *args)

    def stop(self, timeout: float = 10.0) -> None:
        thread = self._thread
        if thread is None:
            return
        if self.loop.is_running():
            self.loop.call_soon_threadsafe(self.loop.stop)
        thread.join(timeout)
        if thread.is_alive():
            log.warning("the NameNode's event loop did not stop in time", nn=self.nn_id)
        self._executor.shutdown(wait=False, cancel_futures=True)
        self._thread = None


class SharedRounds:
    """Read-index rounds on the loop (``qjm.read_index``'s rule, for coroutines): a round is
    one awaitable ``round_fn()``; rounds run one at a time; a caller that arrives while a
    round is in flight waits for the *next* one (the one in flight may have been answered
    before it arrived), and every caller waiting when a round starts shares it."""

    def __init__(self, round_fn: Callable[[], Coroutine[Any, Any, None]]) -> None:
        self._round_fn = round_fn
        self._started = 0
        self._finished = 0
        self._last_error: BaseException | None = None
        self._current: asyncio.Task[None] | None = None
        self.rounds = 0

    async def confirm(self) -> None:
        """Return once a round that started after this call finished well; raise that
        round's error otherwise."""
        needed = self._started + 1
        while True:
            if self._finished >= needed:
                if self._last_error is not None:
                    raise self._last_error
                return
            if self._current is None:
                self._started += 1
                self._current = asyncio.get_running_loop().create_task(
                    self._run(self._started), name="read-index-round"
                )
            # Shielded: a cancelled reader does not cancel the round the others share.
            await asyncio.shield(self._current)

    async def _run(self, number: int) -> None:
        error: BaseException | None = None
        try:
            await self._round_fn()
        except Exception as exc:
            error = exc
        self.rounds += 1
        self._finished = number
        self._last_error = error
        self._current = None


class AppliedTxid:
    """Coroutines on the loop waiting until the namespace has applied a txid: an observer
    holds a read until it has applied the txid the client has seen (docs/consistency.md §9).
    The tailer's applies call ``advanced(last_applied)`` on the loop; a waiter is woken as
    soon as its txid is reached, and ``wait_for`` gives up after ``timeout``::

        applied = AppliedTxid(lambda: namespace.last_applied_txid)
        if await applied.wait_for(client_txid, timeout=1.0): ...   # else: behind
        applied.advanced(namespace.last_applied_txid)              # after each batch
    """

    def __init__(self, last_applied: Callable[[], int]) -> None:
        self._last_applied = last_applied
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []

    async def wait_for(self, txid: int, timeout: float) -> bool:
        """True once ``txid`` is applied (at once if it is), False after ``timeout``."""
        if self._last_applied() >= txid:
            return True
        if timeout <= 0:
            return False
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (txid, waiter)
        self._waiters.append(entry)
        try:
            await asyncio.wait_for(asyncio.shield(waiter), timeout)
        except TimeoutError:
            pass
        finally:
            if entry in self._waiters:
                self._waiters.remove(entry)
        return self._last_applied() >= txid

    def advanced(self, last_applied: int) -> None:
        """Wake every waiter whose txid ``last_applied`` reaches (on the loop)."""
        if not self._waiters:
            return
        ready = [entry for entry in self._waiters if entry[0] <= last_applied]
        for entry in ready:
            self._waiters.remove(entry)
            if not entry[1].done():
                entry[1].set_result(None)

    @property
    def waiting(self) -> int:
        return len(self._waiters)
