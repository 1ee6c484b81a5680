"""Replay: the ops the active logged rebuild its namespace exactly, on any other NameNode.

A seeded random workload (``namespace_workload``) runs on a live namespace, checked against a
naive model after every step; its logged ops, serialized as they travel through the
JournalNodes, are then applied to a fresh namespace — the standby's tailer — which must end
with an equal snapshot and the same retry-cache answers. A failure prints ``seed=N``; rerun
it alone with ``HN_SEED=N pytest tests/unit/test_namespace_replay.py``.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from hanamenode.errors import EditLogReplayError, InvalidPathError
from hanamenode.fsimage import load_image, save_image
from hanamenode.namespace import Namespace
from hanamenode.retry_cache import RetryCache
from proto import edits_pb2, records
from proto.values import NamespaceInfo
from tests.unit.namespace_workload import Workload, run_workload

SEEDS = [int(os.environ["HN_SEED"])] if "HN_SEED" in os.environ else list(range(12))
STEPS = 1500


@pytest.mark.parametrize("seed", SEEDS)
def test_replaying_the_logged_ops_rebuilds_the_namespace(seed: int) -> None:
    print(f"seed={seed}")
    live = Namespace(root_mtime_ms=0)
    standby = Namespace(root_mtime_ms=0, retry_cache=RetryCache())
    work = Workload(random.Random(seed))
    run_workload(live, work, STEPS)

    # Enough of both outcomes that the test means something.
    logged, refused = len(work.ops), work.refused
    assert logged > STEPS // 8, f"seed={seed}: only {logged} ops logged"
    assert refused > STEPS // 8, f"seed={seed}: only {refused} calls refused"
    kinds = {op.WhichOneof("op") for op in work.ops}
    assert kinds == {"mkdir", "create", "delete", "rename"}, f"seed={seed}: {kinds}"

    # The ops go through the segment framing, as they do on the way to the JournalNodes.
    framed = records.frame_ops(work.ops)
    for op in records.decode_ops(framed):
        standby.apply(op)
    assert standby.snapshot() == live.snapshot(), f"seed={seed}"
    assert standby.digest() == live.digest()
    assert standby.last_applied_txid == live.last_applied_txid == work.ops[-1].txid
    assert (standby.dir_count, standby.file_count) == (live.dir_count, live.file_count)

    # A retry reaching the standby after it becomes active gets the active's first answer.
    cache = standby.retry_cache
    assert cache is not None
    kinds = {(op.client_id, op.call_id): op.WhichOneof("op") for op in work.ops}
    for (client_id, call_id), answer in work.answers.items():
        entry = cache.lookup(client_id, call_id, kinds[client_id, call_id])
        assert entry is not None, f"seed={seed}: no entry for {client_id!r}/{call_id}"
        assert entry.answer() == answer


@pytest.mark.parametrize("seed", SEEDS[:3])
def test_replay_in_pieces_matches_the_live_namespace_at_every_cut(seed: int) -> None:
    """A standby that tails in batches is, after each batch, the active at that txid."""
    print(f"seed={seed}")
    rng = random.Random(seed)
    live = Namespace()
    standby = Namespace()
    work = Workload(rng)
    while live.last_applied_txid < 400:
        start = len(work.ops)
        run_workload(live, work, rng.randint(1, 40))
        for op in work.ops[start:]:
            standby.apply(edits_pb2.EditOp.FromString(op.SerializeToString()))
        assert standby.snapshot() == live.snapshot(), f"seed={seed} txid={live.last_applied_txid}"


def test_replaying_an_op_twice_is_refused() -> None:
    live = Namespace()
    work = Workload(random.Random(1))
    run_workload(live, work, 200)
    standby = Namespace()
    for op in work.ops:
        standby.apply(op)
    snapshot = standby.snapshot()
    with pytest.raises(EditLogReplayError, match="not after the last applied txid"):
        standby.apply(work.ops[-1])
    assert standby.snapshot() == snapshot


def test_a_log_written_before_the_control_character_rule_still_replays(tmp_path: Path) -> None:
    # Names with control characters were stored and replicated before requests were checked
    # for them (issue 10 row 8); a NameNode must still load such a log and its image, and a
    # client must still read, rename away and delete those names, but create no new one.
    def op(txid: int, **kind: object) -> edits_pb2.EditOp:
        return edits_pb2.EditOp(txid=txid, **kind)  # type: ignore[arg-type]

    attrs = {"mtime_ms": 1, "permission": 0o755, "owner": "o", "group": "g"}
    old_log = [
        op(1, mkdir=edits_pb2.MkdirOp(path="/esc\x1b[2J", **attrs)),
        op(2, mkdir=edits_pb2.MkdirOp(path="/esc\x1b[2J/line\nbreak", **attrs)),
        op(3, create=edits_pb2.CreateOp(path="/bell\x07", replication=1, **attrs)),
    ]
    standby = Namespace(root_mtime_ms=0)
    for logged in records.decode_ops(records.frame_ops(old_log)):
        standby.apply(logged)
    assert standby.last_applied_txid == 3
    assert [st.path for st in standby.list("/")] == ["/bell\x07", "/esc\x1b[2J"]
    assert standby.stat("/esc\x1b[2J/line\nbreak").is_dir

    image = save_image(standby, tmp_path, 3, NamespaceInfo("CID-old", 7))
    loaded, txid, _ = load_image(image)
    assert txid == 3 and loaded.snapshot() == standby.snapshot()

    with pytest.raises(InvalidPathError, match="control character U\\+0001"):
        loaded.prepare_mkdir("/esc\x1b[2J/new\x01", mtime_ms=2)
    with pytest.raises(InvalidPathError, match="control character U\\+0002"):
        loaded.prepare_mkdir("/new\x02/a", parents=True, mtime_ms=2)
    made = loaded.prepare_mkdir("/esc\x1b[2J/clean", mtime_ms=2)
    assert made is not None
    with pytest.raises(InvalidPathError, match="control character U\\+001B"):
        loaded.prepare_rename("/bell\x07", "/again\x1b", mtime_ms=2)
    made.txid = 4
    loaded.apply(made)
    renamed = loaded.prepare_rename("/bell\x07", "/bell", mtime_ms=2)
    renamed.txid = 5
    loaded.apply(renamed)
    deleted = loaded.prepare_delete("/esc\x1b[2J", recursive=True, mtime_ms=3)
    deleted.txid = 6
    loaded.apply(deleted)
    assert [st.path for st in loaded.list("/")] == ["/bell"]
