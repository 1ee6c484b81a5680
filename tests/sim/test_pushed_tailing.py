"""The simulator checks the pushed-edits reader on its own (qjm.subscriber over the
Journal's own subscriptions), not only beside the polling one: with the polling reader
switched off, a planted tailing bug is still caught through what the pusher applied."""

from __future__ import annotations

import pytest

from qjm.sim import run_simulation
from qjm.sim.runner import Simulation


@pytest.mark.parametrize(
    ("mutant", "seeds"),
    [
        # Searched from seed 0 when this test was written: caught at seeds 0 and 48.
        ("tail-single-journalnode", range(0, 30)),
        ("tail-any-epoch", range(40, 60)),
    ],
)
def test_the_pushed_reader_alone_is_held_to_the_tailing_invariants(
    monkeypatch: pytest.MonkeyPatch, mutant: str, seeds: range
) -> None:
    monkeypatch.setattr(Simulation, "_read_polled", lambda self: None)
    caught = []
    for seed in seeds:
        result = run_simulation(seed, 200, mutants=(mutant,))
        if not result.ok:
            caught.append(result)
            print(f"{mutant}: seed={seed} {result.violated_invariant}: {result.message}")
            break
    assert caught, f"{mutant} went unnoticed by the pushed reader in seeds {seeds}"
    assert "pusher" in (caught[0].message or "") + "".join(caught[0].trace_tail)


def test_the_pushed_reader_is_clean_without_a_planted_bug(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(Simulation, "_read_polled", lambda self: None)
    bad = [r.summary() for seed in range(10) if not (r := run_simulation(seed, 200)).ok]
    assert bad == []
