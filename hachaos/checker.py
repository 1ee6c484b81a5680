"""The linearizability checker of ``hachaos`` (issue 11): is there one order of the
operations, each taking effect at an instant between its invocation and its completion,
that a single namespace would have answered exactly as the clients were answered?

The search is Wing and Gong's, in Lowe's form with memoization (as Porcupine does it): walk
the invocation/completion events in time order; at an invocation, try to linearize that
operation now (the model must give the answer the client got), lift it out of the list and
start again from the head; at a completion of an operation not yet linearized, backtrack. A
configuration (set of linearized operations, model state) already explored is never explored
again, so the search is polynomial on the histories a small key set produces.

- **P-compositionality.** Every key is an independent object (its own path directly under
  the workload's root directory), so the history is split by key and each key is checked
  alone: a history is linearizable if and only if each key's is.
- **The model of a key** is its path: ``absent``, ``dir`` or ``file``. ``step`` gives, for a
  state and an operation, the next state and the one answer a correct namespace gives:

  ======================= ============ ============ ============
  operation                absent       dir          file
  ======================= ============ ============ ============
  ``mkdir``                created→dir  exists       exists
  ``mkdir`` (parents)      created→dir  noop         exists
  ``create``               created→file is-dir       exists
  ``delete``               not-found    deleted→absent deleted→absent
  ``stat``, ``ls``         absent       dir          file
  ======================= ============ ============ ============

  ``ls`` of the root directory answers for every key at once; it is projected onto each key
  as a read of that key's state over the same interval (a key not listed is ``absent``).
  The projections are necessary conditions of the whole listing being linearizable, so a
  key's violation is a real one; a listing that is right key by key but shows two keys at
  inconsistent moments is not detected (no key set snapshot in this model).
- **Indeterminate operations** (``info``: a timeout, an exhausted retry budget) may take
  effect at any instant after their invocation, or never; their answer is unknown. They are
  given a completion at +infinity, so the search may place them anywhere after their
  invocation, and they need not be placed before the search ends (all determinate
  operations placed means success). Two indeterminate operations with the same call are
  interchangeable, so only the earliest invoked of those not yet placed is tried (an
  exponential fan-out otherwise). An indeterminate read is dropped: it changes nothing.
- **Failed operations** (``fail``: certainly never applied) are dropped.

``minimal_anomaly`` shrinks a key's non-linearizable history to a small sub-history that is
itself non-linearizable from *any* starting state, using only reductions that keep the
implication "the sub-history is not linearizable, so neither is the history": the shortest
failing prefix (operations completing after the cut become indeterminate), then the latest
quiescent start (no determinate operation in flight; indeterminate ones still pending are
kept), then dropping reads that are not needed.

History lines (JSONL; ``hachaos.history`` writes them)::

    {"type": "invoke", "process": 3, "key": "k1", "f": "mkdir", "args": {"parents": true},
     "time": 12.5}
    {"type": "ok", "process": 3, "key": "k1", "f": "mkdir", "value": "noop", "time": 12.6}
    {"type": "invoke", "process": 4, "key": "", "f": "ls", "args": {}, "time": 12.7}
    {"type": "ok", "process": 4, "key": "", "f": "ls", "value": {"k1": "dir"}, "time": 12.8}

``type`` is ``invoke``, ``ok``, ``fail``, ``info``, or ``meta`` (read for the key set), or
``nemesis``, ``ack``, ``note`` (for the reader; skipped); ``process`` issues one operation
at a time; an invocation with no completion is indeterminate.
"""

from __future__ import annotations

import bisect
import itertools
import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

__all__ = [
    "ANSWERS",
    "MUTATIONS",
    "READS",
    "STATES",
    "CheckResult",
    "HistoryError",
    "KeyResult",
    "Op",
    "check_history",
    "check_key",
    "format_ops",
    "minimal_anomaly",
    "parse_history",
    "read_history",
    "split_by_key",
    "step",
]

ABSENT, DIR, FILE = "absent", "dir", "file"
STATES: tuple[str, ...] = (ABSENT, DIR, FILE)
MUTATIONS = frozenset({"mkdir", "create", "delete"})
READS = frozenset({"stat", "ls"})
ANSWERS: Mapping[str, frozenset[str]] = {
    "mkdir": frozenset({"created", "exists", "noop"}),
    "create": frozenset({"created", "exists", "is-dir"}),
    "delete": frozenset({"deleted", "not-found"}),
    "stat": frozenset(STATES),
    "ls": frozenset(STATES),
}
"""Every answer an operation can have; anything else in a history is an error."""

