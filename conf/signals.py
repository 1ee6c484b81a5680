"""How a daemon (JournalNode, NameNode) learns that it must stop: SIGTERM or SIGINT.

    stopped = stop_on_signals("journalnode")   # before the server starts
    server.start()
    stopped.wait()
    server.stop(grace=2.0)

Installed before the server starts, so that a signal which arrives while it starts (or while
the collector settles after it, ``conf.gcpauses.freeze_after_start``) stops it cleanly once it
has started: installed after, such a signal killed the process by its default action
(exit status -15) with its servers half up.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType

import structlog

log = structlog.get_logger(__name__)


def stop_on_signals(daemon: str) -> threading.Event:
    """An Event that SIGTERM and SIGINT set, each logged as ``<daemon> stopping``."""
    stopped = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        log.info(f"{daemon} stopping", signal=signal.Signals(signum).name)
        stopped.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    return stopped


__all__ = ["stop_on_signals"]
