"""The one bridge from blocking code into the QJM's asyncio core (issue 12).

The Quorum Journal Manager runs on an asyncio event loop: each ``AsyncLogger`` is a task with
its own queue, a quorum wait is an awaited future, heartbeats are a task. Its awaitable API
(``await qjm.arecover_unfinalized_segments()``, ``await out.aflush()``, ...) is what a caller
on an event loop uses. Code that must stay blocking (the CLI tools, ``format``, the threaded
NameNode until it moves onto a loop, tests) calls the blocking methods of the same objects,
which are this module's ``run_blocking`` over the same coroutines, never a second
implementation:

- a manager bound to an event loop that runs in another thread (by default the process-wide
  ``qjm-loop`` thread of ``shared_loop``; or the loop the caller's own async code bound it
  to) gets the coroutine through ``asyncio.run_coroutine_threadsafe`` and waits for it;
- blocking from the thread of that very loop would deadlock, so it is refused with an error
  that names the awaitable method to use instead;
- a manager whose loggers run every call at once in the caller's thread (the deterministic
  simulator's ``DirectExecutor``) has nothing to wait for: its coroutines never suspend, and
  ``run_blocking`` drives them to the end in the caller's thread, with no loop and no thread
  hop, so the simulator stays single-threaded and replays from its seed.

    loop = shared_loop()                           # started on first use, a daemon thread
    value = run_blocking(qjm.arecover_unfinalized_segments(), loop)
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from conf.rpc import new_event_loop
from qjm.errors import QJMError

T = TypeVar("T")

_shared_lock = threading.Lock()
_shared: asyncio.AbstractEventLoop | None = None


def shared_loop() -> asyncio.AbstractEventLoop:
    """The process-wide event loop of blocking callers, running in the daemon thread
    ``qjm-loop`` (started on first use; it lives as long as the process; uvloop's when the
    environment says ``HANAMENODE_UVLOOP=1``)."""
    global _shared
    with _shared_lock:
        if _shared is None or _shared.is_closed():
            loop = new_event_loop()  # uvloop with HANAMENODE_UVLOOP=1
            started = threading.Event()

            def run() -> None:
                asyncio.set_event_loop(loop)
                loop.call_soon(started.set)
                loop.run_forever()

            threading.Thread(target=run, name="qjm-loop", daemon=True).start()
            started.wait()
            _shared = loop
        return _shared


def on_loop_thread(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether the calling thread is the one running ``loop``."""
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


def run_blocking(
    coro: Coroutine[Any, Any, T], loop: asyncio.AbstractEventLoop | None, what: str = ""
) -> T:
    """Run ``coro`` to its end and return its value (or raise its exception).

    ``loop`` None: drive it in this thread; it must never suspend (every future it awaits is
    already done, as with the simulator's direct loggers), else ``QJMError``. Otherwise run it
    on ``loop``, which must run in another thread.
    """
    if loop is None:
        return drive_inline(coro)
    if on_loop_thread(loop):
        coro.close()
        name = what or getattr(coro, "__qualname__", "")
        raise QJMError(
            f"blocking QJM call {name} from its own event loop's thread would deadlock; "
            "await the async method instead"
        )
    return asyncio.run_coroutine_threadsafe(coro, loop).result()


def drive_inline(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine that never suspends to its end, in this thread, with no event loop."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    coro.close()
    name = getattr(coro, "__qualname__", "a QJM coroutine")
    raise QJMError(
        f"{name} would wait for a JournalNode, but its loggers have no event loop "
        "(DirectExecutor loggers must answer every call at once)"
    )


__all__ = ["drive_inline", "on_loop_thread", "run_blocking", "shared_loop"]
