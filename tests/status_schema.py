"""The documented schema of ``/status.json`` (docs/operations.md §13.2) against documents that
daemons served: ``schema_problems`` lists every key served but not documented, served with
a type the table does not allow, or documented but never served.

A documented key may be missing from every sample only when an object or list above it was
null or empty in all of them (``edit_log`` on a standby, ``elector.last_fencing`` before any
fencing), or, for a startup phase's ``details``, when that phase never ran (a key whose
meaning starts with "`becoming_active`:")."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

_ROW = re.compile(r"^\| `([^`]+)` \| ([a-z ]+) \| (.*) \|$")
_PHASE_KEY = re.compile(r"^`([a-z_]+)`:")
DETAILS = "startup.phases[].details."


def documented(kind: str) -> dict[str, tuple[frozenset[str], str]]:
    """The §13.2 table of ``kind`` ("NameNode" or "JournalNode"): key -> (types, meaning)."""
    text = (ROOT / "docs" / "operations.md").read_text()
    section = text.split("### 13.2 `/status.json`", 1)[1].split("\n### ", 1)[0]
    part = section.split(f"\n{kind} (`\"kind\": ", 1)[1].split("\n\n", 2)[1]
    rows: dict[str, tuple[frozenset[str], str]] = {}
    for line in part.splitlines():
        found = _ROW.match(line)
        if found is None:
            continue
        key, types, meaning = found.groups()
        assert key not in rows, f"{key} documented twice"
        names = types.split(" or ")
        assert set(names) <= {"int", "number", "string", "bool", "object", "list", "null"}, line
        rows[key] = (frozenset(names), meaning)
    assert rows, f"no {kind} table in docs/operations.md §13.2"
    return rows


def _type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "list"
    raise TypeError(f"not a JSON value: {value!r}")


def _walk(
    value: Mapping[str, Any], path: str, types: dict[str, set[str]], filled: set[str]
) -> None:
    for key, item in value.items():
        here = f"{path}.{key}" if path else key
        types.setdefault(here, set()).add(_type(item))
        if isinstance(item, dict):
            filled.add(here)
            _walk(item, here, types, filled)
        elif isinstance(item, list) and item:
            filled.add(here)
            for element in item:
                assert isinstance(element, dict), (here, element)
                _walk(element, here + "[]", types, filled)


def _container(key: str) -> str:
    """The object or list a key is in ("" at the top)."""
    head = key.rsplit(".", 1)[0] if "." in key else ""
    return head.removesuffix("[]")


def schema_problems(kind: str, samples: Iterable[Mapping[str, Any]]) -> list[str]:
    docs = documented(kind)
    types: dict[str, set[str]] = {}
    filled: set[str] = set()
    phases: set[str] = set()
    for sample in samples:
        _walk(sample, "", types, filled)
        phases |= {p["name"] for p in sample.get("startup", {}).get("phases", [])}
    problems = []
    for key, served in sorted(types.items()):
        if key not in docs:
            problems.append(f"{key} is served ({'/'.join(sorted(served))}) but not documented")
            continue
        allowed = set(docs[key][0]) | ({"int"} if "number" in docs[key][0] else set())
        if served - allowed:
            problems.append(
                f"{key} is served as {'/'.join(sorted(served - allowed))}, documented as "
                f"{' or '.join(sorted(docs[key][0]))}"
            )
    for key, (_, meaning) in sorted(docs.items()):
        if key in types:
            continue
        if key.startswith(DETAILS) and (phase := _PHASE_KEY.match(meaning)):
            if phase.group(1) not in phases:
                continue
        elif _container(key) and _container(key) not in filled:
            continue
        problems.append(f"{key} is documented but was not served")
    return problems
