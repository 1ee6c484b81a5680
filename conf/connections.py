"""Connections as a bounded resource (issue 25 item 2; docs/operations.md §9.4): the
file-descriptor limit a daemon runs with, and what it says when it runs out.

Every connection a daemon holds is a file descriptor. Three things keep an idle flood from
taking a daemon off the network, and one makes it visible when it happens anyway:

* ``raise_fd_limit`` raises the soft ``RLIMIT_NOFILE`` to the hard limit, once per process,
  and logs both (``conf.rpc`` calls it when it makes a server);
* the gRPC servers close a connection whose handshake has not completed within
  ``hanamenode.rpc.handshake-timeout.ms`` and one without calls for
  ``hanamenode.rpc.max-connection-idle.ms`` (``conf.rpc.server_options``);
* the HTTP server runs a fixed number of connections at once and closes the others at once
  (``conf.web``), counted here;
* ``watch(prefix, registry)`` exports what a daemon holds and whether it can still accept:
  ``<prefix>_open_fds``, ``<prefix>_max_fds``, ``<prefix>_fd_exhausted`` (1 while fewer than
  ``headroom(limit)`` descriptors are free: a new connection is then refused by ``accept``,
  which gRPC's core retries quietly), ``<prefix>_fd_exhaustions`` (times it got there),
  ``<prefix>_http_connections`` and ``<prefix>_http_connections_refused``. One thread per
  process (``fd-watch``) counts ``/proc/self/fd`` every ``WATCH_INTERVAL`` seconds and logs a
  warning when the descriptors run out and an info line when they are back.

When the count has fallen by ``TRIM_AFTER_DROP`` descriptors from its high point (a flood
closed), the same thread asks glibc to give freed heap pages back (``malloc_trim``): the
connections' buffers are freed in gRPC's own threads' arenas, which glibc otherwise keeps,
so that a daemon stayed a gigabyte larger for minutes after 20,000 connections had closed.
"""

from __future__ import annotations

import ctypes
import errno
import os
import resource
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import structlog
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

__all__ = [
    "WATCH_INTERVAL",
    "FdLimit",
    "headroom",
    "http_connection_closed",
    "http_connection_opened",
    "http_connection_refused",
    "open_fds",
    "raise_fd_limit",
    "watch",
]

log = structlog.get_logger(__name__)

WATCH_INTERVAL = 1.0
"""Seconds between two counts of the open descriptors."""
TRIM_AFTER_DROP = 256
"""Descriptors closed since the high point after which freed memory is given back."""


@dataclass(frozen=True, slots=True)
class FdLimit:
    """``RLIMIT_NOFILE`` of this process: the soft limit before and after ``raise_fd_limit``,
    and the hard limit (``resource.RLIM_INFINITY`` is -1)."""

    soft_before: int
    soft: int
    hard: int


_lock = threading.Lock()
_limit: FdLimit | None = None


def raise_fd_limit() -> FdLimit:
    """Raise this process's soft open-file limit to its hard limit (once; later calls return
    the first result) and log both. A daemon holds one descriptor per connection: the soft
    limit (often 1024) is what an idle flood exhausts first, while the hard limit is what the
    operator allowed."""
    global _limit
    with _lock:
        if _limit is not None:
            return _limit
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        wanted = hard
        if hard == resource.RLIM_INFINITY:
            # An unlimited hard limit cannot be the soft one: the kernel's nr_open is.
            wanted = _nr_open()
        new_soft = soft
        if soft != resource.RLIM_INFINITY and soft < wanted:
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
                new_soft = wanted
            except (ValueError, OSError) as exc:
                log.warning(
                    "cannot raise the open-file limit", soft=soft, hard=hard, error=str(exc)
                )
        _limit = FdLimit(soft, new_soft, hard)
        log.info(
            "open-file limit (RLIMIT_NOFILE)",
            soft_before=soft,
            soft=new_soft,
            hard="unlimited" if hard == resource.RLIM_INFINITY else hard,
        )
        return _limit


def _nr_open() -> int:
    try:
        with open("/proc/sys/fs/nr_open") as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return 1 << 20


