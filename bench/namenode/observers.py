"""The observers' series of ``bench.namenode_ops`` (issue 14, ``--observers-only``), on a
cluster of four NameNodes: reads through the failover proxy with 0 then 2 observers, the
same driven by h2load (what the servers can answer), and the observer's lag under the write
load, polled and held (a read carrying the mkdir's txid).
"""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

from bench import h2load
from bench.common import percentile, print_table
from bench.namenode.lag import headline_lag, standby_lag, standby_lag_under_h2load
from bench.namenode.mkdirs import run_load
from bench.namenode.shared import cpu_by_role, nn_samples, settled
from hadev.devcluster import MkdirLoad
from hadev.namenodes import NameNodeProcessCluster, transition
from hadev.scrape import metric_value
from hanamenode.ha import HAState
from proto import namenode_pb2


def observer_series(
    workdir: Path,
    conf: dict[str, str | int | float | bool],
    seconds: float,
    clients: int,
    lag_samples: int,
) -> dict[str, float | int | str]:
    """(d): reads through the proxy with 0 then 2 observers, and the observer's lag under
    ``clients`` writer threads, on a cluster of its own (nn3, nn4 observers)."""
    result: dict[str, float | int | str] = {"observer_clients": clients}
    conf = {**conf, "dfs.ha.tail-edits.in-progress": True}
    # plaintext: the figures compare with earlier runs (docs/benchmarks.md)
    with NameNodeProcessCluster(
        workdir, namenodes=4, observers=2, extra_conf=conf, tls=False
    ) as cluster:
        cluster.transition_to_active("nn1")
        observers = ("nn3", "nn4")
        for count, state in ((0, HAState.STANDBY), (2, HAState.OBSERVER)):
            for nn in observers:
                transition(cluster[nn].address, state, tls=cluster.settings().tls)
            served = [observer_reads(cluster, nn) for nn in observers]
            reads = run_load(cluster, clients, seconds, op="stat")
            by_observers = sum(observer_reads(cluster, nn) for nn in observers) - sum(served)
            result[f"reads_per_s_{count}_observers"] = round(reads.per_s, 1)
            result[f"reads_p50_ms_{count}_observers"] = round(
                percentile(reads.latencies_ms, 0.50), 2
            )
            result[f"reads_p99_ms_{count}_observers"] = round(
                percentile(reads.latencies_ms, 0.99), 2
            )
            result[f"reads_errors_{count}_observers"] = reads.errors
            result[f"reads_on_observers_{count}_observers"] = int(by_observers)
            result[f"cpu_active_reads_{count}_observers"] = round(reads.cpu["active"], 2)
        result["observer_read_ratio"] = round(
            float(result["reads_per_s_2_observers"])
            / max(float(result["reads_per_s_0_observers"]), 1e-9),
            2,
        )
        if shutil.which("h2load") is not None:
            for count, state in ((0, HAState.STANDBY), (2, HAState.OBSERVER)):
                for nn in observers:
                    transition(cluster[nn].address, state, tls=cluster.settings().tls)
                result.update(observer_capacity(cluster, observers[:count], seconds, count))
            result["observer_capacity_ratio"] = round(
                float(result["stat_h2load_per_s_2_observers"])
                / max(float(result["stat_h2load_per_s_0_observers"]), 1e-9),
                2,
            )
        with MkdirLoad(cluster.settings(), "/observer-load", writers=clients) as load:
            lags = standby_lag(cluster, lag_samples, spread=0.05, follower="nn3")
            load.stop()
        result["observer_lag_write_acks"] = load.ack_count
        result["observer_lag_write_failures"] = len(load.failures)
        if shutil.which("h2load") is not None:
            # The same write load from h2load: no writer threads share the measuring GIL.
            native, rate, times = standby_lag_under_h2load(
                cluster, lag_samples, clients, follower="nn3"
            )
            # Where the cores went meanwhile: CPU used and run-queue wait, seconds a second.
            for role in ("client", "active", "standby", "observers", "journalnodes"):
                result[f"observer_lag_h2load_cpu_{role}"] = round(times.cpu[role], 2)
                result[f"observer_lag_h2load_runq_wait_{role}"] = round(times.wait[role], 2)
            result["observer_lag_h2load_p50_ms"] = round(percentile(native, 0.50), 1)
            result["observer_lag_h2load_p99_ms"] = round(percentile(native, 0.99), 1)
            result["observer_lag_h2load_max_ms"] = round(native[-1], 1) if native else 0.0
            result["observer_lag_h2load_creates_per_s"] = round(rate, 1)
            # The same, probed as an observer's client reads: one read that carries the
            # mkdir's txid and that the observer holds until it has applied it.
            held, rate, _ = standby_lag_under_h2load(
                cluster, lag_samples, clients, follower="nn3", consistent=True
            )
            result["observer_lag_h2load_read_p50_ms"] = round(percentile(held, 0.50), 1)
            result["observer_lag_h2load_read_p99_ms"] = round(percentile(held, 0.99), 1)
            result["observer_lag_h2load_read_max_ms"] = round(held[-1], 1) if held else 0.0
            result["observer_lag_h2load_read_creates_per_s"] = round(rate, 1)
    result["observer_lag_pyclients_p50_ms"] = round(percentile(lags, 0.50), 1)
    result["observer_lag_pyclients_p99_ms"] = round(percentile(lags, 0.99), 1)
    result["observer_lag_pyclients_max_ms"] = round(lags[-1], 1) if lags else 0.0
    result["observer_lag_samples"] = len(lags)
    result["observer_lag_load"] = headline_lag(result, "observer_lag")
    return result


