# `make demo` and `make test` are the two commands a newcomer needs (README.md).
# Every target bootstraps first: scripts/bootstrap.sh is idempotent and quick when nothing changed.

PYTHON := .venv/bin/python
TESTARGS ?=
# Seeds of the simulator sweep in `make check` (`make test` sweeps the suite's default, 200).
SIMSEEDS ?= 50

.PHONY: bootstrap demo test check lint proto

bootstrap:
	@scripts/bootstrap.sh

demo: bootstrap
	$(PYTHON) -m hadev.demo

# Two pytest-xdist workers, each taking whole files (--dist loadfile: a file's fixtures are
# made once): most of the suite waits on real daemons, sessions and fault windows, not on CPU.
# TESTWORKERS=0 runs it in one process.
TESTWORKERS ?= 2

test: bootstrap
	$(PYTHON) -m pytest -q tests --durations=25 -n $(TESTWORKERS) --dist loadfile $(TESTARGS)

# The fast lane, under 3 minutes: lint, types, and the tests that start no daemon or ZooKeeper.
# The planted-bug search of tests/sim (two minutes of simulation) is left to `make test`.
check: bootstrap
	.venv/bin/ruff check .
	.venv/bin/mypy
	$(PYTHON) -m pytest -q tests/unit tests/storage tests/sim --sim-seeds $(SIMSEEDS) \
		--ignore tests/sim/test_planted_bug.py $(TESTARGS)

lint: bootstrap
	.venv/bin/ruff check .
	.venv/bin/mypy

proto: bootstrap
	$(PYTHON) scripts/gen_proto.py
