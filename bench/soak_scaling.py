"""How ``hapipe soak`` scales with Spark's cores: seeds per minute on ``local[1]`` and on
``local[2]`` over the same seed range, and their ratio (target >= 1.8x).

Run from the checkout: ``.venv/bin/python -m bench.soak_scaling [--seeds 40] [--steps 400]``.

For each master, one after the other, a SparkSession is built by ``pipeline.session`` (so
with Python worker reuse), every worker is warmed up (it imports the simulator and runs a
short simulation: a soak of thousands of seeds pays that once per worker, not per seed), and
then the soak's own job (``pipeline.soak.soak_rdd``: one task per seed, collected) is timed
from submission to the last result. JVM start-up and warm-up are not in the figure; the
Parquet write and summary, which take a fixed second or two, are not either. ``--steps`` is
chosen so one seed takes a fraction of a second to a second: then the per-task overhead of
Spark is small beside the work and two cores can approach twice the rate of one.

``--rounds N`` repeats the pair N times (alternating) and keeps each master's best round:
the machine may be shared, and others' load only ever slows a round down. The load average
before and after is printed beside the figures, and so are the mean seconds per simulation
(a seed that takes longer on ``local[2]`` than on ``local[1]`` ran on a core someone else was
using) and the share of the task slots' time spent simulating (what Spark's overhead leaves:
the ratio Spark allows on an idle machine is about 2 x that share on ``local[2]`` / that share
on ``local[1]``). It prints a table, then one JSON line with
``seeds_per_min_local1``, ``seeds_per_min_local2`` and ``ratio``. Never asserts.

A second series runs the same job on a Spark standalone cluster on loopback
(``hadev.spark_standalone``: a master and one, then two, workers of one core each, started
from the ``pyspark`` package's jars and stopped by pid; the executors get this project in the
zip ``pipeline.session`` ships): ``seeds_per_min_standalone1``, ``seeds_per_min_standalone2``
and ``standalone_ratio_2_vs_1`` in the same JSON line. ``--no-standalone`` skips it.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import print_json, print_table
from conf.logging import setup_logging
from hadev.spark_standalone import SparkStandalone
from pipeline.session import SessionSettings, build_session, stop_session
from pipeline.soak import SoakConfig, soak_rdd

MASTERS = ("local[1]", "local[2]")
TARGET_RATIO = 1.8


def warm_worker(index: int) -> int:
    """Executor side: import the simulator and run a short simulation; then hold the task
    slot a moment, so that every slot gets a task and so its own (reused) worker."""
    from qjm.sim import run_simulation

    run_simulation(index, 20)
    time.sleep(0.5)
    return os.getpid()


def measure(master: str, config: SoakConfig) -> dict[str, Any]:
    """Seeds per minute of one soak job on ``master`` (a new SparkSession, stopped after)."""
    spark = build_session(SessionSettings(master=master, app_name=f"soak-scaling-{master}"))
    try:
        sc = spark.sparkContext
        slots = sc.defaultParallelism
        workers = set(sc.parallelize(range(slots), slots).map(warm_worker).collect())
        began = time.perf_counter()
        rows = soak_rdd(spark, config).collect()
        elapsed = time.perf_counter() - began
    finally:
        stop_session(spark)
    simulated = sum(row[8] for row in rows)  # wall_seconds of each simulation
    return {
        "master": master,
        "slots": slots,
        "workers": len(workers),
        "seeds": len(rows),
        "failing": sum(row[2] != "ok" for row in rows),
        "elapsed_s": elapsed,
        "seeds_per_min": 60.0 * len(rows) / elapsed,
        "simulation_s": simulated,
        "mean_seed_s": simulated / len(rows),
        # How much of the slots' time went into simulations (the rest is Spark's overhead,
        # or idle slots at the end): the scaling Spark itself allows, whatever the load.
        "slot_utilization": simulated / (elapsed * slots),
    }


def measure_standalone(workers: int, config: SoakConfig, rounds: int) -> list[dict[str, Any]]:
    """``rounds`` soak jobs on a fresh standalone cluster of ``workers`` one-core workers."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # the executors' interpreter
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # the driver on loopback too
    with (
        tempfile.TemporaryDirectory(prefix="soak-scaling-spark-") as tmp,
        SparkStandalone(Path(tmp), workers=workers, cores=1) as cluster,
    ):
        results = []
        for _ in range(rounds):
            result = measure(cluster.master_url, config)
            result["master"] = f"standalone, {workers} worker(s)"
            # Spark's default parallelism is at least 2; the task slots are the workers' cores.
            result["slots"] = workers
            result["slot_utilization"] = result["simulation_s"] / (result["elapsed_s"] * workers)
            results.append(result)
        return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=40, help="seeds per run (one task each)")
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=400, help="simulation steps per seed")
    parser.add_argument("--rounds", type=int, default=1, help="pairs of runs; best kept")
    parser.add_argument(
        "--standalone", action=argparse.BooleanOptionalAction, default=True,
        help="also measure 1 and 2 workers of a Spark standalone cluster on loopback",
    )
    args = parser.parse_args(argv)
    setup_logging("console", "warning")  # stdout is for the table and the JSON line
    config = SoakConfig(first_seed=args.first_seed, seeds=args.seeds, steps=args.steps)

    load_before = os.getloadavg()[0]
    runs: list[dict[str, Any]] = []
    for _ in range(args.rounds):
        for master in MASTERS:
            runs.append(measure(master, config))
    standalone: dict[int, dict[str, Any]] = {}
    if args.standalone:
        for workers in (1, 2):
            series = measure_standalone(workers, config, args.rounds)
            runs.extend(series)
            standalone[workers] = max(series, key=lambda r: r["seeds_per_min"])
    load_after = os.getloadavg()[0]
    best = {
        master: max((r for r in runs if r["master"] == master), key=lambda r: r["seeds_per_min"])
        for master in MASTERS
    }
    one, two = best["local[1]"], best["local[2]"]
    ratio = two["seeds_per_min"] / one["seeds_per_min"]
    standalone_ratio = (
        standalone[2]["seeds_per_min"] / standalone[1]["seeds_per_min"] if standalone else None
    )

    print_table(
        f"hapipe soak scaling: seeds {config.first_seed}..{config.last_seed}, "
        f"{config.steps} steps each (load average {load_before:.1f} before, "
        f"{load_after:.1f} after, {os.cpu_count()} CPUs)",
        [
            "run",
            "master",
            "workers",
            "elapsed s",
            "seeds/min",
            "mean s/seed",
            "slots busy",
            "failing",
        ],
        [
            [
                i + 1,
                r["master"],
                r["workers"],
                f"{r['elapsed_s']:.1f}",
                f"{r['seeds_per_min']:.1f}",
                f"{r['mean_seed_s']:.3f}",
                f"{100 * r['slot_utilization']:.0f}%",
                r["failing"],
            ]
            for i, r in enumerate(runs)
        ],
    )
    print_table(
        "best of each",
        ["measure", "value", "target"],
        [
            ["seeds/min local[1]", f"{one['seeds_per_min']:.1f}", ""],
            ["seeds/min local[2]", f"{two['seeds_per_min']:.1f}", ""],
            ["ratio", f"{ratio:.2f}x", f">= {TARGET_RATIO}x"],
            *(
                [
                    ["seeds/min standalone, 1 worker", f"{standalone[1]['seeds_per_min']:.1f}", ""],
                    ["seeds/min standalone, 2 workers", f"{standalone[2]['seeds_per_min']:.1f}",
                     ""],
                    ["standalone ratio 2 vs 1", f"{standalone_ratio:.2f}x", ""],
                ]
                if standalone_ratio is not None
                else []
            ),
        ],
    )
    print_json(
        {
            "seeds": config.seeds,
            "steps": config.steps,
            "rounds": args.rounds,
            "seeds_per_min_local1": round(one["seeds_per_min"], 2),
            "seeds_per_min_local2": round(two["seeds_per_min"], 2),
            "ratio": round(ratio, 3),
            "target_ratio": TARGET_RATIO,
            "mean_seed_s_local1": round(one["mean_seed_s"], 4),
            "mean_seed_s_local2": round(two["mean_seed_s"], 4),
            "slot_utilization_local1": round(one["slot_utilization"], 3),
            "slot_utilization_local2": round(two["slot_utilization"], 3),
            "load_average_before": round(load_before, 2),
            "load_average_after": round(load_after, 2),
            "cpus": os.cpu_count(),
            "seeds_per_min_standalone1": (
                round(standalone[1]["seeds_per_min"], 2) if standalone else None
            ),
            "seeds_per_min_standalone2": (
                round(standalone[2]["seeds_per_min"], 2) if standalone else None
            ),
            "standalone_ratio_2_vs_1": (
                round(standalone_ratio, 3) if standalone_ratio is not None else None
            ),
        }
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
