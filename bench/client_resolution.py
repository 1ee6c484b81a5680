"""Clients that follow the election in ZooKeeper against clients with a configured list
(issue 29 item 2, docs/operations.md §3.5): from a fault of the active NameNode to the first
write each kind of client gets acknowledged, over the dev cluster's real processes.

Run from the checkout: ``.venv/bin/python -m bench.client_resolution [--rounds 3]``.

Each round connects two probes to the active, one ``HaFsClient`` from the dev cluster's file
(its NameNode list) and one resolving from ZooKeeper (``dfs.client.failover.zookeeper.quorum``),
both with the file's retry policy (``dfs.client.*``: 45 attempts, sleeps up to 250 ms, a
15 s RPC deadline). Then it faults the active and at once sends one mkdir through each probe,
in two threads, and times each until acknowledged:

- ``kill -9``: the call to the dead active is refused at once, so both clients retry; the
  configured one walks its list with backoff, the resolving one is sent to the lock's new
  holder as soon as it takes the lock;
- ``SIGSTOP``: the call to the frozen active hangs. The configured client waits out its RPC
  deadline before it tries another NameNode; the resolving one gives the frozen active's
  session up when another NameNode holds the lock and sends the call there.

The killed NameNode is restarted and the frozen one resumed after each round. Nothing is
asserted; the last line is one JSON object.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import statistics
import tempfile
import threading
import time
from pathlib import Path

from bench.common import print_json, print_table
from conf import Settings
from conf.logging import setup_logging
from hadev.devcluster import DevCluster, DevClusterError
from hanamenode.client import HaFsClient
from hanamenode.ha import HAState

CLIENTS = ("configured", "zookeeper")
FAULTS = ("sigkill", "sigstop")


def zookeeper_settings(dev: DevCluster) -> Settings:
    """The dev cluster's users' file, resolving from its ZooKeeper (its list unused)."""
    users = dev.settings()
    key = "dfs.client.failover.zookeeper.quorum"
    return Settings.from_mapping({**users.raw, key: dev.zookeeper.connect_string}, users.source)


def run_round(dev: DevCluster, number: int, fault: str) -> dict[str, float]:
    """Seconds from the fault to each client's acknowledged mkdir."""
    victim = dev.wait_active(30)
    other = next(nn for nn in dev.namenode_ids if nn != victim)
    dev.wait_state(other, HAState.STANDBY, 30)
    probes = {"configured": HaFsClient(dev.settings()), "zookeeper": HaFsClient(
        zookeeper_settings(dev))}
    acked: dict[str, float] = {}
    try:
        for fs in probes.values():
            fs.mkdirs(f"/bench/resolution/{fault}-{number}", parents=True)
        faulted_at = time.monotonic()
        dev.kill(victim, signal.SIGKILL if fault == "sigkill" else signal.SIGSTOP)

        def write(kind: str) -> None:
            probes[kind].mkdirs(f"/bench/resolution/{fault}-{number}/{kind}")
            acked[kind] = time.monotonic() - faulted_at

        threads = [threading.Thread(target=write, args=(k,), name=f"probe-{k}") for k in CLIENTS]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
    finally:
        if fault == "sigstop":
            dev.kill(victim, signal.SIGCONT)
        for fs in probes.values():
            fs.close()
    try:
        if fault == "sigkill":
            raise DevClusterError("killed")
        dev.wait_state(victim, HAState.STANDBY, 30)
    except DevClusterError:
        dev.restart(victim)
        dev.wait_state(victim, HAState.STANDBY, 30)
    return acked


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.client_resolution", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each fault")
    parser.add_argument("--dir", type=Path, help="cluster directory (kept)")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    setup_logging("console", "error")
    workdir = args.dir or Path(tempfile.mkdtemp(prefix="bench-client-resolution-"))
    print(f"client resolution benchmark: {args.rounds} rounds of each fault, cluster in "
          f"{workdir}", flush=True)
    times: dict[tuple[str, str], list[float]] = {(f, c): [] for f in FAULTS for c in CLIENTS}
    try:
        with DevCluster(workdir, session_timeout=1.0) as dev:
            for number in range(1, args.rounds + 1):
                for fault in FAULTS:
                    acked = run_round(dev, number, fault)
                    for kind in CLIENTS:
                        times[(fault, kind)].append(acked.get(kind, float("nan")))
                    print(f"round {number} {fault}: " + ", ".join(
                        f"{k} {acked.get(k, float('nan')):.3f}s" for k in CLIENTS), flush=True)
    finally:
        if args.dir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    result: dict[str, object] = {"rounds": args.rounds, "session_timeout_s": 1.0}
    rows = []
    for (fault, kind), values in times.items():
        median = statistics.median(values)
        result[f"{fault}_{kind}_median_s"] = round(median, 3)
        result[f"{fault}_{kind}_max_s"] = round(max(values), 3)
        rows.append([fault, kind, f"{median:.3f}", f"{max(values):.3f}"])
    print_table("fault of the active -> the client's first acknowledged write (seconds)",
                ["fault", "client", "median", "max"], rows)
    print_json(result)


if __name__ == "__main__":
    main()
