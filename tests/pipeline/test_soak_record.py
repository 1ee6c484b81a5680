"""The record of the 10,000-seed mutation soak kept in ``docs/soaks/`` (docs/soaks/README.md)
is whole and agrees with the figures the docs quote: its state file covers every seed in
finished blocks of all their runs, its summary's table names every mutant of that
configuration over all the seeds with the clean code at 0 violations, and the block time is
the 15,459 s docs/architecture.md §8.8 gives. A record half copied, or a figure in the docs
that the record does not hold, is found here."""

from __future__ import annotations

import json
import re

from hadev.daemon import CODE_ROOT
from pipeline.mutants import STATE_FILE

SOAK = CODE_ROOT / "docs" / "soaks" / "mutation-10000"
DOCS = (CODE_ROOT / "docs" / "architecture.md", CODE_ROOT / "docs" / "soaks" / "README.md")


def test_the_state_file_covers_every_seed_in_whole_blocks() -> None:
    state = json.loads((SOAK / STATE_FILE).read_text())
    config, done, width = state["config"], state["done"], state["chunk_seeds"]
    assert config["seeds"] == 10000 and config["first_seed"] == 0 and config["steps"] == 200
    assert len(state["fingerprint"]) == 16
    runs_per_seed = len(config["mutants"]) + 1  # each mutant and the clean code
    expected = {
        f"seeds-{first:06d}-{first + width - 1:06d}" for first in range(0, config["seeds"], width)
    }
    assert set(done) == expected, "blocks missing from or extra in the state file"
    for name, block in done.items():
        assert block["runs"] == runs_per_seed * width, name
        assert 0 <= block["failing"] <= block["runs"] and block["seconds"] > 0, name
    seconds = sum(block["seconds"] for block in done.values())
    for doc in DOCS:
        assert "15,459 s" in doc.read_text(), f"{doc.name} no longer quotes the block time"
    assert round(seconds) == 15459


def test_the_summary_scores_every_mutant_over_every_seed_and_the_clean_code_passed() -> None:
    state = json.loads((SOAK / STATE_FILE).read_text())
    lines = (SOAK / "mutation_summary.txt").read_text().splitlines()
    score = json.loads(lines[-1])
    assert score["clean_violations"] == 0
    assert set(score) == {*state["config"]["mutants"], "clean_violations", "min_caught_fraction"}
    rows = {
        m.group(1): (int(m.group(2)), int(m.group(3)))
        for m in (re.match(r"^([a-z-]+)\s+(\d+)\s+(\d+)\s+[\d.]+\s", line) for line in lines)
        if m
    }
    assert set(rows) == set(state["config"]["mutants"])
    for mutant, (seeds, caught) in rows.items():
        assert seeds == 10000 and score[mutant] == caught / seeds, mutant
    assert "clean code: 10000 seeds from 0, 200 steps: 0 violations (ok)" in lines
    assert (SOAK / "mutation_score.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
