"""Large listings beside other calls (issue 25 item 3; docs/protocol.md §13.6).

``python -m bench.listings [--children 20000] [--seconds 5]``

One process cluster; a directory of ``--children`` files (made with multis of 1,000). h2load
keeps 8 linearizable ``GetFileInfo`` calls of ``/`` in flight on the active and logs each
call's latency: first alone, then while a second h2load keeps 8 ``GetListing`` calls of the
large directory in flight (each answers one page, ``dfs.ls.limit`` entries, as a client
iterating the listing asks them). Before paging, one listing of 20,000 children answered them
all at once (several MiB), and eight clients listing in a loop held every other call for
seconds. It prints a table and a JSON line: the stat p50/p99 alone and under the listing
load, their ratios, and the listings answered per second.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from pathlib import Path

from bench import h2load
from bench.common import percentile, print_json, print_table
from bench.namenode.shared import POLICY, cluster_conf
from conf.logging import setup_logging
from hadev.namenodes import NameNodeProcessCluster
from hanamenode.client import CreateOp, HaFsClient
from proto import namenode_pb2

BIG = "/big"
SERVICE = "hanamenode.namenode.ClientProtocol"


def run(workdir: Path, children: int, seconds: float) -> dict[str, float]:
    result: dict[str, float] = {"children": children, "cpus": os.cpu_count() or 0,
                                "load_average_1m_before": round(os.getloadavg()[0], 2)}
    conf = cluster_conf(0.1, 0.5, True, 16)
    # plaintext: h2load presents no client certificate, and the figures compare with earlier runs
    with NameNodeProcessCluster(workdir, extra_conf=conf, tls=False) as cluster:
        cluster.transition_to_active("nn1")
        with HaFsClient(cluster.settings(), policy=POLICY) as fs:
            fs.mkdirs(BIG)
            for first in range(0, children, 1000):
                fs.multi([CreateOp(f"{BIG}/f{i:06d}") for i in range(first,
                                                                    min(children, first + 1000))])
            if len(fs.list(BIG)) != children:
                raise RuntimeError(f"{BIG} does not hold {children} children")
        active = cluster["nn1"].address
        header = namenode_pb2.RpcHeader()
        stat = namenode_pb2.GetFileInfoRequest(header=header, path="/").SerializeToString()
        listing = namenode_pb2.GetListingRequest(header=header, path=BIG).SerializeToString()
        stat_url = f"http://{active}/{SERVICE}/GetFileInfo"
        list_url = f"http://{active}/{SERVICE}/GetListing"
        alone = h2load.run(stat_url, stat, 8, seconds, connections=1)
        with h2load.background(list_url, listing, 8):
            loaded = h2load.run(stat_url, stat, 8, seconds, connections=1)
        listed = h2load.run(list_url, listing, 8, seconds, connections=1)
    for name, run_ in (("alone", alone), ("with_listings", loaded)):
        lat = run_.latencies_ms
        result[f"stat_p50_ms_{name}"] = round(percentile(lat, 0.50), 2)
        result[f"stat_p99_ms_{name}"] = round(percentile(lat, 0.99), 2)
        result[f"stat_per_s_{name}"] = round(len(lat) / seconds, 1)
    result["stat_p99_ratio"] = round(
        result["stat_p99_ms_with_listings"] / max(result["stat_p99_ms_alone"], 1e-9), 2
    )
    result["listing_pages_per_s_8"] = round(len(listed.latencies_ms) / seconds, 1)
    result["listing_page_p50_ms_8"] = round(percentile(listed.latencies_ms, 0.50), 2)
    result["load_average_1m"] = round(os.getloadavg()[0], 2)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--dir", type=Path, help="work directory (default: a temporary one)")
    parser.add_argument("--children", type=int, default=20_000)
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args(argv)
    setup_logging(level="warning")
    workdir = args.dir or Path(tempfile.mkdtemp(prefix="bench-listings-"))
    try:
        result = run(workdir, args.children, args.seconds)
    finally:
        if args.dir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    print_table(
        f"GetFileInfo beside GetListing of {args.children} children (8 + 8 in flight, h2load)",
        ["measure", "alone", "with listings"],
        [
            ["stat p50 ms", result["stat_p50_ms_alone"], result["stat_p50_ms_with_listings"]],
            ["stat p99 ms", result["stat_p99_ms_alone"], result["stat_p99_ms_with_listings"]],
            ["stats/s", result["stat_per_s_alone"], result["stat_per_s_with_listings"]],
            ["listing pages/s (alone)", result["listing_pages_per_s_8"], ""],
        ],
    )
    print_json(result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
