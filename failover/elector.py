"""The ActiveStandbyElector embedded in every NameNode (docs/architecture.md §6.2; HDFS
``ActiveStandbyElector`` and ``ZKFailoverController`` in one): a kazoo ``Lock`` plus a
breadcrumb and a fence step.

This is the shell that wires the parts to kazoo and the NameNode. The decisions are pure
functions in ``failover.election_rules``; the parts (docs/architecture.md §6.2 lists them)
are the lock (``election_lock``, ``lock_watch``), the breadcrumb, the membership znode, the
session (``zk_session``), the thread (``elector_thread``) and the state it shares with the
others (``elector_state``), the health monitor, the cede, the rejoin after an expired
session, the attempt record, the fence (``controller.fence_old_active``) and the steps of a
graceful failover (``graceful``).

    elector = ActiveStandbyElector(settings, "nn1", fsn)   # fsn: FSNamesystem (an HATarget)
    elector.start()          # threads elector-nn1 and health-monitor-nn1
    ...
    elector.stop()           # no new attempt; a held lock stays held ...
    fsn.stop()               # ... while the NameNode leaves the active state
    elector.close()          # closes the ZooKeeper session: the lock is free

One round of thread ``elector-<nn>``:

1. Wait until eligible: healthy (``health-monitor-<nn>`` runs the NameNode's check every
   ``ha.health-monitor.check-interval.ms``), not ceding, connected, and the working znode
   exists (``hactl format-zk``).
2. Queue for ``ActiveStandbyElectorLock`` (``Lock.acquire``, blocking). Turning unhealthy,
   ceding or stopping cancels the wait.
3. Holding the lock: read ``ActiveBreadCrumb``. If it names another NameNode, fence it:
   ask it to step down (TransitionToStandby, ``ha.failover-controller.graceful-fence.
   rpc-timeout.ms``), and if that fails run ``dfs.ha.fencing.methods`` in order; if every
   method fails, give the lock back and try again after a pause. Then write the breadcrumb
   (version-checked) and make the NameNode active; if that fails, give the lock back.
4. While active, step down (transition to standby, give the lock back) as soon as: the
   session expired (LOST), the connection has been down longer than the session timeout
   (the server may have expired the session and another NameNode may be winning), the lock
   znode was deleted, the NameNode turned unhealthy, it was asked to cede, or it left the
   active state on its own (edit log failure).

Threads: ``elector-<nn>`` runs the rounds, and is the only one to set the state, publish a
wait for the lock, fence, write the breadcrumb or hold the lock. RPC threads (``cede_active``,
``graceful_failover``, ``lock_holder``), ``health-monitor-<nn>`` (health changes, the
membership znode, the rejoin check) and kazoo's threads (the session listener, watches) only
change inputs and wake it, through ``StateBoard.interrupt`` whose condition makes a cancel
of the wait for the lock race-free; kazoo's callbacks never block.

Safety never rests on one ZooKeeper request finishing promptly (docs/operations.md §8.2,
ZOOKEEPER-4537: a lone client's request may wait a third of the session timeout): a slow
request only delays; stepping down needs no request at all; a lock znode is deleted by
requests of its own session, which ZooKeeper applies in order; and the QJM epoch fences an
old active that has not noticed yet. ``ephemeral members/<nn>`` says which NameNodes run an
elector.

Graceful failover (``hactl failover nn1 nn2``, HDFS ``gracefulFailoverToYou``): the target's
``graceful_failover`` asks the lock holder, then every other NameNode, to ``cede_active``
(step down, delete its own breadcrumb, give the lock back and stay out for twice the graceful
fence timeout), wins the lock itself with nothing to fence, then lets the others rejoin.
"""

from __future__ import annotations

import time
from typing import Any, Protocol

import structlog
from kazoo.exceptions import CancelledError, KazooException
from kazoo.protocol.states import KazooState
from prometheus_client import CollectorRegistry

