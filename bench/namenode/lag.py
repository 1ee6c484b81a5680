"""The followers' lag of ``bench.namenode_ops``: the probe (a mkdir acknowledged by the
active, then the standby or an observer asked until it shows it), series (b) (the standby's
lag with the cluster idle), the probe under h2load's write load, and the keys both the
standby's and the observers' series report it with.
"""

from __future__ import annotations

import random
import time

import grpc

from bench import h2load
from bench.common import percentile, print_table
from bench.namenode.shared import (
    CREATE_PATH,
    POLICY,
    ROLES,
    RoleTimes,
    nn_samples,
    role_pids,
)
from conf.rpc import make_channel
from hadev.namenodes import NameNodeProcessCluster
from hanamenode.client import HaFsClient
from hanamenode.ha import SEEN_TXID_KEY
from proto import namenode_pb2, namenode_pb2_grpc


def standby_lag(
    cluster: NameNodeProcessCluster,
    samples: int,
    spread: float,
    follower: str = "nn2",
    tag: str = "",
    consistent: bool = False,
) -> list[float]:
    """Milliseconds from a mkdir's acknowledgement by the active to the standby (or observer)
    ``follower`` showing it, over ``samples`` samples each started after a random pause in
    ``[0, spread)``.

    By default the probe polls ``follower`` with stale reads every millisecond until the new
    directory is there, so a sample also holds up to a poll's period and the polls' own
    round trips. ``consistent`` (an observer) asks once instead, as an observer's client
    does (docs/consistency.md §9): the read carries the mkdir's txid as the txid the client
    has seen, and the observer holds it until it has applied that txid; a refusal for lag
    (ObserverBehindError, past ``dfs.namenode.observer.read.max-wait.ms``) is asked again."""
    settings = cluster.settings()
    standby = cluster[follower]
    rng = random.Random(4)
    lags: list[float] = []
    channel = make_channel(standby.address, settings.tls)
    stub = namenode_pb2_grpc.ClientProtocolStub(channel)
    # A stale read is answered at once by any follower, whatever txid the client has seen;
    # the consistent probe must not ask for one, or the observer would not hold it.
    header = namenode_pb2.RpcHeader(allow_stale_read=not consistent)
    try:
        with HaFsClient(settings, policy=POLICY) as fs:
            fs.mkdirs(f"/lag-{follower}{tag}")
            for i in range(samples):
                time.sleep(rng.uniform(0.0, spread))
                path = f"/lag-{follower}{tag}/s{i}"
                fs.mkdirs(path)
                acked = time.perf_counter()
                request = namenode_pb2.GetFileInfoRequest(header=header, path=path)
                metadata = ((SEEN_TXID_KEY, str(fs.proxy.seen_txid)),) if consistent else ()
                deadline = acked + 30.0
                while time.perf_counter() < deadline:
                    try:
                        stub.GetFileInfo(request, timeout=5.0, metadata=metadata)
                        break
                    except grpc.RpcError as exc:
                        if consistent and exc.code() == grpc.StatusCode.UNAVAILABLE:
                            time.sleep(0.001)  # not a busy loop if nn3 is not there at all
                            continue  # the observer's wait ran out: ask again
                        if exc.code() != grpc.StatusCode.NOT_FOUND or consistent:
                            raise  # anything but "not applied yet" ends the bench
                        time.sleep(0.001)
                lags.append((time.perf_counter() - acked) * 1000.0)
    finally:
        channel.close()
    return sorted(lags)


def standby_lag_under_h2load(
    cluster: NameNodeProcessCluster,
    samples: int,
    in_flight: int,
    follower: str = "nn2",
    consistent: bool = False,
) -> tuple[list[float], float, RoleTimes]:
    """``standby_lag`` of ``follower`` (the standby, or an observer) while h2load keeps
    ``in_flight`` ``Create(overwrite)`` calls of one path outstanding on the active: the same
    write load without 32 Python threads sharing the measuring thread's GIL and cores. The
    lags, the creates logged per second meanwhile, and the CPU each role used and waited for
    per second (``RoleTimes``)."""
    active = cluster["nn1"]
    create = namenode_pb2.CreateRequest(
        header=namenode_pb2.RpcHeader(), path=CREATE_PATH, overwrite=True
    )
    url = f"http://{active.address}/hanamenode.namenode.ClientProtocol/Create"
    synced = "hanamenode_edit_log_synced_txid"
    with h2load.background(url, create.SerializeToString(), in_flight):
        time.sleep(1.0)  # the connections are up and the creates flowing
        before, began = nn_samples(active.metrics_url or "")[synced], time.perf_counter()
        lags, times = sample_lag(
            cluster, samples, tag=f"-h2load{in_flight}{'-read' if consistent else ''}",
            follower=follower, consistent=consistent,
        )
        logged = nn_samples(active.metrics_url or "")[synced] - before
        rate = logged / (time.perf_counter() - began)
    return lags, rate, times