NOTES = frozenset({"nemesis", "ack", "note"})
"""History lines for the reader, which the checker skips."""

DEFAULT_MAX_STEPS = 2_000_000
"""Search steps (at least; ``STEPS_PER_OP`` per operation of the key if more) before the
checker gives up and says it does not know, unless the caller gives ``max_steps``."""
STEPS_PER_OP = 1_000
"""Proving a history of a few thousand operations per key non-linearizable took about 170
steps per operation with 8 concurrent clients; a search is allowed several times that."""


class HistoryError(ValueError):
    """A history line that is malformed or out of order; the message names the line."""


def step(state: str, f: str, parents: bool = False) -> tuple[str, str]:
    """The model: ``(next state, answer)`` of operation ``f`` on a key in ``state``.

    >>> step("absent", "mkdir")
    ('dir', 'created')
    >>> step("dir", "mkdir", parents=True)
    ('dir', 'noop')
    >>> step("file", "delete")
    ('absent', 'deleted')
    """
    if f == "mkdir":
        if state == ABSENT:
            return DIR, "created"
        return state, "noop" if parents and state == DIR else "exists"
    if f == "create":
        if state == ABSENT:
            return FILE, "created"
        return state, "is-dir" if state == DIR else "exists"
    if f == "delete":
        return ABSENT, "not-found" if state == ABSENT else "deleted"
    if f in READS:
        return state, state
    raise ValueError(f"unknown operation {f!r}")


@dataclass(frozen=True, slots=True)
class Op:
    """One operation of one key: its call, its answer (None: indeterminate) and its interval
    (``complete`` is +inf for an indeterminate operation)."""

    index: int
    process: int
    key: str
    f: str
    parents: bool
    value: str | None
    invoke: float
    complete: float
    error: str | None = None

    @property
    def indeterminate(self) -> bool:
        return self.value is None

    @property
    def call(self) -> tuple[str, bool]:
        """What the operation does, whatever its answer: interchangeable when equal."""
        return self.f, self.parents

    def describe(self) -> str:
        flags = " -p" if self.parents else ""
        answer = "?" if self.value is None else self.value
        end = "      ..." if math.isinf(self.complete) else f"{self.complete:9.3f}"
        return (
            f"{self.invoke:9.3f} {end}  p{self.process:<3} {self.f}{flags} {self.key} -> {answer}"
            + (f"  ({self.error})" if self.error else "")
        )


@dataclass(frozen=True, slots=True)
class History:
    """A parsed history: operations per key (ls projected), and the meta line if any."""

    ops: tuple[Op, ...]
    keys: tuple[str, ...]
    meta: Mapping[str, Any] = field(default_factory=dict)


def _answer(f: str, value: Any, where: str) -> str:
    if not isinstance(value, str) or value not in ANSWERS[f]:
        raise HistoryError(f"{where}: {f} answered {value!r}; expected one of {sorted(ANSWERS[f])}")
    return value


