"""Quorum Journal Manager write benchmark: real JournalNode processes, real fdatasync.

Run from the checkout: ``.venv/bin/python -m bench.qjm_write [--calls 2000] [--seconds 3]``.

It starts a 3-JournalNode and a 5-JournalNode ``JournalNodeProcessCluster`` and writes
realistic mkdir edits (~100 bytes framed) through ``QuorumJournalManager`` /
``QuorumOutputStream``, measuring

(a) 1-edit sync latency, 3 JournalNodes: ``write(op)`` + ``flush()`` (a quorum acknowledged
    it), p50 and p99 over ``--calls``; (a') the same awaited on the QJM's event loop
    (``await out.aflush()``, as a NameNode on asyncio calls it: no hop through the blocking
    bridge);
(b) the same with one of the 3 JournalNodes paused by SIGSTOP (SIGCONT at the end): the
    quorum is the two others, so latency should not move;
(c) the same with 5 JournalNodes: latency is the median JournalNode's, so no worse;
(d) throughput in edits/s at 100 edits per ``flush``, one thread, 3 JournalNodes;
(e) throughput with 8 writers, coroutines on one event loop, each logging 10 edits and then
    awaiting their sync, through ``hanamenode.editlog.FSEditLog`` (one syncer task, one sync
    in flight, the next sync ships everything logged meanwhile; 3 JournalNodes);
(f) the floor: ``os.write`` + ``os.fdatasync`` of one record to a file on the JournalNodes'
    filesystem, p50.

(a), (a'), (c) and (f) run interleaved in blocks so that drift of the shared machine's load hits all
alike. It prints a table with each target beside its measurement (1-edit p50 <= 0.6 ms; p99
with one JournalNode stopped <= 1.2x; 5 vs 3 JournalNodes p50 <= 1.2x; >= 80,000 edits/s at
100 per batch; >= 36,000 edits/s with 8 writers at 10 per batch), then one JSON line.
Targets are reported, never asserted (docs/architecture.md §8.6 ``bench/``).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import signal
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench.common import (
    journal_metrics,
    percentile,
    print_json,
    print_table,
    raw_fdatasync_latencies,
)
from conf.logging import setup_logging
from hadev.journalnodes import JournalNodeProcess, JournalNodeProcessCluster
from hanamenode.editlog import FSEditLog
from hanamenode.journal import JournalManager
from proto import edits_pb2, records
from proto.values import NamespaceInfo
from qjm.bridge import run_blocking, shared_loop
from qjm.journal_manager import QuorumJournalManager, QuorumOutputStream

JID = "bench"
NS = NamespaceInfo("CID-bench-qjm", 1)
BLOCKS = 8
WRITERS = 8
PER_WRITER_BATCH = 10
BATCH = 100
TARGETS = {
    "p50_us": ("<=", 600.0),
    "p99_ratio_one_jn_stopped": ("<=", 1.2),
    "p50_ratio_5_vs_3": ("<=", 1.2),
    "edits_per_s_batch100": (">=", 80_000.0),
    "edits_per_s_8writers": (">=", 36_000.0),
}


def mkdir_op(n: int) -> edits_pb2.EditOp:
    """A NameNode-like mkdir edit with a retry-cache id: about 100 bytes framed."""
    op = edits_pb2.MkdirOp(
        path=f"/bench/user/dir-{n:08d}",
        mtime_ms=1_700_000_000_000 + n,
        permission=0o755,
        owner="hdfs",
        group="supergroup",
    )
    return edits_pb2.EditOp(mkdir=op, client_id=b"bench-client-id!", call_id=n)


class Writer:
    """The one writer of a journal: format, fence and recover, then one open segment."""

    def __init__(self, addresses: list[str]) -> None:
        self.qjm = QuorumJournalManager.connect(addresses, JID, NS)
        self.qjm.format()
        end = self.qjm.recover_unfinalized_segments()
        self.next_txid = (end or 0) + 1
        self.stream: QuorumOutputStream | None = self.qjm.start_log_segment(self.next_txid)
        self._ops = [mkdir_op(n) for n in range(BATCH)]

    def _open(self) -> QuorumOutputStream:
        if self.stream is None:
            raise RuntimeError("no segment is open")
        return self.stream

    def write(self, count: int) -> None:
        """Write ``count`` edits (serialized and framed by the stream; built in advance, as
        building them is the namespace's cost, not the log's)."""
        stream = self._open()
        for i in range(count):
            op = self._ops[i % BATCH]
            op.txid = self.next_txid
            stream.write(op)
            self.next_txid += 1

    def one_edit_latencies(self, calls: int) -> list[float]:
        """``calls`` times: one edit written and flushed to a quorum; seconds each."""
        stream = self._open()
        out = []
        for _ in range(calls):
            began = time.perf_counter()
            self.write(1)
            stream.flush()
            out.append(time.perf_counter() - began)
        return out

    def one_edit_latencies_awaited(self, calls: int) -> list[float]:
        """As ``one_edit_latencies``, awaited on the manager's event loop (a caller on the
        loop, as the asyncio NameNode of issue 12): no thread hop through the bridge."""
        stream = self._open()

        async def measure() -> list[float]:
            out = []
            for _ in range(calls):
                began = time.perf_counter()
                self.write(1)
                await stream.aflush()
                out.append(time.perf_counter() - began)
            return out

        return self.qjm.run_on_loop(measure())

    def throughput(self, batch: int, seconds: float) -> float:
        """Edits/s writing ``batch`` edits per flush for ``seconds`` (framing included)."""
        stream = self._open()
        edits = 0
        began = time.perf_counter()
        while (elapsed := time.perf_counter() - began) < seconds or edits < 10 * batch:
            self.write(batch)
            stream.flush()
            edits += batch
        return edits / elapsed

    def start_segment(self, txid: int) -> None:
        """Open a new segment at ``txid`` (the previous one must be finalized)."""
        self.stream = self.qjm.start_log_segment(txid)
        self.next_txid = txid

    def finalize(self) -> None:
        """Finalize the open segment; the next one starts at ``next_txid``."""
        stream = self._open()
        self.qjm.finalize_log_segment(stream.segment_txid, self.next_txid - 1)
        self.stream = None

    def close(self) -> None:
        self.qjm.close()


def group_commit_throughput(
    qjm: QuorumJournalManager, first_txid: int, seconds: float
) -> tuple[float, int]:
    """Edits/s of WRITERS coroutines on one event loop (the NameNode's shape since issue 12),
    each logging PER_WRITER_BATCH edits and then awaiting their sync through FSEditLog's
    syncer (one sync in flight), in a segment of its own starting at ``first_txid``. Also
    returns the txid after that segment. The writers run on the loop the benchmark's QJM is
    bound to (the shared ``qjm-loop``: its earlier calls were blocking ones)."""
    return run_blocking(_group_commit(qjm, first_txid, seconds), shared_loop())


async def _group_commit(
    qjm: JournalManager, first_txid: int, seconds: float
) -> tuple[float, int]:
    edit_log = FSEditLog(qjm)

    def apply(op: edits_pb2.EditOp) -> None:
        """The namespace would apply the op here; the benchmark measures the log only."""

    await edit_log.open_for_write(first_txid, apply)
    counts = [0] * WRITERS
    began = time.perf_counter()
    stop_at = began + seconds

    async def handler(i: int) -> None:
        ops = [mkdir_op(i * 1000 + k) for k in range(PER_WRITER_BATCH)]
        while time.perf_counter() < stop_at:
            last = 0
            for op in ops:
                last, _ = edit_log.log_and_apply(op, apply)
            await edit_log.log_sync(last)
            counts[i] += PER_WRITER_BATCH

    await asyncio.gather(*(handler(i) for i in range(WRITERS)))
    elapsed = time.perf_counter() - began
    await edit_log.close(apply)
    return sum(counts) / elapsed, edit_log.last_written_txid + 1


def batches_written(jn: JournalNodeProcess) -> tuple[float, float]:
    """(Journal batches, txns) the JournalNode wrote for the journal, from its /metrics."""
    values = journal_metrics(jn.metrics_url, JID)
    return (
        values.get("journalnode_batches_written_total", 0.0),
        values.get("journalnode_txns_written_total", 0.0),
    )


def interleaved(calls: int, *measures: Callable[[int], list[float]]) -> list[list[float]]:
    """Run each measure ``calls`` times in total, in BLOCKS rounds, alternating."""
    per_block = max(1, calls // BLOCKS)
    results: list[list[float]] = [[] for _ in measures]
    for _ in range(BLOCKS):
        for out, measure in zip(results, measures, strict=True):
            out += measure(per_block)
    return [sorted(r) for r in results]


def run(workdir: Path, calls: int, seconds: float) -> dict[str, float]:
    with (
        # plaintext: the writers are in-process QJMs without certificates, and the figures
        # compare with earlier runs
        JournalNodeProcessCluster(3, workdir / "three", journal_id=JID, tls=False) as three,
        JournalNodeProcessCluster(5, workdir / "five", journal_id=JID, tls=False) as five,
    ):
        w3, w5 = Writer(three.addresses), Writer(five.addresses)
        try:
            record_len = len(records.frame(mkdir_op(10**6).SerializeToString()))
            raw_path = three[0].edits_dir / "raw-fdatasync-floor"
            # Warm up connections, JournalNode code paths and the raw file.
            w3.one_edit_latencies(200)
            w5.one_edit_latencies(200)
            raw_fdatasync_latencies(raw_path, record_len, 100)

            lat3, lat3_awaited, lat5, raw = interleaved(
                calls,
                w3.one_edit_latencies,
                w3.one_edit_latencies_awaited,
                w5.one_edit_latencies,
                lambda n: raw_fdatasync_latencies(raw_path, record_len, n),
            )
            rate_batch = w3.throughput(BATCH, seconds)

            w3.finalize()
            before = batches_written(three[0])
            rate_writers, next_txid = group_commit_throughput(w3.qjm, w3.next_txid, seconds)
            after = batches_written(three[0])

            # (b) last: the paused JournalNode's logger is stuck until SIGCONT.
            w3.start_segment(next_txid)
            three.kill(2, signal.SIGSTOP)
            try:
                lat_stopped = sorted(w3.one_edit_latencies(calls))
            finally:
                three.kill(2, signal.SIGCONT)
        finally:
            w3.close()
            w5.close()

    result: dict[str, float] = {
        "p50_us": percentile(lat3, 0.5) * 1e6,
        "p99_us": percentile(lat3, 0.99) * 1e6,
        "p50_us_awaited": percentile(lat3_awaited, 0.5) * 1e6,
        "p99_us_awaited": percentile(lat3_awaited, 0.99) * 1e6,
        "p50_us_one_jn_stopped": percentile(lat_stopped, 0.5) * 1e6,
        "p99_us_one_jn_stopped": percentile(lat_stopped, 0.99) * 1e6,
        "p50_us_5jn": percentile(lat5, 0.5) * 1e6,
        "p99_us_5jn": percentile(lat5, 0.99) * 1e6,
        "edits_per_s_batch100": rate_batch,
        "edits_per_s_8writers": rate_writers,
        "edits_per_sync_8writers": (after[1] - before[1]) / max(1.0, after[0] - before[0]),
        "raw_fdatasync_p50_us": percentile(raw, 0.5) * 1e6,
        "raw_fdatasync_p99_us": percentile(raw, 0.99) * 1e6,
        "calls": len(lat3),
        "record_bytes": record_len,
    }
    result["p99_ratio_one_jn_stopped"] = result["p99_us_one_jn_stopped"] / result["p99_us"]
    result["p50_ratio_5_vs_3"] = result["p50_us_5jn"] / result["p50_us"]
    return result


def report(result: dict[str, float]) -> None:
    def target(key: str) -> str:
        if key not in TARGETS:
            return ""
        op, goal = TARGETS[key]
        met = result[key] <= goal if op == "<=" else result[key] >= goal
        shown = f"{goal:,.0f} us" if key.endswith("_us") else f"{goal:,.1f}x"
        if key.startswith("edits_per_s"):
            shown = f"{goal:,.0f}/s"
        return f"{op} {shown} ({'met' if met else 'MISSED'})"

    def us(key: str) -> str:
        return f"{result[key]:,.0f} us"

    rows = [
        ["(a) 1-edit sync p50, 3 JNs", us("p50_us"), target("p50_us")],
        ["(a) 1-edit sync p99, 3 JNs", us("p99_us"), ""],
        ["(a') 1-edit sync p50, awaited on the QJM's loop", us("p50_us_awaited"), ""],
        ["(a') 1-edit sync p99, awaited on the QJM's loop", us("p99_us_awaited"), ""],
        ["(b) 1-edit sync p50, 1 of 3 JNs SIGSTOPped", us("p50_us_one_jn_stopped"), ""],
        ["(b) 1-edit sync p99, 1 of 3 JNs SIGSTOPped", us("p99_us_one_jn_stopped"), ""],
        [
            "(b) p99 ratio stopped / all up",
            f"{result['p99_ratio_one_jn_stopped']:.2f}x",
            target("p99_ratio_one_jn_stopped"),
        ],
        ["(c) 1-edit sync p50, 5 JNs", us("p50_us_5jn"), ""],
        ["(c) 1-edit sync p99, 5 JNs", us("p99_us_5jn"), ""],
        [
            "(c) p50 ratio 5 / 3 JNs",
            f"{result['p50_ratio_5_vs_3']:.2f}x",
            target("p50_ratio_5_vs_3"),
        ],
        [
            f"(d) edits/s, {BATCH} per batch, 1 thread",
            f"{result['edits_per_s_batch100']:,.0f}",
            target("edits_per_s_batch100"),
        ],
        [
            f"(e) edits/s, {WRITERS} writers x {PER_WRITER_BATCH} per batch (group commit)",
            f"{result['edits_per_s_8writers']:,.0f}",
            target("edits_per_s_8writers"),
        ],
        ["(e) edits per sync", f"{result['edits_per_sync_8writers']:.1f}", ""],
        ["(f) raw write+fdatasync p50", us("raw_fdatasync_p50_us"), ""],
        ["(f) raw write+fdatasync p99", us("raw_fdatasync_p99_us"), ""],
    ]
    title = (
        f"QJM writes, real JournalNode processes ({int(result['calls'])} 1-edit calls, "
        f"{int(result['record_bytes'])}-byte records)"
    )
    print_table(title, ["measure", "value", "target"], rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--dir", type=Path, help="work directory (default: a temporary one)")
    parser.add_argument("--calls", type=int, default=2000, help="1-edit syncs per measurement")
    parser.add_argument("--seconds", type=float, default=3.0, help="time per throughput run")
    args = parser.parse_args(argv)
    setup_logging("console", "warning")  # stdout is for the table and the JSON line
    workdir = args.dir or Path(tempfile.mkdtemp(prefix="bench-qjm-"))
    try:
        result = run(workdir, args.calls, args.seconds)
    finally:
        if args.dir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    report(result)
    out: dict[str, float] = {k: round(v, 3) for k, v in result.items()}
    out.update({f"target_{k}": goal for k, (_, goal) in TARGETS.items()})
    print_json(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
