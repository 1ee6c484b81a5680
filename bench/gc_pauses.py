"""What the freeze after start (``hanamenode.gc.freeze-after-start``, conf/gcpauses.py) does
to the active NameNode's garbage-collection pauses and to the latency of writes.

Two fresh clusters of processes (3 JournalNodes, 2 NameNodes), the baseline first with the
freeze off, then with it on (the default), in this one process. Each: nn1 made active,
``/gc`` filled with ``--files`` files (a namespace that every full collection visits, frozen
or not: it was made after start), then ``h2load`` keeps 32 ``Create(overwrite)`` calls of
one path in flight for ``--seconds``.
Reported: creates/s and their p50/p99/max latency (h2load's log), and the active's
``python_gc_pause_seconds`` by generation during the load (count, total, how many over 20 ms),
with ratios on over off.

    python -m bench.gc_pauses [--seconds 10] [--files 20000]
"""

from __future__ import annotations

import argparse
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from bench import h2load
from bench.common import percentile, print_json, print_table
from hadev.namenodes import NameNodeProcessCluster
from hanamenode.client import HaFsClient
from proto import namenode_pb2

IN_FLIGHT = 32
LONG_PAUSE = 0.02


def gc_pauses(url: str) -> dict[str, float]:
    """``count_<g>``, ``sum_<g>`` and ``over20ms_<g>`` of ``python_gc_pause_seconds``."""
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    out: dict[str, float] = {}
    below: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        if family.name != "python_gc_pause_seconds":
            continue
        for s in family.samples:
            g = s.labels.get("generation", "?")
            if s.name.endswith("_count"):
                out[f"count_{g}"] = s.value
            elif s.name.endswith("_sum"):
                out[f"sum_{g}"] = s.value
            elif s.name.endswith("_bucket") and float(s.labels["le"]) == LONG_PAUSE:
                below[g] = s.value
    for g, count in below.items():
        out[f"over20ms_{g}"] = out[f"count_{g}"] - count
    return out


def fill(cluster: NameNodeProcessCluster, files: int) -> None:
    with HaFsClient([cluster["nn1"].address]) as fs:
        fs.mkdirs("/gc", parents=True)
        for i in range(files):
            fs.create(f"/gc/f{i:06d}")


def series(workdir: Path, freeze: bool, seconds: float, files: int) -> dict[str, float]:
    conf: dict[str, Any] = {"hanamenode.gc.freeze-after-start": freeze}
    # plaintext: h2load presents no client certificate, and the figures compare with earlier runs
    with NameNodeProcessCluster(workdir, extra_conf=conf, tls=False) as cluster:
        cluster.transition_to_active("nn1")
        fill(cluster, files)
        url = cluster["nn1"].metrics_url
        assert url is not None
        create = namenode_pb2.CreateRequest(
            header=namenode_pb2.RpcHeader(), path="/gc/hot", overwrite=True
        )
        target = f"http://{cluster['nn1'].address}/hanamenode.namenode.ClientProtocol/Create"
        before = gc_pauses(url)
        run = h2load.run(target, create.SerializeToString(), IN_FLIGHT, seconds)
        after = gc_pauses(url)
    lat = run.latencies_ms
    result = {
        "creates_per_s": len(lat) / seconds,
        "p50_ms": percentile(lat, 0.50),
        "p99_ms": percentile(lat, 0.99),
        "max_ms": lat[-1] if lat else 0.0,
    }
    for key in ("count_0", "count_1", "count_2", "sum_2", "over20ms_0", "over20ms_1",
                "over20ms_2"):
        result[f"gc_{key}"] = after.get(key, 0.0) - before.get(key, 0.0)
    result["gc_seconds_per_s"] = sum(
        after.get(f"sum_{g}", 0.0) - before.get(f"sum_{g}", 0.0) for g in "012"
    ) / seconds
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="h2load duration")
    parser.add_argument("--files", type=int, default=20000, help="files made before the load")
    parser.add_argument("--dir", type=Path, help="work directory (default: a temporary one)")
    args = parser.parse_args(argv)
    workdir = args.dir or Path(tempfile.mkdtemp(prefix="bench-gc-"))
    started = time.perf_counter()
    off = series(workdir / "off", False, args.seconds, args.files)
    on = series(workdir / "on", True, args.seconds, args.files)
    keys = list(off)
    rows = [
        [key, f"{off[key]:,.2f}", f"{on[key]:,.2f}",
         f"{on[key] / off[key]:.2f}" if off[key] else "-"]
        for key in keys
    ]
    print_table(
        f"active NameNode under h2load, {IN_FLIGHT} Create(overwrite) in flight, "
        f"{args.seconds:g} s, {args.files:,} files made first",
        ["measure", "freeze off (baseline)", "freeze on", "on / off"],
        rows,
    )
    result: dict[str, Any] = {"seconds": args.seconds, "files": args.files}
    for key in keys:
        result[f"off_{key}"] = round(off[key], 4)
        result[f"on_{key}"] = round(on[key], 4)
        if off[key]:
            result[f"ratio_{key}"] = round(on[key] / off[key], 3)
    result["wall_s"] = round(time.perf_counter() - started, 1)
    print_json(result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
