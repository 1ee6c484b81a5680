"""Journal RPC append benchmark: one real JournalNode process, real fdatasync.

Run from the checkout: ``.venv/bin/python -m bench.journal_append [--dir D] [--calls 2000]``.

It starts one ``python -m journalnode run`` process (``hadev.journalnodes``), opens a
segment through ``GrpcJournalChannel`` and measures

(a) the latency of a synchronous Journal RPC carrying one ~100-byte record (the JournalNode
    validates it, appends it and fdatasyncs before answering): p50 and p99 over ``--calls``;
(b) throughput in edits/s with 1, 10, 100 and 1000 edits per Journal RPC, one writer,
    each size for ``--seconds`` of RPC time (batches are framed before the clock starts);
(c) the floor: ``os.write`` + ``os.fdatasync`` of a record of the same size, appended to a
    file in the JournalNode's storage directory (same filesystem), p50 and p99;
(d) the RPC floor: an IsFormatted round trip (same channel and server, no disk), p50.

(a), (c) and (d) run interleaved in blocks so that drift of the disk's latency hits all alike.
It prints a table with the targets beside the measured values (1-edit p50 within 3x the raw
fdatasync p50; 100,000 edits/s at 1000 edits per batch), then one JSON line. Targets are
reported, never asserted (docs/architecture.md §8.6 ``bench/``).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.common import (
    journal_metrics,
    percentile,
    print_json,
    print_table,
    raw_fdatasync_latencies,
)
from bench.namenode.shared import cpu_seconds
from hadev.journalnodes import JournalNodeProcess, start_journalnode
from proto import edits_pb2, records
from proto.values import NamespaceInfo, RequestInfo
from qjm.channel import AioJournalChannel, GrpcJournalChannel

JID = "bench"
NS = NamespaceInfo("CID-bench", 1)
RPC_TIMEOUT = 30.0
BATCH_SIZES = (1, 10, 100, 1000)
TARGET_P50_RATIO = 3.0
TARGET_EDITS_PER_S_AT_1000 = 100_000
BLOCKS = 8


class Writer:
    """The one writer: epoch 1, one open segment, contiguous txids, fixed-size records."""

    def __init__(self, channel: GrpcJournalChannel, record_bytes: int) -> None:
        self.channel = channel
        self.serial = 0
        self.segment_txid = 1
        self.next_txid = 1
        # The NoOp payload is sized so that a framed record is about record_bytes long.
        overhead = len(records.frame(_op(10**6, b"").SerializeToString()))
        self._payload = b"x" * max(0, record_bytes - overhead - 1)
        self.record_len = len(self.frame(1, 1))

    def req(self) -> RequestInfo:
        self.serial += 1
        return RequestInfo(JID, NS.cluster_id, 1, self.serial)

    def open(self) -> None:
        self.channel.format(JID, NS, True, RPC_TIMEOUT)
        self.channel.new_epoch(JID, NS, 1, RPC_TIMEOUT)
        self.channel.start_log_segment(self.req(), self.segment_txid, RPC_TIMEOUT)

    def frame(self, first: int, count: int) -> bytes:
        op = _op(first, self._payload)
        out = []
        for txid in range(first, first + count):
            op.txid = txid
            out.append(records.frame(op.SerializeToString()))
        return b"".join(out)

    def batches(self, count: int) -> Iterator[tuple[int, bytes]]:
        """Framed batches of ``count`` edits continuing the segment, forever."""
        first = self.next_txid
        while True:
            yield first, self.frame(first, count)
            first += count

    def send_stream(self, first: int, count: int, framed: bytes) -> float:
        """One batch on the JournalStream (the writer's path, qjm.async_logger); its latency."""
        req = self.req()
        began = time.perf_counter()
        self.channel.send_journal(
            req, self.segment_txid, first, count, framed, RPC_TIMEOUT
        ).result()
        took = time.perf_counter() - began
        self.next_txid = first + count
        return took

    def send(self, first: int, count: int, framed: bytes) -> float:
        """One Journal RPC; returns its latency in seconds."""
        req = self.req()
        began = time.perf_counter()
        self.channel.journal(req, self.segment_txid, first, count, framed, RPC_TIMEOUT)
        took = time.perf_counter() - began
        self.next_txid = first + count
        return took


class WireWriter:
    """The writer's batches on the JournalNode's edits wire (docs/protocol.md §13.8), from an
    ``AioJournalChannel`` on an event loop of its own thread, continuing ``writer``'s txids
    and serials: the path a NameNode's ``AsyncLogger`` takes."""

    def __init__(self, writer: Writer, address: str) -> None:
        self.writer = writer
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.channel = AioJournalChannel(address)
        self._call(self.channel.get_journal_state(JID, NS.cluster_id, RPC_TIMEOUT))
        if not self.channel.edits_port:
            raise RuntimeError(f"the JournalNode at {address} announced no edits wire")

    def _call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(RPC_TIMEOUT)

    def send(self, first: int, count: int, framed: bytes) -> float:
        writer = self.writer
        req = writer.req()

        async def one() -> None:
            await self.channel.send_journal(
                req, writer.segment_txid, first, count, framed, RPC_TIMEOUT
            )

        began = time.perf_counter()
        self._call(one())
        took = time.perf_counter() - began
        writer.next_txid = first + count
        return took

    def latencies(self, calls: int) -> list[float]:
        batches = self.writer.batches(1)
        return [self.send(first, 1, framed) for first, framed in _take(batches, calls)]

    def close(self) -> None:
        self._call(self.channel.aclose())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


def _op(txid: int, payload: bytes) -> edits_pb2.EditOp:
    return edits_pb2.EditOp(txid=txid, noop=edits_pb2.NoOp(payload=payload))


def journal_latencies(writer: Writer, calls: int) -> list[float]:
    batches = writer.batches(1)
    return [writer.send(first, 1, framed) for first, framed in _take(batches, calls)]


def stream_latencies(writer: Writer, calls: int) -> list[float]:
    batches = writer.batches(1)
    return [writer.send_stream(first, 1, framed) for first, framed in _take(batches, calls)]


def rpc_latencies(channel: GrpcJournalChannel, calls: int) -> list[float]:
    """IsFormatted round trips: the same gRPC path without validation, write or sync."""
    out = []
    for _ in range(calls):
        began = time.perf_counter()
        channel.is_formatted(JID, RPC_TIMEOUT)
        out.append(time.perf_counter() - began)
    return out


def throughput(writer: Writer, batch_size: int, seconds: float, min_batches: int = 5) -> float:
    """Edits/s over at least ``seconds`` of Journal RPC time at ``batch_size`` per call.

    A few batches are framed ahead of the clock, so framing cost is excluded.
    """
    rpc_time, edits, batches = 0.0, 0, 0
    while rpc_time < seconds or batches < min_batches:
        ready = list(_take(writer.batches(batch_size), 20))
        for first, framed in ready:
            rpc_time += writer.send(first, batch_size, framed)
            edits += batch_size
            batches += 1
            if rpc_time >= seconds and batches >= min_batches:
                break
    return edits / rpc_time


def _take(it: Iterator[tuple[int, bytes]], n: int) -> Iterator[tuple[int, bytes]]:
    for _ in range(n):
        yield next(it)


def scrape_sync(jn: JournalNodeProcess) -> tuple[float, float]:
    """(count, sum of seconds) of the JournalNode's own fdatasync histogram for the journal."""
    values = journal_metrics(jn.metrics_url, JID)
    return (
        values.get("journalnode_sync_seconds_count", 0.0),
        values.get("journalnode_sync_seconds_sum", 0.0),
    )


def run(workdir: Path, calls: int, seconds: float, record_bytes: int) -> dict[str, float]:
    # plaintext: the figures compare with earlier runs (docs/benchmarks.md)
    with start_journalnode(workdir, "jn1", probe_journal=JID, tls=False) as jn:
        channel = GrpcJournalChannel(jn.address)
        try:
            writer = Writer(channel, record_bytes)
            writer.open()
            raw_path = jn.edits_dir / "raw-fdatasync-floor"
            # Warm up the connection, the JournalNode's code paths and the raw file.
            journal_latencies(writer, 100)
            stream_latencies(writer, 100)
            wire = WireWriter(writer, jn.address)
            wire.latencies(100)
            raw_fdatasync_latencies(raw_path, writer.record_len, 100)

            journal: list[float] = []
            stream: list[float] = []
            on_wire: list[float] = []
            raw: list[float] = []
            rpc: list[float] = []
            cpu = {"unary": 0.0, "stream": 0.0, "wire": 0.0}
            per_block = max(1, calls // BLOCKS)
            for _ in range(BLOCKS):
                raw += raw_fdatasync_latencies(raw_path, writer.record_len, per_block)
                began = cpu_seconds(jn.pid)
                journal += journal_latencies(writer, per_block)
                cpu["unary"] += cpu_seconds(jn.pid) - began
                began = cpu_seconds(jn.pid)
                stream += stream_latencies(writer, per_block)
                cpu["stream"] += cpu_seconds(jn.pid) - began
                began = cpu_seconds(jn.pid)
                on_wire += wire.latencies(per_block)
                cpu["wire"] += cpu_seconds(jn.pid) - began
                rpc += rpc_latencies(channel, per_block)
            sync_count, sync_sum = scrape_sync(jn)

            wire.close()
            rates = {size: throughput(writer, size, seconds) for size in BATCH_SIZES}
        finally:
            channel.close()
        jn.stop()

    journal.sort()
    stream.sort()
    on_wire.sort()
    raw.sort()
    rpc.sort()
    result: dict[str, float] = {
        "journal_p50_us": percentile(journal, 0.50) * 1e6,
        "journal_p99_us": percentile(journal, 0.99) * 1e6,
        "journal_stream_p50_us": percentile(stream, 0.50) * 1e6,
        "journal_stream_p99_us": percentile(stream, 0.99) * 1e6,
        "journal_wire_p50_us": percentile(on_wire, 0.50) * 1e6,
        "journal_wire_p99_us": percentile(on_wire, 0.99) * 1e6,
        "raw_fdatasync_p50_us": percentile(raw, 0.50) * 1e6,
        "raw_fdatasync_p99_us": percentile(raw, 0.99) * 1e6,
        "raw_fdatasync_mean_us": sum(raw) / len(raw) * 1e6,
        "rpc_floor_p50_us": percentile(rpc, 0.50) * 1e6,
        "jn_mean_fdatasync_us": (sync_sum / sync_count * 1e6) if sync_count else float("nan"),
        "calls": len(journal),
        "record_bytes": writer.record_len,
        # The JournalNode's CPU per 1-edit batch: a unary Journal call against a message on
        # the writer's JournalStream (issue 24 item 4).
        "jn_cpu_us_per_batch_unary": cpu["unary"] / len(journal) * 1e6,
        "jn_cpu_us_per_batch_stream": cpu["stream"] / len(stream) * 1e6,
        "jn_cpu_us_per_batch_wire": cpu["wire"] / len(on_wire) * 1e6,
    }
    result["jn_cpu_wire_to_stream_ratio"] = (
        result["jn_cpu_us_per_batch_wire"] / result["jn_cpu_us_per_batch_stream"]
    )
    result["jn_cpu_stream_to_unary_ratio"] = (
        result["jn_cpu_us_per_batch_stream"] / result["jn_cpu_us_per_batch_unary"]
    )
    result["p50_ratio"] = result["journal_p50_us"] / result["raw_fdatasync_p50_us"]
    result["stream_p50_ratio"] = result["journal_stream_p50_us"] / result["raw_fdatasync_p50_us"]
    for size, rate in rates.items():
        result[f"edits_per_s_at_{size}"] = rate
    result["target_p50_ratio_max"] = TARGET_P50_RATIO
    result["target_edits_per_s_at_1000_min"] = TARGET_EDITS_PER_S_AT_1000
    return result


def report(result: dict[str, float]) -> None:
    def us(key: str) -> str:
        return f"{result[key]:,.0f} us"

    def met(ok: bool) -> str:
        return "met" if ok else "MISSED"

    ratio_ok = result["p50_ratio"] <= TARGET_P50_RATIO
    rate_ok = result["edits_per_s_at_1000"] >= TARGET_EDITS_PER_S_AT_1000
    rows: list[list[str]] = [
        ["1-edit Journal RPC p50", us("journal_p50_us"), ""],
        ["1-edit Journal RPC p99", us("journal_p99_us"), ""],
        ["1-edit JournalStream batch p50 (writer's path)", us("journal_stream_p50_us"), ""],
        ["1-edit JournalStream batch p99", us("journal_stream_p99_us"), ""],
        ["1-edit batch p50 on the edits wire (asyncio writer)", us("journal_wire_p50_us"), ""],
        ["1-edit batch p99 on the edits wire", us("journal_wire_p99_us"), ""],
        ["raw write+fdatasync p50", us("raw_fdatasync_p50_us"), ""],
        ["raw write+fdatasync p99", us("raw_fdatasync_p99_us"), ""],
        ["raw write+fdatasync mean", us("raw_fdatasync_mean_us"), ""],
        ["JournalNode's own fdatasync, mean", us("jn_mean_fdatasync_us"), ""],
        ["RPC floor: IsFormatted p50 (no disk)", us("rpc_floor_p50_us"), ""],
        ["JournalNode CPU per 1-edit batch, unary Journal", us("jn_cpu_us_per_batch_unary"), ""],
        ["JournalNode CPU per 1-edit batch, JournalStream", us("jn_cpu_us_per_batch_stream"),
         f"{result['jn_cpu_stream_to_unary_ratio']:.2f}x of unary"],
        ["JournalNode CPU per 1-edit batch, edits wire", us("jn_cpu_us_per_batch_wire"),
         f"{result['jn_cpu_wire_to_stream_ratio']:.2f}x of JournalStream"],
        [
            "p50 ratio journal/raw",
            f"{result['p50_ratio']:.2f}x",
            f"<= {TARGET_P50_RATIO:.0f}x ({met(ratio_ok)})",
        ],
        [
            "p50 ratio stream/raw",
            f"{result['stream_p50_ratio']:.2f}x",
            f"<= {TARGET_P50_RATIO:.0f}x ({met(result['stream_p50_ratio'] <= TARGET_P50_RATIO)})",
        ],
    ]
    for size in BATCH_SIZES:
        target = ""
        if size == 1000:
            target = f">= {TARGET_EDITS_PER_S_AT_1000:,} ({met(rate_ok)})"
        rate = f"{result[f'edits_per_s_at_{size}']:,.0f}"
        rows.append([f"edits/s at {size} per batch", rate, target])
    title = (
        f"Journal append, one JournalNode process ({int(result['calls'])} calls, "
        f"{int(result['record_bytes'])}-byte records)"
    )
    print_table(title, ["measure", "value", "target"], rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, help="work directory (default: a temporary one)")
    parser.add_argument("--calls", type=int, default=2000, help="1-edit calls (and raw syncs)")
    parser.add_argument("--seconds", type=float, default=2.0, help="RPC time per batch size")
    parser.add_argument("--record-bytes", type=int, default=100, help="framed record size")
    args = parser.parse_args(argv)
    workdir = args.dir or Path(tempfile.mkdtemp(prefix="bench-journal-"))
    try:
        result = run(workdir, args.calls, args.seconds, args.record_bytes)
    finally:
        if args.dir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    report(result)
    print_json({k: round(v, 3) if isinstance(v, float) else v for k, v in result.items()})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
