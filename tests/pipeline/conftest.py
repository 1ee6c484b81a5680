"""One local SparkSession for every test under tests/pipeline: a JVM start costs seconds.

Without PySpark (the ``spark`` extra) these tests are not collected at all; without a Java
runtime the ones that need Spark are skipped.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    if shutil.which("java") is None:
        pytest.fail("no Java runtime on PATH: run scripts/bootstrap.sh (installs a JRE)")
    from pipeline.session import SessionSettings, build_session, stop_session

    session = build_session(SessionSettings(master="local[2]", shuffle_partitions=2))
    try:
        yield session
    finally:
        stop_session(session)
