"""``hapipe`` on a real Spark standalone cluster (docs/operations.md §14): a master and two
workers of one core each from the ``pyspark`` package's jars, on loopback
(``hadev.spark_standalone``), stopped by pid. The workers have no PYTHONPATH and run in
their own directories: executors find this project only in the zip ``pipeline.session``
ships. Then, as a user runs them: ``hapipe soak --master spark://...`` gives the same result
per seed as ``local[2]``, with its progress and summary (``hapipe verify`` and ``analyze``
of a live ``hadev`` cluster on the same kind of cluster: test_spark_standalone_dev.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from hadev.daemon import CODE_ROOT, child_environment
from hadev.spark_standalone import SparkStandalone

# Spark JVMs on a shared 2-core machine; opt-in (--spark-standalone), about 8 minutes in all.
pytestmark = [pytest.mark.timeout(2400), pytest.mark.standalone]

SEEDS, FIRST_SEED, STEPS = 6, 40, 120
COMPARED = ("seed", "steps", "verdict", "failovers", "txns_acknowledged", "faults_injected",
            "violated_invariant", "message", "replay_command", "trace_digest")


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkStandalone]:
    with SparkStandalone(tmp_path_factory.mktemp("spark"), workers=2, cores=1) as cluster:
        yield cluster


def hapipe(*args: str, timeout: float = 1500) -> subprocess.CompletedProcess[str]:
    env = child_environment()
    env["PYSPARK_PYTHON"] = sys.executable  # the executors' interpreter (its dependencies)
    env["SPARK_LOCAL_IP"] = "127.0.0.1"  # the driver on loopback too
    return subprocess.run(
        ["nice", sys.executable, "-m", "pipeline", *args], cwd=CODE_ROOT, env=env,
        capture_output=True, text=True, timeout=timeout, check=False,
    )


def rows(out: Path) -> list[tuple[object, ...]]:
    table = pq.read_table(out / "results.parquet").to_pylist()
    return sorted(tuple(row[c] for c in COMPARED) for row in table)


def test_executors_import_the_project_from_the_shipped_zip(standalone: SparkStandalone) -> None:
    from pipeline.session import SessionSettings, build_session, stop_session

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    spark = build_session(SessionSettings(master=standalone.master_url, app_name="zip-check"))
    try:
        sc = spark.sparkContext

        def where(_: int) -> tuple[str, str, str]:
            import pipeline
            import qjm.sim

            return pipeline.__file__ or "", qjm.sim.__file__ or "", os.environ.get("PYTHONPATH", "")

        found = sc.parallelize(range(4), 4).map(where).collect()
    finally:
        stop_session(spark)
    for pipeline_file, sim_file, _ in found:
        assert "hanamenode-code.zip" in pipeline_file, found
        assert "hanamenode-code.zip" in sim_file, found
    # The checkout itself is not on the executors' path (its .venv may be: pyspark lives
    # there, and a fresh clone keeps the venv inside the checkout).
    root = CODE_ROOT.resolve()
    for _, _, path in found:
        entries = [Path(entry).resolve() for entry in path.split(os.pathsep) if entry]
        assert root not in entries, path


def test_soak_on_standalone_matches_local(standalone: SparkStandalone, tmp_path: Path) -> None:
    seeds = ["--seeds", str(SEEDS), "--first-seed", str(FIRST_SEED), "--steps", str(STEPS)]
    local = hapipe("soak", *seeds, "--master", "local[2]", "--out", str(tmp_path / "local"))
    remote = hapipe(
        "soak", *seeds, "--master", standalone.master_url, "--out", str(tmp_path / "standalone")
    )
    for result in (local, remote):
        assert result.returncode in (0, 1), result.stderr[-3000:]
    print(remote.stdout)
    assert rows(tmp_path / "standalone") == rows(tmp_path / "local")
    assert len(rows(tmp_path / "local")) == SEEDS
    # progress on stderr: seeds done, seeds/minute; then the summary
    assert f"{SEEDS}/{SEEDS} seeds (100%)" in remote.stderr, remote.stderr[-2000:]
    assert "seeds/min" in remote.stderr, remote.stderr[-2000:]
    assert remote.stdout.startswith(f"soak: {SEEDS} seeds ({FIRST_SEED}..")
    failing = [r for r in rows(tmp_path / "standalone") if r[2] != "ok"]
    for row in failing:  # each failing seed ends the summary with its replay command
        assert f"replay: {row[8]}" in remote.stdout, remote.stdout
    last = remote.stdout.rstrip().splitlines()[-1]
    assert last == ("PASSED" if not failing else f"FAILED: {len(failing)} of {SEEDS} seeds")
