"""The hosts of a ``hachaos`` run: one Linux network namespace per daemon and one for the
clients, wired to a bridge that lives in a namespace of its own, on a private subnet that
the harness assigns (``10.77.0.0/24``). Nothing here touches the root namespace: no link,
no address, no route is added there, and no namespace has a default route, so no packet
can leave the machine.

::

    net = ChaosNetwork.create(["zk", "jn1", "jn2", "jn3", "nn1", "nn2"], tag=str(os.getpid()))
    try:
        net.enter("clients")                  # this process's threads now live there
        net.address("nn1")                    # '10.77.0.15'
        net.block("nn1", "zk")                # both ways, silently dropped
        net.heal()
    finally:
        net.destroy()                         # every namespace (and so every link) it made

**Partitions** drop packets silently, as a firewall DROP rule would: to cut ``a`` from
``b``, each side gets a permanent neighbour (ARP) entry for the other's address pointing at
a MAC address that no interface has. Frames sent there are flooded by the bridge and
discarded by every receiver, so TCP sees a silent loss and times out, exactly as across a
broken link. (This kernel has neither iptables/nftables userspace nor the tc actions that
would drop by address; the neighbour table needs only iproute2, which namespaces need
anyway.) Healing deletes the entries, and the kernel resolves the real address again.

A run's namespaces are named ``hc<tag>-<host>``; ``ChaosNetwork.create`` records them (and
any mounts) in ``/run/hachaos/<tag>.json``, and ``cleanup_stale`` removes the namespaces
(killing what still runs inside) and mounts of every run whose owning process is gone
(``hachaos cleanup``).
"""

from __future__ import annotations

import contextlib
import ctypes
import ipaddress
import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import structlog

__all__ = [
    "BLACKHOLE_MAC",
    "CLIENTS",
    "SUBNET",
    "ChaosNetwork",
    "NetworkError",
    "cleanup_stale",
    "run_ip",
]

log = structlog.get_logger(__name__)

SUBNET = ipaddress.IPv4Network("10.77.0.0/24")
CLIENTS = "clients"
BRIDGE = "br0"
BLACKHOLE_MAC = "02:00:00:77:de:ad"
"""A locally administered unicast MAC that no interface of a run has."""
STATE_DIR = Path("/run/hachaos")
_NAME = re.compile(r"hc(\d+)-([a-z0-9]+)")
_CLONE_NEWNET = 0x40000000


class NetworkError(RuntimeError):
    """A namespace, link or address could not be made or removed; names the command."""


def run_ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """``ip <args>``; NetworkError with its stderr when it fails (``check``)."""
    result = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and result.returncode != 0:
        raise NetworkError(f"ip {' '.join(args)}: {result.stderr.strip() or result.returncode}")
    return result


