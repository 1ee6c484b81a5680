"""``BatchedApply``: the standby's tailer hands the ops it read to the loop in batches, in
order, and stops at the first op the namesystem refuses (tailing disabled by a transition)."""

from __future__ import annotations

from hanamenode.tailer import BatchedApply
from proto import edits_pb2


def ops(first: int, count: int) -> list[edits_pb2.EditOp]:
    return [edits_pb2.EditOp(txid=t) for t in range(first, first + count)]


def test_ops_go_in_order_in_batches_and_the_rest_on_flush() -> None:
    batches: list[list[int]] = []

    def apply_many(batch: list[edits_pb2.EditOp]) -> int:
        batches.append([op.txid for op in batch])
        return len(batch)

    batched = BatchedApply(apply_many, size=3)
    assert all(batched(op) for op in ops(1, 7))
    assert batches == [[1, 2, 3], [4, 5, 6]]
    assert batched.flush()
    assert batches == [[1, 2, 3], [4, 5, 6], [7]]
    assert (batched.applied, batched.last_txid) == (7, 7)
    assert batched.flush() and batches[-1] == [7]  # nothing pending: no empty batch


def test_a_refusal_stops_the_load_and_counts_only_what_was_applied() -> None:
    def apply_two(batch: list[edits_pb2.EditOp]) -> int:
        return min(2, len(batch))  # tailing disabled after the second op

    batched = BatchedApply(apply_two, size=3)
    results = [batched(op) for op in ops(10, 3)]
    assert results == [True, True, False]
    assert batched.refused and not batched(edits_pb2.EditOp(txid=13))
    assert not batched.flush()
    assert (batched.applied, batched.last_txid) == (2, 11)


def test_nothing_applied_leaves_last_txid_zero() -> None:
    batched = BatchedApply(lambda batch: 0, size=2)
    assert batched(edits_pb2.EditOp(txid=5))
    assert not batched(edits_pb2.EditOp(txid=6))
    assert (batched.applied, batched.last_txid) == (0, 0)
