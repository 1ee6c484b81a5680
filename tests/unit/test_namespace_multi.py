"""Multi: several mutations as one transaction, all of them or none (docs/consistency.md §11).

A seeded random workload groups the calls of ``namespace_workload`` into multis of one to six
ops. The model plays each multi's calls one by one on a copy of itself: if any is refused,
the namespace must refuse the multi with that op's class and index and stay exactly as it
was; otherwise the namespace must give each op the model's answer and hold the model's
tree. The logged multis, framed as they travel to the JournalNodes, are replayed into a fresh
namespace, which must end with the same tree and the same retry-cache answers. A failure
prints ``seed=N``; rerun it alone with ``HN_SEED=N pytest tests/unit/test_namespace_multi.py``.
"""

from __future__ import annotations

import copy
import os
import random
from collections.abc import Callable
from functools import partial

import pytest

from hanamenode.errors import EditLogReplayError, NamenodeError, PathExistsError
from hanamenode.namespace import Namespace
from hanamenode.retry_cache import RetryCache
from proto import edits_pb2, records
from tests.unit.namespace_workload import (
    Call,
    Workload,
    expected_answer,
    view_of,
)

SEEDS = [int(os.environ["HN_SEED"])] if "HN_SEED" in os.environ else list(range(8))
MULTIS = 400


def _step(call: Call, ns: Namespace) -> edits_pb2.EditOp | None:
    method = getattr(ns, f"prepare_{call.kind}")
    return method(**call.args)  # type: ignore[no-any-return]


@pytest.mark.parametrize("seed", SEEDS)
def test_a_multi_applies_every_op_or_none(seed: int) -> None:
    print(f"seed={seed}")
    rng = random.Random(seed)
    work = Workload(rng)
    live = Namespace(root_mtime_ms=0)
    logged: list[edits_pb2.EditOp] = []
    answers: dict[int, list[object]] = {}
    refused = applied = 0
    for number in range(1, MULTIS + 1):
        calls = [work.next_call() for _ in range(rng.choice((1, 2, 2, 3, 4, 6)))]
        where = f"seed={seed} multi {number}: {[(c.kind, c.args) for c in calls]}"
        model = copy.deepcopy(work.model)
        expected: list[object] = []
        failed_at: int | None = None
        for index, call in enumerate(calls):
            answer = expected_answer(model, call)
            if isinstance(answer, type):
                failed_at = index
                expected.append(answer)
                break
            expected.append(answer)
        before = view_of(live)
        counts = (live.dir_count, live.file_count)
        steps = [partial(_step, call) for call in calls]
        # Every other multi the way the active runs it: applied tentatively, then kept.
        tentative = number % 2 == 0
        try:
            if tentative:
                kept = live.tentative_multi(steps, client_id=b"multi-client", call_id=number)
                op = kept.op
            else:
                op = live.prepare_multi(steps, client_id=b"multi-client", call_id=number)
        except NamenodeError as exc:
            assert failed_at is not None, f"{where}: refused ({exc!r}), the model accepts it"
            assert type(exc) is expected[failed_at], f"{where}: {exc!r}, model {expected!r}"
            assert getattr(exc, "multi_index", None) == failed_at, where
            assert str(exc).startswith(f"multi op {failed_at} of {len(calls)} refused: "), where
            assert view_of(live) == before, f"{where}: a refused multi changed the namespace"
            assert (live.dir_count, live.file_count) == counts, where
            refused += 1
            continue
        assert failed_at is None, f"{where}: accepted, the model refuses op {failed_at}"
        op.txid = live.last_applied_txid + 1
        if tentative:
            result = kept.apply(op)
        else:
            # Deciding changed nothing; applying the op changes everything at once.
            assert view_of(live) == before, f"{where}: prepare_multi changed the namespace"
            result = live.apply(op)
        # The model's mkdir -p of an existing directory answers True; the op says unchanged.
        shown = [False if e.WhichOneof("op") == "unchanged" else r for e, r in zip(
            op.multi.entries, expected, strict=True
        )]
        assert result == shown, f"{where}: answered {result!r}, model {expected!r}"
        work.model = model
        assert view_of(live) == model.view(), f"{where}: the tree differs from the model"
        dirs = sum(1 for attrs in model.view().values() if attrs[0])
        assert (live.dir_count, live.inode_count) == (dirs, len(model.entries)), where
        logged.append(op)
        answers[number] = result  # type: ignore[assignment]
        applied += 1
    assert refused > MULTIS // 10 and applied > 10, f"seed={seed}: {refused}/{applied}"

    standby = Namespace(root_mtime_ms=0, retry_cache=RetryCache())
    for op in records.decode_ops(records.frame_ops(logged)):
        standby.apply(op)
    assert standby.digest() == live.digest(), f"seed={seed}"
    assert (standby.dir_count, standby.file_count) == (live.dir_count, live.file_count)
    cache = standby.retry_cache
    assert cache is not None
    for number, result in answers.items():
        entry = cache.lookup(b"multi-client", number, "multi")
        assert entry is not None and entry.answer() == result, f"seed={seed} multi {number}"


