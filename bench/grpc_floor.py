"""The floor under every RPC of the project: what a Python gRPC call costs on this machine.

An echo server in another process (made by conf.rpc like every daemon's, no disk, no work)
answers raw TCP ping-pongs (the baseline, same processes, same loopback), gRPC unary calls,
and a bidirectional stream driven the way the QJM's JournalStream drives one (a request
iterator fed from a queue, a reader thread). Then 32 client threads call it as the NameNode
benchmark's clients do. What it shows: how much of ``bench.journal_append``'s latency and of
``bench.namenode_ops``'s throughput gRPC's Python layer takes before any of our code runs.

The same process also serves the echo on a grpc.aio server (an event loop in a thread, as the
JournalNode of issue 12 serves), and the stream and unary series are repeated from a grpc.aio
client awaiting each answer on its event loop (as the asyncio QJM's ``AioJournalStream``
does), against both servers.

    python -m bench.grpc_floor [--calls 2000] [--threads 32] [--seconds 4]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import os
import queue
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import Future
from typing import Any

import grpc
import grpc.aio

from bench.common import percentile, print_json, print_table
from conf.logging import setup_logging
from conf.rpc import bind, make_aio_channel, make_aio_server, make_channel, make_server

SERVICE = "bench.Echo"
UNARY = f"/{SERVICE}/Ping"
COUNT = f"/{SERVICE}/Count"
STREAM = f"/{SERVICE}/Stream"
PAYLOAD = b"e" * 100


def _same(data: bytes) -> bytes:
    return data


# ---------------------------------------------------------------------------------------------
# The server process.
# ---------------------------------------------------------------------------------------------


def serve() -> None:
    """Echo over gRPC (unary and stream) and over raw TCP; prints both ports, runs until
    stdin closes."""

    pings = [0]
    lock = threading.Lock()

    def ping(request: bytes, context: grpc.ServicerContext) -> bytes:
        with lock:
            pings[0] += 1
        return request

    def count(request: bytes, context: grpc.ServicerContext) -> bytes:
        # The Ping calls answered so far: how a driver that cannot read gRPC trailers
        # (h2load) learns how many of its calls succeeded.
        with lock:
            return str(pings[0]).encode()

    def stream(requests: Iterator[bytes], context: grpc.ServicerContext) -> Iterator[bytes]:
        yield from requests

    handler = grpc.method_handlers_generic_handler(
        SERVICE,
        {
            "Ping": grpc.unary_unary_rpc_method_handler(ping, _same, _same),
            "Count": grpc.unary_unary_rpc_method_handler(count, _same, _same),
            "Stream": grpc.stream_stream_rpc_method_handler(stream, _same, _same),
        },
    )
    server = make_server(max_workers=64)
    server.add_generic_rpc_handlers((handler,))
    port = bind(server, "127.0.0.1:0", None)
    server.start()

    listener = socket.create_server(("127.0.0.1", 0))

    def tcp_echo(conn: socket.socket) -> None:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with conn:
            while data := conn.recv(4096):
                conn.sendall(data)

    def accept() -> None:
        while True:
            conn, _ = listener.accept()
            threading.Thread(target=tcp_echo, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    aio_port = _serve_aio()
    print(port, listener.getsockname()[1], aio_port, flush=True)
    sys.stdin.read()
    server.stop(None)


def _serve_aio() -> int:
    """The same echo on a grpc.aio server, on an event loop in its own thread; its port."""
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, name="echo-aio-loop", daemon=True).start()

    async def ping(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        return request

    async def stream(
        requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[bytes]:
        async for request in requests:
            yield request

    async def start() -> int:
        handler = grpc.method_handlers_generic_handler(
            SERVICE,
            {
                "Ping": grpc.unary_unary_rpc_method_handler(ping, _same, _same),
                "Stream": grpc.stream_stream_rpc_method_handler(stream, _same, _same),
            },
        )
        server = make_aio_server()
        server.add_generic_rpc_handlers((handler,))
        port = bind(server, "127.0.0.1:0", None)
        await server.start()
        _AIO_SERVERS.append(server)  # kept alive for the process's life
        return port

    return asyncio.run_coroutine_threadsafe(start(), loop).result(30)


_AIO_SERVERS: list[grpc.aio.Server] = []


# ---------------------------------------------------------------------------------------------
# The client side.
# ---------------------------------------------------------------------------------------------


def _timed(call: Callable[[], Any], calls: int, warmup: int = 200) -> list[float]:
    for _ in range(warmup):
        call()
    out = []
    for _ in range(calls):
        began = time.perf_counter()
        call()
        out.append(time.perf_counter() - began)
    return sorted(out)


def tcp_latencies(port: int, calls: int) -> list[float]:
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def ping() -> None:
            sock.sendall(PAYLOAD)
            got = 0
            while got < len(PAYLOAD):
                got += len(sock.recv(4096))

        return _timed(ping, calls)


def unary_latencies(port: int, calls: int) -> list[float]:
    with make_channel(f"127.0.0.1:{port}") as channel:
        ping = channel.unary_unary(UNARY, _same, _same)
        return _timed(lambda: ping(PAYLOAD, timeout=10), calls)


def stream_latencies(port: int, calls: int) -> list[float]:
    """One answer awaited per request, as a 1-edit writer on the JournalStream waits."""
    with make_channel(f"127.0.0.1:{port}") as channel:
        requests: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        answers = channel.stream_stream(STREAM, _same, _same)(iter(requests.get, None))
        waiting: collections.deque[Future[bytes]] = collections.deque()

        def read() -> None:
            for answer in answers:
                waiting.popleft().set_result(answer)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()

        def ping() -> None:
            future: Future[bytes] = Future()
            waiting.append(future)
            requests.put(PAYLOAD)
            future.result(timeout=10)

        try:
            return _timed(ping, calls)
        finally:
            requests.put(None)
            reader.join(timeout=10)


def aio_latencies(port: int, calls: int, *, streaming: bool, warmup: int = 200) -> list[float]:
    """From a grpc.aio client on an event loop, each answer awaited before the next call: on
    one stream fed from a queue (the asyncio QJM's ``AioJournalStream``), or unary calls."""

    async def run() -> list[float]:
        async with make_aio_channel(f"127.0.0.1:{port}") as channel:
            if streaming:
                requests: asyncio.Queue[bytes | None] = asyncio.Queue()

                async def outgoing() -> AsyncIterator[bytes]:
                    while (request := await requests.get()) is not None:
                        yield request

                call = channel.stream_stream(STREAM, _same, _same)(outgoing())

                async def once() -> None:
                    requests.put_nowait(PAYLOAD)
                    await call.read()
            else:
                ping = channel.unary_unary(UNARY, _same, _same)

                async def once() -> None:
                    await ping(PAYLOAD, timeout=10)

            out = []
            for i in range(warmup + calls):
                began = time.perf_counter()
                await once()
                if i >= warmup:
                    out.append(time.perf_counter() - began)
            if streaming:
                requests.put_nowait(None)
            return sorted(out)

    return asyncio.run(run())


def unary_throughput(port: int, threads: int, seconds: float) -> float:
    """Calls per second with ``threads`` threads, each on its own channel."""
    counts = [0] * threads
    window: dict[str, float] = {}

    def open_window() -> None:
        window["begin"] = time.perf_counter() + 0.3
        window["end"] = window["begin"] + seconds

    start = threading.Barrier(threads, action=open_window)

    def client(index: int) -> None:
        with make_channel(f"127.0.0.1:{port}") as channel:
            ping = channel.unary_unary(UNARY, _same, _same)
            ping(PAYLOAD, timeout=10)
            start.wait()
            while (now := time.perf_counter()) < window["end"]:
                ping(PAYLOAD, timeout=10)
                if now >= window["begin"] and time.perf_counter() <= window["end"]:
                    counts[index] += 1

    workers = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=seconds + 60)
    return sum(counts) / seconds


