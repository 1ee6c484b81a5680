"""NameNode mkdirs benchmark: an active NameNode process on three JournalNode processes,
real gRPC, real fdatasync, and the standby's lag behind it.

Run from the checkout: ``.venv/bin/python -m bench.namenode_ops [--seconds 5]``.

It starts a ``NameNodeProcessCluster`` (``hadev.namenodes``: 3 ``journalnode run`` and 2
``hanamenode run`` processes, nn1 formatted, nn2 bootstrapped), makes nn1 active and measures

(a) acknowledged mkdirs/s and p50/p99 latency with 1, 8 and 32 concurrent clients: threads
    of this process, each with its own ``HaFsClient`` (failover proxy, own client id, own
    channel), each creating fresh directories in a loop for ``--seconds``. A mkdir is
    acknowledged only once its edit is durable on a quorum of JournalNodes (group commit:
    concurrent handlers share one sync);
(b) the standby's lag: a mkdir acknowledged by nn1, then nn2 polled with ``GetFileInfo``
    (``allow_stale_read``) every millisecond until it shows the directory; p50/p99 over
    ``--lag-samples`` samples started at random moments. The standby reads finalized
    segments only, so the lag is bounded by the roll period, not by the load: the tailer
    wakes every ``dfs.ha.tail-edits.period`` (tail), reads what is finalized, and when
    ``dfs.ha.log-roll.period`` (roll) has passed asks the active to roll; the segment that
    roll finalizes is read at the next wake-up. Rolls therefore come about every roll +
    tail/2 (the roll period rounded up to whole tail periods), and an edit waits for the next
    roll, then one tail period, then the read and apply: about (roll + tail)/2 + tail on
    average, up to roll + 2 * tail, plus the RPCs of the roll and of the read. With
    ``--in-progress`` (dfs.ha.tail-edits.in-progress) the standby also applies the open
    segment's edits that a majority of JournalNodes hold, and the lag is about half a tail
    period instead.

It prints a table with the targets beside the measurements (>= 5,000 mkdirs/s at 32 clients
with p99 <= 20 ms), then one JSON line. Targets are reported, never asserted (docs/architecture.md
§8.6 ``bench/``). Everything shares this machine's cores: the load generator's threads,
the NameNodes and the JournalNodes.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from bench.common import percentile, print_json, print_table
from conf.rpc import make_channel
from hadev.namenodes import NameNodeProcessCluster
from hanamenode.client import HaFsClient, RetryPolicy
from proto import namenode_pb2, namenode_pb2_grpc

CLIENTS = (1, 8, 32)
TARGET_MKDIRS_PER_S_32 = 5000.0
TARGET_P99_MS_32 = 20.0
POLICY = RetryPolicy(max_attempts=3, rpc_timeout=30.0)


_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int | None = None) -> float:
    """User + system CPU seconds used so far by process ``pid`` (None: this one), from
    ``/proc/<pid>/stat`` (Linux)."""
    if pid is None:
        return time.process_time()
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def role_pids(cluster: NameNodeProcessCluster) -> dict[str, list[int | None]]:
    return {
        "client": [None],
        "active": [cluster["nn1"].pid],
        "standby": [cluster["nn2"].pid],
        "journalnodes": [jn.pid for jn in cluster.journal],
    }


def cpu_by_role(pids: dict[str, list[int | None]]) -> dict[str, float]:
    return {role: sum(cpu_seconds(pid) for pid in group) for role, group in pids.items()}


_SYNC_SAMPLES = (
    "hanamenode_edit_log_syncs_total",
    "hanamenode_edit_log_txns_synced_total",
    "hanamenode_edit_log_sync_seconds_sum",
)


def sync_counters(cluster: NameNodeProcessCluster) -> dict[str, float]:
    """The active's group-commit counters from its ``/metrics``."""
    url = cluster["nn1"].metrics_url
    assert url is not None
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    values = dict.fromkeys(_SYNC_SAMPLES, 0.0)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in values:
                values[sample.name] = float(sample.value)
    return values


@dataclass(frozen=True)
class LoadResult:
    clients: int
    ops: int
    seconds: float
    latencies_ms: list[float]
    errors: int
    cpu: dict[str, float]
    """CPU seconds per second of the window, by role (client, active, standby, journalnodes)."""
    txns_per_sync: float
    sync_ms: float
    """Mean transactions per logSync batch and mean logSync time on the active."""

    @property
    def per_s(self) -> float:
        return self.ops / self.seconds if self.seconds > 0 else 0.0


