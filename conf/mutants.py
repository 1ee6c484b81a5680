"""Planted bugs ("mutants"): named switches, all off, that re-introduce known bugs on purpose.

A test suite earns trust by failing when the code is wrong. Each ``Mutant`` names one bug we
fixed or guard against, and the product code checks ``mutants.active(Mutant.X)`` at the one
place where that bug would change behaviour. The simulator (``python -m qjm.sim mutants``),
the regression sweeps in ``tests/`` and ``hapipe soak --mutants`` switch them on one at a time
and count the seeds that catch each; a mutant nobody catches is a hole in the tests.

Everything is off unless asked for, in one of two ways:

* in-process (simulator, tests)::

      from conf.mutants import Mutant, planted
      with planted(Mutant.IGNORE_WRITER_EPOCH):
          run_simulation(seed, steps)

* in a daemon a test starts: the environment variable ``HANAMENODE_MUTANTS=a,b`` (switch
  names, see ``python -m conf.mutants``) is read once, when this module is first imported;
  ``mutant_env(Mutant.X)`` builds it. An unknown name is an error naming it.

``conf`` is the bottom layer, so any package may import this module. To add a mutant: add a
member below with its switch name and a one-line description of the bug it plants, guard the
one place it changes behaviour with ``active(...)``, and add a test that catches it.
"""

from __future__ import annotations

import enum
import os
import threading
import weakref
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

MUTANTS_ENV = "HANAMENODE_MUTANTS"


class Mutant(enum.Enum):
    """A planted bug: ``value`` is its switch name (as on command lines and in the environment),
    ``description`` says what goes wrong when it is on."""

    description: str

    def __new__(cls, switch: str, description: str) -> Mutant:
        member = object.__new__(cls)
        member._value_ = switch
        member.description = description
        return member

    @property
    def switch(self) -> str:
        return str(self.value)

    # --- QJM writer: recovery decision, in-progress reads (qjm/) ---
    IGNORE_WRITER_EPOCH = (
        "ignore-writer-epoch",
        "recovery compares acceptedInEpoch alone and ignores lastWriterEpoch (HDFS-3845)",
    )
    NO_COMMITTED_SANITY_CHECK = (
        "no-committed-sanity-check",
        "recovery does not refuse a decision that ends below a txid known to be committed",
    )
    ACK_FROM_ONE = (
        "ack-from-one",
        "the writer counts a batch acknowledged once one JournalNode has it, not a majority",
    )
    TAIL_SINGLE_JOURNALNODE = (
        "tail-single-journalnode",
        "in-progress tailing applies edits that a single JournalNode holds",
    )
    TAIL_ANY_EPOCH = (
        "tail-any-epoch",
        "in-progress tailing counts JournalNodes whatever writer epoch their edits carry",
    )

    # --- JournalNode: the Journal's rules (journalnode/journal.py) ---
    PROMISE_NOT_PERSISTED = (
        "promise-not-persisted",
        "newEpoch does not persist lastPromisedEpoch (a restart forgets the promise)",
    )
    NEW_EPOCH_EQUAL = (
        "new-epoch-equal",
        "newEpoch promises an epoch equal to the last promise, not only a higher one",
    )
    WRITER_EPOCH_NOT_PERSISTED = (
        "writer-epoch-not-persisted",
        "startLogSegment does not persist lastWriterEpoch (a restart forgets it)",
    )
    ACCEPT_IN_MEMORY_ONLY = (
        "accept-in-memory-only",
        "acceptRecovery keeps the accepted recovery in memory only (lost on restart)",
    )
    ACCEPT_NO_EPOCH = (
        "accept-no-epoch",
        "acceptRecovery records no accepted epoch at all (design doc 2.10.7)",
    )
    START_KEEPS_ACCEPTED = (
        "start-keeps-accepted",
        "startLogSegment keeps an abandoned recovery's accepted record of that segment",
    )
    FINALIZE_WITHOUT_CONTENT_CHECK = (
        "finalize-without-content-check",
        "finalizeLogSegment of a copy the caller is not writing checks its length only (no md5)",
    )

    # --- JournalNode storage and rules (issue 10's survivors; each has a test that fails) ---
    PURGE_INCLUSIVE = (
        "purge-inclusive",
        "purge also removes the segment ending at min_txid_to_keep (< becomes <=), on disk"
        " and in the Journal",
    )
    RESTART_TWO_TXN_SEGMENT = (
        "restart-two-txn-segment",
        "startLogSegment overwrites an in-progress segment holding two transactions",
    )
    APPEND_WITHOUT_FDATASYNC = (
        "append-without-fdatasync",
        "a JournalNode acknowledges an append before fdatasync (never syncs it)",
    )
    TAIL_MAJORITY_OF_ANSWERS = (
        "tail-majority-of-answers",
        "in-progress tailing counts a majority of the JournalNodes that answered, not of all",
    )

    # --- answers of the active NameNode (hanamenode/namesystem.py, qjm/manager.py; issue 11) ---
    FENCED_HEARTBEAT_REFUSAL_IGNORED = (
        "fenced-heartbeat-refusal-ignored",
        "a heartbeat refused for a newer epoch is only logged: the fenced active keeps serving",
    )
    STEP_DOWN_SERVES_DURING_IO = (
        "step-down-serves-during-io",
        "the step-down flips the state after the END-op sync and finalize: ACTIVE meanwhile",
    )
    ROLL_GATE_IN_TASK = (
        "roll-gate-in-task",
        "the active's roll shuts the write gate in its own task: rolls asked together all pass",
    )
    ANSWER_WITHOUT_DURABILITY = (
        "answer-without-durability",
        "reads, no-op and refused mutations answer before the edits they observed are durable",
    )
    READ_WITHOUT_QUORUM_CONFIRMATION = (
        "read-without-quorum-confirmation",
        "the active answers reads without confirming its epoch with a JournalNode quorum",
    )
    RETRY_ANSWER_BEFORE_DURABLE = (
        "retry-answer-before-durable",
        "a retried call is answered from the retry cache before its edit is durable",
    )