@dataclass
class ChaosNetwork:
    """The namespaces of one run: ``hosts`` (daemon names) plus ``CLIENTS``, each with one
    address on ``SUBNET``, all on a bridge in the run's bridge namespace."""

    tag: str
    hosts: tuple[str, ...]
    addresses: dict[str, str]
    blocked: set[frozenset[str]] = field(default_factory=set)
    mounts: list[str] = field(default_factory=list)

    # -- names ---------------------------------------------------------------------------------

    def namespace(self, host: str) -> str:
        return f"hc{self.tag}-{host}"

    @property
    def bridge_namespace(self) -> str:
        return f"hc{self.tag}-bridge"

    @property
    def all_hosts(self) -> tuple[str, ...]:
        return (*self.hosts, CLIENTS)

    def address(self, host: str) -> str:
        return self.addresses[host]

    def command_prefix(self, host: str) -> tuple[str, ...]:
        """Run a command inside ``host``'s namespace (the command keeps its pid: ``ip netns
        exec`` enters the namespace and execs it)."""
        return ("ip", "netns", "exec", self.namespace(host))

    @property
    def state_file(self) -> Path:
        return STATE_DIR / f"{self.tag}.json"

    # -- life ----------------------------------------------------------------------------------

    @classmethod
    def create(cls, hosts: Sequence[str], tag: str | None = None) -> ChaosNetwork:
        """Make the bridge namespace and one namespace per host and for the clients. On
        failure, whatever was made is removed again."""
        tag = tag or str(os.getpid())
        if not tag.isdigit():
            raise NetworkError(f"a run tag is the owning pid, got {tag!r}")
        if CLIENTS in hosts or len(set(hosts)) != len(hosts):
            raise NetworkError(f"host names must be distinct and not {CLIENTS!r}: {hosts}")
        names = [*hosts, CLIENTS]
        pool = SUBNET.hosts()
        next(pool)  # .1 stays unused: no gateway, no default route
        addresses = {h: str(next(pool)) for h in hosts}
        addresses[CLIENTS] = str(SUBNET.network_address + 100)
        net = cls(tag, tuple(hosts), addresses)
        net._save()
        try:
            run_ip("netns", "add", net.bridge_namespace)
            run_ip("-n", net.bridge_namespace, "link", "add", BRIDGE, "type", "bridge")
            run_ip("-n", net.bridge_namespace, "link", "set", BRIDGE, "up")
            for host in names:
                ns = net.namespace(host)
                port = f"p-{host}"
                run_ip("netns", "add", ns)
                run_ip("-n", ns, "link", "set", "lo", "up")
                run_ip(
                    "-n",
                    net.bridge_namespace,
                    "link",
                    "add",
                    port,
                    "type",
                    "veth",
                    "peer",
                    "name",
                    "eth0",
                    "netns",
                    ns,
                )
                run_ip("-n", net.bridge_namespace, "link", "set", port, "master", BRIDGE)
                run_ip("-n", net.bridge_namespace, "link", "set", port, "up")
                run_ip(
                    "-n", ns, "addr", "add", f"{addresses[host]}/{SUBNET.prefixlen}", "dev", "eth0"
                )
                run_ip("-n", ns, "link", "set", "eth0", "up")
        except BaseException:
            net.destroy()
            raise
        log.info("chaos network up", tag=tag, addresses=addresses)
        return net

    def _save(self) -> None:
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        self.state_file.write_text(
            json.dumps(
                {
                    "pid": int(self.tag),
                    "namespaces": [self.namespace(h) for h in self.all_hosts]
                    + [self.bridge_namespace],
                    "mounts": self.mounts,
                }
            )
            + "\n"
        )

    def add_mount(self, path: Path, size_mb: int) -> None:
        """A tmpfs of ``size_mb`` MiB on ``path`` (a JournalNode's disk that can be filled),
        unmounted by ``destroy``."""
        path.mkdir(parents=True, exist_ok=True)
        result = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size_mb}m,mode=0755", "tmpfs", str(path)],
            capture_output=True,
            text=True,
            timeout=30,
        )
        if result.returncode != 0:
            raise NetworkError(f"mount tmpfs on {path}: {result.stderr.strip()}")
        self.mounts.append(str(path))
        self._save()

    def destroy(self) -> None:
        """Kill what still runs in the namespaces, delete them (their links go with them)
        and unmount the tmpfs mounts. Safe to repeat; errors are logged, and every step is
        tried."""
        _remove([self.namespace(h) for h in self.all_hosts] + [self.bridge_namespace], self.mounts)
        self.state_file.unlink(missing_ok=True)
        self.blocked.clear()

    # -- this process --------------------------------------------------------------------------

    def enter(self, host: str = CLIENTS) -> None:
        """Move the calling thread into ``host``'s namespace (call it before any other
        thread starts: threads made later inherit it; those made earlier stay behind)."""
        libc = ctypes.CDLL(None, use_errno=True)
        with open(f"/run/netns/{self.namespace(host)}") as ns:
            if libc.setns(ns.fileno(), _CLONE_NEWNET) != 0:
                errno = ctypes.get_errno()
                raise NetworkError(f"setns into {self.namespace(host)}: {os.strerror(errno)}")

    # -- partitions ----------------------------------------------------------------------------

    def block(self, a: str, b: str) -> None:
        """Drop every packet between hosts ``a`` and ``b`` (both ways)."""
        pair = frozenset((a, b))
        if a == b or pair in self.blocked:
            return
        for src, dst in ((a, b), (b, a)):
            run_ip(
                "-n",
                self.namespace(src),
                "neigh",
                "replace",
                self.addresses[dst],
                "lladdr",
                BLACKHOLE_MAC,
                "nud",
                "permanent",
                "dev",
                "eth0",
            )
        self.blocked.add(pair)

    def unblock(self, a: str, b: str) -> None:
        pair = frozenset((a, b))
        for src, dst in ((a, b), (b, a)):
            run_ip(
                "-n",
                self.namespace(src),
                "neigh",
                "del",
                self.addresses[dst],
                "dev",
                "eth0",
                check=False,
            )
        self.blocked.discard(pair)

    def partition(self, groups: Iterable[Iterable[str]]) -> None:
        """Block every pair of hosts in different ``groups`` (a host in no group is left
        connected to everyone)."""
        sets = [set(g) for g in groups]
        for i, left in enumerate(sets):
            for right in sets[i + 1 :]:
                for a in left:
                    for b in right:
                        self.block(a, b)

    def heal(self) -> None:
        for pair in list(self.blocked):
            a, b = sorted(pair)
            self.unblock(a, b)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _pids_in(namespace: str) -> list[str]:
    """The live processes in ``namespace`` other than this one (the harness may live there).
    When it does, ``ip netns pids`` runs there too and lists itself; it has exited by the
    time its answer is read, so only the pids still alive count (otherwise ``_remove`` would
    wait its whole deadline for a process that is gone)."""
    pids = run_ip("netns", "pids", namespace, check=False).stdout.split()
    return [pid for pid in pids if pid != str(os.getpid()) and _pid_alive(int(pid))]


