"""Both simulators hand their clock to the code they run (``conf.clock.use_clock``) and
patch nothing: no code of ours that a run reaches reads the machine's clock, through
``conf.clock``'s system clock or straight from the ``time`` module (which this test alone
wraps, to see who calls it). nnsim's NameNodes read its ``VirtualClock``, the QJM
simulator's writers and JournalNodes its ``StepClock``; a time read on the machine's clock
would make a seed's run depend on the machine (docs/architecture.md §8.2)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conf.clock import SystemClock
from nnsim import run_nn_simulation
from qjm.sim import SimResult, run_simulation

ROOT = str(Path(__file__).resolve().parents[2])

RUNS: dict[str, Callable[[], SimResult]] = {
    "nnsim": lambda: run_nn_simulation(2, 80),
    "qjm.sim": lambda: run_simulation(2, 120),
}


@pytest.mark.parametrize("simulator", list(RUNS))
def test_a_run_reads_only_its_own_clock(simulator: str, monkeypatch: pytest.MonkeyPatch) -> None:
    readers: set[str] = set()

    def watch(name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def read(*args: Any) -> Any:
            caller = sys._getframe(1).f_code.co_filename
            if caller.startswith(ROOT) and "/.venv/" not in caller and "/tests/" not in caller:
                readers.add(f"{name} from {caller.removeprefix(ROOT)}")
            return real(*args)

        return read

    for name in ("monotonic", "time", "time_ns"):
        monkeypatch.setattr(time, name, watch(f"time.{name}", getattr(time, name)))
        monkeypatch.setattr(
            SystemClock, name, watch(f"conf.clock.{name}", getattr(SystemClock, name))
        )
    result = RUNS[simulator]()
    assert result.ok, result.message
    assert not readers, f"the run read the machine's clock: {sorted(readers)}"