_BY_SWITCH = {m.switch: m for m in Mutant}


class MutantError(ValueError):
    """A mutant name that no ``Mutant`` has."""


_lock = threading.Lock()
# Replaced whole, never mutated, so ``active`` reads it without the lock.
_active: frozenset[Mutant] = frozenset()


def parse_mutants(names: str | Iterable[str | Mutant]) -> frozenset[Mutant]:
    """The mutants named by a comma-separated string or an iterable of names or members.

    Raises ``MutantError`` naming every unknown name and listing the known ones."""
    items = names.split(",") if isinstance(names, str) else list(names)
    found: set[Mutant] = set()
    unknown: list[str] = []
    for item in items:
        if isinstance(item, Mutant):
            found.add(item)
            continue
        name = item.strip()
        if not name:
            continue
        # A lookup by switch, not Mutant(name): the members' __new__ takes two arguments.
        mutant = _BY_SWITCH.get(name)
        if mutant is None:
            unknown.append(name)
        else:
            found.add(mutant)
    if unknown:
        known = ", ".join(m.switch for m in Mutant)
        raise MutantError(f"unknown mutant(s) {', '.join(unknown)}; known: {known}")
    return frozenset(found)


def active(mutant: Mutant) -> bool:
    """Whether ``mutant`` is planted. Cheap enough for a hot path (one set lookup)."""
    return mutant in _active


def active_mutants() -> frozenset[Mutant]:
    """Every planted mutant (for logs and test reports)."""
    return _active


@contextmanager
def planted(*names: str | Mutant) -> Iterator[frozenset[Mutant]]:
    """Switch on the named mutants in this process for the ``with`` block, then restore what
    was planted before (those from the environment stay). Yields the mutants now active."""
    global _active
    wanted = parse_mutants(names)
    with _lock:
        before = _active
        _active = before | wanted
        now = _active
    try:
        yield now
    finally:
        with _lock:
            _active = before


def mutant_env(*names: str | Mutant) -> dict[str, str]:
    """The environment entry that plants ``names`` in a child process (merge it into ``env``)."""
    return {MUTANTS_ENV: ",".join(sorted(m.switch for m in parse_mutants(names)))}


def _from_environment() -> frozenset[Mutant]:
    value = os.environ.get(MUTANTS_ENV, "")
    try:
        return parse_mutants(value)
    except MutantError as e:
        raise MutantError(f"${MUTANTS_ENV}={value!r}: {e}") from None


_active = _from_environment()


def planted_status() -> list[dict[str, str]]:
    """The planted mutants as ``/status.json`` lists them (docs/operations.md §13.2):
    ``[{"switch": ..., "description": ...}]`` sorted by switch, empty when none is on."""
    return [
        {"switch": m.switch, "description": m.description}
        for m in sorted(_active, key=lambda m: m.switch)
    ]


class PlantedBugsCollector(Collector):
    """The gauge ``<prefix>_planted_bugs``: one sample per planted mutant, labelled with its
    switch, value 1 (so ``sum(...)`` counts them and an empty family means none), read at
    scrape time so that ``planted`` in a test shows too."""

    def __init__(self, prefix: str) -> None:
        self.name = f"{prefix}_planted_bugs"

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            self.name,
            "Planted bugs switched on in this process (HANAMENODE_MUTANTS): 1 per mutant;"
            " never on in production",
            labels=["mutant"],
        )
        for m in sorted(_active, key=lambda m: m.switch):
            family.add_metric([m.switch], 1)
        yield family


# Registries that export the gauge already: a daemon started twice on one registry (a
# restart in a test) registers it once.
_exported: weakref.WeakSet[CollectorRegistry] = weakref.WeakSet()


def announce(prefix: str, registry: CollectorRegistry, logger: Any) -> None:
    """What a daemon does at start (issue 25 item 7): export ``<prefix>_planted_bugs`` in
    ``registry`` and, when any mutant is on, log one warning naming each, so that a planted
    bug is never on unnoticed."""
    with _lock:
        if registry not in _exported:
            registry.register(PlantedBugsCollector(prefix))
            _exported.add(registry)
    if _active:
        logger.warning(
            "planted bugs are ON: this daemon misbehaves on purpose (tests only)",
            mutants=",".join(sorted(m.switch for m in _active)),
            descriptions="; ".join(
                f"{m.switch}: {m.description}" for m in sorted(_active, key=lambda m: m.switch)
            ),
            env=MUTANTS_ENV,
        )


if __name__ == "__main__":
    for m in Mutant:
        print(f"{m.switch:32} {m.description}")
