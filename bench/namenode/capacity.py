"""Series (c) of ``bench.namenode_ops``: the NameNode's capacity driven by ``h2load`` at
each level of calls in flight: the no-op echo server of ``bench.grpc_floor`` (the floor),
``GetFileInfo`` of ``/`` on the active (linearizable) and ``Create(overwrite)`` of one path,
counted on the servers, with the CPU each used per call.
"""

from __future__ import annotations

from collections.abc import Callable

from bench import h2load
from bench.common import percentile, print_table
from bench.grpc_floor import echo_count
from bench.namenode.shared import (
    CREATE_PATH,
    SYNC_SAMPLES,
    cpu_by_role,
    nn_samples,
    settled,
    sync_counters,
)
from conf.rpc import make_channel
from hadev.namenodes import NameNodeProcessCluster
from proto import namenode_pb2, namenode_pb2_grpc


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
            ok = settled(successes) - ok_before
            cpu_after = cpu_by_role({"s": server_pids, "j": list(jn_pids)})
            sync_after = sync_counters(cluster)
            answered = len(load.latencies_ms)
            failed = max(0, load.requests["done"] - int(ok)) + load.requests["errored"]
            good = max(0, answered - failed)
            per_call = 1e6 / ok if ok > 0 else 0.0
            syncs, txns, _ = (sync_after[k] - sync_before[k] for k in SYNC_SAMPLES)
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
