"""A seeded model of the ZooKeeper the electors share: sessions that expire, one lock.

Not kazoo and not a server: the part of ZooKeeper the election relies on (docs/architecture.md
§6), on the simulation's virtual clock. A session lives while its owner pings it within the
session timeout; a paused or crashed owner stops pinging, and the session expires; the
scheduler may also expire a session outright (a network blip between a NameNode and the
ensemble). The lock is the election's ephemeral lock znode: it belongs to one session and
goes with it.

    zk = ZooKeeper(clock, session_timeout=3.0)
    session = zk.connect("nn1")
    zk.try_lock(session)        # True: nn1 holds the lock
    zk.ping(session)            # False once the session has expired: connect again
"""

from __future__ import annotations

from dataclasses import dataclass

from nnsim.loop import VirtualClock


@dataclass(eq=False)
class Session:
    owner: str
    number: int
    expires_at: float
    alive: bool = True


class ZooKeeper:
    """Sessions and the election lock, on virtual time; expiry is noticed on every call."""

    def __init__(self, clock: VirtualClock, session_timeout: float) -> None:
        self.clock = clock
        self.session_timeout = session_timeout
        self.holder: Session | None = None
        self._sessions: list[Session] = []
        self._numbers = 0
        self.expirations = 0

    def connect(self, owner: str) -> Session:
        self._numbers += 1
        session = Session(owner, self._numbers, self.clock.now + self.session_timeout)
        self._sessions.append(session)
        return session

    def _expire_due(self) -> None:
        now = self.clock.now
        for s in self._sessions:
            if s.alive and s.expires_at <= now:
                self.expire(s)
        self._sessions = [s for s in self._sessions if s.alive]

    def expire(self, session: Session) -> None:
        """The ensemble drops ``session`` (and the lock it held)."""
        if not session.alive:
            return
        session.alive = False
        self.expirations += 1
        if self.holder is session:
            self.holder = None

    def ping(self, session: Session) -> bool:
        """The owner's client is alive: extend the session; False if it already expired."""
        self._expire_due()
        if not session.alive:
            return False
        session.expires_at = self.clock.now + self.session_timeout
        return True

    def try_lock(self, session: Session) -> bool:
        self._expire_due()
        if session.alive and self.holder is None:
            self.holder = session
        return self.holder is session

    def holds(self, session: Session) -> bool:
        self._expire_due()
        return self.holder is session

    def release(self, session: Session) -> None:
        if self.holder is session:
            self.holder = None

    def sessions_of(self, owner: str) -> list[Session]:
        return [s for s in self._sessions if s.alive and s.owner == owner]
