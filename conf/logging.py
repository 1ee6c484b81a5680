"""Logging set-up for every daemon and CLI: structlog, console for people, JSON for machines.

Call ``setup_logging`` once at the start of a ``main`` (calling it again replaces the
previous set-up, it never stacks handlers). Library code only does
``log = structlog.get_logger(__name__)`` and binds context (``log.bind(journal=jid)``).
Standard-library loggers (grpc, kazoo) go through the same renderer, so a JSON log is
JSON on every line (docs/architecture.md §3.4).
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import click
import structlog

from conf.xmlconf import ConfigError

__all__ = [
    "LOG_FORMATS",
    "LOG_FORMAT_OPTION",
    "LOG_LEVELS",
    "LOG_LEVEL_OPTION",
    "RepeatFilter",
    "setup_logging",
]

LOG_FORMATS = ("console", "json")
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")

_F = TypeVar("_F", bound=Callable[..., Any])

LOG_FORMAT_OPTION: Callable[[_F], _F] = click.option(
    "--log-format",
    "log_format",
    type=click.Choice(LOG_FORMATS),
    default="console",
    show_default=True,
    help="console: for people; json: one JSON object per line, for machines.",
)
"""``@LOG_FORMAT_OPTION`` adds ``--log-format [console|json]`` (parameter ``log_format``)."""

LOG_LEVEL_OPTION: Callable[[_F], _F] = click.option(
    "--log-level",
    "log_level",
    type=click.Choice(LOG_LEVELS, case_sensitive=False),
    default="info",
    show_default=True,
    help="Least severe level logged.",
)
"""``@LOG_LEVEL_OPTION`` adds ``--log-level`` (parameter ``log_level``)."""


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is at the time (pytest's capture, a daemon's redirect)."""

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        super().emit(record)


_handler: _StderrHandler | None = None


class RepeatFilter(logging.Filter):
    """Lets the first ``burst`` of a run of identical lines through per ``window`` seconds and
    counts the rest; the first one let through in the next window says how many were held
    back (``repeated=N``). Identical: same logger, level and message (structlog: every key
    but the timestamp). Applies to warnings and worse, and to every line of
    ``quiet_loggers`` (kazoo says "Connecting to" and "Connection dropped" at each reconnect
    attempt: hundreds of lines a minute while ZooKeeper is down). A few identical events a
    minute (a step-down after each failover) all pass."""

    def __init__(
        self,
        window: float = 60.0,
        burst: int = 3,
        quiet_loggers: tuple[str, ...] = ("kazoo",),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self.window = window
        self.burst = burst
        self.quiet_loggers = quiet_loggers
        self._clock = clock
        self._lock = threading.Lock()
        self._seen: dict[tuple[Any, ...], tuple[float, int, int]] = {}
        """key -> (start of its window, lines let through in it, lines held back)."""

    def _limited(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.WARNING:
            return True
        return any(
            record.name == name or record.name.startswith(name + ".")
            for name in self.quiet_loggers
        )

    @staticmethod
    def _key(record: logging.LogRecord) -> tuple[Any, ...]:
        msg = record.msg
        if isinstance(msg, dict):
            text = repr(sorted((k, repr(v)) for k, v in msg.items() if k != "timestamp"))
        else:
            text = record.getMessage()
        return record.name, record.levelno, text

    def filter(self, record: logging.LogRecord) -> bool:
        if not self._limited(record):
            return True
        key = self._key(record)
        now = self._clock()
        with self._lock:
            start, passed, held = self._seen.get(key, (now - self.window, 0, 0))
            if now - start < self.window:
                if passed >= self.burst:
                    self._seen[key] = (start, passed, held + 1)
                    return False
                self._seen[key] = (start, passed + 1, held)
                held = 0
            else:
                self._seen[key] = (now, 1, 0)
            if len(self._seen) > 10_000:  # bounded: forget runs that ended long ago
                self._seen = {
                    k: v for k, v in self._seen.items() if now - v[0] < self.window
                }
        if held:
            if isinstance(record.msg, dict):
                record.msg = {**record.msg, "repeated": held}
            else:
                record.msg = f"{record.getMessage()} (repeated {held} times)"
                record.args = None
        return True


def _shared_processors() -> list[Any]:
    return [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.StackInfoRenderer(),
    ]


def setup_logging(fmt: str = "console", level: str = "info") -> None:
    """Route structlog and standard logging to stderr, rendered as ``fmt`` at ``level``."""
    global _handler
    if fmt not in LOG_FORMATS:
        raise ConfigError(f"unknown log format {fmt!r} (expected one of {', '.join(LOG_FORMATS)})")
    if level.lower() not in LOG_LEVELS:
        raise ConfigError(f"unknown log level {level!r} (expected one of {', '.join(LOG_LEVELS)})")
    renderer: Any
    if fmt == "json":
        renderer = structlog.processors.JSONRenderer()
        # Tracebacks as data, without local variables: locals may hold credentials.
        tracebacks = structlog.processors.ExceptionRenderer(
            structlog.tracebacks.ExceptionDictTransformer(show_locals=False)
        )
        final = [tracebacks, renderer]
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
        final = [renderer]
    # Changed in place, not replaced: a logger cached on its first use holds the list it was
    # built with, so a second setup (each CLI command run in one process makes one) must
    # reach it too, as must structlog.testing.capture_logs, which edits that same list.
    processors = structlog.get_config()["processors"]
    processors[:] = [
        structlog.stdlib.filter_by_level,
        *_shared_processors(),
        structlog.stdlib.PositionalArgumentsFormatter(),
        structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
    ]
    structlog.configure(
        processors=processors,
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    handler = _StderrHandler()
    handler.addFilter(RepeatFilter())
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=_shared_processors(),
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, *final],
        )
    )
    root = logging.getLogger()
    if _handler is not None:
        root.removeHandler(_handler)
    root.addHandler(handler)
    root.setLevel(level.upper())
    _handler = handler
