"""Every reference to a section of ``docs/`` resolves, and nothing cites documents that a clone
of the repository does not hold.

Code, tests and docs cite the docs as ``docs/protocol.md §4.2`` (inside ``docs/`` also as
``protocol.md §4.2``, or ``§4.2`` for the same file); the HDFS design is cited by JIRA number
(``HDFS-3077 §2.10``), which this test leaves alone. A section exists when a heading of the
file carries its number (``## 4. ...``, ``### 4.2 ...``). A failure names each bad reference
as ``file:line``.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"

SUFFIXES = {".py", ".pyi", ".md", ".toml", ".sh", ".proto", ".yml", ".yaml", ".xml", ".cfg"}
NAMES = {"Makefile", "Dockerfile"}
SKIP_DIRS = {".git", ".venv", "build", "dist", "__pycache__", ".mypy_cache", ".ruff_cache",
             ".pytest_cache", "node_modules"}

HEADING = re.compile(r"^#{1,6}\s+(\d+(?:\.\d+)*)\.?\s", re.MULTILINE)
SECTION = re.compile(r"§\s*(\d+(?:\.\d+)*)")
# What may stand right before a "§": a markdown file (the reference's target), a JIRA id (not
# ours to check), or the previous reference of a list ("§2.6-§2.9", "§3.1, §3.2").
FILE_BEFORE = re.compile(r"([\w./-]+\.md)[`*]*\s*$")
JIRA_BEFORE = re.compile(r"\b[A-Z][A-Z0-9]+-\d+\s*$")
LIST_BEFORE = re.compile(r"§\s*\d+(?:\.\d+)*\s*(?:-|\u2013|,|and|or|to)\s*$")

# Spelt in pieces so that this file does not itself hold what it forbids.
FORBIDDEN = re.compile(
    "|".join(
        [
            r"\bDESIGN" + r"\.md\b",
            r"\bSTYLE" + r"\.md\b",
            r"/work/" + "shared",
            r"`" + "shared" + r"/`",
            r"\b" + "shared" + r"/(?:DESIGN|STYLE|reference|hooks)",
            r"\b" + "reference" + r"/[\w.-]+\.(?:txt|md)\b",
        ]
    )
)


def _show(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


@dataclass(frozen=True)
class Reference:
    source: Path
    line: int
    target: Path
    section: str

    def __str__(self) -> str:
        return f"{_show(self.source)}:{self.line}: {_show(self.target)} §{self.section}"


def repository_files(root: Path = ROOT) -> list[Path]:
    """The files to check: sources, docs, build and configuration files. Virtual envs, caches
    and VCS data are pruned, not walked. This file is left out: its examples of bad
    references are meant to be bad."""
    files = []
    this = Path(__file__).resolve()
    for top, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.endswith(".egg-info"))
        for name in names:
            path = Path(top) / name
            if path != this and (path.suffix in SUFFIXES or name in NAMES):
                files.append(path)
    return sorted(files)


def sections(path: Path) -> set[str]:
    """The section numbers a markdown file defines by its headings."""
    return set(HEADING.findall(path.read_text(encoding="utf-8")))


def references(path: Path, text: str, docs: Path = DOCS) -> list[Reference]:
    """Every section reference in ``text`` (the content of ``path``) that points into a
    markdown file: ``X.md §N`` anywhere, a bare ``§N`` only inside ``docs/`` (same file)."""
    in_docs = path.parent == docs
    found: list[Reference] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        target: Path | None = None
        for match in SECTION.finditer(line):
            before = line[: match.start()]
            if m := FILE_BEFORE.search(before):
                # "docs/x.md" from anywhere, "x.md" within docs/; anything else is a path
                # from the repository's root (and a missing file unless it is one).
                name = m.group(1)
                in_same_dir = in_docs and not name.startswith("docs/")
                target = (docs / name) if in_same_dir else (docs.parent / name)
            elif JIRA_BEFORE.search(before):
                target = None
                continue
            elif LIST_BEFORE.search(before):
                pass  # same target as the previous reference of the list, if it had one
            elif in_docs:
                target = path
            else:
                target = None
            if target is not None:
                found.append(Reference(path, lineno, target, match.group(1)))
    return found


def broken(refs: list[Reference]) -> list[tuple[Reference, str]]:
    """The references whose file or section does not exist, each with the reason."""
    problems = []
    cache: dict[Path, set[str]] = {}
    for ref in refs:
        if not ref.target.is_file():
            problems.append((ref, "no such file"))
            continue
        if ref.target not in cache:
            cache[ref.target] = sections(ref.target)
        if ref.section not in cache[ref.target]:
            problems.append((ref, "no such section"))
    return problems


def test_every_docs_section_reference_exists() -> None:
    refs: list[Reference] = []
    for path in repository_files():
        refs.extend(references(path, path.read_text(encoding="utf-8", errors="replace")))
    assert any(r.target.parent == DOCS for r in refs), "found no reference into docs/ at all"
    problems = [f"{ref}: {why}" for ref, why in broken(refs)]
    assert not problems, "references to missing docs sections:\n" + "\n".join(problems)


def test_nothing_cites_documents_outside_the_repository() -> None:
    problems = []
    for path in repository_files():
        text = path.read_text(encoding="utf-8", errors="replace")
        for lineno, line in enumerate(text.splitlines(), start=1):
            if m := FORBIDDEN.search(line):
                problems.append(f"{path.relative_to(ROOT)}:{lineno}: {m.group(0)!r}")
    assert not problems, (
        "references to documents outside the repository (cite docs/ or the HDFS JIRA):\n"
        + "\n".join(problems)
    )


def test_docs_files_number_their_sections() -> None:
    for name in ("architecture", "protocol", "operations", "consistency"):
        numbers = sections(DOCS / f"{name}.md")
        assert {"1", "2"} <= numbers, f"docs/{name}.md has no numbered sections 1 and 2"


def test_the_checker_reports_a_bad_reference(tmp_path: Path) -> None:
    """The checks above can fail: a missing section, a missing file, a bare reference inside
    docs, a list, and a JIRA section (never checked) each come out as they should."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "protocol.md").write_text("# P\n\n## 1. One\n\n### 1.2 Sub\n\nSee §1.2 and §7.\n")
    code = tmp_path / "code.py"
    text = (
        "# docs/protocol.md §1.2 is fine\n"
        "# docs/protocol.md §4.2 is not\n"
        "# docs/nothing.md §1 has no file\n"
        "# HDFS-3077 §2.10, §2.10.6 is not ours to check\n"
        "# docs/protocol.md §1-§9: the second end of the list is missing\n"
    )
    refs = references(code, text, docs) + references(
        docs / "protocol.md", (docs / "protocol.md").read_text(), docs
    )
    problems = [(ref.source.name, ref.line, ref.target.name, ref.section, why)
                for ref, why in broken(refs)]
    assert problems == [
        ("code.py", 2, "protocol.md", "4.2", "no such section"),
        ("code.py", 3, "nothing.md", "1", "no such file"),
        ("code.py", 5, "protocol.md", "9", "no such section"),
        ("protocol.md", 7, "protocol.md", "7", "no such section"),
    ], problems
    assert str(refs[0]).endswith("code.py:1: " + str(docs / "protocol.md") + " §1.2")
    assert FORBIDDEN.search("see " + "DESIGN" + ".md §2")
    assert FORBIDDEN.search("in `" + "shared" + "/`")
    assert not FORBIDDEN.search('reader.get_children("/common/ns1")')
