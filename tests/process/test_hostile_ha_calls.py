"""Hostile HAServiceProtocol calls to a live NameNode with mutual TLS and automatic failover
(issue 25 item 5), sent with the operator's admin certificate:

- bytes that are no message, sent to ``TransitionToActive``, ``TransitionToStandby`` and
  ``TransitionToObserver``, are INVALID_ARGUMENT with the NameNode's error class, and leave no
  traceback in its log (before: the role rule read ``source`` from the undecodable request and
  the call ended UNKNOWN with a traceback);
- a ``RequestSource`` number that the enum does not define is INVALID_ARGUMENT naming the
  field, and the active stays active (before: it was not ``REQUEST_BY_USER``, so the
  manual-control check let an operator's call demote the elected active);
- an operator's plain ``REQUEST_BY_USER`` is still refused by the manual-control check.
"""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from conf.rpc import ERROR_CLASS_KEY, make_channel
from hadev.devcluster import DevCluster
from hanamenode.ha import HAState
from proto import namenode_pb2

pytestmark = pytest.mark.timeout(240)

HA = "/hanamenode.namenode.HAServiceProtocol/"
GARBAGE = (b"\xff\xff\xff", b"\x08\x80\x80\x80\x80\x80\x80\x80\x80\x80\x80", b"\x0a\x05ab")


def _refusal(channel: grpc.Channel, method: str, raw: bytes) -> tuple[grpc.StatusCode, str, str]:
    with pytest.raises(grpc.RpcError) as info:
        channel.unary_unary(HA + method)(raw, timeout=20)
    err = info.value
    trailers = dict(err.trailing_metadata() or ())  # type: ignore[attr-defined]
    return err.code(), err.details() or "", str(trailers.get(ERROR_CLASS_KEY, ""))  # type: ignore[attr-defined]


def test_ha_calls_refuse_undecodable_bytes_and_unknown_sources(tmp_path: Path) -> None:
    with DevCluster(tmp_path, session_timeout=1.0, quorum_timeout="4s") as dev:
        active_id = dev.wait_active()
        active = dev.namenode(active_id)
        standby_id = next(nn for nn in dev.namenode_ids if nn != active_id)
        tls = dev.admin_settings().tls
        assert tls.enabled
        for nn_id in (active_id, standby_id):
            with make_channel(dev.namenode(nn_id).address, tls) as channel:
                for method in ("TransitionToActive", "TransitionToStandby", "TransitionToObserver"):
                    for raw in GARBAGE:
                        code, details, error_class = _refusal(channel, method, raw)
                        assert code == grpc.StatusCode.INVALID_ARGUMENT, (method, raw, details)
                        assert "not a valid message" in details, details
                        assert error_class, (method, details)

        with make_channel(active.address, tls) as channel:
            for source in (3, 7, 2**31 - 1):
                raw = namenode_pb2.TransitionRequest(source=source).SerializeToString()
                for method in ("TransitionToStandby", "TransitionToActive"):
                    code, details, _ = _refusal(channel, method, raw)
                    assert code == grpc.StatusCode.INVALID_ARGUMENT, (source, method, details)
                    assert f"source is {source}" in details, details
                    assert active.state() is HAState.ACTIVE
            user = namenode_pb2.TransitionRequest(source=namenode_pb2.REQUEST_BY_USER)
            code, details, _ = _refusal(channel, "TransitionToStandby", user.SerializeToString())
            assert code == grpc.StatusCode.PERMISSION_DENIED, details
            assert "Manual HA control" in details
        assert active.state() is HAState.ACTIVE
        assert dev.active() == active_id

        for nn_id in dev.namenode_ids:
            text = dev.log_path(nn_id).read_text()
            assert "Traceback" not in text, f"{nn_id} logged a traceback:\n{text[-4000:]}"
