"""The one place that builds (and stops) the SparkSession of every ``hapipe`` job
(docs/architecture.md §8.5).

``local[*]`` unless ``--master`` says otherwise; quiet: log4j at WARN on stderr
(``log4j2.properties`` beside this file), no console progress bar, no web UI unless asked for;
few shuffle partitions (the jobs' tables are small); Python workers reused between tasks, so
a soak imports the simulator once per worker, not once per seed::

    with spark_session(SessionSettings(master="local[2]")) as spark:
        summary = run_soak(spark, SoakConfig(first_seed=0, seeds=100), out)

The jobs never run ``spark-submit`` themselves, but can be submitted with it; the master,
memory and the like then come from ``spark-submit``, which this module leaves alone (the
driver JVM is already running then: give it the quiet log4j file with
``--driver-java-options -Dlog4j2.configurationFile=pipeline/log4j2.properties``)::

    PYSPARK_PYTHON=.venv/bin/python spark-submit --master spark://host:7077 \
        pipeline/cli.py soak --seeds 5000

On a master other than ``local``, the project's own packages are shipped to the executors as
one zip (``SparkContext.addPyFile``); their third-party dependencies (grpcio, protobuf,
structlog, crc32c) must be installed there, as for any PySpark job.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import tempfile
import zipfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog
from pyspark.sql import SparkSession

__all__ = [
    "APP_NAME",
    "DEFAULT_MASTER",
    "SessionSettings",
    "build_session",
    "spark_session",
    "stop_session",
]

log = structlog.get_logger(__name__)

DEFAULT_MASTER = "local[*]"
APP_NAME = "hapipe"
LOG4J_CONF = Path(__file__).resolve().with_name("log4j2.properties")
CODE_ROOT = Path(__file__).resolve().parents[1]
# What an executor imports: the simulator (qjm.sim) and what it needs, plus this package.
PROJECT_PACKAGES = ("conf", "proto", "journalnode", "qjm", "hanamenode", "pipeline")
# spark-submit starts the Python driver with these set; then the JVM and its master exist.
_SUBMIT_ENV = "PYSPARK_GATEWAY_PORT"


@dataclass(frozen=True)
class SessionSettings:
    """How to build the session. ``master`` None means ``local[*]``, or under ``spark-submit``
    the master it was given. ``conf`` (``--spark-conf key=value``) is applied last and wins."""

    master: str | None = None
    app_name: str = APP_NAME
    ui: bool = False
    shuffle_partitions: int = 8
    conf: Mapping[str, str] = field(default_factory=dict)


def under_spark_submit() -> bool:
    """Whether this Python process is a driver started by ``spark-submit``."""
    return _SUBMIT_ENV in os.environ


def is_local(master: str) -> bool:
    return master == "local" or master.startswith("local[")


def spark_conf(settings: SessionSettings) -> dict[str, str]:
    """Every Spark property the session is built with (pure; tests read it)."""
    conf = {
        "spark.ui.enabled": "true" if settings.ui else "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": str(settings.shuffle_partitions),
        "spark.python.worker.reuse": "true",
        # Reports bucket edit times by minute: the same minutes on every machine.
        "spark.sql.session.timeZone": "UTC",
        # Read when spark-submit launches the driver JVM, which the builder does for us in
        # local mode; ignored (harmlessly) when the JVM already runs.
        "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile={LOG4J_CONF.as_uri()}",
    }
    for key, value in settings.conf.items():
        if key == "spark.driver.extraJavaOptions" and "log4j2.configurationFile" not in value:
            value = f"{conf[key]} {value}"
        conf[key] = value
    return conf


def build_session(settings: SessionSettings | None = None) -> SparkSession:
    """A new (or spark-submit's) SparkSession; stop it with ``stop_session``."""
    settings = settings or SessionSettings()
    submitted = under_spark_submit()
    master = settings.master or (None if submitted else DEFAULT_MASTER)
    if master is not None and is_local(master) and not submitted:
        # PySpark starts workers with $PYSPARK_PYTHON (default: "python3" on PATH, which may
        # be another interpreter without this project's dependencies): use this one.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        # A local job talks to itself only: loopback, and no warning that the host name
        # resolves to it.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder: Any = SparkSession.builder.appName(settings.app_name)
    if master is not None:
        builder = builder.master(master)
    for key, value in spark_conf(settings).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    # py4j logs every connection it closes at INFO.
    logging.getLogger("py4j").setLevel(logging.WARNING)
    sc = spark.sparkContext
    sc.setLogLevel("WARN")
    if not is_local(sc.master):
        ship_project_code(spark)
    log.debug("spark session started", master=sc.master, app=sc.appName, ui=settings.ui)
    return spark


def stop_session(spark: SparkSession) -> None:
    """Stop the session and its JVM-side context, then delete the code zip shipped for it
    (executors fetch it from the driver until the end); safe to call twice."""
    spark.stop()
    shipped = _SHIPPED.pop(id(spark), None)
    if shipped is not None:
        shutil.rmtree(shipped, ignore_errors=False)
        log.debug("deleted the shipped project code", directory=str(shipped))


@contextmanager
def spark_session(settings: SessionSettings | None = None) -> Iterator[SparkSession]:
    """``build_session`` for the duration of a ``with`` block, stopped however it ends.

    A session already active in this process (a notebook's, a test suite's) is used as it
    is and left running: whoever started it stops it.
    """
    active = SparkSession.getActiveSession()
    if active is not None:
        yield active
        return
    spark = build_session(settings)
    try:
        yield spark
    finally:
        stop_session(spark)


# The temporary directory of each session's shipped zip, by id(session), until stop_session.
_SHIPPED: dict[int, Path] = {}


def ship_project_code(spark: SparkSession) -> Path:
    """Zip the project's packages and add them to every executor's sys.path; the zip's
    temporary directory, which ``stop_session`` deletes."""
    tmp = Path(tempfile.mkdtemp(prefix="hapipe-code-"))
    _SHIPPED[id(spark)] = tmp
    archive = tmp / "hanamenode-code.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        for package in PROJECT_PACKAGES:
            for path in sorted((CODE_ROOT / package).rglob("*")):
                if path.is_file() and "__pycache__" not in path.parts:
                    zf.write(path, path.relative_to(CODE_ROOT).as_posix())
    spark.sparkContext.addPyFile(str(archive))
    log.info("shipped project code to the executors", archive=str(archive))
    return tmp
