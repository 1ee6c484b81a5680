"""Sessions and multis against unary calls, on one process cluster in one run (issue 24;
docs/protocol.md §13).

``python -m bench.sessions [--seconds 3] [--lag-samples 100]``

Every capacity figure is driven by ``h2load`` (``bench.h2load``), never by a Python client,
which would cost the two cores as much as the server. A session stream posts K
``SessionRequest`` frames and half-closes: ``-c 1 -m 4`` with K = 8 keeps 32 calls in flight
on one connection. Each figure is measured beside its unary baseline in the same process
and the same minute, and the JSON line gives the ratio. Creates are ``Create(overwrite)`` of
one path without a client id (never retry-cached: each logs one edit), counted on the
server (synced txids less the roll markers); stats are linearizable ``GetFileInfo`` on the
active. CPU per call comes from ``/proc/<pid>/stat`` of the active and of the JournalNodes.

The Python client series (``pyclient_*``) run 32 threads sharing one ``HaFsClient`` with
unique mkdir paths, on sessions and then on unary calls. The lag series pace 1,000 creates/s
on one session from a child process and sample how long an acknowledged mkdir takes to show
on the standby and, with ``--observer``, on an observer of a second cluster.

JSON keys: ``session_create_per_s_{1,32,128}``, ``session_create_mean_ms_1``,
``session_stat_per_s_32``, ``nn_cpu_us_per_session_create_32``,
``jn_cpu_us_per_session_create_32``, ``session_edits_per_sync_32``, ``multi_ops_per_s``,
``pyclient_mkdirs_per_s_32``, ``pyclient_mkdirs_p99_ms_32``, ``standby_lag_p99_ms_at_1000``,
``observer_lag_p99_ms_at_1000``, the unary baselines (``unary_*``) and ratios (``*_ratio``).
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc

from bench import h2load
from bench.common import percentile, print_json, print_table
from bench.namenode_ops import (
    CREATE_PATH,
    POLICY,
    _settled,
    cluster_conf,
    cpu_by_role,
    nn_samples,
    standby_lag,
    sync_counters,
)
from conf import load_settings
from conf.logging import setup_logging
from hadev.namenodes import NameNodeProcessCluster
from hanamenode.client import HaFsClient
from proto import namenode_pb2, namenode_pb2_grpc

K = 8
"""Calls per session stream that h2load posts."""
MULTI_OPS = 100
SERVICE = "hanamenode.namenode.ClientProtocol"
PACED_RATE = 1000.0


def _session_frames(kind: str, request: Any, count: int) -> list[bytes]:
    return [
        namenode_pb2.SessionRequest(id=i + 1, **{kind: request}).SerializeToString()
        for i in range(count)
    ]


def _batched_frame(kind: str, request: Any, count: int) -> bytes:
    """One SessionRequest carrying ``count`` calls: the first and ``count - 1`` in its batch."""
    first = namenode_pb2.SessionRequest(id=1, **{kind: request})
    first.batch.extend(
        namenode_pb2.SessionRequest(id=i + 2, **{kind: request}) for i in range(count - 1)
    )
    return first.SerializeToString()


def _creates(url: str) -> float:
    m = nn_samples(url)
    return m["hanamenode_edit_log_synced_txid"] - 2 * m["hanamenode_edit_log_rolls_total"]


def _stats(url: str) -> float:
    return nn_samples(url).get("hanamenode_rpc_seconds_count:GetFileInfo", 0.0)


def _multis(url: str) -> float:
    return nn_samples(url).get("hanamenode_rpc_seconds_count:Multi", 0.0)


def measure(
    cluster: NameNodeProcessCluster,
    label: str,
    method: str,
    messages: bytes | list[bytes],
    streams: int,
    connections: int,
    seconds: float,
    count: Callable[[str], float],
    calls_per_stream: int,
) -> dict[str, float]:
    """One h2load run: calls/s counted on the server, mean and p99 latency of a stream,
    and the CPU the active and the JournalNodes spent per call."""
    active = cluster["nn1"]
    url = active.metrics_url or ""
    pids: dict[str, list[int | None]] = {
        "nn": [active.pid], "jn": [jn.pid for jn in cluster.journal]
    }
    done_before, syncs_before = count(url), sync_counters(cluster)
    cpu_before = cpu_by_role(pids)
    run = h2load.run(
        f"http://{active.address}/{SERVICE}/{method}", messages, streams * connections,
        seconds, connections,
    )
    done = _settled(lambda: count(url)) - done_before
    cpu_after, syncs_after = cpu_by_role(pids), sync_counters(cluster)
    syncs = syncs_after["hanamenode_edit_log_syncs_total"] - syncs_before[
        "hanamenode_edit_log_syncs_total"
    ]
    txns = syncs_after["hanamenode_edit_log_txns_synced_total"] - syncs_before[
        "hanamenode_edit_log_txns_synced_total"
    ]
    lat = run.latencies_ms
    out = {
        f"{label}_per_s": round(done / seconds, 1),
        f"{label}_mean_ms": round(sum(lat) / len(lat), 2) if lat else 0.0,
        f"{label}_p99_ms": round(percentile(lat, 0.99), 2) if lat else 0.0,
        f"{label}_failed_streams": run.requests["failed"] + run.requests["errored"],
        f"{label}_nn_cpu_us": round((cpu_after["nn"] - cpu_before["nn"]) * 1e6 / done, 1)
        if done else 0.0,
        f"{label}_jn_cpu_us": round((cpu_after["jn"] - cpu_before["jn"]) * 1e6 / done, 1)
        if done else 0.0,
        f"{label}_edits_per_sync": round(txns / syncs, 1) if syncs else 0.0,
        f"{label}_in_flight": streams * connections * calls_per_stream,
    }
    return out


def capacity_series(cluster: NameNodeProcessCluster, seconds: float) -> dict[str, float]:
    header = namenode_pb2.RpcHeader()  # no client id: every create logs one edit
    create = namenode_pb2.CreateRequest(header=header, path=CREATE_PATH, overwrite=True)
    stat = namenode_pb2.GetFileInfoRequest(header=header, path="/")
    with HaFsClient(cluster.settings(), policy=POLICY) as fs:
        fs.create(CREATE_PATH, overwrite=True)
        fs.mkdirs("/bench-multi", parents=True)
    multi = namenode_pb2.MultiRequest(header=header, ops=[
        namenode_pb2.MultiOp(create=namenode_pb2.CreateRequest(
            path=f"/bench-multi/f{i}", overwrite=True
        ))
        for i in range(MULTI_OPS)
    ])
    session_create = _session_frames("create", create, K)
    session_stat = _session_frames("get_file_info", stat, K)
    r: dict[str, float] = {}
    plan: list[tuple[str, str, bytes | list[bytes], int, int, Callable[[str], float], int]] = [
        # label, method, body, streams per connection, connections, counter, calls/stream
        ("unary_create_32", "Create", create.SerializeToString(), 8, 4, _creates, 1),
        ("session_create_32", "Session", session_create, 4, 1, _creates, K),
        ("session_create_128", "Session", session_create, 16, 1, _creates, K),
        ("unary_create_1", "Create", create.SerializeToString(), 1, 1, _creates, 1),
        ("session_create_1", "Session", _session_frames("create", create, 1), 1, 1, _creates, 1),
        ("unary_stat_32", "GetFileInfo", stat.SerializeToString(), 8, 4, _stats, 1),
        ("session_stat_32", "Session", session_stat, 4, 1, _stats, K),
        ("batched_create_32", "Session", _batched_frame("create", create, K), 4, 1, _creates, K),
        ("batched_stat_32", "Session", _batched_frame("get_file_info", stat, K), 4, 1, _stats,
         K),
        ("multi_4", "Multi", multi.SerializeToString(), 4, 1, _multis, 1),
    ]
    for label, method, body, streams, conns, counter, per_stream in plan:
        r.update(measure(cluster, label, method, body, streams, conns, seconds, counter,
                         per_stream))
    r["multi_ops_per_s"] = round(r["multi_4_per_s"] * MULTI_OPS, 1)
    return r


def pyclient_series(
    cluster: NameNodeProcessCluster, seconds: float, threads: int = 32
) -> dict[str, float]:
    """``threads`` threads sharing one ``HaFsClient``, unique mkdirs, sessions then unary."""
    out: dict[str, float] = {}
    for label, sessions in (("pyclient", True), ("pyclient_unary", False)):
        latencies: list[list[float]] = [[] for _ in range(threads)]
        errors = [0] * threads
        stop = threading.Event()
        with HaFsClient(cluster.settings(), policy=POLICY, sessions=sessions) as fs:
            fs.mkdirs(f"/{label}", parents=True)

            def work(
                index: int,
                fs: HaFsClient = fs,
                label: str = label,
                stop: threading.Event = stop,
                errors: list[int] = errors,
                latencies: list[list[float]] = latencies,
            ) -> None:
                n = 0
                while not stop.is_set():
                    began = time.perf_counter()
                    try:
                        fs.mkdirs(f"/{label}/t{index}-{n}")
                    except Exception:
                        errors[index] += 1
                    latencies[index].append((time.perf_counter() - began) * 1000.0)
                    n += 1

            workers = [threading.Thread(target=work, args=(i,), daemon=True)
                       for i in range(threads)]
            cpu = time.process_time()
            began = time.perf_counter()
            for t in workers:
                t.start()
            time.sleep(seconds)
            stop.set()
            for t in workers:
                t.join(timeout=60)
            elapsed = time.perf_counter() - began
            cpu = time.process_time() - cpu
        lats = sorted(x for per in latencies for x in per)
        out[f"{label}_mkdirs_per_s_{threads}"] = round(len(lats) / elapsed, 1)
        out[f"{label}_mkdirs_p50_ms_{threads}"] = round(percentile(lats, 0.50), 2)
        out[f"{label}_mkdirs_p99_ms_{threads}"] = round(percentile(lats, 0.99), 2)
        out[f"{label}_mkdirs_errors_{threads}"] = sum(errors)
        out[f"{label}_client_cpu_us_per_mkdir_{threads}"] = round(
            cpu * 1e6 / max(len(lats), 1), 1
        )
    return out


def _paced_writer(
    conf_path: str, rate: float, stop: Any, sent: Any, active: str = "nn1"
) -> None:
    """Creates at ``rate`` per second on one session to NameNode ``active`` until ``stop``
    (a child process)."""
    settings = load_settings(conf_path)
    address = settings.namenode(active).rpc_address

    async def main() -> None:
        async with grpc.aio.insecure_channel(address) if not settings.tls.enabled else (
            _aio_tls_channel(settings, address)
        ) as channel:
            stub = namenode_pb2_grpc.ClientProtocolStub(channel)
            queue: asyncio.Queue[Any] = asyncio.Queue()

            async def requests() -> Any:
                while True:
                    item = await queue.get()
                    if item is None:
                        return
                    yield item

            call = stub.Session(requests())

            async def drain() -> None:
                async for _ in call:
                    pass

            reader = asyncio.create_task(drain())
            request = namenode_pb2.CreateRequest(
                header=namenode_pb2.RpcHeader(), path="/paced", overwrite=True
            )
            began, n = time.perf_counter(), 0
            while not stop.is_set():
                n += 1
                queue.put_nowait(namenode_pb2.SessionRequest(id=n, create=request))
                delay = began + n / rate - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
            sent.value = n
            queue.put_nowait(None)
            await reader

    asyncio.run(main())


def _aio_tls_channel(settings: Any, address: str) -> grpc.aio.Channel:
    tls = settings.tls
    credentials = grpc.ssl_channel_credentials(
        root_certificates=Path(tls.ca_file).read_bytes(),
        private_key=Path(tls.key_file).read_bytes(),
        certificate_chain=Path(tls.cert_file).read_bytes(),
    )
    return grpc.aio.secure_channel(address, credentials)


def lag_at_rate(
    cluster: NameNodeProcessCluster,
    follower: str,
    samples: int,
    consistent: bool,
    active: str = "nn1",
) -> tuple[list[float], float]:
    """``standby_lag`` of ``follower`` while a child process paces ``PACED_RATE`` creates/s
    on one session to ``active``; the lags and the creates/s the active logged meanwhile."""
    context = multiprocessing.get_context("spawn")
    stop, sent = context.Event(), context.Value("q", 0)
    writer = context.Process(
        target=_paced_writer,
        args=(str(cluster.conf_path), PACED_RATE, stop, sent, active),
        daemon=True,
    )
    url = cluster[active].metrics_url or ""
    writer.start()
    try:
        time.sleep(1.5)
        before, began = _creates(url), time.perf_counter()
        lags = standby_lag(cluster, samples, spread=0.02, follower=follower,
                           tag=f"-paced-{follower}", consistent=consistent)
        rate = (_creates(url) - before) / (time.perf_counter() - began)
    finally:
        stop.set()
        writer.join(timeout=60)
    return lags, rate


def run(workdir: Path, seconds: float, lag_samples: int, observer: bool) -> dict[str, float]:
    conf = cluster_conf(0.1, 0.5, True, 16)
    result: dict[str, float] = {"cpus": os.cpu_count() or 0, "seconds_per_level": seconds,
                                "load_average_1m_before": round(os.getloadavg()[0], 2)}
    # plaintext: h2load presents no client certificate, and the figures compare with earlier runs
    with NameNodeProcessCluster(workdir / "main", extra_conf=conf, tls=False) as cluster:
        cluster.transition_to_active("nn1")
        if shutil.which("h2load") is not None:
            result.update(capacity_series(cluster, seconds))
        result.update(pyclient_series(cluster, seconds))
        lags, rate = lag_at_rate(cluster, "nn2", lag_samples, consistent=False)
        result["standby_lag_p50_ms_at_1000"] = round(percentile(lags, 0.50), 1)
        result["standby_lag_p99_ms_at_1000"] = round(percentile(lags, 0.99), 1)
        result["standby_lag_creates_per_s_at_1000"] = round(rate, 1)
    if observer:
        with NameNodeProcessCluster(
            workdir / "observer", namenodes=3, observers=1, extra_conf=conf,
            tls=False,  # plaintext: the figures compare with earlier runs
        ) as cluster:
            cluster.transition_to_active("nn1")
            lags, rate = lag_at_rate(cluster, "nn3", lag_samples, consistent=True)
            result["observer_lag_p50_ms_at_1000"] = round(percentile(lags, 0.50), 1)
            result["observer_lag_p99_ms_at_1000"] = round(percentile(lags, 0.99), 1)
            result["observer_lag_creates_per_s_at_1000"] = round(rate, 1)
    result["load_average_1m"] = round(os.getloadavg()[0], 2)
    return with_headline_keys(result)


def with_headline_keys(r: dict[str, float]) -> dict[str, float]:
    """The issue's key names, and each session figure's ratio to its unary baseline."""
    out = dict(r)
    rename = {
        "session_create_per_s_32": "session_create_32_per_s",
        "session_create_per_s_128": "session_create_128_per_s",
        "session_create_mean_ms_1": "session_create_1_mean_ms",
        "session_stat_per_s_32": "session_stat_32_per_s",
        "nn_cpu_us_per_session_create_32": "session_create_32_nn_cpu_us",
        "jn_cpu_us_per_session_create_32": "session_create_32_jn_cpu_us",
        "session_edits_per_sync_32": "session_create_32_edits_per_sync",
        "pyclient_mkdirs_per_s_32": "pyclient_mkdirs_per_s_32",
        "pyclient_mkdirs_p99_ms_32": "pyclient_mkdirs_p99_ms_32",
    }
    for key, source in rename.items():
        if source in r:
            out[key] = r[source]
    for a, b in (
        ("session_create_32_per_s", "unary_create_32_per_s"),
        ("session_stat_32_per_s", "unary_stat_32_per_s"),
        ("session_create_1_mean_ms", "unary_create_1_mean_ms"),
        ("session_create_32_nn_cpu_us", "unary_create_32_nn_cpu_us"),
        ("pyclient_mkdirs_per_s_32", "pyclient_unary_mkdirs_per_s_32"),
    ):
        if a in r and b in r and r[b]:
            out[f"{a}_to_unary_ratio"] = round(r[a] / r[b], 2)
    return out


def report(r: dict[str, float]) -> None:
    rows = []
    for label, target in (
        ("session_create_per_s_32", ">= 5000"), ("session_create_per_s_128", ""),
        ("session_create_mean_ms_1", "<= 1.5"), ("session_stat_per_s_32", ">= 6000"),
        ("nn_cpu_us_per_session_create_32", "<= 150"),
        ("jn_cpu_us_per_session_create_32", "<= 60"), ("session_edits_per_sync_32", ""),
        ("multi_ops_per_s", ">= 30000"), ("pyclient_mkdirs_per_s_32", ">= 2500"),
        ("pyclient_mkdirs_p99_ms_32", "<= 20"), ("standby_lag_p99_ms_at_1000", "<= 10"),
        ("observer_lag_p99_ms_at_1000", "<= 10"),
    ):
        rows.append([label, r.get(label, "-"), target])
    print_table("Sessions and multis (issue 24)", ["key", "value", "target"], rows)
    base = []
    for name in ("create_32", "create_1", "stat_32"):
        base.append([name, r.get(f"unary_{name}_per_s", "-"), r.get(f"session_{name}_per_s", "-"),
                     r.get(f"unary_{name}_mean_ms", "-"), r.get(f"session_{name}_mean_ms", "-"),
                     r.get(f"unary_{name}_nn_cpu_us", "-"),
                     r.get(f"session_{name}_nn_cpu_us", "-")])
    base.append(["pyclient mkdirs 32", r.get("pyclient_unary_mkdirs_per_s_32", "-"),
                 r.get("pyclient_mkdirs_per_s_32", "-"),
                 r.get("pyclient_unary_mkdirs_p50_ms_32", "-"),
                 r.get("pyclient_mkdirs_p50_ms_32", "-"), "-", "-"])
    print_table(
        "Unary against session, same cluster and minute",
        ["series", "unary /s", "session /s", "unary mean ms", "session mean ms",
         "unary nn us/call", "session nn us/call"],
        base,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--dir", type=Path, help="work directory (default: a temporary one)")
    parser.add_argument("--seconds", type=float, default=3.0, help="seconds per h2load level")
    parser.add_argument("--lag-samples", type=int, default=100)
    parser.add_argument("--no-observer", action="store_true", help="skip the observer lag")
    args = parser.parse_args(argv)
    setup_logging(level="warning")
    workdir = args.dir or Path(tempfile.mkdtemp(prefix="bench-sessions-"))
    result = run(workdir, args.seconds, args.lag_samples, not args.no_observer)
    report(result)
    print_json(result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
