"""Path validation (hanamenode.paths): every rule, with the message that names path and rule."""

from __future__ import annotations

import pytest

from hanamenode import paths
from hanamenode.errors import InvalidArgumentError, InvalidPathError


@pytest.mark.parametrize(
    "path",
    [
        "/",
        "/a",
        "/a/b/c",
        "/user/alice/data.csv",
        "/with space/and:colon",
        "/.hidden/..dots/...",
        "/ünïcödé/日本",
        "/" + "x" * 255,
        "/" + "é" * 127,  # 254 bytes
        "/" + "/".join(["d"] * paths.MAX_PATH_DEPTH),
    ],
)
def test_valid_paths_are_returned_unchanged(path: str) -> None:
    assert paths.validate_path(path) == path


@pytest.mark.parametrize(
    ("path", "rule"),
    [
        ("", "the path is empty"),
        ("a/b", "must be absolute"),
        ("./a", "must be absolute"),
        ("//", "trailing '/'"),
        ("/a/", "trailing '/'"),
        ("/a//b", "empty component 2 ('//')"),
        ("//a", "empty component 1 ('//')"),
        ("/a/./b", "component 2 is '.'"),
        ("/a/../b", "component 2 is '..'"),
        ("/..", "component 1 is '..'"),
        ("/.", "component 1 is '.'"),
        ("/a\x00b", "NUL"),
        ("/" + "x" * 256, "component 1 is 256 bytes, longer than 255"),
        ("/a/" + "é" * 128, "component 2 is 256 bytes"),
        ("/bad\udc80surrogate", "component 1 is not valid UTF-8"),
        ("/" + "a/" * 1000 + "a", "deeper than 1000 components (1001)"),
        ("/" + "x" * 8000, "longer than 8000 characters"),
    ],
)
def test_invalid_paths_name_the_path_and_the_rule(path: str, rule: str) -> None:
    with pytest.raises(InvalidPathError) as info:
        paths.validate_path(path)
    message = str(info.value)
    assert rule in message
    assert message.startswith("invalid path ")
    assert repr(path[:40])[:-1] in message  # the path itself (shortened when long) is named


def test_long_paths_are_shortened_in_the_message() -> None:
    path = "/" + "x" * 8000
    with pytest.raises(InvalidPathError) as info:
        paths.validate_path(path)
    message = str(info.value)
    assert "(8001 characters)" in message
    assert len(message) < 300


@pytest.mark.parametrize("value", [None, b"/a", 42, ["/a"]])
def test_a_path_must_be_a_string(value: object) -> None:
    with pytest.raises(InvalidPathError, match="a path must be a string"):
        paths.validate_path(value)


def test_invalid_path_is_an_invalid_argument() -> None:
    assert issubclass(InvalidPathError, InvalidArgumentError)


def test_exactly_the_limits_are_allowed() -> None:
    at_limit = "/" + "/".join(["x" * 15] * 500)  # 8000 characters, 500 components
    assert len(at_limit) == paths.MAX_PATH_LENGTH
    assert paths.validate_path(at_limit) == at_limit


def test_helpers() -> None:
    assert paths.components("/") == []
    assert paths.components("/a/b") == ["a", "b"]
    assert paths.parent("/") is None
    assert paths.parent("/a") == "/"
    assert paths.parent("/a/b") == "/a"
    assert paths.basename("/") == ""
    assert paths.basename("/a/b") == "b"
    assert paths.join("/", "a") == "/a"
    assert paths.join("/a", "b") == "/a/b"
    assert paths.is_ancestor("/", "/a")
    assert not paths.is_ancestor("/", "/")
    assert paths.is_ancestor("/a", "/a/b/c")
    assert not paths.is_ancestor("/a", "/a")
    assert not paths.is_ancestor("/a", "/ab")
    assert not paths.is_ancestor("/a/b", "/a")


@pytest.mark.parametrize(
    ("path", "code"),
    [("/a\x01", "U+0001"), ("/a\x1b[2J", "U+001B"), ("/a\nb", "U+000A"), ("/a\tb", "U+0009"),
     ("/x/\x7f", "U+007F"), ("/\x80", "U+0080"), ("/\x9f/y", "U+009F")],
)
def test_control_characters_are_refused_in_new_names_only(path: str, code: str) -> None:
    with pytest.raises(InvalidPathError) as info:
        paths.check_new_names(path, paths.components(path))
    assert f"contains the control character {code}" in str(info.value)
    # A name written before the rule still loads, and can be read and deleted.
    assert paths.validate_path(path) == path
    paths.check_new_names(path + "/clean", ["clean"])  # and may hold new, clean names


def test_printable_characters_next_to_the_control_ranges_are_accepted() -> None:
    for path in ("/ ~", "/\xa0nbsp", "/\xa1", "/zero\u200bwidth"):
        assert paths.validate_path(path) == path
        paths.check_new_names(path, paths.components(path))


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("/plain/ünï", "/plain/ünï"),
        ("/back\\slash", "/back\\slash"),
        ("/esc\x1b[31m", "/esc\\x1b[31m"),
        ("/n\nl\\", "/n\\nl\\\\"),
        ("/zw\u200b", "/zw\\u200b"),
        ("/bad\udcff", "/bad\\xff"),
    ],
)
def test_printable_escapes_what_a_terminal_would_run(text: str, shown: str) -> None:
    assert paths.printable(text) == shown
    assert paths.printable(text).isprintable()
