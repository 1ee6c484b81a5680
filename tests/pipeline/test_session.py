"""The one SparkSession: quiet, UI off, local by default; the command line shares a running
session instead of starting a second JVM."""

from __future__ import annotations

from pyspark.sql import SparkSession

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
