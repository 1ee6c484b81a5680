"""What ``hafs``, ``hactl``, ``hapipe`` and ``hadev`` print when a daemon does not answer
(issue 28 item 4): one line naming the NameNode or JournalNode, by id and address, and the
cause, and nothing of gRPC's core on the terminal. Each cause is made for real on a dev
cluster (``hadev``: mutual TLS with a certificate per role): a plaintext client at a TLS port
and a TLS client at the HTTP port, a certificate without the role a call needs, a SIGSTOPped
NameNode, a killed one, then both. The exact lines are checked, stderr whole, so that a gRPC
log line fails the test.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from conf import read_xml, write_xml
from conf.guard import Role
from conf.quiet_grpc import VERBOSITY_ENV
from conf.rpc_failures import NOT_GRPC, REFUSED, TIMED_OUT, TLS_EXPECTED, TLS_NOT_SERVED
from hadev.daemon import child_environment
from hadev.devcluster import DevCluster
from hadev.pki import make_pki

pytestmark = pytest.mark.timeout(240)

TOOLS = {"hafs": "hanamenode.client", "hactl": "failover.hactl", "hapipe": "pipeline"}


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    with DevCluster(tmp_path_factory.mktemp("errors"), session_timeout=1.0) as cluster:
        cluster.wait_active()
        yield cluster


def run(
    tool: str, *args: str, conf_env: Path | None = None, timeout_expected: bool = False
) -> tuple[int, str, str]:
    """The tool as a user runs it (its own process, no GRPC_VERBOSITY of the caller's).

    A connection gets 0.1 s to finish its handshake (conf.rpc's reconnect backoff is also
    gRPC's connect timeout), which a loaded machine's daemon can miss: a run that reports a
    timeout where none is expected is run again, twice at most."""
    env = child_environment(conf_env)
    env.pop(VERBOSITY_ENV, None)
    for _ in range(3):
        result = subprocess.run(
            [sys.executable, "-m", TOOLS[tool], *args],
            capture_output=True, text=True, env=env, timeout=120,
        )
        if timeout_expected or TIMED_OUT not in result.stderr:
            break
    return result.returncode, result.stdout, result.stderr


def variant(
    dev: DevCluster, name: str, changes: Mapping[str, str | int], *, plaintext: bool = False
) -> Path:
    """A copy of the dev cluster's configuration with ``changes`` (``plaintext``: no TLS)."""
    props: dict[str, str | int] = {
        p.name: p.value
        for p in read_xml(dev.conf_path)
        if not (plaintext and p.name.startswith("hanamenode.rpc.tls."))
    }
    if plaintext:
        props["hanamenode.rpc.tls.enabled"] = "false"
    props.update(changes)
    return write_xml(props, dev.base_dir / "conf" / f"{name}.xml")


# A stand-in for the import machinery that notes GRPC_VERBOSITY when grpc is first imported.
SPY = """
import importlib, os, sys
class Spy:
    seen = "not imported"
    def find_spec(self, name, path=None, target=None):
        if name == "grpc" and Spy.seen == "not imported":
            Spy.seen = os.environ.get("GRPC_VERBOSITY")
        return None
sys.meta_path.insert(0, Spy())
importlib.import_module(sys.argv[1])
print(Spy.seen, os.environ.get("GRPC_VERBOSITY"))
"""


@pytest.mark.parametrize(
    ("module", "seen"),
    [
        ("hanamenode.client.shell", "NONE"),  # hafs (python -m hanamenode.client: the same)
        ("failover.hactl", "NONE"),
        ("hadev.cli", "NONE"),
        ("pipeline.cli", "NONE"),  # hapipe
        ("namenoded.cli", "None"),  # a daemon logs what gRPC's core says
    ],
)
def test_each_tool_imports_grpc_quiet_and_its_children_do_not_inherit_it(
    module: str, seen: str
) -> None:
    env = child_environment()
    env.pop(VERBOSITY_ENV, None)
    result = subprocess.run(
        [sys.executable, "-c", SPY, module], capture_output=True, text=True, env=env,
        timeout=120, check=True,
    )
    assert result.stdout.split() == [seen, "None"], result.stdout


def test_tls_mismatches_and_a_missing_role_are_named(dev: DevCluster) -> None:
    active = dev.wait_active()
    standby = next(nn for nn in dev.namenode_ids if nn != active)
    nn = dev.namenode(active)
    http = nn.http_address
    assert http is not None
    conf = str(dev.conf_path)

    # hafs -fs at the HTTP port, with the cluster's TLS: one line, no ssl_transport_security.
    assert run("hafs", "--conf", conf, "-fs", http, "ls", "/") == (
        1, "", f"ls: NameNode at {http}: {TLS_NOT_SERVED}\n"
    )
    # Without a configuration hafs speaks plaintext: to the RPC port, and to the HTTP port.
    assert run("hafs", "-fs", nn.address, "ls", "/") == (
        1, "", f"ls: NameNode at {nn.address}: {TLS_EXPECTED}\n"
    )
    assert run("hafs", "-fs", http, "ls", "/") == (1, "", f"ls: NameNode at {http}: {NOT_GRPC}\n")

    # A certificate of the cluster's CA with the client role only: an admin call is refused.
    pki = make_pki(dev.tls_dir, {"errors-client": {Role.CLIENT}})
    client_only = variant(
        dev,
        "client-only",
        {
            "hanamenode.rpc.tls.cert-file": str(pki.cert("errors-client")),
            "hanamenode.rpc.tls.key-file": str(pki.key("errors-client")),
        },
    )
    target = dev.namenode(standby)
    assert run("hactl", "--conf", str(client_only), "failover", active, standby) == (
        255,
        "",
        f"Failover failed: NameNode {standby} at {target.address}: permission denied: "
        "GracefulFailover needs the role admin; the caller's certificate presents client\n",
    )
    assert dev.wait_active() == active  # nothing was done

    # hapipe verify reads $HANAMENODE_CONF (the JournalNodes, their ids, TLS) and names a TLS
    # failure as one; it fails before it starts Spark.
    jns = dev.journalnodes
    code, out, err = run(
        "hapipe", "verify", "--journalnodes", ",".join(jn.address for jn in jns),
        "--journal-id", "ns1",
    )
    named = "; ".join(f"JournalNode at {jn.address}: {TLS_EXPECTED}" for jn in jns)
    assert (code, out, err) == (2, "", f"hapipe: error: no JournalNode answered: {named}\n")
    plaintext = variant(dev, "plaintext", {}, plaintext=True)
    code, out, err = run("hapipe", "verify", conf_env=plaintext)
    named = "; ".join(f"JournalNode {jn.jn_id} at {jn.address}: {TLS_EXPECTED}" for jn in jns)
    assert (code, out, err) == (2, "", f"hapipe: error: no JournalNode answered: {named}\n")


def test_a_stopped_a_dead_and_no_namenode_are_named(dev: DevCluster) -> None:
    active = dev.wait_active()
    standby = next(nn for nn in dev.namenode_ids if nn != active)
    conf = str(dev.conf_path)
    # Two attempts, no sleep: both NameNodes down is one short line, at once.
    quick = str(variant(dev, "quick", {
        "dfs.client.failover.max.attempts": 2,
        "dfs.client.failover.sleep.base.millis": 1,
        "dfs.client.failover.sleep.max.millis": 1,
    }))
    nn = dev.namenode(active)
    os.kill(nn.pid, signal.SIGSTOP)
    try:
        assert run("hafs", "--conf", conf, "--namenode", active, "ls", "/",
                   timeout_expected=True) == (
            1, "", f"ls: NameNode {active} at {nn.address}: {TIMED_OUT}\n"
        )
        # hadev's start-up summary and its errors say the same (DevCluster.states).
        assert dev.states(timeout=1.0)[active] == f"no answer: {TIMED_OUT}"
    finally:
        os.kill(nn.pid, signal.SIGCONT)

    # The freeze outlived the 1 s ZooKeeper session: the standby may have taken over.
    active = dev.wait_active()
    standby = next(nn for nn in dev.namenode_ids if nn != active)
    dev.kill(standby, signal.SIGKILL)
    other = dev.namenode(standby)
    assert run("hactl", "--conf", conf, "failover", active, standby) == (
        255, "", f"Failover failed: NameNode {standby} at {other.address}: {REFUSED}\n"
    )
    assert run("hactl", "--conf", conf, "get-service-state", standby) == (
        255, "", f"Operation failed: NameNode {standby} at {other.address}: {REFUSED}\n"
    )
    assert dev.wait_active(exclude=standby) == active  # the survivor holds the lock again
    width = max(len(dev.namenode(n).address) for n in dev.namenode_ids)
    states = {active: "active", standby: f"Failed to connect: {REFUSED}"}
    assert run("hactl", "--conf", conf, "get-all-service-state") == (0, "".join(
        f"{n}  {dev.namenode(n).address:<{width}}  {states[n]}\n" for n in dev.namenode_ids
    ), "")

    dev.kill(active, signal.SIGKILL)
    listed = "; ".join(
        f"{n} ({dev.namenode(n).address}): {REFUSED}" for n in dev.namenode_ids
    )
    assert run("hafs", "--conf", quick, "ls", "/") == (
        1, "", f"ls: stat: no active NameNode answered in 2 attempt(s): {listed}\n"
    )
