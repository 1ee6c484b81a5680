"""The README and ``docs/`` say nothing about the code that the code contradicts, where that
can be checked mechanically (issue 28, item 10): command names, subcommands, ``make``
targets, ``python -m`` modules, environment variables, and the defaults of the table of keys
in docs/operations.md §2.2. Section numbers are checked by ``test_doc_references.py``.

Each check reads the text, collects what it names, and compares it with what the code
defines; a failure lists every statement that names something the code does not have, with
its file.
"""

from __future__ import annotations

import importlib
import re
import tomllib
from pathlib import Path
from typing import Any

import click
import pytest

from conf.keys import KEYS, parse_duration

ROOT = Path(__file__).resolve().parents[2]
TEXTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SCRIPTS: dict[str, str] = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
    "scripts"
]
# Programs of the venv that are not ours but that the docs name as .venv/bin/NAME.
VENV_TOOLS = {"python", "python3", "pip", "pytest", "ruff", "mypy", "spark-submit", "py-spy"}

FENCE = re.compile(r"^```([^\n]*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
SPAN = re.compile(r"`([^`\n]+)`")


def code_of(text: str) -> list[str]:
    """The commands a markdown text shows: each line of its ```sh blocks, and each inline
    span outside any block (prose is not a command, a word like "make" in it is not a target,
    and an untagged block is a picture)."""
    lines = [
        line.split(" #", 1)[0]  # a comment is prose
        for lang, block in FENCE.findall(text)
        if lang.strip() in ("sh", "bash", "console")
        for line in block.splitlines()
    ]
    return lines + SPAN.findall(FENCE.sub("", text))


def named(pattern: str) -> list[tuple[str, str]]:
    """(file, match) for each ``pattern`` match in the code of the README and docs/."""
    found = []
    for path in TEXTS:
        for code in code_of(path.read_text(encoding="utf-8")):
            for match in re.finditer(pattern, code):
                found.append((path.name, match.group(1) if match.groups() else match.group(0)))
    return found


def test_the_readmes_command_table_is_the_console_scripts() -> None:
    readme = (ROOT / "README.md").read_text()
    table = readme.split("| command | what it is |", 1)[1].split("\n\n", 1)[0]
    listed = set(re.findall(r"^\| `([\w-]+)` \|", table, re.MULTILINE))
    assert listed == set(SCRIPTS), (
        f"README's command table lists {sorted(listed - set(SCRIPTS))} that pyproject.toml "
        f"does not install, and lacks {sorted(set(SCRIPTS) - listed)}"
    )


def test_every_venv_program_named_is_installed() -> None:
    bad = [(f, name) for f, name in named(r"\.venv/bin/([\w.-]+)")
           if name not in SCRIPTS and name not in VENV_TOOLS]
    assert not bad, f"named as .venv/bin/NAME but not a console script of pyproject.toml: {bad}"


def _click_group(script: str) -> click.Group:
    """The click group behind a console script: the entry point itself, or the group named
    ``cli`` beside the ``main()`` that calls it."""
    module_name, _, attr = SCRIPTS[script].partition(":")
    module = importlib.import_module(module_name)
    entry = getattr(module, attr)
    group = entry if isinstance(entry, click.Group) else getattr(module, "cli", None)
    assert isinstance(group, click.Group), f"{script}: {SCRIPTS[script]} is not a click group"
    return group


def test_every_subcommand_named_exists() -> None:
    """``hactl failover``, ``hadev jn-wipe``, ``hafs ls``...: each one the docs show, in code
    spans and blocks, is a command of that script's click group."""
    commands = {script: set(_click_group(script).commands) for script in SCRIPTS}
    names = "|".join(re.escape(s) for s in SCRIPTS)
    bad = sorted(
        {(f, f"{script} {sub}")
         for f, (script, sub) in (
             (f, tuple(m.split(" ", 1)))
             for f, m in named(rf"(?:^|(?<=[\s/(]))((?:{names}) [a-z][a-z0-9-]*)\b")
         )
         if sub not in commands[script]}
    )
    assert not bad, f"subcommands named in the docs that the CLIs do not have: {bad}"


def _make_targets() -> set[str]:
    makefile = (ROOT / "Makefile").read_text()
    return set(re.findall(r"^([a-z][\w-]*):", makefile, re.MULTILINE))


def test_every_make_target_named_exists() -> None:
    targets = _make_targets()
    bad = [(f, t) for f, t in named(r"(?:^|(?<=[\s(]))make ([a-z][\w-]*)") if t not in targets]
    assert not bad, f"make targets named in the docs that the Makefile lacks: {bad}"


def test_every_python_module_named_exists() -> None:
    """``python -m bench.failover`` and ``bench.<name>`` in the docs: a file of the checkout
    (found by path, not imported: a benchmark may need what a unit test does not)."""
    module = r"([a-z_]\w*(?:\.[a-z_]\w*)*)(?![.\w<])"
    found = named(rf"python3? -m {module}") + named(r"^(bench\.[a-z_]+)\b")
    bad = []
    for f, module in found:
        path = ROOT / module.replace(".", "/")
        if not (path.with_suffix(".py").is_file() or (path / "__main__.py").is_file()):
            bad.append((f, module))
    assert not bad, f"python modules named in the docs that the checkout lacks: {bad}"


def test_every_environment_variable_named_is_read_by_the_code() -> None:
    code = "\n".join(
        p.read_text(encoding="utf-8")
        for top in ("conf", "hanamenode", "journalnode", "qjm", "failover", "hadev", "hachaos",
                    "pipeline", "bench", "zk", "durable", "nnsim", "namenoded")
        for p in (ROOT / top).rglob("*.py")
    ) + (ROOT / "Makefile").read_text() + (ROOT / "scripts" / "bootstrap.sh").read_text()
    bad = sorted({(f, v) for f, v in named(r"\b(HANAMENODE_[A-Z_]+)\b") if v not in code})
    assert not bad, f"environment variables named in the docs that no code reads: {bad}"


# --- the table of keys in docs/operations.md §2.2 ---------------------------------------------

BY_NAME = {k.name: k for k in KEYS}
ROW = re.compile(r"^\| `([^`]+)` \| ([^|]*) \|", re.MULTILINE)
# Defaults the table states in words because they depend on another setting: checked by
# hand, listed here so that a new one is a decision.
CONDITIONAL = {
    "hanamenode.rpc.tls.enabled": "`true` if `ca-file` is set",
    "dfs.client.failover.proxy.provider.<ns>": "see meaning",
}


def key_table() -> dict[str, str]:
    ops = (ROOT / "docs" / "operations.md").read_text()
    section = ops.split("\n### 2.2 ", 1)[1].split("\n### ", 1)[0]
    return {key: default.strip() for key, default in ROW.findall(section)}


def _documented_value(name: str, cell: str) -> Any:
    """The value a cell of the default column states, parsed as the key parses its values."""
    key = BY_NAME[name]
    text = cell.replace("`", "").strip()
    if text.endswith(" MiB"):
        text = text.removesuffix(" MiB")
    return key.parse(text)


@pytest.mark.parametrize("name", sorted(BY_NAME))
def test_the_documented_default_is_the_codes(name: str) -> None:
    table = key_table()
    assert name in table, f"docs/operations.md §2.2 lacks a row for `{name}`"
    cell = table[name]
    key = BY_NAME[name]
    if name in CONDITIONAL:
        assert cell == CONDITIONAL[name], f"{name}: default now reads {cell!r}; check it"
        return
    if cell == "none" or cell.strip("`") in BY_NAME:
        # "none", or the generic key a per-id key falls back to.
        assert not key.default, f"{name}: docs say {cell}, conf/keys.py says {key.default!r}"
        if cell != "none":
            assert key.is_pattern, f"{name}: only a per-id key falls back to another key"
        return
    assert key.default, f"{name}: docs say {cell}, conf/keys.py has no default"
    assert _documented_value(name, cell) == key.parse(key.default), (
        f"{name}: docs/operations.md §2.2 says the default is {cell}, "
        f"conf/keys.py says {key.default!r}"
    )


def test_the_key_table_has_no_key_the_code_lacks() -> None:
    extra = sorted(set(key_table()) - set(BY_NAME))
    assert not extra, f"docs/operations.md §2.2 documents keys conf/keys.py lacks: {extra}"


def test_the_default_check_catches_a_wrong_default() -> None:
    """The check compares values, not text: "20 s" is 20000 ms, "15 s" is not."""
    name = "dfs.qjournal.write-txns.timeout.ms"
    assert _documented_value(name, "20 s") == parse_duration("20000")
    assert _documented_value(name, "15 s") != BY_NAME[name].parse(
        BY_NAME[name].default or ""
    )
