"""The ZooKeeper journal's pure parts: its URI, the cut of a batch below the znode limit,
and the checks of a batch znode (docs/protocol.md §15)."""

from __future__ import annotations

import pytest

from conf import ConfigError, Settings
from conf.keys import QJournalUri, ZKJournalUri, parse_shared_edits_uri
from proto import edits_pb2, records
from zkjournal.errors import ZKJournalError
from zkjournal.layout import (
    BatchHeader,
    batch_first_txid,
    batch_sequence,
    decode_batch,
    encode_batch,
    split_framed,
)
from zkjournal.window import LiveBatch, deletion_bound


def framed(first: int, count: int, size: int = 10) -> bytes:
    return b"".join(
        records.frame(edits_pb2.EditOp(
            txid=t, mkdir=edits_pb2.MkdirOp(path="/" + "x" * size)
        ).SerializeToString())
        for t in range(first, first + count)
    )


def test_the_scheme_picks_the_backend() -> None:
    zk = parse_shared_edits_uri("zookeeper://h1:2181,h2:2181/hanamenode/journal/ns1")
    assert zk == ZKJournalUri(("h1:2181", "h2:2181"), "/hanamenode/journal/ns1")
    assert str(zk) == "zookeeper://h1:2181,h2:2181/hanamenode/journal/ns1"
    assert zk.connect_string == "h1:2181,h2:2181" and zk.journal_id == zk.path
    assert isinstance(parse_shared_edits_uri("qjournal://h1:8485/ns1"), QJournalUri)
    settings = Settings.from_mapping(
        {"dfs.namenode.shared.edits.dir": "zookeeper://h1:2181/j"}
    )
    assert settings.journal_uri is None and settings.zk_journal_uri == zk.__class__(
        ("h1:2181",), "/j"
    )
    assert settings.shared_edits_uri == settings.zk_journal_uri
    assert settings.zk_journal.max_znode_bytes == 512 * 1024


@pytest.mark.parametrize(
    ("uri", "says"),
    [
        ("bookkeeper://h1:3181/j", "expected qjournal://"),
        ("zookeeper://h1:2181", "expected a znode path"),
        ("zookeeper://h1:2181/", "expected a znode path"),
        ("zookeeper://h1:2181/a//b", "expected a znode path"),
        ("zookeeper://h1:2181/a/../b", "expected a znode path"),
        ("zookeeper://h1/j", "h1"),
        ("zookeeper://h1:2181,h1:2181/j", "listed twice"),
    ],
)
def test_a_bad_uri_is_refused_by_name(uri: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        parse_shared_edits_uri(uri)


def test_a_batch_is_cut_at_record_boundaries_in_order() -> None:
    data = framed(10, 50)
    one = len(framed(10, 1))
    pieces = split_framed(10, data, 7 * one)
    assert [(f, c) for f, c, _ in pieces] == [
        (10, 7), (17, 7), (24, 7), (31, 7), (38, 7), (45, 7), (52, 7), (59, 1)
    ]
    assert b"".join(p for _, _, p in pieces) == data
    assert all(len(p) <= 7 * one for _, _, p in pieces)
    assert split_framed(10, data, len(data)) == [(10, 50, data)]


def test_a_single_edit_above_the_limit_is_named() -> None:
    data = framed(1, 2) + framed(3, 1, size=5000)
    with pytest.raises(ZKJournalError, match=r"edit txid 3 takes 50[0-9]{2} bytes"):
        split_framed(1, data, 4096)


def test_a_batch_znode_is_checked_and_its_name_carries_its_first_txid() -> None:
    header = BatchHeader(epoch=4, first_txid=31, count=3)
    data = encode_batch(header, framed(31, 3))
    assert decode_batch(data, "b") == (header, framed(31, 3))
    with pytest.raises(ZKJournalError, match="header says 4 records"):
        decode_batch(encode_batch(BatchHeader(4, 31, 4), framed(31, 3)), "b")
    with pytest.raises(ZKJournalError, match="bad magic"):
        decode_batch(b"XXXX" + data[4:], "b")
    name = "b-00000000000000000031-0000000012"
    assert (batch_first_txid(name), batch_sequence(name)) == (31, 12)
    with pytest.raises(ZKJournalError, match="not a batch znode"):
        batch_first_txid("lock-0001")


# (packed per NameNode, max bytes, max seconds) -> the txid the publisher deletes through;
# three batches of 100 bytes ending at txids 10, 20, 30, made at 0, 50 and 90 s; now = 100 s.
DELETION_CASES = [
    ({"nn1": 30, "nn2": 30}, 10_000, 600.0, 30, "everyone packed everything: all of it"),
    ({"nn1": 30, "nn2": 25}, 10_000, 600.0, 20, "whole batches only: 21-25 stay with 26-30"),
    ({"nn1": 30, "nn2": 0}, 10_000, 600.0, 0, "a laggard within the window holds it all"),
    ({"nn1": 30, "nn2": 0}, 150, 600.0, 20, "past the bytes, the oldest go anyway"),
    ({"nn1": 30, "nn2": 0}, 10_000, 30.0, 20, "past the age, too"),
    ({"nn1": 15, "nn2": 30}, 150, 600.0, 10, "never beyond what the active packed"),
    ({"nn1": 0}, 0, 0.0, 0, "the active packed nothing: nothing goes"),
]


@pytest.mark.parametrize(("packed", "max_bytes", "max_seconds", "bound", "rule"), DELETION_CASES)
def test_what_the_publisher_deletes(
    packed: dict[str, int], max_bytes: int, max_seconds: float, bound: int, rule: str
) -> None:
    batches = [LiveBatch(10, 100, 0.0), LiveBatch(20, 100, 50.0), LiveBatch(30, 100, 90.0)]
    got = deletion_bound(
        batches, packed, "nn1", now=100.0, max_bytes=max_bytes, max_seconds=max_seconds
    )
    assert got == bound, rule