def headroom(limit: int) -> int:
    """Free descriptors below which a daemon reports it cannot accept new connections: 1% of
    the limit, at least 32 (a few for the files and connections it opens itself)."""
    return max(32, limit // 100)


def open_fds() -> int:
    """Descriptors this process holds now (``/proc/self/fd``, Linux)."""
    with os.scandir("/proc/self/fd") as entries:
        return sum(1 for _ in entries)


def _malloc_trim() -> Callable[[int], int] | None:
    try:
        libc = ctypes.CDLL("libc.so.6")
        trim: Callable[[int], int] = libc.malloc_trim
    except (OSError, AttributeError):  # not glibc: nothing to trim this way
        return None
    return trim


_TRIM = _malloc_trim()


def _rss_bytes() -> int | None:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def _current_limit() -> int:
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return _nr_open() if soft == resource.RLIM_INFINITY else soft


class _Watch:
    """The process-wide count of descriptors, refreshed by thread ``fd-watch``."""

    def __init__(self) -> None:
        self.open = 0
        self.limit = _current_limit()
        self.exhausted = False
        self.exhaustions = 0
        self.http_open = 0
        self.http_refused = 0
        self.high = 0
        self.trims = 0
        self._thread: threading.Thread | None = None
        self._http_lock = threading.Lock()

    def start(self) -> None:
        with _lock:
            if self._thread is not None:
                return
            self.refresh()
            self._thread = threading.Thread(target=self._run, name="fd-watch", daemon=True)
            self._thread.start()

    def refresh(self) -> None:
        limit = _current_limit()
        try:
            count = open_fds()
        except OSError as exc:
            if exc.errno in (errno.EMFILE, errno.ENFILE):
                count = limit  # counting needs a descriptor too: none is left
            else:  # no /proc: nothing to report, say so once
                if self._thread is None:
                    log.warning("cannot count open file descriptors", error=str(exc))
                return
        self.open, self.limit = count, limit
        exhausted = self.limit - count < headroom(self.limit)
        if exhausted and not self.exhausted:
            self.exhaustions += 1
            log.warning(
                "cannot accept new connections: file descriptors nearly exhausted",
                open_fds=count,
                limit=self.limit,
                free=self.limit - count,
            )
        elif self.exhausted and not exhausted:
            log.info(
                "file descriptors available again: accepting connections",
                open_fds=count,
                limit=self.limit,
            )
        self.exhausted = exhausted
        self.high = max(self.high, count)
        if self.high - count >= TRIM_AFTER_DROP:
            self._trim(self.high, count)
            self.high = count

    def _trim(self, high: int, count: int) -> None:
        if _TRIM is None:
            return
        before = _rss_bytes()
        _TRIM(0)
        after = _rss_bytes()
        self.trims += 1
        log.info(
            "connections closed: freed memory given back",
            open_fds=count,
            high=high,
            rss_before=before,
            rss_after=after,
        )

    def _run(self) -> None:
        while True:
            time.sleep(WATCH_INTERVAL)
            try:
                self.refresh()
            except Exception:  # a bug here must not end the thread unseen
                log.exception("fd-watch round failed")

    def http_change(self, opened: int, refused: int) -> None:
        with self._http_lock:
            self.http_open += opened
            self.http_refused += refused


_WATCH = _Watch()


def http_connection_opened() -> None:
    """The HTTP server (``conf.web``) took a connection."""
    _WATCH.http_change(1, 0)


def http_connection_closed() -> None:
    _WATCH.http_change(-1, 0)


def http_connection_refused() -> None:
    """The HTTP server closed a connection at once: all its workers were busy."""
    _WATCH.http_change(0, 1)


class _Collector(Collector):
    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        p, w = self.prefix, _WATCH
        yield GaugeMetricFamily(f"{p}_open_fds", "File descriptors held now", value=w.open)
        yield GaugeMetricFamily(
            f"{p}_max_fds", "The soft open-file limit (RLIMIT_NOFILE)", value=w.limit
        )
        yield GaugeMetricFamily(
            f"{p}_fd_exhausted",
            "1 while too few file descriptors are free to accept new connections",
            value=int(w.exhausted),
        )
        yield CounterMetricFamily(
            f"{p}_fd_exhaustions",
            "Times the file descriptors ran out (new connections refused)",
            value=w.exhaustions,
        )
        yield GaugeMetricFamily(
            f"{p}_http_connections", "HTTP connections being served now", value=w.http_open
        )
        yield CounterMetricFamily(
            f"{p}_http_connections_refused",
            "HTTP connections closed at once because every HTTP worker was busy",
            value=w.http_refused,
        )


_watched: weakref.WeakSet[CollectorRegistry] = weakref.WeakSet()


def watch(prefix: str, registry: CollectorRegistry) -> None:
    """Export the connection metrics above as ``<prefix>_...`` in ``registry`` (once per
    registry) and start the process's ``fd-watch`` thread if it is not running."""
    with _lock:
        if registry not in _watched:
            registry.register(_Collector(prefix))
            _watched.add(registry)
    _WATCH.start()
