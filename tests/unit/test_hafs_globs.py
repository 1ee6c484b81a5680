"""The pure parts of ``hafs``: glob patterns and their expansion over a table namespace,
``-ls -h`` sizes, ``-count`` lines and ``-test`` flags (the shell itself is tested against
real NameNode processes in tests/process/test_hafs_shell.py)."""

from __future__ import annotations

import pytest

from hanamenode.client.globs import GlobError, component_regex, expand, has_glob
from hanamenode.client.shell import ContentSummary, count_line, human_size, passes_test
from hanamenode.namespace import StatInfo


@pytest.mark.parametrize(
    ("pattern", "name", "matches"),
    [
        ("*", "anything", True),
        ("*", "", True),
        ("a*", "abc", True),
        ("a*", "bac", False),
        ("?", "x", True),
        ("?", "xy", False),
        ("[ab]c", "bc", True),
        ("[ab]c", "cc", False),
        ("[a-c]", "b", True),
        ("[^a-c]", "b", False),
        ("[!a-c]", "d", True),
        ("{x,y}z", "yz", True),
        ("{x,y}z", "xyz", False),
        ("{a,b{c,d}}", "bd", True),
        ("\\*", "*", True),
        ("\\*", "a", False),
        ("a.b", "a.b", True),
        ("a.b", "axb", False),  # a dot is a dot, not a regex wildcard
        ("a,b", "a,b", True),  # a comma outside braces is a comma
    ],
)
def test_component_patterns(pattern: str, name: str, matches: bool) -> None:
    assert (component_regex(pattern).fullmatch(name) is not None) is matches


@pytest.mark.parametrize("pattern", ["[ab", "{a,b", "a\\"])
def test_unreadable_patterns_are_named(pattern: str) -> None:
    with pytest.raises(GlobError, match=r"unclosed|escapes nothing"):
        component_regex(pattern)


def test_has_glob() -> None:
    assert [has_glob(p) for p in ["/a/b", "/a/*", "/a?", "/{a}", "/[a]", "/a\\b"]] == [
        False, True, True, True, True, False,
    ]
    assert has_glob("/a\\*")


TREE: dict[str, list[str] | None] = {
    "/": ["user", "tmp", "f"],
    "/user": ["alice", "bob", "carol"],
    "/user/alice": ["data", "notes"],
    "/user/bob": ["notes"],
    "/user/carol": [],
    "/user/alice/data": [],
    "/tmp": [],
}


def list_names(directory: str) -> list[str] | None:
    return TREE.get(directory)


def exists(path: str) -> bool:
    parent, _, name = path.rpartition("/")
    return name in (TREE.get(parent or "/") or [])


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("/user/*", ["/user/alice", "/user/bob", "/user/carol"]),
        ("/user/*/notes", ["/user/alice/notes", "/user/bob/notes"]),  # literal tail: exists
        ("/user/{alice,carol}", ["/user/alice", "/user/carol"]),
        ("/*/alice/d*", ["/user/alice/data"]),
        ("/f/*", []),  # a file has no children
        ("/nope/*", []),
        ("/user/z*", []),
        ("/plain/missing", ["/plain/missing"]),  # no wildcard: passed on as it is
        ("/user/\\*", []),  # an escaped star is a literal name, which does not exist
        ("/user/back\\", ["/user/back\\"]),  # no wildcard: a backslash is a character
        ("/user/[a", ["/user/[a"]),  # not a readable pattern: a literal name
        ("/esc\x1b[31mred", ["/esc\x1b[31mred"]),
    ],
)
def test_expand(pattern: str, expected: list[str]) -> None:
    assert expand(pattern, list_names, exists) == expected


@pytest.mark.parametrize(
    ("size", "text"),
    [
        (0, "0"),
        (1023, "1023"),
        (1024, "1 K"),
        (1536, "1.5 K"),
        (1024 * 1024, "1 M"),
        (1024 * 1024 - 1, "1.0 M"),  # 1023.999 K rounds into the next prefix
        (3 * 1024**3 + 1, "3.0 G"),
    ],
)
def test_human_size(size: int, text: str) -> None:
    assert human_size(size) == text


def test_count_lines() -> None:
    summary = ContentSummary(directories=2, files=3, length=2048)
    assert count_line("/a", summary, quotas=False, human=False) == (
        f"{2:>12} {3:>12} {2048:>18} /a"
    )
    assert count_line("/a", summary, quotas=False, human=True).endswith(f"{'2 K':>18} /a")
    assert count_line("/a", summary, quotas=True, human=False).startswith(
        f"{'none':>12} {'inf':>15} {'none':>15} {'inf':>15} {2:>12} "
    )


def _stat(is_dir: bool, length: int) -> StatInfo:
    return StatInfo("/x", is_dir, length, 0, 0o755, "hdfs", "supergroup", 0 if is_dir else 3, 0)


@pytest.mark.parametrize(
    ("flag", "missing", "directory", "empty_file", "file"),
    [
        ("e", False, True, True, True),
        ("d", False, True, False, False),
        ("f", False, False, True, True),
        ("s", False, False, False, True),
        ("z", False, True, True, False),
    ],
)
def test_test_flags(
    flag: str, missing: bool, directory: bool, empty_file: bool, file: bool
) -> None:
    assert passes_test(flag, None) is missing
    assert passes_test(flag, _stat(True, 0)) is directory
    assert passes_test(flag, _stat(False, 0)) is empty_file
    assert passes_test(flag, _stat(False, 7)) is file