def run_load(
    cluster: NameNodeProcessCluster,
    clients: int,
    seconds: float,
    op: str = "mkdirs",
    *,
    stale: bool = False,
) -> LoadResult:
    """``clients`` threads doing ``op`` for ``seconds``: ``mkdirs`` of fresh directories, or
    ``stat`` of ``/`` (nothing logged; confirmed by a read-index round on the active, or
    with ``stale`` answered from memory at once: the RPC floor). Only calls that both
    started and finished inside the window count."""
    settings = cluster.settings()
    root = f"/bench-{clients}"
    if op == "mkdirs":
        with HaFsClient(settings, policy=POLICY) as fs:
            fs.mkdirs(root)
    latencies: list[list[float]] = [[] for _ in range(clients)]
    errors = [0] * clients
    window: dict[str, float] = {}

    def open_window() -> None:
        window["begin"] = time.perf_counter() + 0.2  # a short warm-up in each thread's loop
        window["end"] = window["begin"] + seconds

    start = threading.Barrier(clients + 1, action=open_window)

    def client(index: int) -> None:
        with HaFsClient(settings, policy=POLICY, allow_stale_read=stale) as fs:
            fs.stat("/")  # connect and find the active before the clock starts
            mine = latencies[index]
            n = 0
            start.wait()
            begin, end = window["begin"], window["end"]
            while True:
                t0 = time.perf_counter()
                if t0 >= end:
                    return
                try:
                    if op == "mkdirs":
                        fs.mkdirs(f"{root}/c{index}-{n}")
                    else:
                        fs.stat("/")
                except Exception:
                    errors[index] += 1
                t1 = time.perf_counter()
                if t0 >= begin and t1 <= end:
                    mine.append((t1 - t0) * 1000.0)
                n += 1

    threads = [
        threading.Thread(target=client, args=(i,), name=f"bench-client-{i}", daemon=True)
        for i in range(clients)
    ]
    for t in threads:
        t.start()
    start.wait()
    pids = role_pids(cluster)
    time.sleep(max(0.0, window["begin"] - time.perf_counter()))
    cpu_before, sync_before = cpu_by_role(pids), sync_counters(cluster)
    time.sleep(max(0.0, window["end"] - time.perf_counter()))
    cpu_after, sync_after = cpu_by_role(pids), sync_counters(cluster)
    for t in threads:
        t.join(timeout=seconds + 60)
    all_latencies = sorted(x for mine in latencies for x in mine)
    cpu = {role: (cpu_after[role] - cpu_before[role]) / seconds for role in cpu_before}
    syncs, txns, sync_s = (sync_after[k] - sync_before[k] for k in _SYNC_SAMPLES)
    return LoadResult(
        clients,
        len(all_latencies),
        seconds,
        all_latencies,
        sum(errors),
        cpu,
        txns_per_sync=txns / syncs if syncs else 0.0,
        sync_ms=sync_s / syncs * 1000 if syncs else 0.0,
    )


def standby_lag(
    cluster: NameNodeProcessCluster, samples: int, spread: float
) -> list[float]:
    """Milliseconds from a mkdir's acknowledgement by the active to the standby showing it,
    over ``samples`` samples each started after a random pause in ``[0, spread)``."""
    settings = cluster.settings()
    standby = cluster["nn2"]
    rng = random.Random(4)
    lags: list[float] = []
    channel = make_channel(standby.address, settings.tls)
    stub = namenode_pb2_grpc.ClientProtocolStub(channel)
    stale = namenode_pb2.RpcHeader(allow_stale_read=True)
    try:
        with HaFsClient(settings, policy=POLICY) as fs:
            fs.mkdirs("/lag")
            for i in range(samples):
                time.sleep(rng.uniform(0.0, spread))
                path = f"/lag/s{i}"
                fs.mkdirs(path)
                acked = time.perf_counter()
                request = namenode_pb2.GetFileInfoRequest(header=stale, path=path)
                deadline = acked + 30.0
                while time.perf_counter() < deadline:
                    try:
                        stub.GetFileInfo(request, timeout=5.0)
                        break
                    except Exception:
                        time.sleep(0.001)
                lags.append((time.perf_counter() - acked) * 1000.0)
    finally:
        channel.close()
    return sorted(lags)


