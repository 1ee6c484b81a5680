"""The ZooKeeper journal's writer and reader against a real ZooKeeper (docs/architecture.md
§9.2): appends land in order and read back byte for byte, a deposed writer is fenced on its
next append, its next read-index round and, idle, by the watch on the epoch znode, and a
journal refuses another cluster's NameNode."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

from hadev.zookeeper import ZooKeeperServer
from journalnode.errors import EpochError
from proto import edits_pb2, records
from proto.values import NamespaceInfo
from qjm.fencing import FenceLatch
from qjm.metrics import QJM_REGISTRY
from zkjournal.errors import ZKJournalError, ZKJournalFencedError, ZKJournalNotFormattedError
from zkjournal.manager import PublishSettings, ZKJournalManager, read_live_log
from zkjournal.packed import PackedSegments

NS = NamespaceInfo("cluster-a", 7)


def op(txid: int, path: str = "") -> edits_pb2.EditOp:
    return edits_pb2.EditOp(txid=txid, mkdir=edits_pb2.MkdirOp(path=path or f"/d{txid}"))


def framed(first: int, count: int, pad: int = 0) -> bytes:
    return b"".join(
        records.frame(op(t, "/" + "p" * pad + str(t)).SerializeToString())
        for t in range(first, first + count)
    )


@pytest.fixture
def journal_factory(zookeeper: ZooKeeperServer) -> Iterator[Callable[..., ZKJournalManager]]:
    root = f"/hanamenode/journal/{uuid.uuid4().hex[:8]}"
    made: list[ZKJournalManager] = []

    def make(ns: NamespaceInfo = NS, **kwargs: Any) -> ZKJournalManager:
        journal = ZKJournalManager(
            lambda: KazooClient(zookeeper.connect_string, timeout=5.0),
            f"zookeeper://{zookeeper.connect_string}{root}", root, ns, **kwargs,
        )
        made.append(journal)
        return journal

    yield make
    for journal in made:
        journal.close()


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_appends_read_back_in_order_and_a_big_batch_is_cut_below_the_znode_limit(
    journal_factory: Callable[..., ZKJournalManager],
) -> None:
    writer = journal_factory(max_znode_bytes=4096)
    writer.format()
    assert list(writer.is_formatted().values()) == [True]

    async def write() -> int | None:
        end = await writer.arecover_unfinalized_segments()
        out = await writer.astart_log_segment(1)
        await out.asend_batch(1, 3, framed(1, 3))
        # About 40 KB of edits in one batch: at least ten znodes of at most 4 KiB.
        await out.asend_batch(4, 100, framed(4, 100, pad=400))
        await writer.afinalize_log_segment(1, 103)
        return end

    assert run(write()) is None
    reader = journal_factory()
    tail, batches = read_live_log(reader, 1)
    assert tail.last_txid == 103
    assert len(batches) >= 11 and all(len(b.framed) <= 4096 for b in batches)
    applied: list[edits_pb2.EditOp] = []
    result = reader.load_edits(1, lambda o: applied.append(o) is None)
    assert [o.txid for o in applied] == list(range(1, 104))
    assert records.frame_ops(applied) == framed(1, 3) + framed(4, 100, pad=400)
    assert (result.applied, result.last_txid, result.highest_known_txid) == (103, 103, 103)
    later: list[edits_pb2.EditOp] = []
    reader.load_edits(50, lambda o: later.append(o) is None, up_to=60)
    assert [o.txid for o in later] == list(range(50, 61))


def test_a_deposed_writer_is_fenced_on_append_on_confirm_and_idle(
    journal_factory: Callable[..., ZKJournalManager],
) -> None:
    old, new = journal_factory(), journal_factory()
    old.format()
    told: list[str] = []
    heard = threading.Event()
    old.add_fence_listener(lambda reason: (told.append(reason), heard.set()))

    async def old_writes() -> None:
        await old.arecover_unfinalized_segments()
        out = await old.astart_log_segment(1)
        await out.asend_batch(1, 2, framed(1, 2))
        await old.aconfirm_epoch()

    run(old_writes())
    assert old.epoch == 1

    async def new_takes_over() -> int | None:
        return await new.arecover_unfinalized_segments()

    assert run(new_takes_over()) == 2
    assert new.epoch == 2
    # The watch on the epoch znode tells the idle old writer, with no call of its own.
    assert heard.wait(10), "the deposed writer was not told by its watch"
    assert "EpochError" in str(told) or "epoch znode" in told[0]

    async def old_appends() -> None:
        out = await old.astart_log_segment(3)
        await out.asend_batch(3, 1, framed(3, 1))

    with pytest.raises(ZKJournalFencedError) as raised:
        run(old_appends())
    assert any(isinstance(e, EpochError) for e in raised.value.exceptions.values())
    with pytest.raises(ZKJournalFencedError):
        run(old.aconfirm_epoch())
    tail, batches = read_live_log(journal_factory(), 1)
    assert tail.last_txid == 2 and [b.header.epoch for b in batches] == [1]


def test_the_append_of_a_writer_that_missed_the_watch_is_refused_by_zookeeper(
    journal_factory: Callable[..., ZKJournalManager],
) -> None:
    """The multi's epoch check itself fences: the old writer's watch is not what stops it."""
    old, new = journal_factory(), journal_factory()
    old.format()

    async def take(journal: ZKJournalManager) -> None:
        await journal.arecover_unfinalized_segments()

    run(take(old))
    run(take(new))

    async def old_appends() -> None:
        old._fence_latch = FenceLatch(old._log)  # as if its watch had not fired yet
        old._broken = None
        out = await old.astart_log_segment(1)
        await out.asend_batch(1, 1, framed(1, 1))

    fenced = r"fenced writer epoch 1 \(the append of txids 1-1 refused\)"
    with pytest.raises(ZKJournalFencedError, match=fenced):
        run(old_appends())
    assert read_live_log(journal_factory(), 1)[0].last_txid == 0


def test_two_takeovers_at_once_one_wins(journal_factory: Callable[..., ZKJournalManager]) -> None:
    a, b = journal_factory(), journal_factory()
    a.format()

    async def both() -> list[object]:
        return await asyncio.gather(
            a.arecover_unfinalized_segments(), b.arecover_unfinalized_segments(),
            return_exceptions=True,
        )

    outcomes = run(both())
    errors = [o for o in outcomes if isinstance(o, Exception)]
    assert len(errors) <= 1
    if errors:
        assert isinstance(errors[0], ZKJournalError) and "another writer" in str(errors[0])


def test_another_clusters_namenode_and_an_unformatted_journal_are_refused(
    journal_factory: Callable[..., ZKJournalManager],
) -> None:
    with pytest.raises(ZKJournalNotFormattedError, match="is not formatted"):
        journal_factory().check_namespace()
    journal_factory().format()
    stranger = journal_factory(NamespaceInfo("cluster-b", 9))
    with pytest.raises(ZKJournalNotFormattedError, match="belongs to cluster cluster-a"):
        run(stranger.arecover_unfinalized_segments())
    with pytest.raises(ZKJournalError, match="already exists"):
        journal_factory().format()
    journal_factory().format(force=True)


def test_the_push_feed_hands_new_batches_to_the_loop(
    journal_factory: Callable[..., ZKJournalManager],
) -> None:
    writer, reader = journal_factory(), journal_factory()
    writer.format()

    async def follow() -> list[int]:
        applied: list[int] = []
        pushed = asyncio.Event()

        def on_push() -> None:
            for o in feed.decide(len(applied) + 1):
                applied.append(o.txid)
            if len(applied) >= 5:
                pushed.set()

        feed = reader.push_feed(lambda: len(applied) + 1, on_push, lambda a, r: None)
        feed.start()
        await writer.arecover_unfinalized_segments()
        out = await writer.astart_log_segment(1)
        await out.asend_batch(1, 2, framed(1, 2))
        await out.asend_batch(3, 3, framed(3, 3))
        await asyncio.wait_for(pushed.wait(), 10)
        await feed.stop()
        return applied

    assert run(follow()) == [1, 2, 3, 4, 5]


def live_bytes(journal: ZKJournalManager) -> int:
    kazoo = journal.client()
    log = journal.paths.log
    stats = [kazoo.exists(f"{log}/{n}") for n in kazoo.get_children(log)]
    return sum(s.dataLength for s in stats if s is not None)  # None: deleted meanwhile


def test_the_publisher_keeps_zookeeper_to_its_window_and_a_laggard_fetches_the_rest(
    journal_factory: Callable[..., ZKJournalManager], tmp_path: Path,
) -> None:
    """The active packs and deletes; nn2 never packs (it is down), so only the window
    bounds what ZooKeeper holds; nn2 then reads the whole log: its start from nn1's packed
    segments (its fetch), the rest from ZooKeeper."""
    window = 16 * 1024
    publish = PublishSettings(period=0.05, window_bytes=window, window_seconds=300.0)
    nn1_packed = PackedSegments(tmp_path / "nn1")
    writer = journal_factory(nn_id="nn1", packed=nn1_packed, publish=publish)
    writer.format()
    writer.client().create(writer.paths.persisted_by("nn2"), b'{"packed_txid": 0}')
    batch = 20  # edits of about 420 bytes framed: 8 KiB a batch
    peak = 0

    async def write() -> None:
        nonlocal peak
        await writer.arecover_unfinalized_segments()
        writer.start_heartbeats()
        out = await writer.astart_log_segment(1)
        for first in range(1, 60 * batch, batch):
            await out.asend_batch(first, batch, framed(first, batch, pad=400))
            await asyncio.sleep(0.01)
            peak = max(peak, await asyncio.to_thread(live_bytes, writer))

    run(write())
    last = 60 * batch
    deadline = time.monotonic() + 10
    while writer.deleted_through == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert writer.deleted_through > 0, "the publisher deleted nothing"
    # A publisher period of appends may come on top of the window between two rounds.
    assert peak <= window + 12 * 8 * 1024, f"ZooKeeper held {peak} bytes, window {window}"
    assert nn1_packed.last_txid >= writer.deleted_through
    laggard = journal_factory(
        nn_id="nn2", packed=PackedSegments(tmp_path / "nn2"), publish=publish,
        fetch=lambda since: nn1_packed.framed_from(since),
    )
    labels = {"journal": writer.journal_id}
    held = QJM_REGISTRY.get_sample_value("zkjournal_live_bytes", labels)
    assert held is not None and held <= window + 12 * 8 * 1024
    assert QJM_REGISTRY.get_sample_value("zkjournal_deleted_through_txid", labels) == (
        writer.deleted_through
    )
    laggard.check_edits_available(1)
    seen: list[int] = []
    laggard.load_edits(1, lambda o: seen.append(o.txid) is None)
    assert seen == list(range(1, last + 1))
    fetched = QJM_REGISTRY.get_sample_value("zkjournal_fetched_txns_total", labels)
    assert fetched is not None and fetched >= writer.deleted_through
    writer.close()


def test_a_reader_that_missed_deleted_batches_and_cannot_fetch_says_so(
    journal_factory: Callable[..., ZKJournalManager], tmp_path: Path,
) -> None:
    writer = journal_factory()
    writer.format()

    async def write() -> None:
        await writer.arecover_unfinalized_segments()
        out = await writer.astart_log_segment(1)
        await out.asend_batch(1, 3, framed(1, 3))
        await out.asend_batch(4, 3, framed(4, 3))

    run(write())
    kazoo = writer.client()
    first = sorted(kazoo.get_children(writer.paths.log))[0]
    kazoo.delete(f"{writer.paths.log}/{first}")
    with pytest.raises(ZKJournalError, match=r"txids 1-3 are no longer in the live log"):
        journal_factory(nn_id="nn2", packed=PackedSegments(tmp_path)).load_edits(
            1, lambda o: True
        )
    with pytest.raises(ZKJournalError, match="could never catch up"):
        journal_factory().check_edits_available(1)


def test_the_checkpoints_purge_bound_reaches_every_namenodes_packed_segments(
    journal_factory: Callable[..., ZKJournalManager], tmp_path: Path,
) -> None:
    """The active records the purge bound its checkpoints asked for; a follower's packer
    purges its own packed segments below it; a deposed writer records nothing."""
    writer = journal_factory(nn_id="nn1", packed=PackedSegments(tmp_path / "nn1"))
    follower = journal_factory(nn_id="nn2", packed=PackedSegments(tmp_path / "nn2"))
    writer.format()

    async def write(first: int, count: int) -> None:
        out = await writer.astart_log_segment(first)
        await out.asend_batch(first, count, framed(first, count))

    async def take_over() -> None:
        await writer.arecover_unfinalized_segments()

    run(take_over())
    for first in (1, 11, 21):
        run(write(first, 10))
        writer.pack()
        follower.pack()
    assert len(follower.packed.segments()) == 3  # type: ignore[union-attr]
    run(writer.apurge_logs_older_than(21))
    assert [f for f, _, _ in writer.packed.segments()] == [21]  # type: ignore[union-attr]
    follower.pack()
    assert [f for f, _, _ in follower.packed.segments()] == [21]  # type: ignore[union-attr]
    run(journal_factory().arecover_unfinalized_segments())  # a newer writer
    with pytest.raises(ZKJournalFencedError):
        run(writer.apurge_logs_older_than(31))
