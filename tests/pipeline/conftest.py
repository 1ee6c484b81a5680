"""One local SparkSession for every test under tests/pipeline: a JVM start costs seconds.

Without PySpark (the ``spark`` extra) these tests are not collected at all; without a Java
runtime the ones that need Spark are skipped.
"""

from __future__ import annotations

import importlib.util
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

collect_ignore_glob = ["test_*.py"] if importlib.util.find_spec("pyspark") is None else []


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    if shutil.which("java") is None:
        pytest.skip("no Java runtime on PATH")
    from pipeline.session import SessionSettings, build_session, stop_session

    session = build_session(SessionSettings(master="local[2]", shuffle_partitions=2))
    try:
        yield session
    finally:
        stop_session(session)
