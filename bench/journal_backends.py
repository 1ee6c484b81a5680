"""The two shared-edits backends side by side (issue 29 item 4; docs/architecture.md §9): the
QJM on three JournalNodes and the ZooKeeper journal, on one machine in one run.

``python -m bench.journal_backends [--seconds 3] [--calls 400] [--rounds 3] [--repeat 2]
[--first zk] [--quick]``

Each backend gets a dev cluster (``hadev.devcluster.DevCluster``, plaintext: h2load presents
no client certificate, and the in-process writers none either) with automatic failover on
one real ZooKeeper server, as ``hadev up`` starts it: for the QJM, ZooKeeper (the election),
three JournalNodes and two NameNodes; for the ZooKeeper journal (``--journal zookeeper``),
ZooKeeper (election and log) and two NameNodes. ``--repeat`` clusters of each (default 2) run
one after the other in the order ABBA (``schedule``; ``--first zk`` starts with the
ZooKeeper journal), so that the shared machine's drifting load weighs on both alike; each
figure is the mean over a backend's clusters (``mean_of``). In each cluster:

(a) the writer's journal manager alone, in this process, on a journal of its own beside the
    cluster's (JournalNode journal ``bench-direct``, ZooKeeper path ``/bench-direct``): a
    1-edit sync, written and awaited on the manager's loop (``bench.qjm_write``'s (a')), p50
    and p99 over ``--calls``; edits/s at 100 edits a flush; edits/s of 8 writers through
    ``FSEditLog``'s group commit (``bench.qjm_write``'s (d) and (e));
(b) unary ``Create(overwrite)`` of one path driven by h2load, 32 calls in flight, to the
    active NameNode process for ``--seconds``: creates/s counted on the server, the CPU per
    create of the active, of the journal (the JournalNodes' sum, or the ZooKeeper server's
    java process) and of ZooKeeper (both backends: for the QJM it only holds the election),
    the batch znodes of the ZooKeeper journal (count and bytes) as that load ends, and the
    whole server's largest znode count and data size (``mntr``, every 0.25 s) during it:
    the window its publisher keeps (``dfs.namenode.zookeeper-journal.*``, the defaults);
(c) the standby's lag p99 while a child process paces 1,000 creates/s on one session
    (``bench.sessions.lag_at_rate``);
(d) ``kill -9`` of the active to the first write acknowledged by the new one
    (``bench.failover.run_round``, 1 s sessions, its two background writers), ``--rounds``
    times (only the totals: its split into parts looks for the QJM's events).

It prints one table (QJM, ZooKeeper journal, their ratio) and then one JSON line: every key
twice, with the suffixes ``_qjm`` and ``_zk``. Nothing is asserted (docs/architecture.md §8.6).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import math
import os
import random
import shutil
import statistics
import tempfile
import threading
import time
from collections.abc import Coroutine, Iterator, Mapping
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient

from bench import h2load
from bench.common import percentile, print_json, print_table
from bench.failover import run_round
from bench.namenode.shared import CREATE_PATH, POLICY, cpu_seconds, nn_samples, settled
from bench.qjm_write import BATCH, PER_WRITER_BATCH, WRITERS, _group_commit, mkdir_op
from bench.sessions import lag_at_rate
from conf.logging import setup_logging
from conf.settings import ZKSettings
from hadev.devcluster import JOURNAL_ID, ZK_JOURNAL_PARENT, DevCluster, MkdirLoad
from hanamenode.client import HaFsClient
from hanamenode.ha import HAState
from hanamenode.journal import JournalManager
from proto import namenode_pb2, records
from proto.values import NamespaceInfo
from qjm.journal_manager import QuorumJournalManager
from zk.client import close_client, make_client
from zkjournal.manager import ZKJournalManager

BACKENDS = ("qjm", "zk")
"""The JSON keys' suffixes, in the table's column order."""
DIRECT_JOURNAL = "bench-direct"
DIRECT_NS = NamespaceInfo("CID-bench-backends", 1)
IN_FLIGHT = 32
SERVICE = "hanamenode.namenode.ClientProtocol"
NN_CONF = {
    "hanamenode.rpc.handler.count": 16,
    "dfs.namenode.checkpoint.txns": 10_000_000,  # no checkpoint in the middle of a series
}

ROWS: tuple[tuple[str, str], ...] = (
    # (key without suffix, what it is)
    ("sync_p50_us", "(a) 1-edit sync p50, us (manager alone, awaited on its loop)"),
    ("sync_p99_us", "(a) 1-edit sync p99, us"),
    ("edits_per_s_batch100", f"(a) edits/s, {BATCH} edits a flush"),
    ("edits_per_s_8writers",
     f"(a) edits/s, {WRITERS} writers x {PER_WRITER_BATCH} (group commit)"),
    ("creates_per_s_32", f"(b) creates/s, {IN_FLIGHT} in flight (h2load, unary Create)"),
    ("create_p99_ms_32", "(b) create p99, ms"),
    ("edits_per_sync_32", "(b) edits per sync"),
    ("nn_cpu_us_per_create_32", "(b) active's CPU per create, us"),
    ("journal_cpu_us_per_create_32", "(b) journal's CPU per create, us (JNs / ZooKeeper)"),
    ("zk_cpu_us_per_edit_32", "(b) ZooKeeper's CPU per edit, us"),
    ("zk_log_znodes", "(b) batch znodes ZooKeeper holds as the load ends"),
    ("zk_log_bytes", "(b) their bytes"),
    ("zk_znode_count_peak", "(b) znodes of the whole server, peak (mntr, 0.25 s)"),
    ("zk_data_bytes_peak", "(b) data bytes of the whole server, peak (mntr)"),
    ("standby_lag_p99_ms", "(c) standby lag p99, ms, paced creates"),
    ("standby_lag_creates_per_s", "(c) the paced creates/s"),
    ("failover_median_s", "(d) kill -9 -> first acknowledged write, median s"),
    ("failover_max_s", "(d) the same, max s"),
    ("failover_acknowledged_lost", "(d) acknowledged writes lost"),
    ("daemons", "daemons run"),
)


# -- pure: the result's shape ------------------------------------------------------------------


def combine(per_backend: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """One flat result: each backend's keys with its suffix (``sync_p50_us_qjm``), and
    ``<key>_zk_to_qjm`` for every key both measured with a non-zero QJM figure."""
    out: dict[str, float] = {}
    for backend in BACKENDS:
        for key, value in per_backend.get(backend, {}).items():
            out[f"{key}_{backend}"] = value
    qjm, zk = per_backend.get("qjm", {}), per_backend.get("zk", {})
    for key in sorted(set(qjm) & set(zk)):
        if qjm[key] and not math.isnan(qjm[key]) and not math.isnan(zk[key]):
            out[f"{key}_zk_to_qjm"] = round(zk[key] / qjm[key], 2)
    return out


def table_rows(result: Mapping[str, float]) -> list[list[str]]:
    """The table's rows: what, QJM, ZooKeeper journal, ZooKeeper / QJM ('-' when absent)."""

    def shown(key: str) -> str:
        value = result.get(key)
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return "-"
        return f"{value:,.0f}" if abs(value) >= 100 else f"{value:g}"

    return [
        [label, shown(f"{key}_qjm"), shown(f"{key}_zk"), shown(f"{key}_zk_to_qjm")]
        for key, label in ROWS
    ]


