"""Namespace paths: the one validation every client path goes through (docs/architecture.md §5.1).

A path arrives from the network, becomes part of an edit op that every NameNode replays, and
of an fsimage row, so the NameNode accepts exactly one spelling of each path: absolute,
normalized (no empty, ``.`` or ``..`` component, no trailing slash except the root), valid
UTF-8 without control characters (C0 including NUL, DEL and C1: HDFS accepts them, but names
are printed on terminals, where they are commands), and within HDFS's default limits: 8000
characters (``HdfsServerConstants.MAX_PATH_LENGTH``), 1000 components (``MAX_PATH_DEPTH``)
and 255 bytes per component (``dfs.namenode.fs-limits.max-component-length``). Anything else is an
``InvalidPathError`` whose message names the path and the rule it broke.

The control-character rule is a rule for new names (``check_new_names``): edit logs and
images written before it may hold such names, and a NameNode must still load them, and a
client must still stat, list, rename away and delete them (``validate_path``).
"""

from __future__ import annotations

from collections.abc import Iterable

from hanamenode.errors import InvalidPathError

ROOT = "/"
SEPARATOR = "/"
MAX_PATH_LENGTH = 8000
MAX_PATH_DEPTH = 1000
MAX_COMPONENT_BYTES = 255

# Long enough to recognize a path in a message, short enough that an 8000-character path
# does not flood the client's terminal or the log.
_SHOWN_CHARS = 120


def describe(path: object) -> str:
    """``path`` quoted for an error message, shortened when long."""
    if isinstance(path, str) and len(path) > _SHOWN_CHARS:
        return f"{path[:_SHOWN_CHARS]!r}... ({len(path)} characters)"
    return repr(path)


def _invalid(path: object, rule: str) -> InvalidPathError:
    return InvalidPathError(f"invalid path {describe(path)}: {rule}")


def check_new_names(path: str, names: Iterable[str]) -> None:
    """Refuse ``names``, the components a request would create in ``path``, when one holds a
    control character; the existing components of ``path`` may (the module's docstring)."""
    for name in names:
        control = _first_control(name)
        if control is not None:
            raise _invalid(
                path,
                f"contains the control character U+{ord(control):04X} "
                "(names may not contain C0, DEL or C1 control characters)",
            )


def validate_path(path: object) -> str:
    """Return ``path`` unchanged if it is a valid namespace path, else raise InvalidPathError.
    Control characters other than NUL pass: an existing name may hold them (the module's
    docstring)."""
    if not isinstance(path, str):
        raise _invalid(path, f"a path must be a string, not {type(path).__name__}")
    if not path:
        raise _invalid(path, "the path is empty")
    if not path.startswith(SEPARATOR):
        raise _invalid(path, "the path must be absolute (start with '/')")
    if len(path) > MAX_PATH_LENGTH:
        raise _invalid(path, f"longer than {MAX_PATH_LENGTH} characters")
    if "\x00" in path:
        raise _invalid(path, "contains a NUL character")
    if path == ROOT:
        return path
    if path.endswith(SEPARATOR):
        raise _invalid(path, "trailing '/' (only the root may end with '/')")
    components = path[1:].split(SEPARATOR)
    if len(components) > MAX_PATH_DEPTH:
        raise _invalid(path, f"deeper than {MAX_PATH_DEPTH} components ({len(components)})")
    for index, name in enumerate(components, start=1):
        if not name:
            raise _invalid(path, f"empty component {index} ('//')")
        if name in (".", ".."):
            raise _invalid(path, f"component {index} is {name!r} (paths must be normalized)")
        try:
            size = len(name.encode("utf-8"))
        except UnicodeEncodeError:
            raise _invalid(path, f"component {index} is not valid UTF-8") from None
        if size > MAX_COMPONENT_BYTES:
            raise _invalid(
                path, f"component {index} is {size} bytes, longer than {MAX_COMPONENT_BYTES}"
            )
    return path


def _is_control(ch: str) -> bool:
    code = ord(ch)
    return code < 0x20 or 0x7F <= code <= 0x9F


def _first_control(text: str) -> str | None:
    if text.isprintable():  # fast path: no C0, DEL or C1 character is printable
        return None
    return next((ch for ch in text if _is_control(ch)), None)


def printable(text: str) -> str:
    """``text`` safe to print on a terminal: unchanged when every character is printable;
    otherwise with backslashes doubled and every character that is not printable escaped
    (``\\x1b``, ``\\n``, ``\\u200b``; bytes that were not UTF-8 on a command line, which
    Python carries as lone surrogates, as ``\\x80``)."""
    if text.isprintable():
        return text
    out: list[str] = []
    for ch in text:
        if ch == "\\":
            out.append("\\\\")
        elif "\udc80" <= ch <= "\udcff":
            out.append(f"\\x{ord(ch) - 0xDC00:02x}")
        elif ch.isprintable():
            out.append(ch)
        else:
            out.append(repr(ch)[1:-1])
    return "".join(out)


def components(path: str) -> list[str]:
    """The names along a valid path: ``"/a/b"`` -> ``["a", "b"]``, the root -> ``[]``."""
    return [] if path == ROOT else path[1:].split(SEPARATOR)


def parent(path: str) -> str | None:
    """The parent of a valid path: ``"/a/b"`` -> ``"/a"``, ``"/a"`` -> ``"/"``, root -> None."""
    if path == ROOT:
        return None
    head = path.rpartition(SEPARATOR)[0]
    return head or ROOT


def basename(path: str) -> str:
    """The last component of a valid path; the root's is ``""``."""
    return path.rpartition(SEPARATOR)[2]


def join(directory: str, name: str) -> str:
    """The path of ``name`` inside ``directory``."""
    return SEPARATOR + name if directory == ROOT else directory + SEPARATOR + name


def is_ancestor(ancestor: str, path: str) -> bool:
    """True when ``path`` is strictly inside ``ancestor`` (every path is inside the root)."""
    if ancestor == ROOT:
        return path != ROOT
    return path.startswith(ancestor + SEPARATOR)
