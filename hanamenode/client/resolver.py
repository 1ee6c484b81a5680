"""Where the client finds its NameNodes (docs/architecture.md §5.6): the configured list, or
a ``NameNodeResolver`` that follows them somewhere else and tells the failover proxy when
they change (``hanamenode.client.zk_resolver.ZooKeeperResolver`` reads the election znodes;
docs/operations.md §3.5)::

    resolver = ZooKeeperResolver.from_settings(settings)
    proxy = FailoverProxy((), resolver=resolver)        # follows resolver's Resolutions
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

__all__ = ["NameNodeAddress", "NameNodeResolver", "Resolution"]


@dataclass(frozen=True, slots=True)
class NameNodeAddress:
    """One NameNode: its id (for messages) and the ``host:port`` to dial."""

    nn_id: str
    address: str

    def __str__(self) -> str:
        return self.address if self.nn_id == self.address else f"{self.nn_id} ({self.address})"


@dataclass(frozen=True, slots=True)
class Resolution:
    """What a resolver knows of the nameservice at one moment: every NameNode it can name
    (the active first, when it names one), and the active. ``problem`` says why it knows less
    than it should (ZooKeeper unreachable, a znode it may not read), "" when nothing is
    wrong; the proxy quotes it when no NameNode answers."""

    namenodes: tuple[NameNodeAddress, ...] = ()
    active: NameNodeAddress | None = None
    problem: str = ""


class NameNodeResolver(Protocol):
    """Finds the NameNodes and follows them. ``start(on_change)`` begins (``on_change`` is
    called, from the resolver's own thread, with each new ``Resolution``), ``wait(timeout)``
    gives the current one once there is a first (None before then), ``describe()`` names
    where it looks, for messages, and ``close`` stops it."""

    def start(self, on_change: Callable[[Resolution], None]) -> None: ...

    def wait(self, timeout: float) -> Resolution | None: ...

    def describe(self) -> str: ...

    def close(self) -> None: ...
