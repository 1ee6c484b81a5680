"""``hafs`` takes paths as ``hdfs dfs`` does (issue 28 item 3): the shell normalizes a trailing
'/', '//', '.' and '..' before it asks the NameNode, whose rule stays strict (a test of the
rule is in ``tests/unit/test_paths.py``); docs/operations.md §11 tables the difference."""

from __future__ import annotations

import pytest

from hanamenode import paths
from hanamenode.client.shell import _BashComplete, normalize_argument
from hanamenode.errors import InvalidPathError

CASES = [
    # (typed, sent to the NameNode)
    ("/", "/"),
    ("//", "/"),
    ("/.", "/"),
    ("/user/", "/user"),
    ("/user//", "/user"),
    ("//user", "/user"),
    ("/a//b///c", "/a/b/c"),
    ("/a/./b/.", "/a/b"),
    ("/a/b/..", "/a"),
    ("/a/../b/", "/b"),
    ("/a/..", "/"),
    ("/a/*/", "/a/*"),  # a glob is normalized as text, expanded afterwards
    ("/a/.b/..c/...", "/a/.b/..c/..."),  # only '.' and '..' are special
    # Given back as typed, for the NameNode to refuse with its own message:
    ("relative/", "relative/"),
    ("", ""),
    ("/..", "/.."),
    ("/a/../../b", "/a/../../b"),
]


@pytest.mark.parametrize(("typed", "sent"), CASES)
def test_normalize_argument(typed: str, sent: str) -> None:
    assert normalize_argument(typed) == sent


@pytest.mark.parametrize(("typed", "sent"), [c for c in CASES if c[1].startswith("/")])
def test_an_absolute_argument_is_sent_valid_or_as_typed(typed: str, sent: str) -> None:
    """What the shell changed is a path the NameNode accepts; what it left (a '..' above the
    root) is refused by the NameNode's own rule, naming the '..'."""
    if ".." not in sent.split("/"):
        assert paths.validate_path(sent) == sent
    else:
        with pytest.raises(InvalidPathError, match=r"is '\.\.'"):
            paths.validate_path(sent)


def test_the_bash_completion_leaves_no_space_after_a_directory() -> None:
    source = _BashComplete.source_template
    assert "compopt -o nospace" in source, "click's bash template changed: the patch missed"
    assert source.index("compopt -o nospace") < source.index("    return 0\n}")
