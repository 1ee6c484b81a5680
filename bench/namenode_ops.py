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
import os
import shutil
import tempfile
from pathlib import Path

from bench import h2load
from bench.common import print_json
from bench.grpc_floor import echo_server
from bench.namenode.capacity import h2load_series, report_h2load
from bench.namenode.lag import idle_lag_series, report_idle_lag, standby_lag
from bench.namenode.mkdirs import mkdirs_series, stat_series
from bench.namenode.mkdirs import report as report_mkdirs
from bench.namenode.observers import observer_series, report_observers
from bench.namenode.push_lag import LAG_CLIENTS, push_lag_series, report_push_lag
from bench.namenode.shared import (
    CREATE_PATH,
    EXTRA_CONF,
    POLICY,
    cluster_conf,
    cpu_by_role,
    nn_samples,
    sync_counters,
)
from bench.namenode.shared import settled as _settled
from conf.logging import setup_logging
from conf.rpc import UVLOOP_ENV
from hadev.namenodes import NameNodeProcessCluster

# bench.sessions imports these from here, by the names they have always had.
__all__ = [
    "CREATE_PATH",
    "POLICY",
    "_settled",
    "cluster_conf",
    "cpu_by_role",
    "main",
    "nn_samples",
    "run",
    "standby_lag",
    "sync_counters",
]

CLIENTS = (1, 8, 32)
IN_FLIGHT = (1, 32, 128)


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
    # plaintext: h2load presents no client certificate, and the figures compare with earlier runs
    with NameNodeProcessCluster(workdir, extra_conf=conf, tls=False) as cluster:
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
        result.update(mkdirs_series(cluster, clients, seconds))
        result.update(stat_series(cluster, clients, seconds))
        result.update(idle_lag_series(cluster, lag_samples, roll_period))
        result["load_average_1m"] = round(os.getloadavg()[0], 2)
    if observers:
        result.update(
            observer_series(workdir / "observers", conf, seconds, max(clients), lag_samples)
        )
        result["load_average_1m"] = round(os.getloadavg()[0], 2)
    for n in clients:
        result[f"mkdirs_p99_ms_{n}"] = result[f"p99_ms_{n}"]
    return result


def report(result: dict[str, float | int | str], clients: tuple[int, ...]) -> None:
    """The tables of (a), of the reads on the active and of (b)."""
    report_mkdirs(result, clients)
    report_idle_lag(result)


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
