"""``hadev up --journal zookeeper`` (issue 29 item 4): the dev cluster starts no JournalNode
and names the ZooKeeper journal on its own ZooKeeper; its directory remembers the choice.
Nothing is started here (the daemons run in tests/process/test_zkjournal_process.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from conf import Settings
from conf.keys import ZKJournalUri
from hadev.devcluster import DevCluster, DevClusterError, DevShape


def test_the_zookeeper_journal_has_no_journalnode_and_its_uri(tmp_path: Path) -> None:
    dev = DevCluster(tmp_path / "dev", journal="zookeeper")
    assert dev.journalnodes == [] and dev.names[0] == "zk" and "jn1" not in dev.names
    dev.zookeeper.port = 2181
    uri = dev.journal_conf()["dfs.namenode.shared.edits.dir"]
    settings = Settings.from_mapping({"dfs.namenode.shared.edits.dir": uri})
    assert settings.zk_journal_uri == ZKJournalUri(("127.0.0.1:2181",), "/hanamenode/journal/ns1")
    assert DevCluster(tmp_path / "qjm").journal_conf() == {}


def test_the_directory_remembers_the_journal(tmp_path: Path) -> None:
    shape = DevShape(0, 2, 0, "zookeeper")
    shape.write(tmp_path / "hadev.json")
    assert DevShape.read(tmp_path / "hadev.json") == shape
    (tmp_path / "old.json").write_text('{"journalnodes": 3, "namenodes": 2}')
    assert DevShape.read(tmp_path / "old.json") == DevShape(3, 2, 0, "qjm")
    with pytest.raises(DevClusterError, match="journal 'bookkeeper'"):
        DevCluster(tmp_path / "x", journal="bookkeeper")
