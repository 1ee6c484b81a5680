"""The mutation soak's checkpoint kept in ``soaks/`` (soaks/README.md) is whole: every block
its state file calls done has its Parquet rows, one run per mutant (and the clean code) per
seed of the block, the counts the state file recorded, and not one violation of the clean
code. A block lost or half copied, or a clean run that failed, would be found here rather
than at the end of the soak."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from hadev.daemon import CODE_ROOT
from pipeline.mutants import CHUNKS_DIR, MASKED, RUN_COLUMNS, STATE_FILE
from qjm.sim.mutants import CLEAN

SOAK = CODE_ROOT / "soaks" / "mutation-10000"


def _block_rows(name: str) -> list[dict[str, object]]:
    parts = sorted((SOAK / CHUNKS_DIR / f"{name}.parquet").glob("part-*.parquet"))
    assert len(parts) == 1, f"{name}: {len(parts)} Parquet parts"
    table = pq.read_table(parts[0])
    assert tuple(table.column_names) == RUN_COLUMNS
    return table.to_pylist()


def test_every_recorded_block_is_whole_and_the_clean_code_passed() -> None:
    state = json.loads((SOAK / STATE_FILE).read_text())
    config, done = state["config"], state["done"]
    assert config["seeds"] == 10000 and config["first_seed"] == 0 and config["steps"] == 200
    assert state["chunk_seeds"] == 200 and len(state["fingerprint"]) == 16
    assert done, "no finished block recorded"
    names = {p.name.removesuffix(".parquet") for p in (SOAK / CHUNKS_DIR).iterdir()}
    assert names == set(done), "blocks on disk and in the state file differ"
    runs_per_seed = len(config["mutants"]) + 1
    for name, block in sorted(done.items()):
        first, last = (int(x) for x in name.removeprefix("seeds-").split("-"))
        rows = _block_rows(name)
        assert len(rows) == block["runs"] == runs_per_seed * (last - first + 1), name
        pairs = {(r["mutant"], r["seed"]) for r in rows}
        expected = {(m, s) for m in (*config["mutants"], CLEAN) for s in range(first, last + 1)}
        assert pairs == expected, f"{name}: runs missing or doubled"
        assert sum(1 for r in rows if r["verdict"] != "ok") == block["failing"], name
        clean = [r for r in rows if r["mutant"] == CLEAN]
        assert all(r["verdict"] == "ok" for r in clean), (
            f"{name}: the clean code failed: "
            f"{[(r['seed'], r['violated_invariant']) for r in clean if r['verdict'] != 'ok']}"
        )
        assert all(r["steps"] == 200 for r in rows)
        assert {r["verdict"] for r in rows} <= {"ok", "violation", "error", MASKED}


@pytest.mark.parametrize("mutant", ["accept-no-epoch", "promise-not-persisted"])
def test_the_mutants_that_always_fail_were_caught_in_the_recorded_blocks(mutant: str) -> None:
    """The soak's rows are the simulator's verdicts, not a placeholder: two mutants that
    every 200-seed table catches in nearly every seed are caught in most of the recorded
    runs."""
    state = json.loads((SOAK / STATE_FILE).read_text())
    rows = [r for name in state["done"] for r in _block_rows(name) if r["mutant"] == mutant]
    caught = sum(1 for r in rows if r["verdict"] not in ("ok", MASKED))
    assert rows and caught >= 0.9 * len(rows), f"{mutant}: {caught} of {len(rows)}"
