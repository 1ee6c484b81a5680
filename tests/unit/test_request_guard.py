"""proto.bounds and conf.guard as pure decisions: every request field has a bound, each bound
refuses what it should with the field's name, and each method needs the roles documented."""

from __future__ import annotations

import pytest
from google.protobuf.descriptor import Descriptor, FieldDescriptor

from conf.guard import MethodRule, RequestGuard, Role
from hanamenode.errors import AccessControlError, InvalidArgumentError, to_status
from hanamenode.server import RULES as NAMENODE_RULES
from journalnode.server import RULES as JOURNALNODE_RULES
from proto import bounds, journal_pb2, namenode_pb2

SERVICES = [
    namenode_pb2.DESCRIPTOR.services_by_name["ClientProtocol"],
    namenode_pb2.DESCRIPTOR.services_by_name["HAServiceProtocol"],
    namenode_pb2.DESCRIPTOR.services_by_name["NamenodeProtocol"],
    journal_pb2.DESCRIPTOR.services_by_name["QJournalService"],
]
BOUNDED_BY_TYPE = (FieldDescriptor.TYPE_BOOL, FieldDescriptor.TYPE_ENUM)


def _fields(message: Descriptor, seen: set[str]) -> list[FieldDescriptor]:
    if message.full_name in seen:
        return []
    seen.add(message.full_name)
    found: list[FieldDescriptor] = []
    for field in message.fields:
        if field.type == FieldDescriptor.TYPE_MESSAGE:
            found += _fields(field.message_type, seen)
        elif field.type not in BOUNDED_BY_TYPE:
            found.append(field)
    return found


def test_every_request_field_has_a_bound() -> None:
    seen: set[str] = set()
    fields = [f for s in SERVICES for m in s.methods for f in _fields(m.input_type, seen)]
    assert len(fields) > 50
    missing = sorted(f.full_name for f in fields if f.full_name not in bounds.BOUNDS)
    assert not missing, f"request fields without a bound in proto.bounds: {missing}"
    stale = sorted(set(bounds.BOUNDS) - {f.full_name for f in fields})
    assert not stale, f"proto.bounds names fields no request has: {stale}"


HEADER = namenode_pb2.RpcHeader


@pytest.mark.parametrize(
    ("request_", "field"),
    [
        (namenode_pb2.MkdirsRequest(header=HEADER(client_id=b"c" * 129), path="/a"),
         "header.client_id"),
        (namenode_pb2.MkdirsRequest(path="/" + "é" * 16_000), "path"),
        (namenode_pb2.CreateRequest(path="/a", replication=513), "replication"),
        (namenode_pb2.CreateRequest(path="/a", length=2**63), "length"),
        (namenode_pb2.CedeRequest(millis_to_cede=-1), "millis_to_cede"),
        (namenode_pb2.ImageUpload(data=b"x" * (512 * 1024 + 1)), "data"),
        (journal_pb2.FormatRequest(journal_id="j" * 256), "journal_id"),
        (journal_pb2.HeartbeatRequest(req_info=journal_pb2.RequestInfo(committed_txid=2**63)),
         "req_info.committed_txid"),
        (journal_pb2.JournalRequest(num_txns=(1 << 20) + 1), "num_txns"),
        (journal_pb2.AcceptRecoveryRequest(
            state_to_accept=journal_pb2.SegmentState(md5=b"m" * 17)), "state_to_accept.md5"),
    ],
)
def test_a_field_out_of_bounds_is_named(request_: object, field: str) -> None:
    found = bounds.check(request_)  # type: ignore[arg-type]
    assert found is not None and found.field == field, found
    assert found.message.startswith(f"request field {field} ")


@pytest.mark.parametrize(
    "request_",
    [
        namenode_pb2.MkdirsRequest(header=HEADER(client_id=b"c" * 128), path="/" + "é" * 7999),
        namenode_pb2.CreateRequest(path="/a", replication=512, length=2**63 - 1),
        namenode_pb2.ImageUpload(data=b"x" * 512 * 1024),
        # Epochs are the JournalNode's rule (relative to its promise), not a fixed bound.
        journal_pb2.NewEpochRequest(journal_id="j" * 255, epoch=2**64 - 1),
        journal_pb2.JournalRequest(num_txns=1 << 20, records=b"r" * 100_000),
    ],
)
def test_a_request_within_bounds_passes(request_: object) -> None:
    assert bounds.check(request_) is None  # type: ignore[arg-type]


