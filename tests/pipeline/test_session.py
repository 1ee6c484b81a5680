"""The one SparkSession: quiet, UI off, local by default; the command line shares a running
session instead of starting a second JVM."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from pyspark.sql import SparkSession

from hadev.daemon import CODE_ROOT, child_environment
from pipeline.session import SessionSettings, spark_conf, spark_session


def test_the_session_properties() -> None:
    conf = spark_conf(SessionSettings())
    assert conf["spark.ui.enabled"] == "false"
    assert conf["spark.ui.showConsoleProgress"] == "false"
    assert conf["spark.python.worker.reuse"] == "true"
    assert conf["spark.sql.session.timeZone"] == "UTC"
    assert "log4j2.properties" in conf["spark.driver.extraJavaOptions"]

    mine = spark_conf(
        SessionSettings(
            ui=True,
            shuffle_partitions=3,
            conf={"spark.driver.extraJavaOptions": "-Xss4m", "spark.executor.memory": "2g"},
        )
    )
    assert mine["spark.ui.enabled"] == "true"
    assert mine["spark.sql.shuffle.partitions"] == "3"
    assert mine["spark.executor.memory"] == "2g"
    # Extra JVM options are added to the quiet logging, not instead of it.
    assert mine["spark.driver.extraJavaOptions"].endswith(" -Xss4m")
    assert "log4j2.configurationFile" in mine["spark.driver.extraJavaOptions"]


def test_a_running_session_is_shared_and_left_running(spark: SparkSession) -> None:
    with spark_session(SessionSettings(master="local[1]")) as same:
        assert same is spark
    assert spark.sparkContext.master == "local[2]"
    assert spark.range(3).count() == 3  # still running
    assert spark.conf.get("spark.sql.session.timeZone") == "UTC"
    assert spark.sparkContext.getConf().get("spark.ui.enabled") == "false"


def test_the_shipped_code_zip_is_deleted_when_the_session_stops(tmp_path: Path) -> None:
    # Its own process: a SparkContext per process, and the suite's is shared.
    script = """
import sys
from pathlib import Path
from pipeline.session import SessionSettings, build_session, ship_project_code, stop_session
spark = build_session(SessionSettings(master="local[1]", shuffle_partitions=1))
shipped = ship_project_code(spark)
print("zip", sorted(p.name for p in shipped.iterdir()))
stop_session(spark)
print("after", shipped.exists())
"""
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=CODE_ROOT,
        env={**child_environment(), "TMPDIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "zip ['hanamenode-code.zip']" in result.stdout, result.stdout
    assert "after False" in result.stdout, result.stdout
    assert not list(tmp_path.glob("hapipe-code-*")), list(tmp_path.iterdir())
