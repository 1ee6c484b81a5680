"""The history of a ``hachaos`` run: one JSON line per invocation and per completion (the
format ``hachaos.checker`` reads, described there), plus ``meta``, ``nemesis`` and ``ack``
lines for the reader. Times are ``time.monotonic()`` seconds since the run started, so they
order events across every client thread of the process; each line is flushed as it is
written, so a harness that dies leaves a history that can still be checked.

``outcome`` turns what a client call returned or raised into the answer the checker's model
speaks (``created``, ``exists``, ``dir``...), or into an indeterminate result when the call
may or may not have taken effect.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, TextIO

from hanamenode.errors import (
    NamenodeError,
    PathExistsError,
    PathIsDirectoryError,
    PathNotFoundError,
)
from hanamenode.namespace import StatInfo

__all__ = ["History", "Outcome", "outcome"]

Outcome = tuple[str, Any, str | None]
"""(``ok`` or ``info``, the answer, the error text)."""


def outcome(f: str, result: Any = None, error: BaseException | None = None) -> Outcome:
    """What the history records for a call of ``f`` that returned ``result`` or raised
    ``error``. A refusal that is the namespace's verdict is a definite answer; anything else
    (no NameNode answered, a timeout, an error we do not expect) is ``info``: the call may
    have been applied."""
    if error is None:
        if f == "mkdir":
            return "ok", "created" if result else "noop", None
        if f == "create":
            return "ok", "created", None
        if f == "delete":
            return "ok", "deleted" if result else "not-found", None
        if f == "stat":
            assert isinstance(result, StatInfo)
            return "ok", "dir" if result.is_dir else "file", None
        if f == "ls":
            return (
                "ok",
                {s.path.rsplit("/", 1)[-1]: "dir" if s.is_dir else "file" for s in result},
                None,
            )
        raise ValueError(f"unknown operation {f!r}")
    text = f"{type(error).__name__}: {error}"
    if isinstance(error, PathExistsError) and f in ("mkdir", "create"):
        return "ok", "exists", text
    if isinstance(error, PathIsDirectoryError) and f == "create":
        return "ok", "is-dir", text
    if isinstance(error, PathNotFoundError) and f in ("delete", "stat"):
        return "ok", "not-found" if f == "delete" else "absent", text
    if isinstance(error, NamenodeError | OSError | TimeoutError):
        return "info", None, text
    raise error


class History:
    """An append-only JSONL history file; a context manager that closes it. Thread-safe."""

    def __init__(self, path: Path, meta: Mapping[str, Any] | None = None) -> None:
        self.path = Path(path)
        self.started = time.monotonic()
        self._lock = threading.Lock()
        self._out: TextIO = open(self.path, "a", encoding="utf-8")  # noqa: SIM115
        self.counts: dict[str, int] = {}
        if meta is not None:
            self.write({"type": "meta", **meta})

    def now(self) -> float:
        return round(time.monotonic() - self.started, 6)

    def write(self, record: Mapping[str, Any]) -> None:
        line = json.dumps({**record, "time": record.get("time", self.now())}, sort_keys=True)
        with self._lock:
            self._out.write(line + "\n")
            self._out.flush()
            kind = str(record.get("type"))
            self.counts[kind] = self.counts.get(kind, 0) + 1

    def note(self, record: Mapping[str, Any]) -> None:
        """A line for the reader (``nemesis``, ``ack``), stamped now."""
        self.write(record)

    def invoke(self, process: int, key: str, f: str, **args: Any) -> None:
        self.write({"type": "invoke", "process": process, "key": key, "f": f, "args": args})

    def complete(self, process: int, key: str, f: str, result: Outcome) -> None:
        kind, value, error = result
        record: dict[str, Any] = {"type": kind, "process": process, "key": key, "f": f}
        if kind == "ok":
            record["value"] = value
        if error is not None:
            record["error"] = error[:300]
        self.write(record)

    def record(
        self, process: int, key: str, f: str, call: Callable[[], Any], **args: Any
    ) -> Outcome:
        """Invoke ``f`` on ``key`` as ``process``: run ``call``, record its outcome (a raised
        error too: the checker judges it) and return it."""
        self.invoke(process, key, f, **args)
        try:
            result = outcome(f, call())
        except Exception as exc:
            result = outcome(f, error=exc)
        self.complete(process, key, f, result)
        return result

    def close(self) -> None:
        with self._lock:
            self._out.close()

    def __enter__(self) -> History:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