def test_a_tentative_multi_is_kept_once_or_rolled_back_and_holds_off_other_ops() -> None:
    """The active's path (``tentative_multi``): the steps stay applied until the edit log
    keeps the op with its txid, or are put back; nothing else applies meanwhile, and a
    multi that cannot be kept (rolled back, a stale txid) leaves nothing."""
    ns = Namespace(root_mtime_ms=0)
    ns.mkdir("/x", mtime_ms=1)
    digest = ns.digest()

    def steps() -> list[Callable[[Namespace], edits_pb2.EditOp | None]]:
        return [
            lambda n: n.prepare_mkdir("/x/y", mtime_ms=2),
            lambda n: n.prepare_create("/x/y/f", mtime_ms=3),
        ]

    kept = ns.tentative_multi(steps(), client_id=b"c", call_id=1)
    assert ns.exists("/x/y/f")  # applied, not logged yet
    with pytest.raises(NamenodeError, match="a multi cannot contain a multi"):
        ns.tentative_multi([lambda n: n.prepare_mkdir("/z", mtime_ms=4)])
    other = edits_pb2.EditOp(
        txid=ns.last_applied_txid + 1,
        mkdir=edits_pb2.MkdirOp(path="/z", mtime_ms=4, permission=0o755, owner="o", group="g"),
    )
    with pytest.raises(EditLogReplayError, match="a tentative multi is open"):
        ns.apply(other)
    kept.roll_back()
    assert ns.digest() == digest
    kept.op.txid = ns.last_applied_txid + 1
    with pytest.raises(EditLogReplayError, match="not the open tentative multi"):
        kept.apply(kept.op)
    assert ns.digest() == digest

    kept = ns.tentative_multi(steps(), client_id=b"c", call_id=2)
    kept.op.txid = ns.last_applied_txid + 1
    result = kept.apply(kept.op)
    assert isinstance(result, list) and result[0] is True and result[1].path == "/x/y/f"
    assert ns.last_applied_txid == kept.op.txid
    replayed = Namespace(root_mtime_ms=0)
    replayed.mkdir("/x", mtime_ms=1)
    replayed.apply(kept.op)
    assert replayed.digest() == ns.digest()

    after = ns.digest()
    stale = ns.tentative_multi([lambda n: n.prepare_mkdir("/w", mtime_ms=5)])
    stale.op.txid = ns.last_applied_txid
    with pytest.raises(EditLogReplayError, match="not after the last applied txid"):
        stale.apply(stale.op)
    assert ns.digest() == after and not ns.exists("/w")


def test_a_later_op_sees_the_earlier_ones_and_a_refusal_names_its_index() -> None:
    ns = Namespace(root_mtime_ms=0)
    results = ns.multi([
        lambda n: n.prepare_mkdir("/a", mtime_ms=5),
        lambda n: n.prepare_create("/a/f", mtime_ms=6),
        lambda n: n.prepare_rename("/a/f", "/a/g", mtime_ms=7),
        lambda n: n.prepare_mkdir("/a", parents=True, mtime_ms=8),  # exists: unchanged
    ])
    assert results[0] is True and results[2] == "/a/g" and results[3] is False
    assert [s.path for s in ns.list("/a")] == ["/a/g"]
    digest = ns.digest()
    with pytest.raises(PathExistsError, match=r"^multi op 2 of 3 refused: .*/a/g") as caught:
        ns.multi([
            lambda n: n.prepare_delete("/a/g", mtime_ms=9),
            lambda n: n.prepare_create("/a/g", mtime_ms=9),
            lambda n: n.prepare_create("/a/g", mtime_ms=9),
        ])
    assert caught.value.multi_index == 2  # type: ignore[attr-defined]
    assert ns.digest() == digest


def test_a_logged_multi_that_does_not_apply_changes_nothing() -> None:
    """Replay of a multi whose third entry cannot apply (a corrupt or foreign log) is an
    EditLogReplayError, and the first two entries are put back."""
    ns = Namespace(root_mtime_ms=0)
    ns.mkdir("/x", mtime_ms=1)
    digest, counts = ns.digest(), (ns.dir_count, ns.file_count)
    multi = edits_pb2.MultiOp(entries=[
        edits_pb2.MultiEntry(mkdir=edits_pb2.MkdirOp(
            path="/x/y", mtime_ms=2, permission=0o755, owner="o", group="g")),
        edits_pb2.MultiEntry(delete=edits_pb2.DeleteOp(path="/x", recursive=True, mtime_ms=3)),
        edits_pb2.MultiEntry(delete=edits_pb2.DeleteOp(path="/x", mtime_ms=4)),
    ])
    op = edits_pb2.EditOp(txid=ns.last_applied_txid + 1, multi=multi)
    with pytest.raises(EditLogReplayError, match="multi op 2 of 3 refused"):
        ns.apply(op)
    assert ns.digest() == digest and (ns.dir_count, ns.file_count) == counts
    assert ns.last_applied_txid == op.txid - 1


# -- paged listings (docs/protocol.md §13.6) -------------------------------------------------


def test_a_listing_pages_after_a_name_and_by_bytes() -> None:
    ns = Namespace(root_mtime_ms=0)
    ns.mkdir("/d", mtime_ms=1)
    names = [f"n{i:04d}" for i in range(2500)]
    for name in names:
        ns.create(f"/d/{name}", mtime_ms=1)
    pages, after = [], ""
    while True:
        page, more = ns.list_page("/d", start_after=after, limit=1000)
        pages.append(page)
        if not more:
            break
        after = page[-1].path.rsplit("/", 1)[1]
    assert [len(p) for p in pages] == [1000, 1000, 500]
    assert [s for p in pages for s in p] == ns.list("/d")
    # A page stops at its byte bound first, with at least one entry.
    long = "x" * 200
    for i in range(30):
        ns.create(f"/d/{long}{i:02d}", mtime_ms=1)
    page, more = ns.list_page("/d", start_after="n2499", limit=1000, max_bytes=2000)
    assert more and 1 <= len(page) < 30
    assert sum(len(s.path) + 64 for s in page) <= 2000
    # A file is its own page; a name past the last leaves nothing.
    assert ns.list_page("/d/n0001") == ([ns.stat("/d/n0001")], False)
    assert ns.list_page("/d", start_after="zzz") == ([], False)