from conf import Settings
from failover.attempts import ActiveAttempt, AttemptLog
from failover.breadcrumb import Breadcrumb, BreadcrumbChanged, UnreadableBreadcrumb
from failover.cede import Cede
from failover.controller import HAServiceTarget, fence_old_active
from failover.election_lock import ElectionLock, ElectorLock
from failover.election_rules import (
    FAILOVER_SUSPENDED,
    Decision,
    ElectionInputs,
    Reason,
    ZKConnection,
    become_active,
    failover_note,
    journal_fenced,
    stand_for_election,
    step_down,
    transition_cause,
)
from failover.elector_state import ElectorState, StateBoard
from failover.elector_thread import ElectorThread
from failover.errors import FencingFailedError
from failover.fencing import NodeFencer
from failover.graceful import Attempt, graceful_failover
from failover.health import FreshConnectionProbe, HealthMonitor
from failover.membership import Membership
from failover.metrics import ElectorMetrics
from failover.rejoin import Rejoin
from failover.zk_session import ElectorSession
from hanamenode.errors import ServiceFailedError
from hanamenode.ha import HAState
from hanamenode.peers import connect_address
from hanamenode.transitions import Cause
from zk.client import describe_acls
from zk.paths import ActiveNodeInfo, ElectorPaths

__all__ = ["ActiveAttempt", "ActiveStandbyElector", "ElectorState", "HATarget"]

log = structlog.get_logger(__name__)

_POLL = 0.1
"""How often a waiting thread looks at stop and session loss (seconds)."""


class HATarget(Protocol):
    """What the elector needs of its NameNode (``FSNamesystem`` is one)."""

    @property
    def state(self) -> HAState: ...

    def check_health(self) -> None: ...

    def transition_to_active(self, cause: Cause = ..., detail: str = "") -> None: ...

    def transition_to_standby(self, cause: Cause = ..., detail: str = "") -> None: ...


class _Abort(Exception):
    """This attempt to become active ends; the message says why."""


class _Stopping(Exception):
    """The elector is stopping: leave at once (``close`` ends the session)."""


