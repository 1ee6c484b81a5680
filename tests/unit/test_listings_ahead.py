"""``ListingsAhead``, the listings ``hafs ls -R`` asks ahead of its depth-first walk: every
directory is listed exactly once, the walk sees the same tree in the same order as a serial
walk, a refusal reaches the walk at the directory it concerns, at most ``window`` listings
are in flight, and several are (the reason it exists). The listing function is a dict
here; ``tests/process/test_hafs_shell.py`` walks a real cluster."""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest

from hanamenode.client.client import ListingsAhead
from hanamenode.errors import PathNotFoundError
from hanamenode.namespace import StatInfo


def tree(fanout: int, depth: int) -> dict[str, list[str]]:
    """Directory path -> its child directories, ``fanout`` wide and ``depth`` deep."""
    children: dict[str, list[str]] = {}

    def grow(path: str, level: int) -> None:
        kids = [f"{path.rstrip('/')}/d{i}" for i in range(fanout)] if level < depth else []
        children[path] = kids
        for kid in kids:
            grow(kid, level + 1)

    grow("/", 0)
    return children


def status(path: str) -> StatInfo:
    return StatInfo(path, True, 0, 0, 0o755, "hdfs", "supergroup", 0, 0)


class Lister:
    """A listing function over ``children`` that counts calls and the most in flight."""

    def __init__(self, children: dict[str, list[str]], delay: float = 0.0) -> None:
        self.children = children
        self.delay = delay
        self.calls: Counter[str] = Counter()
        self.in_flight = 0
        self.most_in_flight = 0
        self._lock = threading.Lock()

    def __call__(self, path: str) -> list[StatInfo]:
        with self._lock:
            self.calls[path] += 1
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            time.sleep(self.delay)
            if path not in self.children:
                raise PathNotFoundError(path)
            return [status(kid) for kid in self.children[path]]
        finally:
            with self._lock:
                self.in_flight -= 1


def walk(ahead: ListingsAhead, root: str, errors: list[str]) -> list[str]:
    """The depth-first order in which ``ls -R`` visits directories, through ``ahead``."""
    seen: list[str] = []

    def visit(path: str) -> None:
        try:
            items = ahead.take(path)
        except PathNotFoundError:
            errors.append(path)
            return
        seen.append(path)
        ahead.found(st.path for st in items)
        for st in items:
            visit(st.path)

    visit(root)
    return seen


def serial_walk(children: dict[str, list[str]], root: str) -> list[str]:
    out = [root]
    for kid in children[root]:
        out += serial_walk(children, kid)
    return out


@pytest.mark.parametrize("window", [1, 2, 8, 64])
@pytest.mark.parametrize("fanout, depth", [(3, 3), (1, 12), (40, 1), (5, 2)])
def test_the_walk_sees_the_serial_order_and_lists_each_directory_once(
    window: int, fanout: int, depth: int
) -> None:
    children = tree(fanout, depth)
    lister = Lister(children)
    errors: list[str] = []
    with ListingsAhead(lister, window) as ahead:
        assert walk(ahead, "/", errors) == serial_walk(children, "/")
    assert errors == []
    assert set(lister.calls) == set(children)
    assert max(lister.calls.values()) == 1


def test_a_refusal_is_raised_for_its_directory_and_the_walk_goes_on() -> None:
    children = tree(4, 2)
    vanished = "/d1"  # listed by its parent, deleted before its own listing
    del children[vanished]
    for kid in [k for k in children if k.startswith(vanished + "/")]:
        del children[kid]
    lister = Lister(children)
    errors: list[str] = []
    with ListingsAhead(lister, 8) as ahead:
        seen = walk(ahead, "/", errors)
    assert errors == [vanished]
    assert seen == [p for p in serial_walk(tree(4, 2), "/") if not p.startswith(vanished)]


def test_listings_overlap_up_to_the_window_and_no_further() -> None:
    children = tree(30, 1)
    lister = Lister(children, delay=0.02)
    with ListingsAhead(lister, 6) as ahead:
        walk(ahead, "/", [])
    assert 2 <= lister.most_in_flight <= 6


def test_a_window_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="window must be at least 1, not 0"):
        ListingsAhead(Lister({}), 0)
