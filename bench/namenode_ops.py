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

(d) the standby's lag under the write load (``push_lag_series``): ``--lag-load-samples``
    samples of (b) while 32 clients (threads of a child process, so that they do not share
    the measuring thread's GIL) create directories without pause, with in-progress
    tailing, once with pushed edits (dfs.ha.tail-edits.push: each JournalNode streams every
    batch once synced, the standby applies it once a majority pushed it) and once polled
    every tail period, the baseline, each on a fresh cluster (``standby_lag_pyclients_*``);
    then the same with h2load keeping 32 ``Create`` calls in flight instead
    (``standby_lag_h2load_*``), the load generator of every capacity series here, which
    costs the cores next to nothing where the 32 Python writers use a large share of them.
    ``standby_lag_p50_ms`` and ``standby_lag_p99_ms`` are the pushed figures under h2load
    (target p99 <= 10 ms; the Python writers' without h2load, ``standby_lag_load`` says
    which), ``standby_lag_poll_*`` the baseline's; the idle lag of (b) is
    ``standby_lag_idle_*``. With h2load the pushed lag is measured again under lighter
    write loads (``--lag-levels``, default 4 and 16 calls in
    flight; ``standby_lag_h2load_p99_ms_<n>``), beside the CPU all daemons used: on two cores
    the tail follows how full the cores are. ``--lag-only`` runs (d) alone.

(c) with ``h2load`` (``bench.h2load``: C, gRPC unary over h2c) at 1, 32 and 128 calls in
    flight: the no-op echo server of ``bench.grpc_floor`` (the floor), ``GetFileInfo`` of
    ``/`` on the active (linearizable), and ``Create(overwrite=true)`` of one path, no client
    id (never retry-cached: every call logs one edit). h2load sees HTTP statuses only, so
    success is counted on the server: the echo server's own count, the active's
    ``hanamenode_rpc_seconds`` count for GetFileInfo, and for creates the advance of the
    synced txid less two per roll (END/START segment); fewer than h2load's answers are
    reported as failed. CPU of the active, of the JournalNodes (and of the echo server) from
    ``/proc/PID/stat`` per successful call; edits per sync from the active's group-commit
    counters. Without h2load the bench says how to install it and runs (a) and (b) alone.

(d) observers (issue 14, docs/consistency.md §9), on a second cluster of four NameNodes (nn1
    active, nn2 standby, nn3 and nn4 observers, in-progress tailing at the same tail period):
    ``stat`` of ``/`` by 32 clients through the failover proxy (observer reads on, from the
    configuration) with nn3 and nn4 made standbys (0 observers: every read goes to the
    active, confirmed by a read-index round) and then made observers again (2 observers),
    in the same run, on the same processes; and the observer's lag under 32 writer threads:
    a mkdir acknowledged by nn1, then nn3 polled (``allow_stale_read``) until it shows it;
    under h2load's write load also held (``observer_lag_h2load_read_*``): one read that
    carries the mkdir's txid, which nn3 answers once it has applied it. The proxy's client
    costs as much CPU as a server, so the same comparison is run again with h2load as the
    driver, measuring what the servers can answer: 32 ``GetFileInfo`` calls in flight on
    the active alone, then spread over the active and both observers
    (``observer_capacity_ratio``). ``--no-observers`` leaves (d) out.

(e) sessions and multis (issue 24, ``bench.sessions``, its own clusters): h2load on the
    ``Session`` stream and ``Multi`` beside the unary calls, 32 threads sharing one client on
    sessions and on unary calls, and the standby's and an observer's lag under 1,000 paced
    creates/s; keys ``session_*``, ``batched_*``, ``multi_*``, ``pyclient_*``,
    ``*_lag_p99_ms_at_1000``. ``--no-sessions`` leaves (e) out.

``--loop uvloop|asyncio`` runs every daemon's event loop on that loop (``HANAMENODE_UVLOOP``);
by default each daemon chooses (the NameNode uvloop when installed, the JournalNodes asyncio).

It prints a table with the targets beside the measurements (>= 5,000 mkdirs/s at 32 clients
with p99 <= 20 ms), then one JSON line. Targets are reported, never asserted (docs/architecture.md
§8.6 ``bench/``). Everything shares this machine's cores: the load generator's threads,
the NameNodes and the JournalNodes.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import shutil
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from prometheus_client.parser import text_string_to_metric_families

from bench import h2load
from bench.common import percentile, print_json, print_table
from bench.grpc_floor import echo_count, echo_server
from conf import load_settings
from conf.logging import setup_logging
from conf.rpc import UVLOOP_ENV, make_channel
from hadev.devcluster import MkdirLoad
from hadev.namenodes import NameNodeProcessCluster, transition
from hadev.scrape import metric_value
from hanamenode.client import HaFsClient, RetryPolicy
from hanamenode.ha import SEEN_TXID_KEY, HAState
from proto import namenode_pb2, namenode_pb2_grpc

CLIENTS = (1, 8, 32)
IN_FLIGHT = (1, 32, 128)
CREATE_PATH = "/bench-create"
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
    """The processes of each role: the measuring client (this one), nn1 (active), nn2
    (standby), the NameNodes after them (``observers``: nn3 and nn4 of the observers'
    cluster; none elsewhere) and the JournalNodes."""
    return {
        "client": [None],
        "active": [cluster["nn1"].pid],
        "standby": [cluster["nn2"].pid],
        "observers": [cluster[nn].pid for nn in cluster.ids[2:]],
        "journalnodes": [jn.pid for jn in cluster.journal],
    }


_ROLES = ("active", "standby", "journalnodes")
"""The daemons' roles of ``role_pids`` (without the measuring client), in table order."""


def cpu_by_role(pids: dict[str, list[int | None]]) -> dict[str, float]:
    return {role: sum(cpu_seconds(pid) for pid in group) for role, group in pids.items()}


def run_queue_wait_seconds(pid: int | None = None) -> float:
    """Seconds the threads of process ``pid`` (None: this one) alive now have spent so far
    runnable but waiting for a CPU, from the second field of each
    ``/proc/<pid>/task/<tid>/schedstat`` (Linux; nanoseconds). A thread that ended in between
    takes its share with it, so a difference of two readings is a lower bound."""
    tasks = Path(f"/proc/{'self' if pid is None else pid}/task")
    waited = 0
    for task in tasks.iterdir():
        try:
            waited += int((task / "schedstat").read_text().split()[1])
        except (FileNotFoundError, ProcessLookupError):
            continue  # the thread ended between the listing and the read (either errno)
    return waited / 1e9


@dataclass(frozen=True)
class RoleTimes:
    """Per role, seconds per second of a measurement: running on a CPU (``cpu``, from
    ``/proc/<pid>/stat``) and runnable but waiting in a run queue for one (``wait``, from
    ``/proc/<pid>/task/*/schedstat``). A ``wait`` well above ``cpu`` says the role's wake-ups
    queue behind other processes for the cores: the tail of a latency measured meanwhile is
    set by the machine's cores, not by the role's own work."""

    cpu: dict[str, float]
    wait: dict[str, float]

    @staticmethod
    def read(pids: dict[str, list[int | None]]) -> RoleTimes:
        """Seconds used and waited so far, by role."""
        return RoleTimes(
            cpu_by_role(pids),
            {
                role: sum(run_queue_wait_seconds(pid) for pid in group)
                for role, group in pids.items()
            },
        )

    def per_second_since(self, before: RoleTimes, elapsed: float) -> RoleTimes:
        """What was used and waited between ``before`` and this reading, per second of
        ``elapsed``."""
        return RoleTimes(
            {role: (used - before.cpu[role]) / elapsed for role, used in self.cpu.items()},
            {role: (waited - before.wait[role]) / elapsed for role, waited in self.wait.items()},
        )


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


def nn_samples(url: str) -> dict[str, float]:
    """A NameNode's samples by name (``name:method`` for per-method ones), buckets left out."""
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if "le" in sample.labels:
                continue
            method = sample.labels.get("method")
            out[f"{sample.name}:{method}" if method else sample.name] = float(sample.value)
    return out


def _settled(read: Callable[[], float], quiet: float = 0.3, limit: float = 10.0) -> float:
    """``read()`` once it stopped changing for ``quiet`` seconds: calls h2load gave up on at
    the end of its window may still be served."""
    value, deadline = read(), time.monotonic() + limit
    while time.monotonic() < deadline:
        time.sleep(quiet)
        again = read()
        if again == value:
            break
        value = again
    return value


def h2load_series(
    cluster: NameNodeProcessCluster,
    echo: tuple[int, int],
    seconds: float,
    levels: tuple[int, ...],
    connections: int,
) -> dict[str, float | int]:
    """Echo, stat and create through h2load at each level of calls in flight."""
    echo_port, echo_pid = echo
    active = cluster["nn1"]
    url = active.metrics_url
    assert url is not None and active.pid is not None
    jn_pids = [jn.pid for jn in cluster.journal]
    header = namenode_pb2.RpcHeader()  # no client id: never answered from the retry cache
    stat = namenode_pb2.GetFileInfoRequest(header=header, path="/")
    create = namenode_pb2.CreateRequest(header=header, path=CREATE_PATH, overwrite=True)
    with make_channel(active.address, cluster.settings().tls) as channel:
        stub = namenode_pb2_grpc.ClientProtocolStub(channel)
        stub.GetFileInfo(stat, timeout=30)  # the same bytes h2load posts succeed once
        stub.Create(create, timeout=30)

    def created() -> float:
        m = nn_samples(url)
        return m["hanamenode_edit_log_synced_txid"] - 2 * m["hanamenode_edit_log_rolls_total"]

    kinds: dict[str, tuple[str, bytes, Callable[[], float]]] = {
        "echo": (f"http://127.0.0.1:{echo_port}/bench.Echo/Ping", b"e" * 100,
                 lambda: float(echo_count(echo_port))),
        "stat": (f"http://{active.address}/hanamenode.namenode.ClientProtocol/GetFileInfo",
                 stat.SerializeToString(),
                 lambda: nn_samples(url)["hanamenode_rpc_seconds_count:GetFileInfo"]),
        "create": (f"http://{active.address}/hanamenode.namenode.ClientProtocol/Create",
                   create.SerializeToString(), created),
    }
    result: dict[str, float | int] = {}
    for kind, (target, message, successes) in kinds.items():
        server_pids: list[int | None] = [echo_pid] if kind == "echo" else [active.pid]
        for n in levels:
            ok_before, sync_before = successes(), sync_counters(cluster)
            cpu_server, cpu_jns = cpu_by_role({"s": server_pids, "j": list(jn_pids)}).values()
            load = h2load.run(target, message, n, seconds, connections)
            ok = _settled(successes) - ok_before
            cpu_after = cpu_by_role({"s": server_pids, "j": list(jn_pids)})
            sync_after = sync_counters(cluster)
            answered = len(load.latencies_ms)
            failed = max(0, load.requests["done"] - int(ok)) + load.requests["errored"]
            good = max(0, answered - failed)
            per_call = 1e6 / ok if ok > 0 else 0.0
            syncs, txns, _ = (sync_after[k] - sync_before[k] for k in _SYNC_SAMPLES)
            key = f"{kind}_{{}}_{n}"
            result[f"{kind}_per_s_{n}"] = round(good / seconds, 1)
            result[key.format("mean_ms")] = round(
                sum(load.latencies_ms) / answered if answered else 0.0, 2
            )
            result[key.format("p50_ms")] = round(percentile(load.latencies_ms, 0.50), 2)
            result[key.format("p99_ms")] = round(percentile(load.latencies_ms, 0.99), 2)
            result[key.format("failed")] = failed
            server_role = "echo" if kind == "echo" else "nn"
            result[f"{server_role}_cpu_us_per_{kind}_{n}"] = round(
                (cpu_after["s"] - cpu_server) * per_call, 1
            )
            result[f"jn_cpu_us_per_{kind}_{n}"] = round((cpu_after["j"] - cpu_jns) * per_call, 1)
            if kind == "create":
                result[f"edits_per_sync_{n}"] = round(txns / syncs if syncs else 0.0, 1)
    if 32 in levels and result.get("echo_per_s_32"):
        result["create_to_echo_ratio_32"] = round(
            float(result["create_per_s_32"]) / float(result["echo_per_s_32"]), 2
        )
    return result


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


LAG_CLIENTS = 32
TARGET_STANDBY_LAG_P99_MS = 10.0


def standby_lag_under_load(
    cluster: NameNodeProcessCluster, samples: int, clients: int
) -> tuple[list[float], int, RoleTimes]:
    """``standby_lag`` while ``clients`` threads create directories on the active without
    pause (the write load of (a)); the lags, how many load mkdirs failed, and the CPU each
    role used and waited for per second of the sampling (``RoleTimes``)."""
    context = multiprocessing.get_context("spawn")
    stop = context.Event()
    errors = context.Value("i", 0)
    writers = context.Process(
        target=_mkdir_writers,
        args=(str(cluster.conf_path), clients, stop, errors),
        name="lag-load",
        daemon=True,
    )
    writers.start()
    try:
        time.sleep(2.0)  # the child has started, every client connected and writing
        lags, times = _sample_lag(cluster, samples, load_pids=[writers.pid])
    finally:
        stop.set()
        writers.join(timeout=60)
    if writers.exitcode != 0:
        raise RuntimeError(f"the writers' process exited with {writers.exitcode}")
    return lags, int(errors.value), times


def _mkdir_writers(conf_path: str, clients: int, stop: Any, errors: Any) -> None:
    """``clients`` threads, each with its own ``HaFsClient``, making directories until
    ``stop`` is set; the mkdirs that failed are added to ``errors``. Run in a process of its
    own, so that the 32 writers do not share the measuring thread's GIL: the lag measured is
    the cluster's, not the time the measuring thread waited for its own process."""
    settings = load_settings(conf_path)
    failed = [0] * clients

    def load(index: int) -> None:
        with HaFsClient(settings, policy=POLICY) as fs:
            n = 0
            while not stop.is_set():
                try:
                    fs.mkdirs(f"/lagload/c{index}-{n}", parents=True)
                except Exception:
                    failed[index] += 1
                n += 1

    threads = [
        threading.Thread(target=load, args=(i,), name=f"lag-load-{i}", daemon=True)
        for i in range(clients)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with errors.get_lock():
        errors.value += sum(failed)


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
        lags, times = _sample_lag(
            cluster, samples, tag=f"-h2load{in_flight}{'-read' if consistent else ''}",
            follower=follower, consistent=consistent,
        )
        logged = nn_samples(active.metrics_url or "")[synced] - before
        rate = logged / (time.perf_counter() - began)
    return lags, rate, times


def _sample_lag(
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


def push_lag_series(
    workdir: Path, samples: int, clients: int, tail_period: float, roll_period: float,
    handlers: int, lighter: tuple[int, ...] = (),
) -> dict[str, float | int | str]:
    """Standby lag under the write load with in-progress tailing, pushed (SubscribeEdits)
    and, as the baseline of the same run, polled every ``tail_period``: a fresh cluster each
    (the setting is read at start). The load is ``clients`` Python writer threads in a child
    process (keys ``standby_lag_pyclients_*``), then, with h2load installed, ``clients``
    ``Create`` calls in flight from h2load (``standby_lag_h2load_*``).
    ``standby_lag_{p50,p99}_ms`` (push) and ``standby_lag_poll_{p50,p99}_ms`` (poll) are
    h2load's figures, or the Python writers' without h2load (``standby_lag_load`` says
    which). With h2load, the pushed lag is also measured under each
    ``lighter`` write load (calls in flight; ``standby_lag_h2load_{p50,p90,p99}_ms_<n>``):
    how the tail grows as the daemons fill the machine's cores."""
    result: dict[str, float | int | str] = {
        "standby_lag_clients": clients,
        "standby_lag_samples": samples,
    }
    for mode, push in (("push", True), ("poll", False)):
        conf = cluster_conf(tail_period, roll_period, True, handlers)
        conf["dfs.ha.tail-edits.push"] = push
        key = "standby_lag" if push else "standby_lag_poll"
        with NameNodeProcessCluster(workdir / f"lag-{mode}", extra_conf=conf) as cluster:
            cluster.transition_to_active("nn1")
            began = time.perf_counter()
            lags, errors, times = standby_lag_under_load(cluster, samples, clients)
            elapsed = time.perf_counter() - began
            standby = nn_samples(cluster["nn2"].metrics_url or "")
            if shutil.which("h2load") is not None:
                native, rate, native_times = standby_lag_under_h2load(cluster, samples, clients)
                result.update(_h2load_lag_keys(f"{key}_h2load", "", native, rate, native_times))
                if push and lighter:
                    result.update(lag_by_write_load(cluster, samples, lighter))
        py = f"{key}_pyclients"
        result[f"{py}_p50_ms"] = round(percentile(lags, 0.50), 1)
        result[f"{py}_p99_ms"] = round(percentile(lags, 0.99), 1)
        result[f"{py}_max_ms"] = round(lags[-1], 1) if lags else 0.0
        result[f"{py}_load_errors"] = errors
        result[f"{key}_pushed_txns"] = standby.get("hanamenode_tailer_pushed_txns_applied_total", 0)
        result[f"{key}_tailed_txns"] = standby.get("hanamenode_tailer_txns_applied_total", 0)
        result[f"{py}_txns_per_s"] = round(float(result[f"{key}_tailed_txns"]) / elapsed, 1)
        for role in (*_ROLES, "load"):
            result[f"{py}_cpu_{role}"] = round(times.cpu[role], 2)
            result[f"{py}_runq_wait_{role}"] = round(times.wait[role], 2)
        result["standby_lag_load"] = _headline_lag(result, key)
    poll_p99 = max(float(result["standby_lag_poll_p99_ms"]), 1e-9)
    result["standby_lag_p99_push_vs_poll"] = round(
        float(result["standby_lag_p99_ms"]) / poll_p99, 3
    )
    result["standby_lag_target_p99_ms"] = TARGET_STANDBY_LAG_P99_MS
    return result


def _headline_lag(result: dict[str, float | int | str], stem: str) -> str:
    """Copy ``<stem>_h2load_{p50,p99}_ms`` to ``<stem>_{p50,p99}_ms``, or the Python
    writers' ``<stem>_pyclients_*`` without h2load; the load it took ("h2load" or "python").
    h2load is the load generator of every server-capacity series: its 32 calls in flight cost
    the 2 cores almost nothing, where the Python writers use a large share of them."""
    load = "h2load" if f"{stem}_h2load_p99_ms" in result else "python"
    source = f"{stem}_h2load" if load == "h2load" else f"{stem}_pyclients"
    for q in ("p50", "p99"):
        result[f"{stem}_{q}_ms"] = result[f"{source}_{q}_ms"]
    return load


def lag_by_write_load(
    cluster: NameNodeProcessCluster, samples: int, levels: tuple[int, ...]
) -> dict[str, float | int | str]:
    """The pushed lag under h2load at each level of ``Create`` calls in flight, lightest
    first, with the CPU each role used: keys ``standby_lag_h2load_{p50,p90,p99}_ms_<n>``,
    ``..._creates_per_s_<n>`` and ``..._cpu_total_<n>`` (s/s, all daemons)."""
    out: dict[str, float | int | str] = {"standby_lag_levels": ",".join(map(str, levels))}
    for n in levels:
        lags, rate, times = standby_lag_under_h2load(cluster, samples, n)
        out.update(_h2load_lag_keys("standby_lag_h2load", f"_{n}", lags, rate, times))
    return out


def _h2load_lag_keys(
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
    for role in _ROLES:
        keys[f"{stem}_cpu_{role}{suffix}"] = round(times.cpu[role], 2)
        keys[f"{stem}_runq_wait_{role}{suffix}"] = round(times.wait[role], 2)
    keys[f"{stem}_cpu_total{suffix}"] = round(sum(times.cpu.values()), 2)
    keys[f"{stem}_runq_wait_total{suffix}"] = round(sum(times.wait.values()), 2)
    return keys


def report_push_lag(result: dict[str, float | int | str]) -> None:
    py, poll = "standby_lag_pyclients", "standby_lag_poll_pyclients"
    print_table(
        f"standby lag under {result['standby_lag_clients']} Python writer threads (a child "
        "process), in-progress tailing: ack on nn1 -> visible on nn2 "
        f"({result['standby_lag_samples']} samples each)",
        ["measure", "pushed", "polled (baseline)", "target"],
        [
            ["p50 ms", result[f"{py}_p50_ms"], result[f"{poll}_p50_ms"], ""],
            ["p99 ms", result[f"{py}_p99_ms"], result[f"{poll}_p99_ms"], ""],
            ["max ms", result[f"{py}_max_ms"], result[f"{poll}_max_ms"], ""],
            [
                "CPU active / standby / JNs (s/s)",
                *(
                    " / ".join(str(result[f"{k}_cpu_{role}"]) for role in _ROLES)
                    for k in (py, poll)
                ),
                "",
            ],
            ["CPU of the writers' process (s/s)", result[f"{py}_cpu_load"],
             result[f"{poll}_cpu_load"], ""],
            [
                "run-queue wait active / standby / JNs (s/s)",
                *(
                    " / ".join(str(result[f"{k}_runq_wait_{role}"]) for role in _ROLES)
                    for k in (py, poll)
                ),
                "",
            ],
            [
                "txns/s written (and tailed)",
                result[f"{py}_txns_per_s"],
                result[f"{poll}_txns_per_s"],
                "",
            ],
            [
                "txns applied from pushes / all",
                f"{result['standby_lag_pushed_txns']:.0f} / "
                f"{result['standby_lag_tailed_txns']:.0f}",
                f"{result['standby_lag_poll_pushed_txns']:.0f} / "
                f"{result['standby_lag_poll_tailed_txns']:.0f}",
                "",
            ],
        ],
    )
    if "standby_lag_h2load_p99_ms" in result:
        print_table(
            f"the same, the write load driven by h2load ({result['standby_lag_clients']} "
            "Create(overwrite) calls in flight) instead of Python threads: standby_lag_p99_ms",
            ["measure", "pushed", "polled (baseline)", "target"],
            [
                ["p50 ms", result["standby_lag_h2load_p50_ms"],
                 result["standby_lag_poll_h2load_p50_ms"], ""],
                ["p99 ms", result["standby_lag_h2load_p99_ms"],
                 result["standby_lag_poll_h2load_p99_ms"],
                 f"<= {TARGET_STANDBY_LAG_P99_MS:.0f} (pushed)"],
                ["creates/s logged", result["standby_lag_h2load_creates_per_s"],
                 result["standby_lag_poll_h2load_creates_per_s"], ""],
                [
                    "CPU active / standby / JNs (s/s)",
                    *(
                        f"{result[f'{k}_h2load_cpu_active']} / "
                        f"{result[f'{k}_h2load_cpu_standby']} / "
                        f"{result[f'{k}_h2load_cpu_journalnodes']}"
                        for k in ("standby_lag", "standby_lag_poll")
                    ),
                    "",
                ],
                [
                    "run-queue wait active / standby / JNs (s/s)",
                    *(
                        " / ".join(str(result[f"{k}_h2load_runq_wait_{role}"]) for role in _ROLES)
                        for k in ("standby_lag", "standby_lag_poll")
                    ),
                    "",
                ],
            ],
        )
    if "standby_lag_levels" in result:
        levels = [int(n) for n in str(result["standby_lag_levels"]).split(",")]
        rows: list[list[object]] = [
            [
                n,
                result[f"standby_lag_h2load_creates_per_s_{n}"],
                result[f"standby_lag_h2load_p50_ms_{n}"],
                result[f"standby_lag_h2load_p90_ms_{n}"],
                result[f"standby_lag_h2load_p99_ms_{n}"],
                f"{result[f'standby_lag_h2load_cpu_total_{n}']} / "
                f"{result[f'standby_lag_h2load_cpu_active_{n}']}",
                result[f"standby_lag_h2load_runq_wait_total_{n}"],
            ]
            for n in levels
        ]
        rows.append([
            result["standby_lag_clients"],
            result["standby_lag_h2load_creates_per_s"],
            result["standby_lag_h2load_p50_ms"],
            result["standby_lag_h2load_p90_ms"],
            result["standby_lag_h2load_p99_ms"],
            f"{result['standby_lag_h2load_cpu_total']} / {result['standby_lag_h2load_cpu_active']}",
            result["standby_lag_h2load_runq_wait_total"],
        ])
        print_table(
            "pushed lag by write load (h2load Create calls in flight; CPU of every daemon and "
            "of the measuring client, of 2 cores): the tail grows as the cores fill",
            [
                "in flight", "creates/s", "p50 ms", "p90 ms", "p99 ms", "CPU all / active (s/s)",
                "run-queue wait all (s/s)",
            ],
            rows,
        )


EXTRA_CONF: dict[str, str] = {}
"""Settings every cluster of this run gets on top of ``cluster_conf`` (``--conf KEY=VALUE``)."""


def cluster_conf(
    tail_period: float, roll_period: float, in_progress: bool, handlers: int
) -> dict[str, str | int | float | bool]:
    """The settings of the bench's clusters."""
    return {
        "dfs.ha.tail-edits.period": f"{tail_period}s",
        "dfs.ha.log-roll.period": f"{roll_period}s",
        "dfs.ha.tail-edits.in-progress": in_progress,
        "hanamenode.rpc.handler.count": handlers,
        "dfs.namenode.checkpoint.txns": 10_000_000,
        **EXTRA_CONF,
    }


def run(
    workdir: Path,
    seconds: float,
    clients: tuple[int, ...],
    lag_samples: int,
    roll_period: float,
    tail_period: float,
    handlers: int,
    in_progress: bool = False,
    h2load_seconds: float = 3.0,
    in_flight: tuple[int, ...] = IN_FLIGHT,
    connections: int = 4,
    observers: bool = True,
) -> dict[str, float | int | str]:
    conf = cluster_conf(tail_period, roll_period, in_progress, handlers)
    result: dict[str, float | int | str] = {
        "tail_in_progress": int(in_progress),
        "roll_period_s": roll_period,
        "tail_period_s": tail_period,
        "handlers": handlers,
        "cpus": os.cpu_count() or 0,
        "seconds_per_level": seconds,
    }
    result["load_average_1m_before"] = round(os.getloadavg()[0], 2)
    with NameNodeProcessCluster(workdir, extra_conf=conf) as cluster:
        cluster.transition_to_active("nn1")
        if shutil.which("h2load") is None:
            print(h2load.INSTALL_HINT + "; running the Python-client series alone", flush=True)
            result["h2load"] = 0
        else:
            result["h2load"] = 1
            result["h2load_seconds"] = h2load_seconds
            with echo_server() as (echo_port, _, echo_pid):
                result.update(
                    h2load_series(
                        cluster, (echo_port, echo_pid), h2load_seconds, in_flight, connections
                    )
                )
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
        result["standby_lag_idle_p50_ms"] = round(percentile(lags, 0.50), 1)
        result["standby_lag_idle_p99_ms"] = round(percentile(lags, 0.99), 1)
        result["standby_lag_idle_max_ms"] = round(lags[-1], 1) if lags else 0.0
        result["standby_lag_idle_samples"] = len(lags)
        result["load_average_1m"] = round(os.getloadavg()[0], 2)
    if observers:
        result.update(
            observer_series(workdir / "observers", conf, seconds, max(clients), lag_samples)
        )
        result["load_average_1m"] = round(os.getloadavg()[0], 2)
    for n in clients:
        result[f"mkdirs_p99_ms_{n}"] = result[f"p99_ms_{n}"]
    return result


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
    with NameNodeProcessCluster(workdir, namenodes=4, observers=2, extra_conf=conf) as cluster:
        cluster.transition_to_active("nn1")
        observers = ("nn3", "nn4")
        for count, state in ((0, HAState.STANDBY), (2, HAState.OBSERVER)):
            for nn in observers:
                transition(cluster[nn].address, state, tls=cluster.settings().tls)
            served = [_observer_reads(cluster, nn) for nn in observers]
            reads = run_load(cluster, clients, seconds, op="stat")
            by_observers = sum(_observer_reads(cluster, nn) for nn in observers) - sum(served)
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
    result["observer_lag_load"] = _headline_lag(result, "observer_lag")
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
        return on_active + sum(_observer_reads(cluster, nn) for nn in observers)

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
    done = _settled(answered) - before
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


def _observer_reads(cluster: NameNodeProcessCluster, nn: str) -> float:
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


def report_h2load(result: dict[str, float | int | str], levels: tuple[int, ...]) -> None:
    rows = []
    for kind in ("echo", "stat", "create"):
        server = "echo" if kind == "echo" else "nn"
        for n in levels:
            rows.append(
                [
                    f"{kind} x{n}",
                    f"{result[f'{kind}_per_s_{n}']:,}",
                    result[f"{kind}_mean_ms_{n}"],
                    result[f"{kind}_p50_ms_{n}"],
                    result[f"{kind}_p99_ms_{n}"],
                    result[f"{kind}_failed_{n}"],
                    result[f"{server}_cpu_us_per_{kind}_{n}"],
                    result[f"jn_cpu_us_per_{kind}_{n}"],
                    result.get(f"edits_per_sync_{n}", "") if kind == "create" else "",
                ]
            )
    print_table(
        f"h2load, calls in flight (gRPC unary over h2c, {result['h2load_seconds']} s each; "
        f"load average {result['load_average_1m_before']} before the run)",
        [
            "calls",
            "ok/s",
            "mean ms",
            "p50 ms",
            "p99 ms",
            "failed",
            "server CPU us/call",
            "JNs CPU us/call",
            "edits/sync",
        ],
        rows,
    )


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--dir", type=Path, help="work directory (default: a temporary one)")
    parser.add_argument(
        "--seconds", type=float, default=3.0, help="duration of each Python-client load"
    )
    parser.add_argument(
        "--h2load-seconds", type=float, default=3.0, help="duration of each h2load series"
    )
    parser.add_argument(
        "--long", action="store_true", help="10 s per series (both kinds) instead of 3 s"
    )
    parser.add_argument(
        "--in-flight",
        default=",".join(map(str, IN_FLIGHT)),
        help="h2load calls in flight, e.g. 1,32,128",
    )
    parser.add_argument(
        "--connections", type=int, default=4, help="h2load connections sharing the calls"
    )
    parser.add_argument(
        "--clients", default=",".join(map(str, CLIENTS)), help="concurrency levels, e.g. 1,8,32"
    )
    parser.add_argument("--lag-samples", type=int, default=60, help="standby lag samples")
    parser.add_argument("--roll-period", type=float, default=0.5, help="log roll period (s)")
    parser.add_argument("--tail-period", type=float, default=0.1, help="tail period (s)")
    parser.add_argument(
        "--handlers",
        type=int,
        default=64,
        help="hanamenode.rpc.handler.count (the JournalNodes'; the NameNode has no handlers)",
    )
    parser.add_argument(
        "--loop",
        choices=("default", "uvloop", "asyncio"),
        default="default",
        help="the daemons' event loops: HANAMENODE_UVLOOP=1 (uvloop) or 0 (asyncio) for all of "
        "them, or each daemon's default (the NameNode's: uvloop when installed)",
    )
    parser.add_argument(
        "--in-progress",
        action="store_true",
        help="the standby tails the open segment too (dfs.ha.tail-edits.in-progress)",
    )
    parser.add_argument(
        "--no-observers", action="store_true", help="leave out the observer series (d)"
    )
    parser.add_argument(
        "--observers-only",
        action="store_true",
        help="only the observer series (d)",
    )
    parser.add_argument(
        "--lag-load-samples",
        type=int,
        default=200,
        help="standby lag samples under the write load, pushed and polled (0: skip)",
    )
    parser.add_argument(
        "--lag-levels",
        default="4,16",
        help="lighter h2load write loads (calls in flight) at which the pushed lag is also "
        "measured, e.g. 1,4,16 ('' for none)",
    )
    parser.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a setting for every cluster of the run, e.g. "
        "dfs.namenode.edits.sync.gather-delay=0 (repeatable)",
    )
    parser.add_argument(
        "--lag-only",
        action="store_true",
        help="only the standby lag under the write load, pushed and polled",
    )
    parser.add_argument(
        "--no-sessions",
        action="store_true",
        help="leave out the session and multi series (bench.sessions, issue 24)",
    )
    args = parser.parse_args(argv)
    for setting in args.conf:
        key, sep, value = setting.partition("=")
        if not sep or not key:
            parser.error(f"--conf wants KEY=VALUE, got {setting!r}")
        EXTRA_CONF[key.strip()] = value.strip()
    setup_logging("console", "warning")  # stdout is for the tables and the JSON line
    if args.loop != "default":
        # The daemons inherit it (hadev.daemon.child_environment).
        os.environ[UVLOOP_ENV] = "1" if args.loop == "uvloop" else "0"
    clients = tuple(int(x) for x in args.clients.split(","))
    in_flight = tuple(int(x) for x in args.in_flight.split(","))
    if args.long:
        args.seconds = args.h2load_seconds = 10.0
    workdir = args.dir or Path(tempfile.mkdtemp(prefix="bench-namenode-"))
    try:
        result: dict[str, float | int | str] = {}
        if args.observers_only:
            conf = cluster_conf(args.tail_period, args.roll_period, True, args.handlers)
            result = observer_series(
                workdir / "observers", conf, args.seconds, max(clients), args.lag_samples
            )
            args.lag_only, args.lag_load_samples = True, 0
        elif not args.lag_only:
            result = run(
                workdir,
                args.seconds,
                clients,
                args.lag_samples,
                args.roll_period,
                args.tail_period,
                args.handlers,
                args.in_progress,
                args.h2load_seconds,
                in_flight,
                args.connections,
                observers=not args.no_observers,
            )
        result["load_average_1m_before_lag"] = round(os.getloadavg()[0], 2)
        if args.lag_load_samples > 0:
            result.update(
                push_lag_series(
                    workdir, args.lag_load_samples, LAG_CLIENTS, args.tail_period,
                    args.roll_period, args.handlers,
                    tuple(int(x) for x in args.lag_levels.split(",") if x),
                )
            )
        result["load_average_1m_after_lag"] = round(os.getloadavg()[0], 2)
        if not args.lag_only and not args.no_sessions:
            # The session series on a cluster of their own, keys beside every one above.
            from bench import sessions

            result.update(sessions.run(
                workdir / "sessions", args.h2load_seconds, args.lag_samples, observer=True
            ))
    finally:
        if args.dir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    if not args.lag_only:
        if result["h2load"]:
            report_h2load(result, in_flight)
        report(result, clients)
        if "observer_read_ratio" in result:
            report_observers(result)
        print(f"load average (1 min): {result['load_average_1m_before']} before, "
              f"{result['load_average_1m']} after", flush=True)
    if args.observers_only:
        report_observers(result)
    if args.lag_load_samples > 0:
        report_push_lag(result)
    if "session_create_per_s_32" in result:
        from bench import sessions

        sessions.report(result)  # type: ignore[arg-type]
    result["loop"] = args.loop
    print_json(result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
