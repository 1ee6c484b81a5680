"""``bench.h2load``: the request body, how calls in flight split over connections, the
summary parser, and (with h2load installed) that a gRPC error h2load counts as HTTP 200 is
not counted as a success by the echo server."""

from __future__ import annotations

import shutil
import struct

import pytest

from bench import h2load
from bench.grpc_floor import echo_count, echo_server


def test_grpc_frame_is_uncompressed_flag_then_big_endian_length() -> None:
    assert h2load.grpc_frame(b"abc") == b"\x00\x00\x00\x00\x03abc"
    assert h2load.grpc_frame(b"") == b"\x00" + struct.pack(">I", 0)


@pytest.mark.parametrize(
    ("in_flight", "connections", "expected"),
    [(1, 4, (1, 1)), (32, 4, (4, 8)), (128, 4, (4, 32)), (6, 4, (1, 6)), (3, 4, (1, 3))],
)
def test_streams_for(in_flight: int, connections: int, expected: tuple[int, int]) -> None:
    c, m = h2load.streams_for(in_flight, connections)
    assert (c, m) == expected
    assert c * m == in_flight


def test_parse_requests() -> None:
    out = (
        "finished in 3.00s, 1000.00 req/s, 10KB/s\n"
        "requests: 3000 total, 3010 started, 3000 done, 2990 succeeded, 10 failed, "
        "10 errored, 0 timeout\n"
    )
    got = h2load.parse_requests(out)
    assert got["done"] == 3000 and got["succeeded"] == 2990 and got["errored"] == 10


def test_parse_requests_without_summary_names_it() -> None:
    with pytest.raises(ValueError, match="requests:"):
        h2load.parse_requests("connect: Connection refused\n")


@pytest.mark.skipif(shutil.which("h2load") is None, reason="apt-get install nghttp2-client")
def test_http_200_with_grpc_error_is_not_a_success_on_the_server() -> None:
    with echo_server() as (port, _, _pid):
        before = echo_count(port)
        good = h2load.run(f"http://127.0.0.1:{port}/bench.Echo/Ping", b"x", 2, 1.0)
        served = echo_count(port) - before
        bad = h2load.run(f"http://127.0.0.1:{port}/bench.Echo/Nope", b"x", 2, 1.0)
        assert echo_count(port) - before == served
    assert good.requests["done"] > 0 and served >= good.requests["done"]
    # UNIMPLEMENTED arrives as HTTP 200: h2load calls it succeeded, the server served none.
    assert bad.requests["succeeded"] > 0 and bad.latencies_ms
