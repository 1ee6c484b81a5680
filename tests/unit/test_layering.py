"""The package layering of docs/architecture.md §2, checked on every import of every module.

    proto <- conf  <-  zk, journalnode  <-  qjm  <-  hanamenode  <-  failover  <-  namenoded
    (``durable``, on ``proto`` only, sits under ``zk`` and ``journalnode`` beside ``conf``;
    ``hanamenode`` builds on ``zk`` as well, for the client that reads the election znodes;
    ``zkjournal``, the ZooKeeper journal, sits on ``qjm`` and ``zk``, below ``hanamenode``)

A package may import its own modules and the packages it reaches by following the arrows
of ``BUILDS_ON`` (the picture in docs/architecture.md §2); ``zk`` and ``journalnode`` are
peers that do not import each other; the tools (``hadev``, ``hachaos``,
``nnsim``, ``pipeline``, ``bench``, ``scripts``) may import any product package and each
other; no product package imports a tool; nothing but ``tests`` imports ``tests``.
Imports are read with ``ast`` (function-level and ``TYPE_CHECKING`` imports included), so an
edge cannot hide in a function body. There are no exceptions: the NameNode process, which
embeds the ``failover`` layer's elector, is composed in ``namenoded`` above both, and the
NameNode-layer simulation is its own command, ``python -m nnsim``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# The arrows of docs/architecture.md §2: each product package and the packages just below it.
BUILDS_ON: dict[str, frozenset[str]] = {
    "conf": frozenset({"proto"}),  # conf.guard checks requests against proto.bounds
    "proto": frozenset(),
    "durable": frozenset({"proto"}),
    "zk": frozenset({"conf", "durable"}),
    "journalnode": frozenset({"conf", "durable"}),
    "qjm": frozenset({"journalnode"}),
    # the second shared-edits backend: the QJM's interface and errors, kazoo (§9)
    "zkjournal": frozenset({"qjm", "zk"}),
    # the client library reads the election znodes to find the NameNodes (§2.1)
    "hanamenode": frozenset({"qjm", "zk", "zkjournal"}),
    "failover": frozenset({"hanamenode", "zk"}),
    # the NameNode process: hanamenode's command line with failover's elector handed in
    "namenoded": frozenset({"failover"}),
}
TOOLS = frozenset({"hadev", "hachaos", "nnsim", "pipeline", "bench", "scripts"})
TESTS = "tests"
PACKAGES = frozenset(BUILDS_ON) | TOOLS | {TESTS}


def below(package: str) -> frozenset[str]:
    """Every product package ``package`` reaches by following the arrows."""
    found: set[str] = set()
    todo = list(BUILDS_ON[package])
    while todo:
        p = todo.pop()
        if p not in found:
            found.add(p)
            todo.extend(BUILDS_ON[p])
    return frozenset(found)


def layering_violation(importer: str, imported: str) -> str | None:
    """Why package ``importer`` may not import package ``imported`` (both ours), or None."""
    if importer in (imported, TESTS):
        return None
    if imported == TESTS:
        return "nothing imports tests"
    if importer in TOOLS:
        return None
    if imported in TOOLS:
        return f"product package {importer} imports no tool ({', '.join(sorted(TOOLS))})"
    if imported in below(importer):
        return None
    allowed = ", ".join(sorted(below(importer))) or "nothing of ours"
    if importer in below(imported):
        return f"{importer} is below {imported}; it may import only {allowed}"
    return f"{importer} and {imported} are peers, neither below the other; {importer} may " + (
        f"import only {allowed}"
    )


@pytest.mark.parametrize(
    ("importer", "imported", "expected"),
    [
        ("qjm", "qjm", None),
        ("qjm", "journalnode", None),
        ("qjm", "conf", None),
        ("qjm", "proto", None),
        ("durable", "proto", None),
        ("journalnode", "durable", None),
        ("hanamenode", "durable", None),
        ("zk", "proto", None),
        ("failover", "zk", None),
        ("failover", "hanamenode", None),
        ("hadev", "failover", None),
        ("bench", "hadev", None),
        ("hachaos", "hadev", None),
        ("tests", "hadev", None),
        ("tests", "tests", None),
        ("journalnode", "qjm", "journalnode is below qjm"),
        ("hanamenode", "failover", "hanamenode is below failover"),
        ("conf", "zk", "conf is below zk"),
        ("zk", "journalnode", "zk and journalnode are peers"),
        ("journalnode", "zk", "journalnode and zk are peers"),
        ("conf", "proto", None),
        ("durable", "conf", "durable and conf are peers"),
        ("proto", "conf", "proto is below conf"),
        ("proto", "durable", "proto is below durable"),
        ("hanamenode", "zk", None),
        ("zk", "hanamenode", "zk is below hanamenode"),
        ("qjm", "failover", "qjm is below failover"),
        ("qjm", "hadev", "product package qjm imports no tool"),
        ("failover", "pipeline", "product package failover imports no tool"),
        ("hadev", "tests", "nothing imports tests"),
        ("failover", "tests", "nothing imports tests"),
        ("namenoded", "failover", None),
        ("namenoded", "hanamenode", None),
        ("hanamenode", "namenoded", "hanamenode is below namenoded"),
        ("failover", "namenoded", "failover is below namenoded"),
        ("qjm", "nnsim", "product package qjm imports no tool"),
        ("zkjournal", "qjm", None),
        ("zkjournal", "zk", None),
        ("hanamenode", "zkjournal", None),
        ("zkjournal", "hanamenode", "zkjournal is below hanamenode"),
        ("qjm", "zkjournal", "qjm is below zkjournal"),
        ("zk", "zkjournal", "zk is below zkjournal"),
    ],
)
def test_layering_rule(importer: str, imported: str, expected: str | None) -> None:
    found = layering_violation(importer, imported)
    if expected is None:
        assert found is None
    else:
        assert found is not None and found.startswith(expected), found


@dataclass(frozen=True)
class Edge:
    importer: str  # dotted module name
    imported: str  # dotted module name (or package, for ``from pkg import name``)
    line: int


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def our_modules() -> Iterator[tuple[str, Path]]:
    for top in sorted(PACKAGES):
        for path in sorted((ROOT / top).rglob("*.py")):
            yield module_name(path), path


def imports_of(module: str, path: Path) -> Iterator[Edge]:
    """Every import statement in the module, anywhere in it, as absolute module names."""
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Edge(module, alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                base = base[: len(base) - node.level + (1 if is_package else 0)]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            yield Edge(module, target, node.lineno)


def test_every_package_of_ours_has_a_layer() -> None:
    """A new top-level package must be placed in the layering before it can be used."""
    tops = {
        p.parent.name
        for p in ROOT.glob("*/__init__.py")
        if not p.parent.name.startswith(".")
    }
    assert tops <= PACKAGES, f"packages without a layer here: {sorted(tops - PACKAGES)}"


def test_imports_follow_the_layering() -> None:
    modules = dict(our_modules())
    assert "qjm.quorum" in modules and "hadev.devcluster" in modules  # the walk sees the tree
    errors = []
    checked = 0
    for module, path in modules.items():
        for edge in imports_of(module, path):
            imported_top = edge.imported.split(".")[0]
            if imported_top not in PACKAGES:
                continue  # the standard library or a third-party package
            checked += 1
            why = layering_violation(module.split(".")[0], imported_top)
            if why is not None:
                errors.append(
                    f"{edge.importer} imports {edge.imported} "
                    f"({path.relative_to(ROOT)}:{edge.line}): {why}"
                )
    assert checked > 100, f"only {checked} imports of our packages found"
    assert not errors, "imports against the layering (docs/architecture.md §2):\n" + "\n".join(
        errors
    )