def _guard(rules: dict[str, MethodRule], check_roles: bool = True) -> RequestGuard:
    return RequestGuard(
        rules,
        check_roles=check_roles,
        invalid=InvalidArgumentError,
        denied=AccessControlError,
        to_status=to_status,
    )


ZKFC = namenode_pb2.TransitionRequest(source=namenode_pb2.REQUEST_BY_ZKFC)
USER = namenode_pb2.TransitionRequest(source=namenode_pb2.REQUEST_BY_USER)
NN = "/hanamenode.namenode."
JN = "/hanamenode.journal.QJournalService/"


@pytest.mark.parametrize(
    ("rules", "method", "request_", "presented", "refused"),
    [
        (NAMENODE_RULES, NN + "ClientProtocol/Mkdirs", None, {"client"}, None),
        (NAMENODE_RULES, NN + "ClientProtocol/Mkdirs", None, {"namenode"},
         "Mkdirs needs the role client; the caller's certificate presents namenode"),
        (NAMENODE_RULES, NN + "HAServiceProtocol/TransitionToActive", ZKFC, {"namenode"}, None),
        (NAMENODE_RULES, NN + "HAServiceProtocol/TransitionToActive", USER, {"namenode"},
         "TransitionToActive needs the role admin; the caller's certificate presents namenode"),
        (NAMENODE_RULES, NN + "HAServiceProtocol/TransitionToStandby", USER, {"admin"}, None),
        (NAMENODE_RULES, NN + "HAServiceProtocol/GracefulFailover", None, {"client"},
         "GracefulFailover needs the role admin; the caller's certificate presents client"),
        (NAMENODE_RULES, NN + "HAServiceProtocol/GetServiceStatus", None, {"client"}, None),
        (NAMENODE_RULES, NN + "NamenodeProtocol/PutImage", None, set(),
         "PutImage needs the role namenode; the caller's certificate presents none"),
        (JOURNALNODE_RULES, JN + "Format", None, {"namenode"},
         "Format needs the role admin; the caller's certificate presents namenode"),
        (JOURNALNODE_RULES, JN + "Format", None, {"admin", "client"}, None),
        (JOURNALNODE_RULES, JN + "JournalStream", None, {"admin"},
         "JournalStream needs the role namenode; the caller's certificate presents admin"),
        (JOURNALNODE_RULES, JN + "GetSegment", None, {"journalnode"}, None),
        (JOURNALNODE_RULES, JN + "NoSuchMethod", None, {"admin"},
         "NoSuchMethod: no role may call this method"),
    ],
)
def test_roles(
    rules: dict[str, MethodRule],
    method: str,
    request_: object,
    presented: set[str],
    refused: str | None,
) -> None:
    guard = _guard(rules)
    found = guard.refusal(method, request_, frozenset(presented))  # type: ignore[arg-type]
    if refused is None:
        assert found is None
    else:
        assert isinstance(found, AccessControlError) and str(found) == refused


def test_without_tls_roles_are_not_checked_but_bounds_are() -> None:
    guard = _guard(NAMENODE_RULES, check_roles=False)
    mkdirs = NN + "ClientProtocol/Mkdirs"
    assert guard.refusal(mkdirs, namenode_pb2.MkdirsRequest(path="/a"), None) is None
    bad = namenode_pb2.MkdirsRequest(header=HEADER(client_id=b"c" * 200))
    found = guard.refusal(mkdirs, bad, None)
    assert isinstance(found, InvalidArgumentError)
    assert str(found) == (
        "Mkdirs: request field header.client_id is 200 bytes, longer than the limit of 128"
    )


@pytest.mark.parametrize(
    ("rules", "services"),
    [(NAMENODE_RULES, SERVICES[:3]), (JOURNALNODE_RULES, SERVICES[3:])],
)
def test_every_method_has_a_rule(rules: dict[str, MethodRule], services: list[object]) -> None:
    methods = {f"/{s.full_name}/{m.name}" for s in services for m in s.methods}  # type: ignore[attr-defined]
    assert methods == set(rules)
    for rule in rules.values():
        assert rule.roles or rule.roles_for is not None
        assert all(isinstance(r, Role) for r in rule.roles)