# -- (a) the journal manager alone -------------------------------------------------------------


async def _direct(manager: JournalManager, calls: int, seconds: float) -> dict[str, float]:
    """(a) on a formatted journal: take over, then the three series."""
    end = await manager.arecover_unfinalized_segments()
    txid = first = (end or 0) + 1
    out = await manager.astart_log_segment(txid)
    ops = [mkdir_op(n) for n in range(BATCH)]

    def write(count: int) -> None:
        nonlocal txid
        for i in range(count):
            op = ops[i % BATCH]
            op.txid = txid
            out.write_framed(txid, records.frame(op.SerializeToString()))
            txid += 1

    async def flush() -> None:
        await out.asend_batch(*out.take_written())

    latencies = []
    for i in range(calls + calls // 10):  # the first tenth warms up the connection
        began = time.perf_counter()
        write(1)
        await flush()
        if i >= calls // 10:
            latencies.append(time.perf_counter() - began)
    latencies.sort()
    edits, began = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - began) < seconds or edits < 10 * BATCH:
        write(BATCH)
        await flush()
        edits += BATCH
    batch_rate = edits / elapsed
    await manager.afinalize_log_segment(first, txid - 1)
    writers_rate, _ = await _group_commit(manager, txid, seconds)
    return {
        "sync_p50_us": round(percentile(latencies, 0.50) * 1e6, 1),
        "sync_p99_us": round(percentile(latencies, 0.99) * 1e6, 1),
        "edits_per_s_batch100": round(batch_rate, 1),
        "edits_per_s_8writers": round(writers_rate, 1),
    }