OBSERVER_H2LOAD_IN_FLIGHT = 32
"""Calls in flight of the observers' capacity series, split between the NameNodes read."""


def observer_capacity(
    cluster: NameNodeProcessCluster, observers: tuple[str, ...], seconds: float, count: int
) -> dict[str, float | int]:
    """Reads the NameNodes can answer, driven by h2load rather than by the Python proxy
    (whose client costs as much CPU as the server): ``GetFileInfo`` of ``/`` on the active
    alone (confirmed by its read-index rounds), or spread evenly over the active and
    ``observers``, at ``OBSERVER_H2LOAD_IN_FLIGHT`` calls in flight in all. Counted on the
    servers: the active's answered calls plus the reads the observers served."""
    active_url = cluster["nn1"].metrics_url
    assert active_url is not None
    targets = ("nn1", *observers)
    header = namenode_pb2.RpcHeader()
    message = namenode_pb2.GetFileInfoRequest(header=header, path="/").SerializeToString()
    share = [OBSERVER_H2LOAD_IN_FLIGHT // len(targets)] * len(targets)
    share[0] += OBSERVER_H2LOAD_IN_FLIGHT - sum(share)

    def answered() -> float:
        on_active = nn_samples(active_url)["hanamenode_rpc_seconds_count:GetFileInfo"]
        return on_active + sum(observer_reads(cluster, nn) for nn in observers)

    pids: dict[str, list[int | None]] = {nn: [cluster[nn].pid] for nn in targets}
    before, cpu_before = answered(), cpu_by_role(pids)
    runs: list[h2load.H2loadRun] = []
    failures: list[BaseException] = []

    def drive(nn: str, in_flight: int) -> None:
        url = f"http://{cluster[nn].address}/hanamenode.namenode.ClientProtocol/GetFileInfo"
        try:
            runs.append(h2load.run(url, message, in_flight, seconds))
        except BaseException as exc:  # re-raised below, in the caller's thread
            failures.append(exc)

    drivers = [
        threading.Thread(target=drive, args=(nn, n), name=f"h2load-{nn}")
        for nn, n in zip(targets, share, strict=True)
    ]
    for driver in drivers:
        driver.start()
    for driver in drivers:
        driver.join()
    if failures:
        raise failures[0]
    done = settled(answered) - before
    cpu_after = cpu_by_role(pids)
    latencies = sorted(ms for run in runs for ms in run.latencies_ms)
    result: dict[str, float | int] = {
        f"stat_h2load_per_s_{count}_observers": round(done / seconds, 1),
        f"stat_h2load_p99_ms_{count}_observers": round(percentile(latencies, 0.99), 2),
    }
    for nn in targets:
        result[f"cpu_{nn}_stat_h2load_{count}_observers"] = round(
            (cpu_after[nn] - cpu_before[nn]) / seconds, 2
        )
    return result


def observer_reads(cluster: NameNodeProcessCluster, nn: str) -> float:
    """Reads observer ``nn`` answered (``hanamenode_observer_reads_total{outcome=served}``)."""
    return metric_value(
        cluster[nn].metrics_url, "hanamenode_observer_reads_total", outcome="served"
    )


def report_observers(result: dict[str, float | int | str]) -> None:
    rows = [
        [
            f"{count} observers",
            result[f"reads_per_s_{count}_observers"],
            result[f"reads_p50_ms_{count}_observers"],
            result[f"reads_p99_ms_{count}_observers"],
            result[f"reads_errors_{count}_observers"],
            result[f"reads_on_observers_{count}_observers"],
            result[f"cpu_active_reads_{count}_observers"],
        ]
        for count in (0, 2)
    ]
    print_table(
        f"stat of / by {result['observer_clients']} clients through the failover proxy "
        f"(ratio {result['observer_read_ratio']}, target >= 1.5)",
        ["NameNodes", "reads/s", "p50 ms", "p99 ms", "errors", "on observers", "CPU nn1"],
        rows,
    )
    if "observer_capacity_ratio" in result:
        print_table(
            f"stat of / driven by h2load, {OBSERVER_H2LOAD_IN_FLIGHT} in flight spread over "
            f"the NameNodes read (ratio {result['observer_capacity_ratio']})",
            ["NameNodes", "reads/s", "p99 ms", "CPU s/s nn1", "CPU s/s nn3", "CPU s/s nn4"],
            [
                [
                    f"{count} observers",
                    result[f"stat_h2load_per_s_{count}_observers"],
                    result[f"stat_h2load_p99_ms_{count}_observers"],
                    *(result.get(f"cpu_{nn}_stat_h2load_{count}_observers", "-")
                      for nn in ("nn1", "nn3", "nn4")),
                ]
                for count in (0, 2)
            ],
        )
    else:
        print(f"observers' h2load series left out: {h2load.INSTALL_HINT}", flush=True)
    print_table(
        f"observer lag: ack on nn1 -> visible on nn3, under {result['observer_clients']} "
        f"Python writer threads in the measuring process ({result['observer_lag_samples']} "
        f"samples, {result['observer_lag_write_acks']} writes acknowledged meanwhile)",
        ["measure", "value"],
        [
            ["p50 ms", result["observer_lag_pyclients_p50_ms"]],
            ["p99 ms", result["observer_lag_pyclients_p99_ms"]],
            ["max ms", result["observer_lag_pyclients_max_ms"]],
        ],
    )
    if "observer_lag_h2load_p99_ms" in result:
        print_table(
            f"the same, the write load driven by h2load ({result['observer_clients']} "
            f"Create(overwrite) calls in flight, {result['observer_lag_h2load_creates_per_s']} "
            "creates/s logged): observer_lag_p99_ms polled; held: one read carrying the "
            f"mkdir's txid ({result['observer_lag_h2load_read_creates_per_s']} creates/s)",
            ["measure", "polled (stale reads)", "held (seen txid)"],
            [
                [
                    f"{q} ms",
                    result[f"observer_lag_h2load_{q}_ms"],
                    result[f"observer_lag_h2load_read_{q}_ms"],
                ]
                for q in ("p50", "p99", "max")
            ],
        )
        roles = ("active", "standby", "observers", "journalnodes", "client")
        print_table(
            "meanwhile (polled series), seconds a second: CPU used, and runnable but waiting "
            "for a core (/proc/<pid>/task/*/schedstat)",
            ["role", "CPU", "run-queue wait"],
            [
                [
                    role,
                    result.get(f"observer_lag_h2load_cpu_{role}", "-"),
                    result.get(f"observer_lag_h2load_runq_wait_{role}", "-"),
                ]
                for role in roles
            ],
        )