def _remove(namespaces: Sequence[str], mounts: Sequence[str]) -> None:
    existing = set(run_ip("netns", "list", check=False).stdout.split())
    for ns in namespaces:
        if ns not in existing:
            continue
        pids = _pids_in(ns)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid), signal.SIGKILL)
        deadline = time.monotonic() + 10
        while pids and time.monotonic() < deadline:
            pids = _pids_in(ns)
            time.sleep(0.05)
        result = run_ip("netns", "del", ns, check=False)
        if result.returncode != 0:
            log.error("cannot delete namespace", namespace=ns, error=result.stderr.strip())
    for path in mounts:
        result = subprocess.run(["umount", "-l", path], capture_output=True, text=True, timeout=30)
        if result.returncode != 0 and "not mounted" not in result.stderr:
            log.error("cannot unmount", path=path, error=result.stderr.strip())


def cleanup_stale(everything: bool = False) -> list[str]:
    """Remove the namespaces and mounts of every run whose owning process is gone (all
    runs' with ``everything``), including namespaces named like a run's with no state file.
    The names of the namespaces removed."""
    removed: list[str] = []
    states = sorted(STATE_DIR.glob("*.json")) if STATE_DIR.is_dir() else []
    owned: set[str] = set()
    for path in states:
        try:
            state = json.loads(path.read_text())
            pid = int(state["pid"])
        except (OSError, ValueError, KeyError) as exc:
            log.error("unreadable run state, left alone", path=str(path), error=str(exc))
            continue
        owned.update(state["namespaces"])
        if _pid_alive(pid) and not everything:
            continue
        _remove(state["namespaces"], state.get("mounts", []))
        removed += state["namespaces"]
        path.unlink(missing_ok=True)
    for ns in run_ip("netns", "list", check=False).stdout.split():
        match = _NAME.fullmatch(ns)
        if match and ns not in owned and (everything or not _pid_alive(int(match.group(1)))):
            _remove([ns], [])
            removed.append(ns)
    return removed