def sample_lag(
    cluster: NameNodeProcessCluster,
    samples: int,
    tag: str = "",
    follower: str = "nn2",
    load_pids: list[int | None] | None = None,
    consistent: bool = False,
) -> tuple[list[float], RoleTimes]:
    """``standby_lag`` and the CPU each role used and waited for per second of it (role
    ``load``: ``load_pids``, the load generator's processes, when given)."""
    pids = role_pids(cluster)
    if load_pids:
        pids["load"] = load_pids
    before, began = RoleTimes.read(pids), time.perf_counter()
    lags = standby_lag(
        cluster, samples, spread=0.02, follower=follower, tag=tag, consistent=consistent
    )
    elapsed = time.perf_counter() - began
    return lags, RoleTimes.read(pids).per_second_since(before, elapsed)


def headline_lag(result: dict[str, float | int | str], stem: str) -> str:
    """Copy ``<stem>_h2load_{p50,p99}_ms`` to ``<stem>_{p50,p99}_ms``, or the Python
    writers' ``<stem>_pyclients_*`` without h2load; the load it took ("h2load" or "python").
    h2load is the load generator of every server-capacity series: its 32 calls in flight cost
    the 2 cores almost nothing, where the Python writers use a large share of them."""
    load = "h2load" if f"{stem}_h2load_p99_ms" in result else "python"
    source = f"{stem}_h2load" if load == "h2load" else f"{stem}_pyclients"
    for q in ("p50", "p99"):
        result[f"{stem}_{q}_ms"] = result[f"{source}_{q}_ms"]
    return load


def h2load_lag_keys(
    stem: str, suffix: str, lags: list[float], rate: float, times: RoleTimes
) -> dict[str, float | int | str]:
    """One h2load lag series as keys ``<stem>_{p50,p90,p99}_ms<suffix>``,
    ``<stem>_creates_per_s<suffix>``, ``<stem>_cpu_<role><suffix>``,
    ``<stem>_runq_wait_<role><suffix>`` and ``<stem>_{cpu,runq_wait}_total<suffix>`` (every
    role, the measuring client included)."""
    keys: dict[str, float | int | str] = {
        f"{stem}_p{q}_ms{suffix}": round(percentile(lags, q / 100), 1) for q in (50, 90, 99)
    }
    keys[f"{stem}_creates_per_s{suffix}"] = round(rate, 1)
    for role in ROLES:
        keys[f"{stem}_cpu_{role}{suffix}"] = round(times.cpu[role], 2)
        keys[f"{stem}_runq_wait_{role}{suffix}"] = round(times.wait[role], 2)
    keys[f"{stem}_cpu_total{suffix}"] = round(sum(times.cpu.values()), 2)
    keys[f"{stem}_runq_wait_total{suffix}"] = round(sum(times.wait.values()), 2)
    return keys


def idle_lag_series(
    cluster: NameNodeProcessCluster, samples: int, roll_period: float
) -> dict[str, float | int | str]:
    """(b): ``standby_lag`` with nothing else running, samples spread over a roll period;
    keys ``standby_lag_idle_{p50,p99,max}_ms`` and ``standby_lag_idle_samples``."""
    lags = standby_lag(cluster, samples, spread=roll_period)
    return {
        "standby_lag_idle_p50_ms": round(percentile(lags, 0.50), 1),
        "standby_lag_idle_p99_ms": round(percentile(lags, 0.99), 1),
        "standby_lag_idle_max_ms": round(lags[-1], 1) if lags else 0.0,
        "standby_lag_idle_samples": len(lags),
    }


def report_idle_lag(result: dict[str, float | int | str]) -> None:
    """The table of (b), with the bound the roll and tail periods set."""
    roll_ms = float(result["roll_period_s"]) * 1000
    tail_ms = float(result["tail_period_s"]) * 1000
    if result["tail_in_progress"]:
        print_table(
            f"standby lag, idle, with in-progress tailing "
            f"({result['standby_lag_idle_samples']} samples)",
            ["measure", "value", "bound"],
            [
                [
                    "p50 ms",
                    result["standby_lag_idle_p50_ms"],
                    f"pushed; polled ~ tail/2 = {tail_ms / 2:.0f} + RPCs",
                ],
                ["p99 ms", result["standby_lag_idle_p99_ms"], ""],
                ["max ms", result["standby_lag_idle_max_ms"], f"polled ~ tail = {tail_ms:.0f}"],
            ],
        )
        return
    print_table(
        f"standby lag, idle: ack on nn1 -> visible on nn2 "
        f"({result['standby_lag_idle_samples']} samples)",
        ["measure", "value", "bound"],
        [
            [
                "p50 ms",
                result["standby_lag_idle_p50_ms"],
                f"~ (roll + tail)/2 + tail = {(roll_ms + tail_ms) / 2 + tail_ms:.0f} + RPCs",
            ],
            ["p99 ms", result["standby_lag_idle_p99_ms"], ""],
            [
                "max ms",
                result["standby_lag_idle_max_ms"],
                f"~ roll + 2 tail = {roll_ms + 2 * tail_ms:.0f} + RPCs",
            ],
        ],
    )
