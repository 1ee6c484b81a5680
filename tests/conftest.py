"""Options shared by the whole test suite (keep this file minimal).

``--sim-seeds N``: how many seeds the simulator tests sweep (default 200).
``--soak``: run the tests marked ``@pytest.mark.slow`` (skipped by default).
``--chaos-rounds N``: rounds of the chaos tests' kill -9 of the active (default 10; the other
chaos tests scale with it).
``--fuzz-minutes M``: how long ``tests/fuzz`` sends generated requests (default 1).
``--idle-connections N``: idle connections the flood test opens to each of three daemons
(default 1000; the issue's attack was 20000).
``--power-cuts N``: power cuts of real daemons on crash filesystems in ``tests/powerloss``
(default 20, each kind once and then drawn; ``POWERCUT_SEED`` replays a run's choices).
``--spark-standalone``: run the tests marked ``@pytest.mark.standalone``, which start a Spark
standalone master and workers (about 8 minutes on 2 cores; ``--soak`` runs them too).
"""

from __future__ import annotations

import os

import pytest

# grpcio installs fork handlers that run on every fork of the test process, and those are
# skipped or misbehave while other threads are inside gRPC: the Spark fixture's Java gateway
# (forked with a preexec_fn) once died at launch that way, beside "skipping fork() handlers".
# No test forks a process that goes on using gRPC without exec, so the handlers are off
# (grpc/grpc#13998 and #14056). Set before any test module imports grpc.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

pytest_plugins = ["tests.daemon_logs"]  # a failing test prints its daemons' log tails


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--sim-seeds",
        type=int,
        default=200,
        help="number of seeds the qjm.sim tests run (default 200)",
    )
    parser.addoption(
        "--soak", action="store_true", default=False, help="run the slow, opt-in soak tests"
    )
    parser.addoption(
        "--chaos-rounds",
        type=int,
        default=10,
        help="rounds of kill -9 of the active NameNode in tests/chaos (default 10)",
    )
    parser.addoption(
        "--spark-standalone",
        action="store_true",
        default=False,
        help="run the tests that start a Spark standalone cluster",
    )
    parser.addoption(
        "--power-cuts",
        type=int,
        default=20,
        help="power cuts of real daemons in tests/powerloss (default 20: each kind once, "
        "then drawn at random)",
    )
    parser.addoption(
        "--fuzz-minutes",
        type=float,
        default=1.0,
        help="how long tests/fuzz sends generated requests to live daemons (default 1)",
    )
    parser.addoption(
        "--idle-connections",
        type=int,
        default=1000,
        help="idle connections per daemon in tests/process/test_idle_connection_flood.py "
        "(default 1000; issue 25's attack: 20000)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--soak"):
        return
    skip_slow = pytest.mark.skip(reason="opt-in: run with --soak")
    skip_standalone = pytest.mark.skip(reason="opt-in: run with --spark-standalone")
    standalone = config.getoption("--spark-standalone")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip_slow)
        elif "standalone" in item.keywords and not standalone:
            item.add_marker(skip_standalone)
