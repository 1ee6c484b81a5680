"""A real ZooKeeper server for the ZooKeeper journal's tests (one per module)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from hadev.zookeeper import ZooKeeperServer


@pytest.fixture(scope="module")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    with ZooKeeperServer(tmp_path_factory.mktemp("zk"), tick_time_ms=100) as zk:
        yield zk
