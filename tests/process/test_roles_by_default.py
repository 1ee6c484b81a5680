"""Roles by default (issue 25 item 6, docs/operations.md §9.2 and §9.5): the dev cluster gives
its users a client-only certificate and its operator an admin-only one, so that an ``hafs``
user cannot move the active, while ``hactl`` with the operator's file can.

Before, ``hadev`` made one generic certificate with both roles and every ``hafs`` user was an
admin.
"""

from __future__ import annotations

import sys
from pathlib import Path

import grpc
import pytest

from conf.guard import roles_of_certificate
from conf.rpc import make_channel
from hadev.daemon import run_command
from hadev.devcluster import DevCluster
from hadev.namenodes import run_hafs
from hadev.pki import ADMIN, CLIENT
from hanamenode.ha import HAState
from proto import namenode_pb2, namenode_pb2_grpc

pytestmark = pytest.mark.timeout(240)


def test_a_client_certificate_cannot_call_admin_rpcs(tmp_path: Path) -> None:
    with DevCluster(tmp_path, session_timeout=1.0, quorum_timeout="4s") as dev:
        active = dev.wait_active()
        standby = next(nn for nn in dev.namenode_ids if nn != active)
        users, operator = dev.settings().tls, dev.admin_settings().tls
        assert users.cert_file is not None and operator.cert_file is not None
        assert roles_of_certificate(users.cert_file.read_bytes()) == {CLIENT}
        assert roles_of_certificate(operator.cert_file.read_bytes()) == {ADMIN}

        # The users' file serves the file system ...
        made = run_hafs(dev.conf_path, "mkdir", "-p", "/user/alice")
        assert made.returncode == 0, made.stderr

        # ... and no HA transition, forced or not, nor a graceful failover.
        with make_channel(dev.namenode(active).address, users) as channel:
            ha = namenode_pb2_grpc.HAServiceProtocolStub(channel)
            forced = namenode_pb2.TransitionRequest(source=namenode_pb2.REQUEST_BY_USER_FORCED)
            for call, request in (
                (ha.TransitionToStandby, forced),
                (ha.TransitionToActive, forced),
                (ha.GracefulFailover, namenode_pb2.HAEmpty()),
            ):
                with pytest.raises(grpc.RpcError) as info:
                    call(request, timeout=10)
                assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED, info.value
                assert "needs the role admin" in (info.value.details() or "")
                assert "presents client" in (info.value.details() or "")
        as_user = run_command(
            [sys.executable, "-m", "failover.hactl", "--conf", str(dev.conf_path),
             "failover", active, standby]
        )
        print(as_user.stdout, as_user.stderr)
        assert as_user.returncode != 0
        assert "admin" in as_user.stderr, as_user.stderr
        assert dev.namenode(active).state() is HAState.ACTIVE

        # The operator's file moves the active.
        as_operator = dev.hactl("failover", active, standby)
        assert as_operator.returncode == 0, as_operator.stderr
        dev.wait_state(standby, HAState.ACTIVE)
        assert dev.wait_active() == standby
