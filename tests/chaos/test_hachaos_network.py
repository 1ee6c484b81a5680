"""hachaos's hosts (``hachaos.netns``): real network namespaces on a bridge of their own, real
TCP between them; a partition drops packets both ways until healed; and nothing is left
behind, neither by ``destroy`` nor, for a run whose process died, by ``hachaos cleanup``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from hachaos.netns import ChaosNetwork, cleanup_stale, run_ip

pytestmark = pytest.mark.timeout(120)

SERVER = textwrap.dedent(
    """
    import socket, sys
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((sys.argv[1], 9000))
    s.listen()
    print("listening", flush=True)
    while True:
        c, _ = s.accept()
        c.sendall(b"hello")
        c.close()
    """
)
CLIENT = textwrap.dedent(
    """
    import socket, sys
    try:
        with socket.create_connection((sys.argv[1], 9000), timeout=1.5) as c:
            print(c.recv(5).decode())
    except OSError as e:
        print(type(e).__name__)
    """
)


def _namespaces() -> set[str]:
    return {line.split()[0] for line in run_ip("netns", "list").stdout.splitlines() if line}


def _made_by(net: ChaosNetwork) -> set[str]:
    """The namespaces ``net`` owns (another test worker may make and remove its own
    meanwhile, so a test compares these, not the whole list)."""
    return {net.namespace(h) for h in net.all_hosts} | {net.bridge_namespace}


def _links() -> str:
    return "\n".join(sorted(run_ip("-o", "link").stdout.splitlines()))


def _connect(net: ChaosNetwork, src: str, dst: str) -> str:
    result = subprocess.run(
        [*net.command_prefix(src), sys.executable, "-c", CLIENT, net.address(dst)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    return result.stdout.strip()


def test_partition_drops_both_ways_and_destroy_leaves_nothing() -> None:
    before_links = _links()
    before = _namespaces()
    net = ChaosNetwork.create(["a", "b", "c"], tag=str(os.getpid()))
    try:
        made = _namespaces() - before
        assert _made_by(net) == {net.namespace(h) for h in ("a", "b", "c", "clients")} | {
            net.bridge_namespace
        }
        assert _made_by(net) <= made
        assert _links() == before_links, "no link in the root namespace"
        routes = run_ip("-n", net.namespace("a"), "route").stdout
        assert "default" not in routes and "10.77.0.0/24" in routes
        server = subprocess.Popen(
            [*net.command_prefix("a"), sys.executable, "-c", SERVER, net.address("a")],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert server.stdout is not None and server.stdout.readline().strip() == "listening"
            assert _connect(net, "b", "a") == "hello"
            assert _connect(net, "clients", "a") == "hello"
            net.block("a", "b")
            assert _connect(net, "b", "a") == "TimeoutError"  # silently dropped
            assert _connect(net, "c", "a") == "hello"  # the others still reach it
            net.partition([["a"], ["c"]])
            assert _connect(net, "c", "a") == "TimeoutError"
            net.heal()
            assert _connect(net, "b", "a") == "hello"
            assert _connect(net, "c", "a") == "hello"
        finally:
            server.kill()
            server.wait()
    finally:
        net.destroy()
    assert not _made_by(net) & _namespaces()
    assert _links() == before_links
    assert not net.state_file.exists()


def test_cleanup_removes_what_a_dead_run_left() -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    net = ChaosNetwork.create(["x"], tag=str(dead.pid))
    sleeper = subprocess.Popen([*net.command_prefix("x"), "sleep", "60"])
    try:
        assert net.namespace("x") in _namespaces()
        removed = cleanup_stale()
        assert _made_by(net) <= set(removed)
        assert not _made_by(net) & _namespaces()
        assert sleeper.wait(10) == -9  # what ran inside was killed
        assert not net.state_file.exists()
    finally:
        sleeper.kill()
        net.destroy()


INSIDE = textwrap.dedent(
    """
    import json, os
    from hachaos.netns import ChaosNetwork, _pids_in
    net = ChaosNetwork.create(["a"], tag=str(os.getpid()))
    print(json.dumps(sorted({net.namespace(h) for h in net.all_hosts} | {net.bridge_namespace})))
    try:
        net.enter("clients")  # as the harness does
        print(_pids_in(net.namespace("clients")), _pids_in(net.namespace("a")))
    finally:
        net.destroy()
    """
)


def test_a_harness_inside_the_clients_namespace_sees_nothing_left_running_there() -> None:
    # The harness lives in the clients' namespace, so the ``ip netns pids`` it runs lives
    # there too and lists itself: counted as a process to kill and wait for, every run's
    # destroy waited its whole 10 s deadline for it.
    result = subprocess.run(
        [sys.executable, "-c", INSIDE], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert lines[-1] == "[] []", result.stdout
    # Only the child's own namespaces: another test worker may make and remove its own
    # meanwhile (a fresh-clone run saw a hachaos run's hc<pid>-* appear during this test).
    made = set(json.loads(lines[-2]))  # printed just before the pids
    assert made and not made & _namespaces()
