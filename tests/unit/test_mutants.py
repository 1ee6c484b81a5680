"""``conf.mutants``: every planted bug is off unless switched on, in-process by ``planted`` or
in a child process by ``$HANAMENODE_MUTANTS``; an unknown name is refused by name."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conf import mutants
from conf.mutants import MUTANTS_ENV, Mutant, MutantError, active, mutant_env, planted
from hadev.daemon import CODE_ROOT, child_environment


def test_every_mutant_is_off_by_default_and_described() -> None:
    assert os.environ.get(MUTANTS_ENV) is None, "the test run itself must not plant bugs"
    for m in Mutant:
        assert not active(m), m
        assert m.switch == m.switch.lower() and " " not in m.switch and "," not in m.switch
        assert m.description and "\n" not in m.description, m
    assert len({m.switch for m in Mutant}) == len(Mutant)


def test_planted_switches_on_for_the_block_and_restores() -> None:
    m = Mutant.IGNORE_WRITER_EPOCH
    with planted(m.switch) as now:
        assert active(m) and now == {m}
        with planted(m):  # nested: leaving the inner block keeps the outer one's
            assert active(m)
        assert active(m)
    assert not active(m)
    with pytest.raises(RuntimeError), planted(m):
        raise RuntimeError("the block fails")
    assert not active(m)


def test_unknown_names_are_refused_by_name() -> None:
    with pytest.raises(MutantError, match="unknown mutant\\(s\\) no-such-bug, other-typo; known: "):
        mutants.parse_mutants("no-such-bug, ignore-writer-epoch,other-typo")
    with pytest.raises(MutantError, match="no-such-bug"), planted("no-such-bug"):
        pass
    assert mutants.parse_mutants(" , ") == frozenset()


def _child(env_value: str | None) -> subprocess.CompletedProcess[str]:
    env = child_environment()
    env.pop(MUTANTS_ENV, None)
    if env_value is not None:
        env[MUTANTS_ENV] = env_value
    code = (
        "from conf.mutants import Mutant, active\n"
        "print(sorted(m.switch for m in Mutant if active(m)))\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=CODE_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_environment_plants_mutants_in_a_child_process() -> None:
    planted_env = mutant_env(Mutant.IGNORE_WRITER_EPOCH)
    assert planted_env == {MUTANTS_ENV: "ignore-writer-epoch"}
    child = _child(planted_env[MUTANTS_ENV])
    assert child.returncode == 0, child.stderr
    assert child.stdout.strip() == "['ignore-writer-epoch']"
    clean = _child(None)
    assert clean.returncode == 0, clean.stderr
    assert clean.stdout.strip() == "[]"


def test_an_unknown_name_in_the_environment_stops_the_child_naming_it() -> None:
    child = _child("ignore-writer-epoch,not-a-mutant")
    assert child.returncode != 0
    assert f"${MUTANTS_ENV}=" in child.stderr and "not-a-mutant" in child.stderr