def run(
    workdir: Path,
    seconds: float,
    clients: tuple[int, ...],
    lag_samples: int,
    roll_period: float,
    tail_period: float,
    handlers: int,
    in_progress: bool = False,
) -> dict[str, float | int | str]:
    conf: dict[str, str | int | float | bool] = {
        "dfs.ha.tail-edits.period": f"{tail_period}s",
        "dfs.ha.log-roll.period": f"{roll_period}s",
        "dfs.ha.tail-edits.in-progress": in_progress,
        "hanamenode.rpc.handler.count": handlers,
        "dfs.namenode.checkpoint.txns": 10_000_000,
    }
    result: dict[str, float | int | str] = {
        "tail_in_progress": int(in_progress),
        "roll_period_s": roll_period,
        "tail_period_s": tail_period,
        "handlers": handlers,
        "cpus": os.cpu_count() or 0,
        "seconds_per_level": seconds,
    }
    with NameNodeProcessCluster(workdir, extra_conf=conf) as cluster:
        cluster.transition_to_active("nn1")
        for n in clients:
            load = run_load(cluster, n, seconds)
            result[f"mkdirs_per_s_{n}"] = round(load.per_s, 1)
            result[f"p50_ms_{n}"] = round(percentile(load.latencies_ms, 0.50), 2)
            result[f"p99_ms_{n}"] = round(percentile(load.latencies_ms, 0.99), 2)
            result[f"errors_{n}"] = load.errors
            result[f"txns_per_sync_{n}"] = round(load.txns_per_sync, 1)
            result[f"sync_ms_{n}"] = round(load.sync_ms, 2)
            for role, used in load.cpu.items():
                result[f"cpu_{role}_{n}"] = round(used, 2)
        # Reads on the active: linearizable (the default: the edits observed are durable and
        # a read-index round confirmed the epoch on a JournalNode quorum, shared by the reads
        # waiting at once) against stale (allow_stale_read: answered from memory), in turns.
        result["stat_clients"] = max(clients)
        for n in sorted({1, max(clients)}):
            for kind, stale in (("stale", True), ("confirmed", False)):
                reads = run_load(cluster, n, seconds, op="stat", stale=stale)
                key = f"stat_{kind}_{n}"
                result[f"{key}_per_s"] = round(reads.per_s, 1)
                result[f"{key}_p50_ms"] = round(percentile(reads.latencies_ms, 0.50), 2)
                result[f"{key}_p99_ms"] = round(percentile(reads.latencies_ms, 0.99), 2)
                result[f"{key}_cpu_active"] = round(reads.cpu["active"], 2)
                result[f"{key}_cpu_journalnodes"] = round(reads.cpu["journalnodes"], 2)
                result[f"{key}_errors"] = reads.errors
            confirmed, stale_key = f"stat_confirmed_{n}", f"stat_stale_{n}"
            for measure, name in (("p50_ms", "p50_ratio"), ("per_s", "throughput_ratio")):
                base = max(float(result[f"{stale_key}_{measure}"]), 1e-9)
                result[f"stat_{name}_{n}"] = round(
                    float(result[f"{confirmed}_{measure}"]) / base, 2
                )
        lags = standby_lag(cluster, lag_samples, spread=roll_period)
        result["standby_lag_p50_ms"] = round(percentile(lags, 0.50), 1)
        result["standby_lag_p99_ms"] = round(percentile(lags, 0.99), 1)
        result["standby_lag_max_ms"] = round(lags[-1], 1) if lags else 0.0
        result["standby_lag_samples"] = len(lags)
        result["load_average_1m"] = round(os.getloadavg()[0], 2)
    return result