@contextlib.contextmanager
def echo_server() -> Iterator[tuple[int, int, int]]:
    """The echo server in its own process: (gRPC port, raw TCP port, pid); stopped on exit."""
    with echo_servers() as (grpc_port, tcp_port, pid, _):
        yield grpc_port, tcp_port, pid


@contextlib.contextmanager
def echo_servers() -> Iterator[tuple[int, int, int, int]]:
    """``echo_server`` with the grpc.aio echo's port last: (gRPC port, raw TCP port, pid,
    grpc.aio port)."""
    server = subprocess.Popen(
        [sys.executable, "-m", "bench.grpc_floor", "--serve"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        grpc_port, tcp_port, aio_port = (int(x) for x in server.stdout.readline().split())
        yield grpc_port, tcp_port, server.pid, aio_port
    finally:
        if server.stdin is not None:
            server.stdin.close()
        server.wait(timeout=30)


def echo_count(port: int) -> int:
    """How many Ping calls the echo server has answered."""
    with make_channel(f"127.0.0.1:{port}") as channel:
        return int(channel.unary_unary(COUNT, _same, _same)(b"", timeout=10))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=2000, help="calls per latency series")
    parser.add_argument("--threads", type=int, default=32, help="client threads for throughput")
    parser.add_argument("--seconds", type=float, default=4.0, help="throughput window")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        # stdout carries the ports to the parent: every log line goes to stderr.
        setup_logging(level="warning")
        serve()
        return 0

    with echo_servers() as (grpc_port, tcp_port, _, aio_port):
        tcp = tcp_latencies(tcp_port, args.calls)
        unary = unary_latencies(grpc_port, args.calls)
        stream = stream_latencies(grpc_port, args.calls)
        aio_stream_sync = aio_latencies(grpc_port, args.calls, streaming=True)
        aio_stream = aio_latencies(aio_port, args.calls, streaming=True)
        aio_unary = aio_latencies(aio_port, args.calls, streaming=False)
        per_s = unary_throughput(grpc_port, args.threads, args.seconds)

    def us(values: list[float], q: float) -> float:
        return round(percentile(values, q) * 1e6, 1)

    rows = [
        ["raw TCP ping-pong (baseline)", us(tcp, 0.5), us(tcp, 0.99), "1.00"],
        ["gRPC unary", us(unary, 0.5), us(unary, 0.99), f"{us(unary, 0.5) / us(tcp, 0.5):.2f}"],
        [
            "gRPC stream (JournalStream shape)",
            us(stream, 0.5),
            us(stream, 0.99),
            f"{us(stream, 0.5) / us(tcp, 0.5):.2f}",
        ],
        *(
            [name, us(values, 0.5), us(values, 0.99), f"{us(values, 0.5) / us(tcp, 0.5):.2f}"]
            for name, values in (
                ("grpc.aio stream client -> sync server", aio_stream_sync),
                ("grpc.aio stream client -> grpc.aio server", aio_stream),
                ("grpc.aio unary client -> grpc.aio server", aio_unary),
            )
        ),
    ]
    print_table(
        f"echo of {len(PAYLOAD)} bytes to another process, {args.calls} calls, "
        f"{os.cpu_count()} CPUs",
        ["path", "p50 us", "p99 us", "p50 / TCP"],
        rows,
    )
    print_table(
        "gRPC unary throughput",
        ["client threads", "calls/s"],
        [[args.threads, f"{per_s:,.0f}"]],
    )
    print_json(
        {
            "tcp_p50_us": us(tcp, 0.5),
            "grpc_unary_p50_us": us(unary, 0.5),
            "grpc_unary_p99_us": us(unary, 0.99),
            "grpc_stream_p50_us": us(stream, 0.5),
            "aio_stream_to_sync_server_p50_us": us(aio_stream_sync, 0.5),
            "aio_stream_to_aio_server_p50_us": us(aio_stream, 0.5),
            "aio_unary_to_aio_server_p50_us": us(aio_unary, 0.5),
            "unary_vs_tcp_p50_ratio": round(us(unary, 0.5) / us(tcp, 0.5), 2),
            "stream_vs_tcp_p50_ratio": round(us(stream, 0.5) / us(tcp, 0.5), 2),
            f"grpc_unary_calls_per_s_{args.threads}": round(per_s, 1),
            "cpus": os.cpu_count(),
        }
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