def direct_series(dev: DevCluster, backend: str, calls: int, seconds: float) -> dict[str, float]:
    """(a) against the dev cluster's JournalNodes or ZooKeeper, on a journal of its own."""
    if backend == "qjm":
        addresses = [jn.address for jn in dev.journalnodes]
        qjm = QuorumJournalManager.connect(addresses, DIRECT_JOURNAL, DIRECT_NS)
        try:
            qjm.format()
            return qjm.run_on_loop(_direct(qjm, calls, seconds))
        finally:
            qjm.close()
    zk_settings = zk_settings_of(dev)
    root = f"/{DIRECT_JOURNAL}"
    journal = ZKJournalManager(
        lambda: make_client(zk_settings), f"zookeeper://{zk_settings.quorum}{root}", root,
        DIRECT_NS,
    )
    try:
        journal.format()
        return _run(_direct(journal, calls, seconds))
    finally:
        journal.close()
        # No publisher deletes this journal's batches: gone, they leave the server's znode
        # figures of (b) to the cluster's own journal.
        _delete_tree(zk_settings, root)


def _delete_tree(zk_settings: ZKSettings, path: str) -> None:
    with zk_session(zk_settings) as client:
        client.delete(path, recursive=True)


@contextlib.contextmanager
def zk_session(zk_settings: ZKSettings) -> Iterator[KazooClient]:
    """A started kazoo client with the cluster's authentication, closed on exit."""
    client = make_client(zk_settings)
    client.start(timeout=15)
    try:
        yield client
    finally:
        close_client(client)


def _run(coro: Coroutine[Any, Any, dict[str, float]]) -> dict[str, float]:
    return asyncio.run(coro)


# -- (b) creates through the active NameNode ---------------------------------------------------


def _synced(url: str) -> tuple[float, float]:
    """(txids synced, creates): a create is one edit, a roll two (its end and start)."""
    m = nn_samples(url)
    txid = m["hanamenode_edit_log_synced_txid"]
    return txid, txid - 2 * m["hanamenode_edit_log_rolls_total"]


def _sync_counts(url: str) -> tuple[float, float]:
    m = nn_samples(url)
    return m["hanamenode_edit_log_syncs_total"], m["hanamenode_edit_log_txns_synced_total"]


def journal_pids(dev: DevCluster, backend: str) -> list[int]:
    """The daemons that keep the log: the JournalNodes, or the ZooKeeper server."""
    if backend == "qjm":
        return [jn.pid for jn in dev.journalnodes]
    return [dev.zookeeper.pid]


def live_log_znodes(dev: DevCluster) -> tuple[int, int]:
    """(count, bytes) of the ZooKeeper journal's batch znodes (``<path>/log``) now."""
    log_path = f"{ZK_JOURNAL_PARENT}/{JOURNAL_ID}/log"
    with zk_session(zk_settings_of(dev)) as client:
        children = client.get_children(log_path)
        pending = [client.exists_async(f"{log_path}/{c}") for c in children]
        stats = [p.get(timeout=15) for p in pending]
    return len(children), sum(s.dataLength for s in stats if s is not None)


def zk_settings_of(dev: DevCluster) -> ZKSettings:
    """The cluster's ZooKeeper session settings (its digest authentication and ACL) on the
    server itself, as the ZooKeeper journal connects (``ZKJournalManager.from_settings``)."""
    return dataclasses.replace(dev.settings().zk, quorum=dev.zookeeper.connect_string)


def mntr(dev: DevCluster) -> dict[str, float]:
    """The server's znode count and approximate data size from ``mntr``."""
    out: dict[str, float] = {}
    for line in dev.zookeeper.four_letter_word("mntr").splitlines():
        key, _, value = line.partition("\t")
        if key == "zk_znode_count":
            out["zk_znode_count"] = float(value)
        elif key == "zk_approximate_data_size":
            out["zk_data_bytes"] = float(value)
    return out