def parse_history(records: Iterable[Mapping[str, Any]]) -> History:
    """Pair invocations with completions per process; project ``ls`` onto every key.

    Keys are those of the meta line (``"keys": [...]``) together with every key an
    operation names or a listing shows."""
    meta: dict[str, Any] = {}
    pending: dict[int, tuple[int, Mapping[str, Any]]] = {}
    raw: list[tuple[Mapping[str, Any], Mapping[str, Any] | None]] = []
    keys: set[str] = set()
    for n, record in enumerate(records, 1):
        where = f"line {n}"
        kind = record.get("type")
        if kind == "meta":
            meta.update(record)
            keys.update(str(k) for k in record.get("keys", ()))
            continue
        if kind in NOTES:
            continue
        try:
            process = int(record["process"])
            f = str(record["f"])
            float(record["time"])
        except (KeyError, TypeError, ValueError) as exc:
            raise HistoryError(f"{where}: needs process, f and time ({exc!r})") from None
        if f not in ANSWERS:
            raise HistoryError(f"{where}: unknown operation {f!r}")
        if kind == "invoke":
            if process in pending:
                raise HistoryError(
                    f"{where}: process {process} invokes while its call of line "
                    f"{pending[process][0]} has no completion"
                )
            pending[process] = (n, record)
            if f != "ls":
                keys.add(str(record.get("key", "")))
        elif kind in ("ok", "fail", "info"):
            if process not in pending:
                raise HistoryError(f"{where}: completion of process {process} with no invocation")
            _, invocation = pending.pop(process)
            if invocation["f"] != f:
                raise HistoryError(
                    f"{where}: completes {f} but process {process} invoked {invocation['f']}"
                )
            if float(record["time"]) < float(invocation["time"]):
                raise HistoryError(f"{where}: completes before its invocation")
            if kind == "fail":
                continue  # certainly never applied
            if kind == "ok" and f == "ls":
                if not isinstance(record.get("value"), Mapping):
                    raise HistoryError(f"{where}: ls answers a {{key: state}} object")
                keys.update(str(k) for k in record["value"])
            raw.append((invocation, record if kind == "ok" else None))
        else:
            raise HistoryError(f"{where}: unknown type {kind!r}")
    raw.extend((invocation, None) for _, invocation in pending.values())

    ops: list[Op] = []
    for invocation, completion in sorted(raw, key=lambda pair: float(pair[0]["time"])):
        f = str(invocation["f"])
        if completion is None and f in READS:
            continue  # an indeterminate read changes nothing
        args = invocation.get("args") or {}
        base = Op(
            index=0,
            process=int(invocation["process"]),
            key=str(invocation.get("key", "")),
            f=f,
            parents=bool(args.get("parents", False)),
            value=None,
            invoke=float(invocation["time"]),
            complete=math.inf if completion is None else float(completion["time"]),
            error=None if completion is None else completion.get("error"),
        )
        if f == "ls":
            assert completion is not None
            listing = completion["value"]
            for key in sorted(keys):
                state = _answer(f, listing.get(key, ABSENT), f"ls of process {base.process}")
                ops.append(replace(base, index=len(ops), key=key, value=state))
            continue
        value = None
        if completion is not None:
            value = _answer(f, completion.get("value"), f"{f} of process {base.process}")
        ops.append(replace(base, index=len(ops), value=value))
    return History(tuple(ops), tuple(sorted(keys)), meta)


def read_history(path: str) -> History:
    """Parse the JSONL history at ``path`` (HistoryError naming the line if it is bad)."""
    records: list[Mapping[str, Any]] = []
    with open(path, encoding="utf-8") as lines:
        for n, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise HistoryError(f"{path}: line {n}: not JSON ({exc})") from None
    return parse_history(records)


def split_by_key(ops: Iterable[Op]) -> dict[str, list[Op]]:
    """Each key's operations in invocation order (the P-compositionality split)."""
    out: dict[str, list[Op]] = {}
    for op in ops:
        out.setdefault(op.key, []).append(op)
    return out


# -- the search ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class KeyResult:
    """The verdict on one key: ``linearizable`` is None when the step budget ran out.
    ``stuck`` is the operation whose completion the deepest partial linearization could not
    pass (a pointer for a reader, not a proof)."""

    key: str
    linearizable: bool | None
    ops: int
    steps: int
    stuck: Op | None = None


