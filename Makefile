# `make demo` and `make test` are the two commands a newcomer needs (README.md).
# Every target bootstraps first: scripts/bootstrap.sh is idempotent and quick when nothing changed.

PYTHON := .venv/bin/python
TESTARGS ?=

.PHONY: bootstrap demo test lint proto

bootstrap:
	@scripts/bootstrap.sh

demo: bootstrap
	$(PYTHON) -m hadev.demo

test: bootstrap
	$(PYTHON) -m pytest -q tests $(TESTARGS)

lint: bootstrap
	.venv/bin/ruff check .
	.venv/bin/mypy

proto: bootstrap
	$(PYTHON) scripts/gen_proto.py