class ActiveStandbyElector:
    """The election of one NameNode; see the module docstring for what a round does and
    which thread does what.

    ``address`` is where the other NameNodes reach this one (default: its configured RPC
    address); ``registry`` receives the metrics (default: a private one);
    ``failure_backoff`` is the pause after a failed attempt, before queueing again.
    """

    def __init__(
        self,
        settings: Settings,
        nn_id: str,
        target: HATarget,
        *,
        address: str | None = None,
        registry: CollectorRegistry | None = None,
        failure_backoff: float = 1.0,
    ) -> None:
        ha = settings.ha
        self.settings = settings
        self.nn_id = nn_id
        self.paths = ElectorPaths.from_settings(settings)
        self.info = ActiveNodeInfo(
            settings.nameservice,
            nn_id,
            address or connect_address(settings.namenode(nn_id).rpc_address),
        )
        self.fencer = NodeFencer.from_settings(settings)
        self.session_timeout = settings.zk.session_timeout
        self.graceful_fence_timeout = ha.graceful_fence_timeout
        self.new_active_timeout = ha.new_active_timeout
        self.cede_seconds = max(1.0, 2 * ha.graceful_fence_timeout)
        """How long a NameNode asked to cede by a graceful failover stays out (HDFS: twice
        the graceful fence timeout)."""
        self.failure_backoff = failure_backoff
        self.last_fencing: tuple[float, str] | None = None
        """(wall-clock time, outcome) of the last fencing this elector did (status page)."""
        self._target = target
        self._log = log.bind(nn=nn_id, ns=settings.nameservice)
        self._thread = ElectorThread(nn_id)
        self._board = StateBoard(self._log)
        self._zk = ElectorSession(settings, nn_id, self._log, nn_state=lambda: target.state,
                                  on_change=self._on_zk_state)
        self.zk_op_timeout = self._zk.op_timeout
        client = self._zk.client
        self._lock = ElectionLock(client, self.paths.lock, nn_id, self._zk.watcher,
                                  self._zk.wait, self._log, wake=self._thread.wake,
                                  max_delay=max(0.2, self.session_timeout / 4))
        self._breadcrumb = Breadcrumb(client, self.paths.breadcrumb, self.info)
        self._membership = Membership(client, self.paths, nn_id, self.info, self._zk.wait,
                                      self._log)
        self._health = HealthMonitor(
            lambda: target.check_health(),
            ha.health_check_interval,
            self._on_health_change,
            name=nn_id,
            on_tick=self._keep_membership,
            # Reachable from outside too, not only healthy inside (issue 25 item 2).
            probe=FreshConnectionProbe(self.info.address, settings.tls, ha.health_rpc_timeout)
            if ha.health_rpc_timeout > 0 else None,
        )
        self._cede = Cede()
        self._rejoin = Rejoin(nn_id, self._log)
        self._attempts = AttemptLog()
        self._graceful = False
        """A graceful failover to this NameNode is under way (the history's cause)."""
        self._fenced_gracefully = False
        """The last fence was the old active stepping down when asked (the history's cause)."""
        self.metrics = ElectorMetrics(
            registry or CollectorRegistry(), lambda: self._board.state.value,
            lambda: self.zk_state, self._zk.neutral.seconds,
        )

    # -- what it is ----------------------------------------------------------------------------

    @property
    def state(self) -> ElectorState:
        return self._board.state

    @property
    def zk_state(self) -> str:
        """kazoo's CONNECTED, SUSPENDED or LOST."""
        return self._zk.state

    @property
    def healthy(self) -> bool:
        return self._health.status[0]

    @property
    def failover_note(self) -> str:
        """What ``hactl get-service-state`` prints after the state: "ZooKeeper unreachable:
        automatic failover suspended" in neutral mode, else ""."""
        return failover_note(self._inputs()) if self.running else ""

    @property
    def last_attempt(self) -> ActiveAttempt | None:
        return self._attempts.last

    @property
    def running(self) -> bool:
        return self._thread.running

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> ActiveStandbyElector:
        """Connect to ZooKeeper (in the background) and start both threads."""
        if self._thread.started:
            raise RuntimeError(f"the elector of {self.nn_id} was already started")
        self._log.info(
            "elector starting",
            zk=self.settings.zk.quorum,
            lock=self.paths.lock,
            session_timeout=self.session_timeout,
            fencing=[str(m) for m in self.fencer.methods],
            acl=describe_acls(self._zk.client.default_acl),
        )
        self._zk.start()
        self._health.start()
        self._thread.start(self._run)
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Leave the election: no new attempt, a wait for the lock cancelled, both threads
        stopped (waiting up to ``timeout``). A lock this NameNode holds stays held until
        ``close``, so that the NameNode can leave the active state first."""
        self._thread.stop()
        self._board.interrupt(cancel=True)
        timeout = self._zk.join_timeout(timeout)
        self._health.stop(timeout)
        if self._thread.join(timeout):
            # Blocked in a transition or a ZooKeeper request: close() ends the session,
            # which fails every request and lets it go.
            self._log.info("elector thread still busy after stop", timeout=timeout)

    def close(self, timeout: float = 10.0) -> None:
        """``stop``; step the NameNode down if it is still active (it would be active without
        the lock otherwise); close the session, which frees the lock and the membership
        znode at once; unregister the metrics."""
        self.stop(timeout)
        if self._target.state is HAState.ACTIVE:
            self._log.info("stepping down before leaving the election")
            self._transition_to_standby("the elector is closing", Cause.SHUTDOWN)
        timeout = self._zk.join_timeout(timeout)
        self._zk.close(timeout)
        if self._thread.join(timeout):
            if self._zk.connected:
                self._log.error("elector thread did not stop", timeout=timeout)
            else:
                self._log.info("elector thread still waiting for ZooKeeper; it ends with the "
                               "client", timeout=timeout)
        if self._target.state is HAState.ACTIVE:
            # A transition to active that was in flight when the session closed.
            self._transition_to_standby("the elector closed during a transition to active",
                                        Cause.SHUTDOWN)
        self.metrics.unregister()
        self._board.set(ElectorState.STOPPED)
        self._log.info("elector closed")

    def __enter__(self) -> ActiveStandbyElector:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- requests from other threads (RPC) ------------------------------------------------------

    def _require_running(self) -> None:
        if not self.running:
            raise ServiceFailedError(f"the elector of NameNode {self.nn_id} is not running")

    def _require_zookeeper(self, what: str) -> None:
        """Fail at once, naming neutral mode, when ZooKeeper is unreachable: stepping down
        or taking over needs the lock, and waiting for ZooKeeper would only time out."""
        if not self._zk.connected:
            raise ServiceFailedError(
                f"NameNode {self.nn_id} cannot {what}: {FAILOVER_SUSPENDED}"
            )

    def cede_active(self, seconds: float) -> None:
        """Step down if active, give the lock back (or leave the queue) and stay out of the
        election for ``seconds``; ``seconds <= 0`` ends an earlier cede at once. Returns once
        this NameNode no longer holds the lock (ServiceFailedError if that takes longer than
        ``ha.failover-controller.new-active.rpc-timeout.ms``)."""
        self._require_running()
        if seconds <= 0:
            self._board.interrupt(self._cede.end)
            self._thread.wake()
            self._log.info("cede ended: rejoining the election")
            return
        self._require_zookeeper("cede the election")
        self._log.info("asked to cede the election", seconds=seconds)
        self._board.interrupt(lambda: self._cede.begin(seconds), cancel=True)
        self._thread.wake()
        if not self._board.wait_released(self.new_active_timeout):
            raise ServiceFailedError(
                f"NameNode {self.nn_id} did not step down within {self.new_active_timeout:g}s"
            )
        if self._target.state is HAState.ACTIVE:
            # Active without the lock: made active by hand (--forcemanual).
            self._transition_to_standby("ceding the election", Cause.GRACEFUL)

    def graceful_failover(self) -> str:
        """Become active without fencing: the lock holder and every other NameNode cede, this
        one wins the lock, then the others rejoin. Returns the previous holder's id ("" if
        none, or if this NameNode was active already); ServiceFailedError naming the step that
        failed."""
        self._require_running()
        if self._target.state is HAState.ACTIVE and self.state is ElectorState.ACTIVE:
            self._log.info("graceful failover asked of the active NameNode: nothing to do")
            return ""
        if self._target.state is HAState.OBSERVER:
            raise ServiceFailedError(
                f"NameNode {self.nn_id} is an observer, which never becomes active; make it "
                "standby first (hactl transition-to-standby)"
            )
        self._require_zookeeper("become active")
        healthy, reason = self._health.check_now()
        if not healthy:
            raise ServiceFailedError(
                f"NameNode {self.nn_id} is not healthy, so it cannot become active: {reason}"
            )
        seq = self._attempts.seq  # an attempt recorded from now on answers this failover
        self._graceful = True
        self._board.interrupt(self._cede.end)
        self._thread.wake()
        started = time.monotonic()
        holder = self.lock_holder()
        self._log.info("graceful failover to this NameNode", holder=holder)

        def cede(nn: str) -> None:
            # The ceding NameNode waits up to new_active_timeout to step down, then answers
            # why not; the call's own deadline leaves it the graceful timeout to say so.
            target = HAServiceTarget.from_settings(self.settings, nn)
            target.cede_active(
                self.cede_seconds, self.new_active_timeout + self.graceful_fence_timeout
            )

        def rejoin(nn: str) -> None:
            target = HAServiceTarget.from_settings(self.settings, nn)
            target.cede_active(0, self.graceful_fence_timeout)

        def wait_won() -> Attempt | None:
            attempt = self._attempts.wait_after(seq, self.new_active_timeout)
            return None if attempt is None else (attempt.succeeded, attempt.message)

        def why_not_won() -> str:
            healthy, reason = self._health.status
            return "" if healthy else f" (it is unhealthy: {reason})"

        try:
            previous = graceful_failover(
                self.nn_id, holder=holder, others=self.settings.namenode_ids, cede=cede,
                rejoin=rejoin, wait_won=wait_won, log=self._log,
                within=self.new_active_timeout, why_not_won=why_not_won,
            )
        finally:
            self._graceful = False
        self._log.info("graceful failover done", previous=holder,
                       seconds=round(time.monotonic() - started, 3))
        return previous

    def lock_holder(self) -> str | None:
        """Who holds the election lock now, read from ZooKeeper (kazoo's
        ``Lock.contenders()``: the first contender); None when nobody does."""
        self._require_zookeeper("read the election lock")
        return self._lock.holder()

    # -- callbacks (other threads; never block) -------------------------------------------------

    def _on_zk_state(self, state: KazooState) -> None:
        """kazoo's session listener (after the neutral clock was updated)."""
        if state != KazooState.CONNECTED:
            self._lock.watch.disarm()
        self._thread.wake()

    def _on_health_change(self, healthy: bool, reason: str) -> None:
        """The monitor set ``status`` before calling: a round that publishes its wait for the
        lock after that sees the change, one that published it before is cancelled here."""
        self._board.interrupt(cancel=not healthy)
        self._thread.wake()

    def _keep_membership(self) -> None:
        """``members/<nn>``, once per session; while waiting, the rejoin check (run by the
        health monitor)."""
        if self._thread.stopping or not self._zk.connected:
            return
        client_id = self._zk.client.client_id
        if client_id is not None:
            self._membership.keep(client_id[0])
        if self.state is ElectorState.WAITING:
            if self._target.state is HAState.OBSERVER:
                # Made an observer while queued: leave the queue (and never take the lock).
                self._board.interrupt(cancel=True)
                return
            self._check_rejoin()

    def _check_rejoin(self) -> None:
        """After its session expired while active (neutral), the NameNode stays active until
        it wins the lock again, or steps down once another NameNode holds it. Called by the
        elector thread before it queues and by the health monitor while it waits."""
        self._rejoin.check(
            lambda: self._target.state, self.lock_holder,
            lambda holder: step_down(self._inputs(session_expired=True, other_holder=holder)),
            self._step_down,
        )

    # -- the election thread -------------------------------------------------------------------

    def _inputs(
        self, generation: int | None = None, *, session_expired: bool = False,
        other_holder: str = "",
    ) -> ElectionInputs:
        """The snapshot the rules decide on; ``generation``: the session count when the lock
        was won (None while not holding it)."""
        healthy, health_reason = self._health.status
        return ElectionInputs(
            stopping=self._thread.stopping,
            healthy=healthy,
            health_reason=health_reason,
            cede_left=self._cede.left(),
            cede_for=self._cede.seconds,
            zk=ZKConnection(self._zk.state),
            session_expired=session_expired or (
                generation is not None and self._zk.sessions_lost != generation
            ),
            other_holder=other_holder,
            lock_node_lost=self._lock.watch.lost,
            # An FSNamesystem says why its edit log failed; other targets say nothing.
            fenced=journal_fenced(getattr(self._target, "last_failure", None)),
            nn_state=self._target.state,
        )

    def _why_out(self) -> Decision | None:
        """Why this NameNode may not be in the election now (None: it may)."""
        return stand_for_election(self._inputs())

    def _run(self) -> None:
        while not self._thread.stopping:
            try:
                self._round()
            except _Stopping:
                break
            except Exception as exc:
                self._log.exception("election round failed; retrying", error=repr(exc))
                self._board.set(ElectorState.OUT)
                self._thread.pause(self.failure_backoff)
        self._log.info("elector thread stopped", state=self.state.value)

    def _wait_until_eligible(self) -> bool:
        logged: str | None = None
        while True:
            why = self._why_out()
            if why is None:
                return True
            if why.reason is Reason.STOPPING:
                return False
            if why.message != logged:
                self._log.info("staying out of the election", why=why.message)
                logged = why.message
            cede_left = self._cede.left()
            self._thread.pause(min(0.5, cede_left) if cede_left > 0 else 0.5)

    def _round(self) -> None:
        self._board.set(ElectorState.OUT)
        if not self._wait_until_eligible():
            return
        if not self._zk.working_znode_exists(self.paths.working):
            self._thread.pause(self.failure_backoff)
            return
        if not self._zk.znodes_protected(self.paths):  # ha.zookeeper.acl, issue 25 item 6
            self._thread.pause(self.failure_backoff)
            return
        self._check_rejoin()
        lock = self._lock.contender()
        if not self._board.queue(lock, self._why_out):
            return  # a cancel that came before the lock was published
        try:
            acquired = bool(lock.acquire())
        except CancelledError:
            acquired = False
        except KazooException as exc:
            self._log.warning("waiting for the lock failed", error=f"{type(exc).__name__} {exc}")
            acquired = False
        finally:
            self._board.dequeue()
        if not acquired:
            self._give_back(lock)  # kazoo's own clean-up is best effort
            why = self._why_out()
            self._log.info("left the queue for the lock",
                           why=why.message if why is not None else "cancelled")
            return
        generation = self._zk.sessions_lost
        self._log.info("won the election lock", node=lock.node)
        release, backoff = True, False
        try:
            try:
                self._check_own_lock_node(lock, generation)
                why = self._why_out()
                if why is not None:
                    raise _Abort(f"no longer eligible: {why.message}")
                self._become_active(generation)
            except _Abort as exc:
                self._attempts.record(False, str(exc))
                self.metrics.failed_attempts.inc()
                self._log.warning("not becoming active; giving the lock back", reason=str(exc))
                backoff = True
                return
            backoff = self._stay_active(lock, generation)
        except _Stopping:
            release = False
            raise
        finally:
            if release:
                self._release(lock, generation)
                self._board.set(ElectorState.OUT)
                if backoff:
                    self._thread.pause(self.failure_backoff)

    def _wait(self, result: Any, what: str, generation: int) -> Any:
        """Wait for a request made while holding the lock: as long as it takes (a slow
        request delays, it does not decide), but _Abort when the session is lost and
        _Stopping when stopping. Kazoo's errors are raised as they are."""
        while not result.wait(_POLL):
            if self._thread.stopping:
                raise _Stopping()
            if self._zk.sessions_lost != generation:
                raise _Abort(f"the ZooKeeper session expired while {what}")
        return result.get(block=False)

    def _check_own_lock_node(self, lock: ElectorLock, generation: int) -> None:
        path = self._lock.node_path(lock)
        try:
            stat = self._wait(self._zk.client.exists_async(path), "checking the lock",
                              generation)
        except KazooException as exc:
            raise _Abort(f"cannot check the lock znode: {type(exc).__name__}") from exc
        if not self._lock.owns(stat):
            raise _Abort(f"the lock znode {path} does not belong to this session")

    def _become_active(self, generation: int) -> None:
        self._board.set(ElectorState.BECOMING_ACTIVE)
        started = time.monotonic()
        self._fenced_gracefully = False
        try:
            fenced = self._breadcrumb.take_over(
                lambda result, what: self._wait(result, what, generation), self._fence)
        except (UnreadableBreadcrumb, BreadcrumbChanged) as exc:
            raise _Abort(str(exc)) from None
        except KazooException as exc:
            raise _Abort(f"ZooKeeper request failed: {type(exc).__name__} {exc}") from exc
        why = become_active(self._inputs(generation))
        if why is not None:
            raise _Abort(f"{why.message} before the transition")
        try:
            self._target.transition_to_active(*self._takeover_cause(fenced))
        except Exception as exc:
            raise _Abort(f"the transition to active failed: {exc}") from exc
        self._rejoin.end()
        elapsed = time.monotonic() - started
        self.metrics.became_active.inc()
        self.metrics.become_active_seconds.observe(elapsed)
        self._attempts.record(True, f"became active ({fenced}) in {elapsed:.3f}s")
        self._log.info("now active through the election", fenced=fenced,
                       seconds=round(elapsed, 3))

    def _takeover_cause(self, fenced: str) -> tuple[Cause, str]:
        """The failover history's cause of this NameNode becoming active (docs/operations.md
        §13.1): a graceful failover to it; the first election (nothing to fence); an old
        active that stepped down when asked (fenced); or one that could not be asked, so the
        lock was free because its session ended (killed, frozen, cut off)."""
        if self._graceful:
            return Cause.GRACEFUL, "hactl failover"
        if fenced == "nothing to fence":
            return Cause.ELECTION, "won the election lock; nothing to fence"
        if self._fenced_gracefully:
            return Cause.FENCING, f"took over from an active that lost the lock: {fenced}"
        return Cause.EXPIRED_SESSION, f"the previous active's session ended: {fenced}"

    def _fence(self, old: ActiveNodeInfo) -> str:
        """``fence_old_active``: what worked; _Abort when nothing did. Either way
        ``last_fencing`` says what happened."""
        def count(method: str, succeeded: bool) -> None:
            outcome = "success" if succeeded else "failure"
            self.metrics.fencing_attempts.labels(method, outcome).inc()
            if method == "graceful" and succeeded:
                self._fenced_gracefully = True

        target = HAServiceTarget(old.namenode_id, old.address, self.settings.tls)
        try:
            fenced = fence_old_active(target, self.fencer, nameservice=old.nameservice,
                                      graceful_timeout=self.graceful_fence_timeout,
                                      count=count, log=self._log)
        except FencingFailedError as exc:
            self.last_fencing = (time.time(), f"failed: {exc}")
            raise _Abort(str(exc)) from None
        self.last_fencing = (time.time(), fenced)
        return fenced

    def _stay_active(self, lock: ElectorLock, generation: int) -> bool:
        """Watch for a reason to step down; step down; True when the next round should wait
        ``failure_backoff`` first."""
        self._board.set(ElectorState.ACTIVE)
        self._lock.watch.watch(self._lock.node_path(lock))
        try:
            while True:
                self._thread.pause(_POLL)
                if self._thread.stopping:
                    raise _Stopping()
                self._lock.watch.keep_armed(self._zk.connected)
                inputs = self._inputs(generation)
                decision = step_down(inputs)
                if decision is None:
                    if inputs.session_expired:
                        # Neutral: no reason to step down yet. Queue again in a new session;
                        # step down if another NameNode holds the lock (_check_rejoin).
                        self._rejoin.begin()
                        self._log.warning(
                            "ZooKeeper session expired while active: staying active and "
                            "rejoining the election")
                        return False
                    continue
                stepped = self._step_down(decision)
                if decision.reason is Reason.CEDED and stepped:
                    self._delete_own_breadcrumb(generation)
                return decision.reason in (Reason.LEFT_ACTIVE, Reason.FENCED)
        finally:
            self._lock.watch.stop()

    def _step_down(self, decision: Decision) -> bool:
        """Count and log ``decision``, and leave the active state unless the NameNode left it
        on its own; True when it is standby now."""
        self._log.warning("stepping down", reason=decision.message)
        self.metrics.step_downs.labels(decision.reason.value).inc()
        return decision.reason is Reason.LEFT_ACTIVE or self._transition_to_standby(
            decision.message, transition_cause(decision.reason))

    def _transition_to_standby(self, why: str, cause: Cause) -> bool:
        try:
            self._target.transition_to_standby(cause, why)
        except Exception as exc:
            self._log.error("could not transition to standby; the next active will fence "
                            "this NameNode", why=why, error=str(exc))
            return False
        return True

    def _delete_own_breadcrumb(self, generation: int) -> None:
        """After a clean step-down, the next active needs no fence. Requests of one session
        apply in order, so this is done before the lock is given back."""
        try:
            if self._breadcrumb.delete_own(lambda r, what: self._wait(r, what, generation)):
                self._log.info("deleted own breadcrumb after stepping down")
        except (KazooException, UnreadableBreadcrumb, _Abort) as exc:
            self._log.warning("could not delete own breadcrumb; the next active will fence "
                              "this NameNode gracefully", error=str(exc) or type(exc).__name__)

    def _release(self, lock: ElectorLock, generation: int) -> None:
        if self._zk.sessions_lost != generation:
            return  # the ephemeral lock znode went with the session
        self._give_back(lock)

    def _give_back(self, lock: ElectorLock) -> None:
        self._lock.give_back(lock, lambda: self._thread.stopping, self._thread.pause,
                             self.failure_backoff)
