"""Real processes, a real ZooKeeper, real signals (docs/architecture.md §8.4, ``tests/chaos``).

Each module gets its own dev cluster (``hadev.devcluster``: ZooKeeper, three
JournalNodes, two NameNodes with automatic failover, session timeout 1 s) with QJM quorum
timeouts of 4 s, so that a lost quorum shows at once. Each test gets a
``Timeline`` of what it did, with the random seed it drew its choices from; a failing test
prints it (with each NameNode's state) after the failure.
"""

from __future__ import annotations

import datetime
import os
import random
import re
import time
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest

from hadev.devcluster import DevCluster

# What a failing test prints of each NameNode's log: its warnings and errors and its HA steps
# (election, transitions, cedes, rolls), since the test began, the last EXCERPT_LINES of them.
# A CI run keeps only the test's output, so this is what explains a failure there.
EXCERPT_LINES = 60
_NOTABLE = re.compile(
    r"\[(warning|error|critical)|\[failover\.|now active|now standby|leaving active|rolled edit"
)

SESSION_TIMEOUT = 1.0
QUORUM_TIMEOUT = "4s"
STATUS_TIMEOUT = 5.0
"""How long a NameNode has to answer a status call that a test asserts on (``dev.active``):
on a loaded two-core machine one can take over a second."""


class Timeline:
    """What a chaos test did and saw, with times relative to its start."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.started = time.monotonic()
        self.started_wall = datetime.datetime.now(datetime.UTC)
        self.events: list[str] = [f"seed {seed} (CHAOS_SEED={seed} draws the same choices)"]

    def add(self, event: str) -> None:
        self.events.append(f"{time.monotonic() - self.started:7.2f}s  {event}")

    def __str__(self) -> str:
        return "\n".join(self.events)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.when == "call":
        item.stash[_FAILED] = report.failed
    return report


_FAILED = pytest.StashKey[bool]()


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    with DevCluster(
        tmp_path_factory.mktemp("dev"),
        session_timeout=SESSION_TIMEOUT,
        quorum_timeout=QUORUM_TIMEOUT,
    ) as cluster:
        yield cluster


@pytest.fixture
def chaos_rounds(request: pytest.FixtureRequest) -> int:
    rounds = int(request.config.getoption("--chaos-rounds"))
    assert rounds >= 1, "--chaos-rounds must be at least 1"
    return rounds


@pytest.fixture
def rng(timeline: Timeline) -> random.Random:
    return random.Random(timeline.seed)


@pytest.fixture
def timeline(request: pytest.FixtureRequest, dev: DevCluster) -> Iterator[Timeline]:
    seed = int(os.environ.get("CHAOS_SEED") or time.time_ns() % 1_000_000_007)
    line = Timeline(seed)
    yield line
    if request.node.stash.get(_FAILED, False):
        line.add(f"at failure: {dev.states()}; logs in {dev.log_dir}")
        excerpts = "".join(
            log_excerpt(dev.log_path(nn), line.started_wall) for nn in dev.namenode_ids
        )
        print(f"\nchaos timeline of {request.node.name}:\n{line}{excerpts}")


def log_excerpt(path: Path, since: datetime.datetime, limit: int = EXCERPT_LINES) -> str:
    """The notable lines of the daemon log ``path`` stamped at ``since`` or later, the last
    ``limit`` of them, under a heading naming the file ("" when it has none)."""
    stamp = since.strftime("%Y-%m-%dT%H:%M:%S.%f")
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return f"\n{path.name}: no log\n"
    notable = [
        row for row in text.splitlines()
        if row[:26] >= stamp and row[:4].isdigit() and _NOTABLE.search(row)
    ]
    if not notable:
        return ""
    shown = notable[-limit:]
    skipped = f" ({len(notable) - limit} earlier left out)" if len(notable) > limit else ""
    return f"\n{path.name}, notable lines since the test began{skipped}:\n" + "\n".join(shown)

