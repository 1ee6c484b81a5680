"""Series (a) of ``bench.namenode_ops``: acknowledged mkdirs/s and latency with 1, 8 and 32
Python client threads, each with its own ``HaFsClient``; and the same clients' ``stat`` of
``/`` on the active, linearizable (a read-index round) against stale (the RPC floor).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from bench.common import percentile, print_table
from bench.namenode.shared import (
    POLICY,
    SYNC_SAMPLES,
    cpu_by_role,
    role_pids,
    sync_counters,
)
from hadev.namenodes import NameNodeProcessCluster
from hanamenode.client import HaFsClient

TARGET_MKDIRS_PER_S_32 = 5000.0
TARGET_P99_MS_32 = 20.0


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
    syncs, txns, sync_s = (sync_after[k] - sync_before[k] for k in SYNC_SAMPLES)
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


def mkdirs_series(
    cluster: NameNodeProcessCluster, clients: tuple[int, ...], seconds: float
) -> dict[str, float | int | str]:
    """(a): ``run_load`` of mkdirs at each level of ``clients``; keys ``mkdirs_per_s_<n>``,
    ``p50_ms_<n>``, ``p99_ms_<n>``, ``errors_<n>``, ``txns_per_sync_<n>``, ``sync_ms_<n>`` and
    ``cpu_<role>_<n>``."""
    result: dict[str, float | int | str] = {}
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
    return result


def stat_series(
    cluster: NameNodeProcessCluster, clients: tuple[int, ...], seconds: float
) -> dict[str, float | int | str]:
    """Reads on the active: linearizable (the default: the edits observed are durable and a
    read-index round confirmed the epoch on a JournalNode quorum, shared by the reads waiting
    at once) against stale (allow_stale_read: answered from memory), in turns, with 1 and
    the most ``clients``; keys ``stat_{stale,confirmed}_<n>_*`` and their ratios."""
    result: dict[str, float | int | str] = {"stat_clients": max(clients)}
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
            result[f"stat_{name}_{n}"] = round(float(result[f"{confirmed}_{measure}"]) / base, 2)
    return result


def report(result: dict[str, float | int | str], clients: tuple[int, ...]) -> None:
    """The tables of (a) and of the reads on the active."""
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
