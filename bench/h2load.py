"""gRPC unary calls driven by nghttp2's ``h2load``: many calls in flight without a Python client.

A Python client saturates the 2 cores before a Python server does, so the server-side figures
(calls/s, CPU per call, edits per sync) are driven from C: ``h2load`` posts one fixed body, a
gRPC frame (1 byte "not compressed", 4 bytes big-endian length, the serialized request), over
h2c with ``-m`` streams on each of ``-c`` connections. It reads HTTP statuses only, and a gRPC
error is an HTTP 200 with ``grpc-status`` in the trailers, so the caller checks success on the
server side. ``--log-file`` gives each call's latency (h2load itself prints no percentiles).

Debian: ``apt-get install nghttp2-client`` (``scripts/bootstrap.sh`` does, as root).
"""

from __future__ import annotations

import contextlib
import re
import shutil
import struct
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["H2loadRun", "command", "grpc_frame", "parse_requests", "run", "streams_for"]

INSTALL_HINT = "h2load not found: install it with 'apt-get install nghttp2-client' (Debian)"


def grpc_frame(message: bytes) -> bytes:
    """The body of a uncompressed gRPC unary request carrying ``message``."""
    return struct.pack(">BI", 0, len(message)) + message


def streams_for(in_flight: int, connections: int) -> tuple[int, int]:
    """(connections, streams per connection) giving ``in_flight`` calls at once: one
    connection for fewer calls than ``connections``, else ``connections`` sharing them."""
    if in_flight < connections or in_flight % connections:
        return 1, in_flight
    return connections, in_flight // connections


def command(
    url: str, body: Path, in_flight: int, seconds: float, log_file: Path, connections: int = 4
) -> list[str]:
    c, m = streams_for(in_flight, connections)
    return [
        "h2load",
        "-t1",
        f"-c{c}",
        f"-m{m}",
        f"-D{seconds:g}",
        "-H",
        "content-type: application/grpc",
        "-H",
        "te: trailers",
        "-d",
        str(body),
        f"--log-file={log_file}",
        url,
    ]


_REQUESTS = re.compile(
    r"requests: (?P<total>\d+) total, (?P<started>\d+) started, (?P<done>\d+) done, "
    r"(?P<succeeded>\d+) succeeded, (?P<failed>\d+) failed, (?P<errored>\d+) errored, "
    r"(?P<timeout>\d+) timeout"
)


def parse_requests(output: str) -> dict[str, int]:
    """The ``requests:`` line of h2load's summary, by field; ValueError naming what is
    missing when the output has none (h2load failed to connect, or changed its format)."""
    found = _REQUESTS.search(output)
    if found is None:
        raise ValueError(f"no 'requests: ...' summary line in h2load's output: {output[-500:]!r}")
    return {key: int(value) for key, value in found.groupdict().items()}


@dataclass(frozen=True)
class H2loadRun:
    requests: dict[str, int]
    """h2load's counts: done, succeeded (HTTP 2xx), failed, errored, timeout."""
    latencies_ms: list[float]
    """Sorted, every call h2load logged as HTTP 200."""
    seconds: float


Messages = bytes | Sequence[bytes]
"""What one h2load stream posts: one message (a unary call), or several, each its own gRPC
frame in one request body (the calls of a ``Session`` stream, sent and then half-closed)."""


@contextlib.contextmanager
def _files(message: Messages) -> Iterator[tuple[Path, Path]]:
    """(body, log) for one h2load run: the request body holding ``message`` as gRPC frames,
    and where h2load logs each call; FileNotFoundError saying how to install h2load."""
    if shutil.which("h2load") is None:
        raise FileNotFoundError(INSTALL_HINT)
    messages = [message] if isinstance(message, bytes) else list(message)
    with tempfile.TemporaryDirectory(prefix="h2load-") as tmp:
        body, log = Path(tmp) / "body", Path(tmp) / "log"
        body.write_bytes(b"".join(grpc_frame(m) for m in messages))
        yield body, log


def run(
    url: str, message: Messages, in_flight: int, seconds: float, connections: int = 4
) -> H2loadRun:
    """``h2load`` posting ``message`` to ``url`` (``http://host:port/package.Service/Method``)
    with ``in_flight`` calls outstanding for ``seconds``."""
    with _files(message) as (body, log):
        done = subprocess.run(
            command(url, body, in_flight, seconds, log, connections),
            capture_output=True,
            text=True,
            timeout=seconds + 120,
        )
        if done.returncode != 0:
            raise RuntimeError(f"h2load exited with {done.returncode}: {done.stderr[-500:]}")
        latencies = []
        for line in log.read_text().splitlines():
            _, status, micros = line.split("\t")[:3]
            if status == "200":
                latencies.append(int(micros) / 1000.0)
    return H2loadRun(parse_requests(done.stdout), sorted(latencies), seconds)


@contextlib.contextmanager
def background(
    url: str, message: Messages, in_flight: int, limit: float = 600.0
) -> Iterator[None]:
    """``h2load`` posting ``message`` to ``url`` with ``in_flight`` calls outstanding while the
    ``with`` body runs (at most ``limit`` seconds): a load that costs the measuring process
    no CPU and no GIL. Stopped with SIGTERM on exit; ``RuntimeError`` when it ended early
    with an error."""
    with _files(message) as (body, log):
        load = subprocess.Popen(
            command(url, body, in_flight, limit, log),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            yield
        finally:
            ended = load.poll()
            load.terminate()
            _, err = load.communicate(timeout=30)
        if ended not in (None, 0):
            raise RuntimeError(f"h2load exited with {ended} during the load: {err[-500:]}")

