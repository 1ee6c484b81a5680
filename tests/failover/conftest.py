"""A real ZooKeeper server for the tests of this directory (one per module)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from hadev.zookeeper import ZooKeeperServer
from tests.failover.zkcluster import TICK_MS


@pytest.fixture(scope="module")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    with ZooKeeperServer(tmp_path_factory.mktemp("zk"), tick_time_ms=TICK_MS) as zk:
        yield zk
