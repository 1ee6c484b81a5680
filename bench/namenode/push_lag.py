"""Series (d) of ``bench.namenode_ops`` (``--lag-only``): the standby's lag under the write
load with in-progress tailing, edits pushed by the JournalNodes against polled every tail
period, each on a fresh cluster; the load from 32 Python writer threads in a child process
and from h2load, and with h2load at lighter write loads too.
"""

from __future__ import annotations

import multiprocessing
import shutil
import threading
import time
from pathlib import Path
from typing import Any

from bench.common import percentile, print_table
from bench.namenode.lag import (
    h2load_lag_keys,
    headline_lag,
    sample_lag,
    standby_lag_under_h2load,
)
from bench.namenode.shared import POLICY, ROLES, RoleTimes, cluster_conf, nn_samples
from conf import load_settings
from hadev.namenodes import NameNodeProcessCluster
from hanamenode.client import HaFsClient

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
        lags, times = sample_lag(cluster, samples, load_pids=[writers.pid])
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
        # plaintext: h2load presents no client certificate; figures compare with earlier runs
        with NameNodeProcessCluster(
            workdir / f"lag-{mode}", extra_conf=conf, tls=False
        ) as cluster:
            cluster.transition_to_active("nn1")
            began = time.perf_counter()
            lags, errors, times = standby_lag_under_load(cluster, samples, clients)
            elapsed = time.perf_counter() - began
            standby = nn_samples(cluster["nn2"].metrics_url or "")
            if shutil.which("h2load") is not None:
                native, rate, native_times = standby_lag_under_h2load(cluster, samples, clients)
                result.update(h2load_lag_keys(f"{key}_h2load", "", native, rate, native_times))
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
        for role in (*ROLES, "load"):
            result[f"{py}_cpu_{role}"] = round(times.cpu[role], 2)
            result[f"{py}_runq_wait_{role}"] = round(times.wait[role], 2)
        result["standby_lag_load"] = headline_lag(result, key)
    poll_p99 = max(float(result["standby_lag_poll_p99_ms"]), 1e-9)
    result["standby_lag_p99_push_vs_poll"] = round(
        float(result["standby_lag_p99_ms"]) / poll_p99, 3
    )
    result["standby_lag_target_p99_ms"] = TARGET_STANDBY_LAG_P99_MS
    return result


def lag_by_write_load(
    cluster: NameNodeProcessCluster, samples: int, levels: tuple[int, ...]
) -> dict[str, float | int | str]:
    """The pushed lag under h2load at each level of ``Create`` calls in flight, lightest
    first, with the CPU each role used: keys ``standby_lag_h2load_{p50,p90,p99}_ms_<n>``,
    ``..._creates_per_s_<n>`` and ``..._cpu_total_<n>`` (s/s, all daemons)."""
    out: dict[str, float | int | str] = {"standby_lag_levels": ",".join(map(str, levels))}
    for n in levels:
        lags, rate, times = standby_lag_under_h2load(cluster, samples, n)
        out.update(h2load_lag_keys("standby_lag_h2load", f"_{n}", lags, rate, times))
    return out


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
                    " / ".join(str(result[f"{k}_cpu_{role}"]) for role in ROLES)
                    for k in (py, poll)
                ),
                "",
            ],
            ["CPU of the writers' process (s/s)", result[f"{py}_cpu_load"],
             result[f"{poll}_cpu_load"], ""],
            [
                "run-queue wait active / standby / JNs (s/s)",
                *(
                    " / ".join(str(result[f"{k}_runq_wait_{role}"]) for role in ROLES)
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
                        " / ".join(str(result[f"{k}_h2load_runq_wait_{role}"]) for role in ROLES)
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