def create_series(dev: DevCluster, backend: str, active: str, seconds: float) -> dict[str, float]:
    """(b): h2load's unary creates at IN_FLIGHT to ``active``, CPU from ``/proc``."""
    nn = dev.namenode(active)
    url = nn.metrics_url or ""
    with HaFsClient(dev.settings(), policy=POLICY) as fs:
        fs.create(CREATE_PATH, overwrite=True)
    create = namenode_pb2.CreateRequest(
        header=namenode_pb2.RpcHeader(), path=CREATE_PATH, overwrite=True  # no client id:
    ).SerializeToString()  # never retry-cached, each create logs one edit
    groups = {"nn": [nn.pid], "journal": journal_pids(dev, backend), "zk": [dev.zookeeper.pid]}

    def cpu() -> dict[str, float]:
        return {role: sum(cpu_seconds(p) for p in pids) for role, pids in groups.items()}

    (txid0, creates0), syncs0, cpu0 = _synced(url), _sync_counts(url), cpu()
    peak: dict[str, float] = {}
    stop = threading.Event()
    sampler = threading.Thread(
        target=_sample_peak, args=(dev, stop, peak), name="bench-mntr", daemon=True
    )
    sampler.start()
    try:
        run = h2load.run(f"http://{nn.address}/{SERVICE}/Create", create, IN_FLIGHT, seconds)
    finally:
        stop.set()
        sampler.join(timeout=10)
    held = live_log_znodes(dev) if backend == "zk" else (0, 0)  # as the load ends
    settled(lambda: _synced(url)[0])
    (txid1, creates1), syncs1, cpu1 = _synced(url), _sync_counts(url), cpu()
    creates, edits = creates1 - creates0, txid1 - txid0
    syncs, synced = syncs1[0] - syncs0[0], syncs1[1] - syncs0[1]

    def per(role: str, count: float) -> float:
        return round((cpu1[role] - cpu0[role]) * 1e6 / count, 1) if count else math.nan

    out = {
        "creates_per_s_32": round(creates / seconds, 1),
        "create_p99_ms_32": round(percentile(run.latencies_ms, 0.99), 2),
        "create_failed_streams_32": run.requests["failed"] + run.requests["errored"],
        "edits_per_sync_32": round(synced / syncs, 1) if syncs else math.nan,
        "nn_cpu_us_per_create_32": per("nn", creates),
        "journal_cpu_us_per_create_32": per("journal", creates),
        "zk_cpu_us_per_edit_32": per("zk", edits),
    }
    out["zk_log_znodes"], out["zk_log_bytes"] = held
    out.update({f"{key}_peak": value for key, value in peak.items()})
    return out


def _sample_peak(dev: DevCluster, stop: threading.Event, peak: dict[str, float]) -> None:
    """The largest ``mntr`` figures seen every 0.25 s until ``stop`` (thread
    ``bench-mntr``)."""
    while not stop.wait(0.25):
        for key, value in mntr(dev).items():
            peak[key] = max(peak.get(key, 0.0), value)


# -- one backend -------------------------------------------------------------------------------


def run_backend(
    workdir: Path, backend: str, seconds: float, calls: int, lag_samples: int, rounds: int,
    rng: random.Random,
) -> dict[str, float]:
    journal = "qjm" if backend == "qjm" else "zookeeper"
    # plaintext: h2load presents no client certificate, nor do the in-process writers; the
    # figures compare with the other benches', which run plaintext too
    with DevCluster(
        workdir / backend, journal=journal, tls=False, log_format="json", extra_conf=NN_CONF
    ) as dev:
        active = dev.wait_active(30)
        standby = next(nn for nn in dev.namenode_ids if nn != active)
        dev.wait_state(standby, HAState.STANDBY, 30)
        result: dict[str, float] = {"daemons": len(dev.names)}
        print(f"[{backend}] {len(dev.names)} daemons: {', '.join(dev.names)}", flush=True)
        result.update(direct_series(dev, backend, calls, seconds))
        print(f"[{backend}] (a) done", flush=True)
        result.update(create_series(dev, backend, active, seconds))
        print(f"[{backend}] (b) done", flush=True)
        lags, rate = lag_at_rate(dev.nodes, standby, lag_samples, consistent=False,
                                 active=active)
        result["standby_lag_p50_ms"] = round(percentile(lags, 0.50), 1)
        result["standby_lag_p99_ms"] = round(percentile(lags, 0.99), 1)
        result["standby_lag_creates_per_s"] = round(rate, 1)
        print(f"[{backend}] (c) done", flush=True)
        totals = []
        # bench.failover's light load: two writers making directories under /bench/load
        with MkdirLoad(dev.settings(), "/bench/load", writers=2, pause=0.01) as load:
            for number in range(1, rounds + 1):
                done = run_round(dev, number, rng)
                totals.append(done.total)
                print(f"[{backend}] (d) round {number}: kill -9 {done.killed}, "
                      f"{done.survivor} acknowledged a write after {done.total:.3f} s "
                      f"{done.note}", flush=True)
        with dev.client() as fs:
            result["failover_acknowledged_lost"] = len(load.missing(fs))
        if totals:
            result["failover_median_s"] = round(statistics.median(totals), 3)
            result["failover_max_s"] = round(max(totals), 3)
    return result