def _search(ops: Sequence[Op], initial: str, max_steps: int) -> tuple[bool | None, int, int]:
    """Wing-Gong-Lowe over one key from ``initial``: (verdict, steps, stuck op index)."""
    n = len(ops)
    if n == 0:
        return True, 0, -1
    # Event nodes: 2*i is the call of op i, 2*i+1 its completion; HEAD/TAIL are sentinels.
    events = sorted(
        [(op.invoke, 0, 2 * i) for i, op in enumerate(ops)]
        + [(op.complete, 1, 2 * i + 1) for i, op in enumerate(ops)]
    )
    head, tail = 2 * n, 2 * n + 1
    nxt = [0] * (2 * n + 2)
    prv = [0] * (2 * n + 2)
    order = [head, *(node for _, _, node in events), tail]
    for a, b in itertools.pairwise(order):
        nxt[a] = b
        prv[b] = a

    def lift(node: int) -> None:
        for x in (node, node + 1):
            nxt[prv[x]] = nxt[x]
            prv[nxt[x]] = prv[x]

    def unlift(node: int) -> None:
        for x in (node + 1, node):
            nxt[prv[x]] = x
            prv[nxt[x]] = x

    # Interchangeable indeterminate ops: only the earliest unplaced one of a call is tried.
    before_same = [-1] * n
    last_of: dict[tuple[str, bool], int] = {}
    for i, op in enumerate(ops):
        if op.indeterminate:
            before_same[i] = last_of.get(op.call, -1)
            last_of[op.call] = i
    determinate = sum(1 for op in ops if not op.indeterminate)

    cache: set[tuple[int, str]] = set()
    stack: list[tuple[int, str, bool]] = []
    linearized = 0
    placed = 0
    state = initial
    steps = 0
    deepest, stuck = -1, -1
    entry = nxt[head]
    while placed < determinate:
        steps += 1
        if steps > max_steps:
            return None, steps, stuck
        if entry == tail:  # only indeterminate completions were left to pass
            return True, steps, -1
        i = entry // 2
        if entry % 2 == 0:
            op = ops[i]
            earlier = before_same[i]
            if earlier < 0 or linearized >> earlier & 1:
                new_state, answer = step(state, op.f, op.parents)
                if op.value is None or answer == op.value:
                    config = (linearized | 1 << i, new_state)
                    if config not in cache:
                        cache.add(config)
                        stack.append((entry, state, not op.indeterminate))
                        state = new_state
                        linearized |= 1 << i
                        placed += not op.indeterminate
                        lift(entry)
                        entry = nxt[head]
                        continue
            entry = nxt[entry]
            continue
        # A completion of an op not yet linearized: this branch is dead.
        if placed > deepest:
            deepest, stuck = placed, i
        if not stack:
            return False, steps, stuck
        entry, state, was_determinate = stack.pop()
        linearized &= ~(1 << entry // 2)
        placed -= was_determinate
        unlift(entry)
        entry = nxt[entry]
    return True, steps, -1


def check_key(
    ops: Sequence[Op],
    initial: Iterable[str] = (ABSENT,),
    *,
    max_steps: int | None = None,
) -> KeyResult:
    """Is this one key's history linearizable from one of the ``initial`` states?"""
    key = ops[0].key if ops else ""
    total = 0
    verdict: bool | None = False
    stuck = -1
    for start in initial:
        budget = max_steps or max(DEFAULT_MAX_STEPS, STEPS_PER_OP * len(ops))
        found, steps, at = _search(ops, start, budget)
        total += steps
        if found:
            return KeyResult(key, True, len(ops), total)
        if found is None:
            verdict = None
        stuck = at if at >= 0 else stuck
    return KeyResult(key, verdict, len(ops), total, ops[stuck] if stuck >= 0 else None)


# -- the smallest anomalous sub-history ------------------------------------------------------


def _truncate(ops: Sequence[Op], cut: float) -> list[Op]:
    """The history as it stood at ``cut``: later invocations dropped, later completions
    unknown (reads then dropped). Linearizability is prefix-closed, so a non-linearizable
    truncation proves the whole history non-linearizable."""
    out: list[Op] = []
    for op in ops:
        if op.invoke > cut:
            continue
        if op.complete > cut:
            if op.f in READS:
                continue
            op = replace(op, value=None, complete=math.inf, error=None)
        out.append(op)
    return out


def _suffix_from(ops: Sequence[Op], start: float) -> list[Op]:
    """The history from a quiescent instant ``start`` on: determinate ops finished by then
    are dropped, indeterminate ones invoked before it stay pending. From any starting state,
    non-linearizable suffix implies non-linearizable history: a linearization of the whole
    would give one of the suffix from its state at ``start``."""
    return [op for op in ops if op.indeterminate or op.complete >= start]


def _reindex(ops: Sequence[Op]) -> list[Op]:
    return [replace(op, index=i) for i, op in enumerate(ops)]


def _quiescent_starts(determinate: Sequence[Op]) -> list[float]:
    """Invocation instants at which no determinate operation is in flight, in order."""
    out: list[float] = []
    reach = -math.inf  # the latest completion of the ops invoked earlier
    by_invoke = sorted(determinate, key=lambda op: op.invoke)
    for invoke, group in itertools.groupby(by_invoke, key=lambda op: op.invoke):
        if reach < invoke:
            out.append(invoke)
        reach = max(reach, *(op.complete for op in group))
    return out


def _first_true(pred: Callable[[int], bool], n: int, guess: int) -> int | None:
    """The smallest ``i`` in ``range(n)`` with ``pred(i)``, for a ``pred`` false then true
    (monotone); None if ``pred(n - 1)`` is false. Gallops down from ``guess`` first, so a
    guess near the answer costs a few calls of ``pred`` instead of a full bisection."""
    if n == 0:
        return None
    guess = min(max(guess, 0), n - 1)
    width = 1
    if pred(guess):
        hi, lo = guess, guess - 1
        while lo >= 0 and pred(lo):
            hi, width = lo, width * 2
            lo = hi - width
        lo = max(lo, -1)  # pred(lo) is false, or lo is before the range
    else:
        lo, hi = guess, guess + 1
        while hi < n and not pred(hi):
            lo, width = hi, width * 2
            hi = lo + width
        if hi >= n:
            if lo == n - 1 or not pred(n - 1):
                return None
            hi = n - 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if pred(mid):
            hi = mid
        else:
            lo = mid
    return hi


def minimal_anomaly(
    ops: Sequence[Op], *, stuck: Op | None = None, max_steps: int | None = None
) -> list[Op]:
    """A small sub-history of one key that is not linearizable from any state, found by
    sound reductions only (module docstring). ``ops`` must not be linearizable from
    ``absent``; the result is ``ops`` itself when no reduction applies. ``stuck`` is the
    search's ``KeyResult.stuck``, if known (where to look first)."""

    def bad(candidate: Sequence[Op], initial: Iterable[str] = (ABSENT,)) -> bool:
        # The search reads positions, not ``Op.index``: only the result is reindexed.
        return check_key(candidate, initial, max_steps=max_steps).linearizable is False

    current = list(ops)
    # 1. The shortest failing prefix: a cut at a determinate completion; failing is monotone
    # in the cut, and the violation is usually near where the search got stuck, so gallop
    # down from there.
    cuts = sorted({op.complete for op in current if not op.indeterminate})
    if stuck is None:
        stuck = check_key(_reindex(current), max_steps=max_steps).stuck
    guess = bisect.bisect_left(cuts, stuck.complete) if stuck else len(cuts) - 1
    first = _first_true(lambda i: bad(_truncate(current, cuts[i])), len(cuts), guess)
    if first is not None:
        current = _truncate(current, cuts[first])
    # 2. The latest quiescent start from which it fails whatever the state was. A start
    # that fails makes every earlier one fail too (its suffix is a reduction of theirs).
    starts = _quiescent_starts([op for op in current if not op.indeterminate])
    last = _first_true(lambda i: bad(_suffix_from(current, starts[-1 - i]), STATES), len(starts), 0)
    if last is None:
        return _reindex(current)  # fails only from the empty start: keep it whole
    current = _suffix_from(current, starts[-1 - last])
    # 3. Reads that are not needed for the violation, dropped in halves, then quarters, and
    # so on down to one at a time (a write left pending through a partition can keep
    # thousands of reads in the window, and few of them matter).
    reads = [op for op in current if op.f in READS]
    chunk = max(1, len(reads) // 2)
    while True:
        i = 0
        while i < len(reads) and len(current) > 1:
            dropped = {id(op) for op in reads[i : i + chunk]}
            without = [o for o in current if id(o) not in dropped]
            if without and bad(without, STATES):
                current = without
                del reads[i : i + chunk]
            else:
                i += chunk
        if chunk == 1:
            return _reindex(current)
        chunk = max(1, chunk // 2)


# -- a whole history -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CheckResult:
    """Per-key verdicts; ``anomalies`` holds, for each key found not linearizable, its
    smallest anomalous sub-history."""

    keys: tuple[KeyResult, ...]
    anomalies: Mapping[str, tuple[Op, ...]]

    @property
    def ok(self) -> bool:
        return all(result.linearizable for result in self.keys)

    @property
    def unknown(self) -> list[str]:
        return [r.key for r in self.keys if r.linearizable is None]

    @property
    def operations(self) -> int:
        return sum(r.ops for r in self.keys)


def check_history(
    history: History, *, initial: str = ABSENT, max_steps: int | None = None
) -> CheckResult:
    """Check every key of ``history`` from ``initial`` (a fresh root: every key absent)."""
    results: list[KeyResult] = []
    anomalies: dict[str, tuple[Op, ...]] = {}
    by_key = split_by_key(history.ops)
    for key in sorted(by_key):
        ops = _reindex(by_key[key])
        result = check_key(ops, (initial,), max_steps=max_steps)
        results.append(result)
        if result.linearizable is False:
            anomalies[key] = tuple(minimal_anomaly(ops, stuck=result.stuck, max_steps=max_steps))
    return CheckResult(tuple(results), anomalies)


def format_ops(ops: Iterable[Op]) -> str:
    """One line per operation: invoked, completed (``...``: never known), process, call,
    answer (``?``: indeterminate)."""
    return "\n".join(op.describe() for op in ops)