def report(result: dict[str, float | int | str], clients: tuple[int, ...]) -> None:
    rows = []
    for n in clients:
        target = ""
        if n == 32:
            target = f">= {TARGET_MKDIRS_PER_S_32:,.0f}/s, p99 <= {TARGET_P99_MS_32:.0f} ms"
        rows.append(
            [
                f"{n} client{'s' if n > 1 else ''}",
                f"{result[f'mkdirs_per_s_{n}']:,}",
                result[f"p50_ms_{n}"],
                result[f"p99_ms_{n}"],
                result[f"errors_{n}"],
                result[f"txns_per_sync_{n}"],
                result[f"sync_ms_{n}"],
                " / ".join(
                    f"{result[f'cpu_{role}_{n}']:.2f}"
                    for role in ("client", "active", "standby", "journalnodes")
                ),
                target,
            ]
        )
    top = int(result["stat_clients"])
    rows.append(
        [
            f"floor: stale stat / x{top}",
            f"{result[f'stat_stale_{top}_per_s']:,}",
            result[f"stat_stale_{top}_p50_ms"],
            result[f"stat_stale_{top}_p99_ms"],
            "",
            "",
            "",
            f"nn1 {result[f'stat_stale_{top}_cpu_active']:.2f}",
            "",
        ]
    )
    print_table(
        f"mkdirs through an active NameNode process on 3 JournalNode processes "
        f"({result['cpus']} CPUs, {result['handlers']} handlers, "
        f"{result['seconds_per_level']} s per level)",
        [
            "load",
            "mkdirs/s",
            "p50 ms",
            "p99 ms",
            "errors",
            "txns/sync",
            "sync ms",
            "CPU client/nn1/nn2/JNs",
            "target",
        ],
        rows,
    )
    read_rows = []
    for n in sorted({1, top}):
        for kind in ("stale", "confirmed"):
            key = f"stat_{kind}_{n}"
            read_rows.append(
                [
                    f"{kind} x{n}",
                    f"{result[f'{key}_per_s']:,}",
                    result[f"{key}_p50_ms"],
                    result[f"{key}_p99_ms"],
                    result[f"{key}_errors"],
                    f"{result[f'{key}_cpu_active']:.2f} / {result[f'{key}_cpu_journalnodes']:.2f}",
                    (
                        f"p50 x{result[f'stat_p50_ratio_{n}']}, "
                        f"throughput x{result[f'stat_throughput_ratio_{n}']}"
                        if kind == "confirmed"
                        else ""
                    ),
                ]
            )
    print_table(
        "stat on the active: linearizable (read-index round on the JournalNodes) vs stale",
        ["reads", "stats/s", "p50 ms", "p99 ms", "errors", "CPU nn1 / JNs", "vs stale"],
        read_rows,
    )
    roll_ms = float(result["roll_period_s"]) * 1000
    tail_ms = float(result["tail_period_s"]) * 1000
    if result["tail_in_progress"]:
        print_table(
            f"standby lag with in-progress tailing ({result['standby_lag_samples']} samples)",
            ["measure", "value", "bound"],
            [
                ["p50 ms", result["standby_lag_p50_ms"], f"~ tail/2 = {tail_ms / 2:.0f} + RPCs"],
                ["p99 ms", result["standby_lag_p99_ms"], ""],
                ["max ms", result["standby_lag_max_ms"], f"~ tail = {tail_ms:.0f} + RPCs"],
            ],
        )
        return
    print_table(
        f"standby lag: ack on nn1 -> visible on nn2 ({result['standby_lag_samples']} samples)",
        ["measure", "value", "bound"],
        [
            [
                "p50 ms",
                result["standby_lag_p50_ms"],
                f"~ (roll + tail)/2 + tail = {(roll_ms + tail_ms) / 2 + tail_ms:.0f} + RPCs",
            ],
            ["p99 ms", result["standby_lag_p99_ms"], ""],
            [
                "max ms",
                result["standby_lag_max_ms"],
                f"~ roll + 2 tail = {roll_ms + 2 * tail_ms:.0f} + RPCs",
            ],
        ],
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--dir", type=Path, help="work directory (default: a temporary one)")
    parser.add_argument("--seconds", type=float, default=5.0, help="duration of each load")
    parser.add_argument(
        "--clients", default=",".join(map(str, CLIENTS)), help="concurrency levels, e.g. 1,8,32"
    )
    parser.add_argument("--lag-samples", type=int, default=60, help="standby lag samples")
    parser.add_argument("--roll-period", type=float, default=0.5, help="log roll period (s)")
    parser.add_argument("--tail-period", type=float, default=0.1, help="tail period (s)")
    parser.add_argument("--handlers", type=int, default=64, help="NameNode RPC handlers")
    parser.add_argument(
        "--in-progress",
        action="store_true",
        help="the standby tails the open segment too (dfs.ha.tail-edits.in-progress)",
    )
    args = parser.parse_args(argv)
    clients = tuple(int(x) for x in args.clients.split(","))
    workdir = args.dir or Path(tempfile.mkdtemp(prefix="bench-namenode-"))
    try:
        result = run(
            workdir,
            args.seconds,
            clients,
            args.lag_samples,
            args.roll_period,
            args.tail_period,
            args.handlers,
            args.in_progress,
        )
    finally:
        if args.dir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    report(result, clients)
    print_json(result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