def schedule(first: str, repeat: int) -> list[str]:
    """The order the backends' clusters run in: ``repeat`` times each, ABBA, so that a load
    drifting through the run weighs on both alike.

    >>> schedule("qjm", 2)
    ['qjm', 'zk', 'zk', 'qjm']
    """
    second = next(b for b in BACKENDS if b != first)
    return [b for i in range(repeat) for b in ((first, second) if i % 2 == 0 else (second, first))]


def mean_of(runs: list[Mapping[str, float]]) -> dict[str, float]:
    """One backend's figures over its repeats: the mean of each key (NaNs left out), but the
    largest ``*_max_s`` and the sum of ``*_lost``."""
    out: dict[str, float] = {}
    for key in dict.fromkeys(k for r in runs for k in r):
        values = [r[key] for r in runs if key in r and not math.isnan(r[key])]
        if not values:
            out[key] = math.nan
        elif key.endswith("_max_s"):
            out[key] = max(values)
        elif key.endswith("_lost"):
            out[key] = sum(values)
        else:
            out[key] = round(statistics.fmean(values), 3)
    return out


def run(
    workdir: Path, seconds: float, calls: int, lag_samples: int, rounds: int, seed: int,
    first: str = "qjm", repeat: int = 2,
) -> dict[str, float]:
    """Both backends, ``repeat`` clusters each in ``schedule``'s order, ``first`` first."""
    rng = random.Random(seed)
    head: dict[str, float] = {
        "cpus": os.cpu_count() or 0,
        "seconds_per_series": seconds,
        "calls": calls,
        "failover_rounds": rounds,
        "lag_samples": lag_samples,
        "seed": seed,
        "tls": 0,
        "zk_ran_first": int(first == "zk"),
        "repeat": repeat,
        "load_average_1m_before": round(os.getloadavg()[0], 2),
    }
    runs: dict[str, list[Mapping[str, float]]] = {backend: [] for backend in BACKENDS}
    for i, backend in enumerate(schedule(first, repeat)):
        runs[backend].append(run_backend(
            workdir / str(i), backend, seconds, calls, lag_samples, rounds, rng
        ))
    per_backend = {backend: mean_of(results) for backend, results in runs.items()}
    return {**head, **combine(per_backend),
            "load_average_1m_after": round(os.getloadavg()[0], 2)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.journal_backends", description=(__doc__ or "").split("\n\n")[0]
    )
    parser.add_argument("--dir", type=Path, help="work directory (kept; default: a temporary one)")
    parser.add_argument("--seconds", type=float, default=3.0, help="seconds per throughput series")
    parser.add_argument("--calls", type=int, default=400, help="1-edit syncs per backend")
    parser.add_argument("--lag-samples", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3, help="kill -9 rounds per backend")
    parser.add_argument("--seed", type=int, default=None, help="seed of the kill moments")
    parser.add_argument("--first", choices=BACKENDS, default="qjm",
                        help="the backend measured first (default: %(default)s)")
    parser.add_argument("--repeat", type=int, default=2,
                        help="clusters per backend, run ABBA (default: %(default)s)")
    parser.add_argument("--quick", action="store_true",
                        help="1 s series, 100 calls, 30 lag samples, 1 round, 1 cluster each "
                        "(a smoke run)")
    args = parser.parse_args(argv)
    if args.quick:
        args.seconds, args.calls, args.lag_samples, args.rounds = 1.0, 100, 30, 1
        args.repeat = 1
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    setup_logging("console", "error")  # stdout is for the table and the JSON line
    workdir = args.dir or Path(tempfile.mkdtemp(prefix="bench-backends-"))
    order = " ".join(schedule(args.first, args.repeat))
    print(f"journal backends: {args.seconds:g} s a series, {args.calls} 1-edit calls, "
          f"{args.lag_samples} lag samples, {args.rounds} kill -9 rounds, "
          f"{args.repeat} cluster(s) each in the order {order}, seed {seed}, "
          f"plaintext (tls=False), in {workdir}", flush=True)
    try:
        result = run(
            workdir, args.seconds, args.calls, args.lag_samples, args.rounds, seed,
            args.first, args.repeat,
        )
    finally:
        if args.dir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    print_table(
        f"Shared-edits backends, one machine, one run, mean of {args.repeat} cluster(s) each "
        "(plaintext; QJM: 3 JournalNodes)",
        ["measure", "QJM", "ZooKeeper journal", "ZK / QJM"],
        table_rows(result),
    )
    print_json(result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
