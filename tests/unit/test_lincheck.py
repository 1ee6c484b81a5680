"""The linearizability checker of hachaos (``hachaos/checker.py``): its model table, known-good
and known-bad histories (among them the three anomalies of issue 11), the smallest anomalous
sub-history it reports, and seeded random histories that are linearizable by construction."""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from typing import Any

import pytest

from hachaos import checker as checker_module
from hachaos.checker import (
    STATES,
    HistoryError,
    Op,
    _first_true,
    _quiescent_starts,
    check_history,
    check_key,
    format_ops,
    minimal_anomaly,
    parse_history,
    split_by_key,
    step,
)

INF = math.inf


def history(*ops: tuple[Any, ...], keys: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """JSONL records from ``(process, key, f, answer, invoke, complete[, parents])``:
    answer None is an indeterminate completion (``info``), "FAIL" a ``fail``, complete INF
    no completion at all."""
    records: list[dict[str, Any]] = [{"type": "meta", "keys": list(keys)}] if keys else []
    events: list[tuple[float, int, dict[str, Any]]] = []
    for process, key, f, answer, invoke, complete, *rest in ops:
        parents = bool(rest and rest[0])
        events.append(
            (
                invoke,
                0,
                {
                    "type": "invoke",
                    "process": process,
                    "key": key,
                    "f": f,
                    "args": {"parents": parents},
                    "time": invoke,
                },
            )
        )
        if complete == INF:
            continue
        kind = "info" if answer is None else "fail" if answer == "FAIL" else "ok"
        done = {"type": kind, "process": process, "key": key, "f": f, "time": complete}
        if kind == "ok":
            done["value"] = answer
        events.append((complete, 1, done))
    records += [record for _, _, record in sorted(events, key=lambda e: (e[0], e[1]))]
    return records


def verdict(records: list[Mapping[str, Any]]) -> dict[str, bool | None]:
    result = check_history(parse_history(records))
    return {r.key: r.linearizable for r in result.keys}


# -- the model -----------------------------------------------------------------------------------

MODEL_TABLE = [
    # state, op, parents, next state, answer
    ("absent", "mkdir", False, "dir", "created"),
    ("dir", "mkdir", False, "dir", "exists"),
    ("file", "mkdir", False, "file", "exists"),
    ("absent", "mkdir", True, "dir", "created"),
    ("dir", "mkdir", True, "dir", "noop"),
    ("file", "mkdir", True, "file", "exists"),
    ("absent", "create", False, "file", "created"),
    ("dir", "create", False, "dir", "is-dir"),
    ("file", "create", False, "file", "exists"),
    ("absent", "delete", False, "absent", "not-found"),
    ("dir", "delete", False, "absent", "deleted"),
    ("file", "delete", False, "absent", "deleted"),
    *((s, "stat", False, s, s) for s in STATES),
    *((s, "ls", False, s, s) for s in STATES),
]


@pytest.mark.parametrize(("state", "f", "parents", "after", "answer"), MODEL_TABLE)
def test_model_table(state: str, f: str, parents: bool, after: str, answer: str) -> None:
    assert step(state, f, parents) == (after, answer)


# -- known-good histories -------------------------------------------------------------------------


def test_sequential_history_is_linearizable() -> None:
    records = history(
        (1, "k", "mkdir", "created", 0, 1),
        (1, "k", "mkdir", "noop", 2, 3, True),
        (2, "k", "create", "is-dir", 4, 5),
        (2, "k", "delete", "deleted", 6, 7),
        (1, "k", "stat", "absent", 8, 9),
        (1, "k", "create", "created", 10, 11),
        (2, "k", "mkdir", "exists", 12, 13, True),
    )
    assert verdict(records) == {"k": True}


def test_concurrent_reads_may_see_either_side_of_a_write() -> None:
    records = history(
        (1, "k", "create", "created", 0, 10),
        (2, "k", "stat", "file", 1, 2),  # the create took effect early...
        (3, "k", "stat", "absent", 3, 4),  # ...no: this read says it had not yet
    )
    assert verdict(records) == {"k": False}
    records = history(
        (1, "k", "create", "created", 0, 10),
        (2, "k", "stat", "absent", 1, 2),
        (3, "k", "stat", "file", 3, 4),
        (4, "k", "stat", "file", 5, 11),
    )
    assert verdict(records) == {"k": True}


def test_indeterminate_mutation_may_take_effect_late_or_never() -> None:
    late = history(
        (1, "k", "mkdir", None, 0, 1),  # timed out
        (2, "k", "stat", "absent", 5, 6),
        (3, "k", "stat", "dir", 7, 8),  # took effect after the timeout
    )
    assert verdict(late) == {"k": True}
    never = history(
        (1, "k", "create", None, 0, 1),
        (2, "k", "stat", "absent", 5, 6),
        (2, "k", "create", "created", 7, 8),
    )
    assert verdict(never) == {"k": True}
    unfinished = history((1, "k", "delete", None, 0, INF), (2, "k", "mkdir", "created", 1, 2))
    assert verdict(unfinished) == {"k": True}


def test_indeterminate_mutation_takes_effect_at_most_once() -> None:
    records = history(
        (1, "k", "mkdir", None, 0, 1),
        (2, "k", "stat", "dir", 2, 3),
        (2, "k", "delete", "deleted", 4, 5),
        (3, "k", "stat", "dir", 6, 7),  # the one mkdir cannot apply twice
    )
    assert verdict(records) == {"k": False}


def test_indeterminate_op_cannot_take_effect_before_its_invocation() -> None:
    records = history((2, "k", "stat", "dir", 0, 1), (1, "k", "mkdir", None, 2, 3))
    assert verdict(records) == {"k": False}


def test_failed_operations_never_took_effect() -> None:
    records = history((1, "k", "create", "FAIL", 0, 1), (2, "k", "stat", "absent", 2, 3))
    assert verdict(records) == {"k": True}
    records = history((1, "k", "create", "FAIL", 0, 1), (2, "k", "stat", "file", 2, 3))
    assert verdict(records) == {"k": False}


def test_keys_are_checked_independently() -> None:
    records = history(
        (1, "a", "mkdir", "created", 0, 1),
        (2, "b", "create", "created", 0, 1),
        (1, "a", "stat", "dir", 2, 3),
        (2, "b", "stat", "absent", 2, 3),  # b is wrong, a is right
        keys=("a", "b", "c"),
    )
    assert verdict(records) == {"a": True, "b": False}


def test_ls_is_projected_onto_every_key() -> None:
    records = history((1, "a", "mkdir", "created", 0, 1), (2, "b", "create", "created", 0, 1))
    records.append({"type": "invoke", "process": 3, "key": "", "f": "ls", "time": 2})
    records.append(
        {
            "type": "ok",
            "process": 3,
            "key": "",
            "f": "ls",
            "time": 3,
            "value": {"a": "dir", "b": "file"},
        }
    )
    assert verdict(records) == {"a": True, "b": True}
    records[-1] = {**records[-1], "value": {"a": "dir", "c": "dir"}}
    # b created but missing from the listing; c listed but never made.
    assert verdict(records) == {"a": True, "b": False, "c": False}


# -- the three anomalies of issue 11 ---------------------------------------------------------


def test_anomaly_deposed_active_answers_a_read_of_a_deleted_path() -> None:
    """Finding 1: the new active deleted k; the fenced old active still says it exists."""
    records = history(
        (1, "k", "create", "created", 0.0, 0.1),  # on nn1, then active
        (2, "k", "stat", "file", 0.2, 0.3),
        (3, "k", "delete", "deleted", 2.0, 2.1),  # on nn2, the new active
        (4, "k", "stat", "file", 2.5, 2.6),  # nn1, deposed, from its frozen namespace
        (5, "j", "mkdir", "created", 0.0, 0.1),
        (5, "j", "mkdir", "noop", 2.5, 2.6, True),  # an unrelated key stays fine
    )
    assert verdict(records) == {"j": True, "k": False}
    result = check_history(parse_history(records))
    anomaly = result.anomalies["k"]
    assert [(op.f, op.value) for op in anomaly] == [("delete", "deleted"), ("stat", "file")]
    assert set(result.anomalies) == {"k"}


def test_anomaly_read_sees_the_old_namespace_during_step_down() -> None:
    """Finding 2: while the old active syncs END and finalizes, reads still see ACTIVE."""
    records = history(
        (1, "k", "mkdir", "created", 0.0, 0.1),
        (2, "k", "delete", "deleted", 3.0, 3.1),  # the new active
        (3, "k", "stat", "absent", 3.05, 3.2),  # concurrent: fine either way
        keys=("k",),
    )
    records.append({"type": "invoke", "process": 4, "key": "", "f": "ls", "time": 3.5})
    records.append(
        {"type": "ok", "process": 4, "key": "", "f": "ls", "time": 3.6, "value": {"k": "dir"}}
    )  # the stepping-down active's listing
    assert verdict(records) == {"k": False}
    anomaly = check_history(parse_history(records)).anomalies["k"]
    assert [(op.f, op.value) for op in anomaly] == [("delete", "deleted"), ("ls", "dir")]


@pytest.mark.parametrize(
    ("name", "answered"),
    [
        # mkdir -p answered "it exists" because of the in-flight mkdir
        ("no-op mkdir", (2, "k", "mkdir", "noop", 1, 2, True)),
        # create refused with PathExists because of the in-flight create
        ("refused create", (2, "k", "create", "exists", 1, 2)),
        # a read on the active saw the in-flight edit
        ("read", (2, "k", "stat", "dir", 1, 2)),
    ],
)
def test_anomaly_answer_depends_on_an_edit_that_never_became_durable(
    name: str, answered: tuple[Any, ...]
) -> None:
    """Finding 3: the edit that the answer observed failed to sync; the new active (and
    every later answer) does not have it."""
    f = "create" if answered[2] == "create" else "mkdir"
    records = history(
        (1, "k", f, None, 0, 1),  # its sync failed: the client timed out
        answered,
        (3, "k", "stat", "absent", 3, 4),  # the new active never had it
    )
    assert verdict(records) == {"k": False}, name
    anomaly = check_history(parse_history(records)).anomalies["k"]
    assert [op.f for op in anomaly if not op.indeterminate] == [answered[2], "stat"]


# -- the smallest anomalous sub-history ------------------------------------------------------


def test_minimal_anomaly_is_a_small_non_linearizable_sub_history() -> None:
    rng = random.Random(11)
    ops: list[tuple[Any, ...]] = []
    t = 0.0
    state = "absent"
    for _ in range(60):  # a long correct prefix, sequential
        f = rng.choice(["mkdir", "create", "delete", "stat"])
        state, answer = step(state, f)
        ops.append((rng.randrange(8), "k", f, answer, t, t + 0.5))
        t += 1
    ops.append((1, "k", "delete", "deleted", t, t + 0.5))
    ops.append((2, "k", "stat", "file", t + 1, t + 1.5))  # cannot be: nothing made it
    ops.append((3, "k", "stat", "absent", t + 2, t + 2.5))
    parsed = parse_history(history(*ops))
    result = check_history(parsed)
    assert not result.ok
    anomaly = list(result.anomalies["k"])
    assert [(op.f, op.value) for op in anomaly] == [("delete", "deleted"), ("stat", "file")]
    # It is a sub-history, and not linearizable from any state.
    originals = {(op.f, op.value, op.invoke, op.complete) for op in parsed.ops}
    assert all((op.f, op.value, op.invoke, op.complete) in originals for op in anomaly)
    assert check_key(anomaly, STATES).linearizable is False
    text = format_ops(anomaly)
    assert "delete k -> deleted" in text and "stat k -> file" in text


def test_minimal_anomaly_keeps_the_pending_operation_that_matters() -> None:
    records = history(
        (1, "k", "mkdir", None, 0, 1),
        (2, "k", "mkdir", "noop", 1, 2, True),
        (3, "k", "stat", "absent", 3, 4),
    )
    ops = split_by_key(parse_history(records).ops)["k"]
    anomaly = minimal_anomaly(ops)
    assert [(op.f, op.value) for op in anomaly] == [
        ("mkdir", None),
        ("mkdir", "noop"),
        ("stat", "absent"),
    ]
    assert "-> ?" in format_ops(anomaly)


def test_minimal_anomaly_drops_a_window_of_reads_in_few_searches(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The shape hachaos met under partition-jns: a create that hangs for seconds, and whose
    # answer is the contradiction, keeps every read of those seconds in a window that no
    # quiescent start can cut, and one of them matters. Dropping them one at a time took
    # 2,000 searches of 2,000 ops (33 s for one key).
    ops: list[tuple[Any, ...]] = [(1, "k", "mkdir", "created", 0, 1)]
    ops.append((2, "k", "create", "is-dir", 2, 3000))  # answers while the reads go on
    ops.append((9, "k", "delete", None, 2.5, INF))  # pending: a file may follow it...
    for i in range(1000):
        t = 3 + i * 2
        ops.append((3 + i % 5, "k", "stat", "dir" if i < 500 else "file", t, t + 1))
    # ... but only a create makes one, and the only create found a directory.
    parsed = split_by_key(parse_history(history(*ops)).ops)["k"]
    searches = 0
    real_check_key = checker_module.check_key

    def counting_check_key(*args: Any, **kwargs: Any) -> Any:
        nonlocal searches
        searches += 1
        return real_check_key(*args, **kwargs)

    monkeypatch.setattr(checker_module, "check_key", counting_check_key)
    anomaly = minimal_anomaly(parsed)
    assert [(op.f, op.value) for op in anomaly] == [
        ("create", "is-dir"),
        ("delete", None),
        ("stat", "file"),
    ]
    assert real_check_key(anomaly, STATES).linearizable is False
    assert searches < 200, searches


def test_budget_exhausted_is_unknown_not_linearizable() -> None:
    records = history(
        *((p, "k", "mkdir", None, 0, 1) for p in range(6)),
        (9, "k", "stat", "dir", 2, 3),
        (9, "k", "stat", "file", 4, 5),
    )
    ops = split_by_key(parse_history(records).ops)["k"]
    assert check_key(ops, max_steps=3).linearizable is None
    assert check_key(ops).linearizable is False


# -- random histories, linearizable by construction ------------------------------------------


def random_history(
    rng: random.Random, processes: int, per_process: int, lost_rate: float = 0.15
) -> tuple[list[dict[str, Any]], str]:
    """Each op takes effect at a random instant of its interval; answers follow the model in
    the order of those instants. Some completions are lost (``info``): those ops take effect
    or not, at a random instant after their invocation. Also returns the final state."""
    planned: list[tuple[float, int, str, bool, float, float, bool]] = []
    for process in range(processes):
        t = rng.uniform(0, 1)
        for _ in range(per_process):
            f = rng.choice(["mkdir", "mkdir", "create", "delete", "stat", "ls"])
            parents = f == "mkdir" and rng.random() < 0.5
            duration = rng.uniform(0.01, 2.0)
            lost = rng.random() < lost_rate
            point = t + rng.uniform(0, duration * (3 if lost else 1))
            applied = not lost or rng.random() < 0.5
            if applied:
                planned.append((point, process, f, parents, t, t + duration, lost))
            elif f not in ("stat", "ls"):
                planned.append((INF, process, f, parents, t, t + duration, lost))
            t += duration + rng.uniform(0, 0.5)
    state = "absent"
    ops: list[tuple[Any, ...]] = []
    for point, process, f, parents, invoke, complete, lost in sorted(planned):
        if point != INF:
            state, answer = step(state, f, parents)
        value: Any = None if lost else answer
        if f == "ls" and not lost:
            value = {} if answer == "absent" else {"k": answer}
        ops.append((process, "" if f == "ls" else "k", f, value, invoke, complete, parents))
    return history(*ops, keys=("k",)), state


@pytest.mark.parametrize("seed", range(20))
def test_random_linearizable_histories_pass(seed: int) -> None:
    print(f"seed={seed}")
    records, _ = random_history(random.Random(seed), processes=8, per_process=30)
    result = check_history(parse_history(records))
    assert result.ok, (seed, result.anomalies)


@pytest.mark.parametrize("seed", range(10))
def test_random_history_with_a_stale_read_appended_fails(seed: int) -> None:
    """No completion lost (so nothing pending can explain it): after the history, a read
    that sees another state than the last write left."""
    print(f"seed={seed}")
    rng = random.Random(seed)
    records, final = random_history(rng, processes=4, per_process=20, lost_rate=0.0)
    assert check_history(parse_history(records)).ok
    end = max(r["time"] for r in records if "time" in r) + 1
    stale = rng.choice([s for s in STATES if s != final])
    records += [
        {"type": "invoke", "process": 98, "key": "k", "f": "stat", "time": end},
        {"type": "ok", "process": 98, "key": "k", "f": "stat", "time": end + 0.1, "value": stale},
    ]
    result = check_history(parse_history(records))
    assert not result.ok, seed
    anomaly = result.anomalies["k"]
    assert (anomaly[-1].f, anomaly[-1].value) == ("stat", stale)
    assert check_key(anomaly, STATES).linearizable is False


# -- malformed histories ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("records", "message"),
    [
        (
            [
                {"type": "invoke", "process": 1, "key": "k", "f": "stat", "time": 0},
                {"type": "invoke", "process": 1, "key": "k", "f": "stat", "time": 1},
            ],
            "line 2: process 1 invokes while its call of line 1",
        ),
        (
            [{"type": "ok", "process": 1, "key": "k", "f": "stat", "time": 0, "value": "dir"}],
            "line 1: completion of process 1 with no invocation",
        ),
        (
            [
                {"type": "invoke", "process": 1, "key": "k", "f": "stat", "time": 0},
                {"type": "ok", "process": 1, "key": "k", "f": "stat", "time": 1, "value": "gone"},
            ],
            "stat answered 'gone'",
        ),
        (
            [{"type": "invoke", "process": 1, "key": "k", "f": "rename", "time": 0}],
            "line 1: unknown operation 'rename'",
        ),
        (
            [
                {"type": "invoke", "process": 1, "key": "k", "f": "stat", "time": 2},
                {"type": "ok", "process": 1, "key": "k", "f": "stat", "time": 1, "value": "dir"},
            ],
            "line 2: completes before its invocation",
        ),
    ],
)
def test_malformed_history_is_refused(records: list[dict[str, Any]], message: str) -> None:
    with pytest.raises(HistoryError, match=message):
        parse_history(records)


def test_op_describe() -> None:
    op = Op(0, 3, "k", "mkdir", True, None, 1.0, INF)
    assert op.describe().endswith("p3   mkdir -p k -> ?")


@pytest.mark.parametrize("n", range(0, 9))
@pytest.mark.parametrize("guess", range(-1, 10))
def test_first_true_finds_the_boundary_from_any_guess(n: int, guess: int) -> None:
    for boundary in range(n + 1):  # pred is false below boundary, true from it
        calls: list[int] = []

        def pred(i: int, boundary: int = boundary, calls: list[int] = calls) -> bool:
            assert 0 <= i < n
            calls.append(i)
            return i >= boundary

        expected = boundary if boundary < n else None
        assert _first_true(pred, n, guess) == expected, (n, guess, boundary)


def test_quiescent_starts() -> None:
    ops = [
        Op(0, 1, "k", "stat", False, "absent", 0.0, 1.0),
        Op(1, 2, "k", "stat", False, "absent", 0.5, 2.0),  # 0.5 is inside op 0
        Op(2, 1, "k", "stat", False, "absent", 2.5, 3.0),
        Op(3, 2, "k", "stat", False, "absent", 2.5, 2.6),
        Op(4, 1, "k", "stat", False, "absent", 3.0, 4.0),  # 3.0 touches op 2's completion
    ]
    assert _quiescent_starts(ops) == [0.0, 2.5]
