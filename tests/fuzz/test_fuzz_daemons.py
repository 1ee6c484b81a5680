"""Generated requests, well-formed and malformed, to live JournalNode and NameNode processes.

Three JournalNodes and an active NameNode run as real processes (``hadev.namenodes``). For
``--fuzz-minutes`` (default 1, shared by the three services' tests) hypothesis generates
requests for every method of ``QJournalService``, of ``ClientProtocol`` and of the
NameNode's ``HAServiceProtocol`` and ``NamenodeProtocol`` — fields of every size and value,
including out of bounds and enum numbers no member has — and raw bytes that are no message at
all. Then:

- every call is answered with a status the daemon decided: a response, or an error that
  carries its error class (``hn-error-class``) or is gRPC's own message-size refusal; never
  UNKNOWN, INTERNAL, a deadline or a dead daemon;
- a refused request changes nothing: on the JournalNodes, no file or directory appears,
  changes or disappears; on the NameNode, no transaction is applied and its HA state stays;
- an accepted HA call that took the NameNode out of ACTIVE (a transition hypothesis made up)
  is undone by making it active again, so that the next request meets an active NameNode;
- at the end every daemon still runs and answers, and no log holds a traceback.

The JournalNode requests name the journal ``fuzz`` (formatted here) or ids hypothesis makes
up, never the NameNode's own journal, so an accepted request cannot fence the NameNode. The
seed is printed; ``FUZZ_SEED=<seed>`` replays the same examples.
"""

from __future__ import annotations

import hashlib
import os
import random
import time
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from conf import TLSSettings
from conf.guard import Role
from conf.rpc import ERROR_CLASS_KEY, make_channel
from hadev.namenodes import NameNodeProcessCluster
from hadev.pki import make_pki
from hanamenode.client import HaFsClient
from proto import journal_pb2, namenode_pb2

pytestmark = pytest.mark.timeout(3600)

JOURNAL = "ns1"  # the NameNode's journal: never named by a generated request
FUZZ_JOURNAL = "fuzz"
EXAMPLES_PER_ROUND = 40
CALL_TIMEOUT = 20.0
BAD_CODES = {
    grpc.StatusCode.UNKNOWN,
    grpc.StatusCode.INTERNAL,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.CANCELLED,
}

# -- strategies ---------------------------------------------------------------------------------

_TEXT = st.one_of(
    st.from_regex(r"\A(/[a-z]{1,6}){1,4}\Z"),  # valid paths, so that some calls succeed
    st.text(max_size=40),
    st.sampled_from([FUZZ_JOURNAL, "", "/", "/a", "/a/b", "..", "/.", "x" * 256, "/a\x1b[2J"]),
    st.text(min_size=250, max_size=400),
    st.text(alphabet=st.characters(max_codepoint=0x9F), max_size=20),
)
_BYTES = st.one_of(st.binary(max_size=64), st.binary(min_size=120, max_size=300))
_U64 = st.one_of(
    st.integers(0, 200), st.integers(0, 2**64 - 1), st.sampled_from([2**63 - 1, 2**63])
)
_U32 = st.one_of(st.integers(0, 1000), st.integers(0, 2**32 - 1))
_I64 = st.integers(-(2**63), 2**63 - 1)
_SCALARS: dict[int, st.SearchStrategy[Any]] = {
    FieldDescriptor.TYPE_STRING: _TEXT,
    FieldDescriptor.TYPE_BYTES: _BYTES,
    FieldDescriptor.TYPE_UINT64: _U64,
    FieldDescriptor.TYPE_UINT32: _U32,
    FieldDescriptor.TYPE_INT64: _I64,
    FieldDescriptor.TYPE_BOOL: st.booleans(),
}


def _field(field: FieldDescriptor, depth: int) -> st.SearchStrategy[Any]:
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        return message(field.message_type, depth + 1)
    if field.type == FieldDescriptor.TYPE_ENUM:
        # proto3 enums are open: a number no member has decodes, and must be refused.
        return st.one_of(
            st.sampled_from([v.number for v in field.enum_type.values]),
            st.integers(-(2**31), 2**31 - 1),
        )
    return _SCALARS[field.type]


def message(descriptor: Descriptor, depth: int = 0) -> st.SearchStrategy[Message]:
    """Messages of ``descriptor``'s class with any subset of fields set to any value."""
    cls: type[Message] = _classes[descriptor.full_name]
    if depth > 3:
        return st.just(cls())
    fields = {f.name: _field(f, depth) for f in descriptor.fields if not f.is_repeated}
    # Repeated messages (a multi's ops, a session request's batch): a few of them.
    fields.update({
        f.name: st.lists(message(f.message_type, depth + 1), max_size=3)
        for f in descriptor.fields
        if f.is_repeated and f.type == FieldDescriptor.TYPE_MESSAGE
    })

    def build(values: dict[str, Any]) -> Message:
        msg = cls()
        for name, value in values.items():
            if isinstance(value, list):
                getattr(msg, name).extend(value)
                continue
            target = getattr(msg, name) if isinstance(value, Message) else None
            if target is not None:
                target.CopyFrom(value)
            else:
                setattr(msg, name, value)
        return msg

    return st.fixed_dictionaries({}, optional=fields).map(build)


_classes: dict[str, type[Message]] = {}
for _module in (journal_pb2, namenode_pb2):
    for _name in dir(_module):
        _obj = getattr(_module, _name)
        if isinstance(_obj, type) and issubclass(_obj, Message):
            _classes[_obj.DESCRIPTOR.full_name] = _obj


def _journal_ids(msg: Message) -> Iterator[str]:
    for field, value in msg.ListFields():
        if field.name == "journal_id":
            yield value
        elif field.type == FieldDescriptor.TYPE_MESSAGE and not field.is_repeated:
            yield from _journal_ids(value)


# -- the daemons ----------------------------------------------------------------------------------


def fuzzer_tls(cluster: NameNodeProcessCluster) -> TLSSettings | None:
    """The fuzzer's certificate: every role, so that its requests pass the role check (which
    runs: the daemons serve mutual TLS) and reach decoding, bounds and the servicers."""
    pki = make_pki(cluster.tls_dir, {"fuzzer": set(Role)})
    return pki.tls("fuzzer")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NameNodeProcessCluster]:
    with NameNodeProcessCluster(
        tmp_path_factory.mktemp("fuzz"), namenodes=1, journal_id=JOURNAL
    ) as c:
        c.transition_to_active("nn1")
        with HaFsClient(c.settings()) as fs:
            fs.mkdirs("/seeded/dir", parents=True)
        for address in c.journal.addresses:
            with make_channel(address, fuzzer_tls(c)) as channel:
                _call(channel, "/hanamenode.journal.QJournalService/Format",
                      journal_pb2.FormatRequest(
                          journal_id=FUZZ_JOURNAL,
                          namespace_info=journal_pb2.NamespaceInfo(
                              cluster_id="fuzz-cluster", namespace_id=7, layout_version=1
                          ),
                      ))
        yield c


@pytest.fixture(scope="module")
def fuzz_seed() -> int:
    chosen = int(os.environ.get("FUZZ_SEED") or random.SystemRandom().randrange(2**32))
    print(f"\nfuzz seed {chosen} (FUZZ_SEED={chosen} replays it)")
    return chosen


def _call(
    channel: grpc.Channel, method: str, request: Message | bytes, streaming: str = "unary"
) -> tuple[grpc.StatusCode, str, str | None]:
    """Send ``request`` (a message, or raw bytes); the status, details and error class."""
    raw = request if isinstance(request, bytes) else request.SerializeToString()
    try:
        if streaming == "response":
            for _ in channel.unary_stream(method)(raw, timeout=CALL_TIMEOUT):
                pass
        elif streaming == "both":
            for _ in channel.stream_stream(method)(iter([raw]), timeout=CALL_TIMEOUT):
                pass
        elif streaming == "request":
            channel.stream_unary(method)(iter([raw]), timeout=CALL_TIMEOUT)
        else:
            channel.unary_unary(method)(raw, timeout=CALL_TIMEOUT)
    except grpc.RpcError as err:
        trailers = dict(err.trailing_metadata() or ())  # type: ignore[attr-defined]
        return err.code(), err.details() or "", trailers.get(ERROR_CLASS_KEY)  # type: ignore[attr-defined]
    return grpc.StatusCode.OK, "", None


def _session(
    channel: grpc.Channel, request: Any
) -> tuple[tuple[grpc.StatusCode, str, str | None], list[Any]]:
    """One ``Session`` stream carrying ``request``: the stream's end, and every answer."""
    answers: list[Any] = []
    call = channel.stream_stream(
        "/hanamenode.namenode.ClientProtocol/Session",
        request_serializer=namenode_pb2.SessionRequest.SerializeToString,
        response_deserializer=namenode_pb2.SessionResponses.FromString,
    )
    try:
        for batch in call(iter([request]), timeout=CALL_TIMEOUT):
            answers.extend(batch.responses)
    except grpc.RpcError as err:
        trailers = dict(err.trailing_metadata() or ())  # type: ignore[attr-defined]
        end = (err.code(), err.details() or "", trailers.get(ERROR_CLASS_KEY))  # type: ignore[attr-defined]
        return end, answers
    return (grpc.StatusCode.OK, "", None), answers


def _check_session_answers(request: Any, answers: list[Any]) -> bool:
    """Every call of the message answered once by id, each refusal a clean one; whether
    every call was refused."""
    expected = [c.id for c in (request, *request.batch) if c.WhichOneof("call") or not (
        c is request and request.batch
    )]
    assert sorted(a.id for a in answers) == sorted(expected), (request, answers)
    refused = 0
    for answer in answers:
        if answer.WhichOneof("answer") != "error":
            continue
        refused += 1
        code = next(c for c in grpc.StatusCode if c.value[0] == answer.error.code)
        classes = {t.key: t.value for t in answer.error.trailers}
        _check_answer(f"Session call {answer.id}", (
            code, answer.error.message, classes.get(ERROR_CLASS_KEY)
        ))
    return refused == len(answers)


def _check_answer(method: str, answer: tuple[grpc.StatusCode, str, str | None]) -> None:
    code, details, error_class = answer
    assert code not in BAD_CODES, f"{method}: {code.name}: {details}"
    if code not in (grpc.StatusCode.OK, grpc.StatusCode.RESOURCE_EXHAUSTED):
        assert error_class, f"{method}: {code.name} without an error class: {details}"


def _disk(cluster: NameNodeProcessCluster) -> dict[str, tuple[int, str]]:
    """Every file and directory of every JournalNode except the NameNode's journal."""
    found: dict[str, tuple[int, str]] = {}
    for index, node in enumerate(cluster.journal):
        for path in sorted(node.edits_dir.rglob("*")):
            relative = path.relative_to(node.edits_dir)
            if relative.parts[0] == JOURNAL:
                continue
            key = f"jn{index + 1}/{relative}"
            if path.is_dir():
                found[key] = (-1, "")
            else:
                data = path.read_bytes()
                found[key] = (len(data), hashlib.sha1(data).hexdigest())
    return found


def _run_for(minutes: float, base_seed: int, one_round: Callable[[int], None]) -> int:
    deadline = time.monotonic() + minutes * 60
    rounds = 0
    while rounds == 0 or time.monotonic() < deadline:
        one_round(base_seed + rounds)
        rounds += 1
    return rounds


def _settings() -> settings:
    return settings(
        max_examples=EXAMPLES_PER_ROUND,
        deadline=None,
        database=None,
        phases=[Phase.generate, Phase.shrink],
        suppress_health_check=list(HealthCheck),
    )


JN_SERVICE = journal_pb2.DESCRIPTOR.services_by_name["QJournalService"]
NN_SERVICE = namenode_pb2.DESCRIPTOR.services_by_name["ClientProtocol"]
HA_SERVICE = namenode_pb2.DESCRIPTOR.services_by_name["HAServiceProtocol"]
NNP_SERVICE = namenode_pb2.DESCRIPTOR.services_by_name["NamenodeProtocol"]
SERVICES = (JN_SERVICE, NN_SERVICE, HA_SERVICE, NNP_SERVICE)
SHARE = 1 / 3  # of --fuzz-minutes for each test: JournalNodes, clients, HA and NamenodeProtocol


def _methods(service: Any) -> list[tuple[str, Descriptor, str]]:
    out = []
    for m in service.methods:
        kind = "both" if m.client_streaming and m.server_streaming else (
            "response" if m.server_streaming else "request" if m.client_streaming else "unary"
        )
        out.append((f"/{service.full_name}/{m.name}", m.input_type, kind))
    return out


def _request(methods: list[tuple[str, Descriptor, str]]) -> st.SearchStrategy[Any]:
    return st.sampled_from(methods).flatmap(
        lambda m: st.tuples(st.just(m), st.one_of(message(m[1]), st.binary(max_size=200)))
    )


def test_journalnodes_answer_every_generated_request_and_refusals_change_nothing(
    cluster: NameNodeProcessCluster, fuzz_seed: int, request: pytest.FixtureRequest
) -> None:
    minutes = float(request.config.getoption("--fuzz-minutes")) * SHARE
    methods = _methods(JN_SERVICE)
    channels = [make_channel(a, fuzzer_tls(cluster)) for a in cluster.journal.addresses]
    counts: dict[str, int] = {}

    def one_round(round_seed: int) -> None:
        @_settings()
        @seed(round_seed)
        @given(_request(methods), st.integers(0, len(channels) - 1))
        def attempt(generated: tuple[tuple[str, Descriptor, str], Any], target: int) -> None:
            (method, _, kind), request_ = generated
            if isinstance(request_, Message) and JOURNAL in set(_journal_ids(request_)):
                return  # never the NameNode's journal
            before = _disk(cluster)
            answer = _call(channels[target], method, request_, kind)
            _check_answer(method, answer)
            counts[answer[0].name] = counts.get(answer[0].name, 0) + 1
            if answer[0] != grpc.StatusCode.OK:
                after = _disk(cluster)
                keys = before.keys() | after.keys()
                changed = sorted(k for k in keys if before.get(k) != after.get(k))
                assert not changed, f"{method} was refused ({answer}) but changed {changed}"

        attempt()

    try:
        rounds = _run_for(minutes, fuzz_seed, one_round)
    finally:
        for channel in channels:
            channel.close()
    print(f"JournalNodes: {rounds} rounds, answers {dict(sorted(counts.items()))}")
    _check_alive_and_clean(cluster)


def test_namenode_answers_every_generated_request_and_refusals_change_nothing(
    cluster: NameNodeProcessCluster, fuzz_seed: int, request: pytest.FixtureRequest
) -> None:
    minutes = float(request.config.getoption("--fuzz-minutes")) * SHARE
    methods = _methods(NN_SERVICE)
    nn = cluster["nn1"]
    channel = make_channel(nn.address, fuzzer_tls(cluster))
    status = channel.unary_unary(
        "/hanamenode.namenode.HAServiceProtocol/GetServiceStatus",
        request_serializer=namenode_pb2.HAEmpty.SerializeToString,
        response_deserializer=namenode_pb2.ServiceStatus.FromString,
    )
    counts: dict[str, int] = {}

    def one_round(round_seed: int) -> None:
        @_settings()
        @seed(round_seed)
        @given(_request(methods))
        def attempt(generated: tuple[tuple[str, Descriptor, str], Any]) -> None:
            (method, _, kind), request_ = generated
            before = status(namenode_pb2.HAEmpty(), timeout=CALL_TIMEOUT).last_applied_txid
            every_call_refused = False
            if method.endswith("/Session") and isinstance(request_, Message):
                answer, answers = _session(channel, request_)
                every_call_refused = answer[0] == grpc.StatusCode.OK and (
                    _check_session_answers(request_, answers)
                )
            else:
                answer = _call(channel, method, request_, kind)
            _check_answer(method, answer)
            counts[answer[0].name] = counts.get(answer[0].name, 0) + 1
            if answer[0] != grpc.StatusCode.OK or every_call_refused:
                after = status(namenode_pb2.HAEmpty(), timeout=CALL_TIMEOUT).last_applied_txid
                assert after == before, f"{method} was refused but applied txids {before}..{after}"

        attempt()

    try:
        rounds = _run_for(minutes, fuzz_seed + 10_000, one_round)
    finally:
        channel.close()
    print(f"NameNode: {rounds} rounds, answers {dict(sorted(counts.items()))}")
    with HaFsClient(cluster.settings()) as fs:
        assert fs.stat("/seeded/dir").is_dir
    _check_alive_and_clean(cluster)


def test_namenode_answers_every_generated_ha_and_namenode_protocol_request(
    cluster: NameNodeProcessCluster, fuzz_seed: int, request: pytest.FixtureRequest
) -> None:
    minutes = float(request.config.getoption("--fuzz-minutes")) * SHARE
    methods = _methods(HA_SERVICE) + _methods(NNP_SERVICE)
    nn = cluster["nn1"]
    channel = make_channel(nn.address, fuzzer_tls(cluster))
    status = channel.unary_unary(
        "/hanamenode.namenode.HAServiceProtocol/GetServiceStatus",
        request_serializer=namenode_pb2.HAEmpty.SerializeToString,
        response_deserializer=namenode_pb2.ServiceStatus.FromString,
    )
    counts: dict[str, int] = {}
    restored = 0

    def facts() -> tuple[int, int]:
        s = status(namenode_pb2.HAEmpty(), timeout=CALL_TIMEOUT)
        return s.state, s.last_applied_txid

    def one_round(round_seed: int) -> None:
        @_settings()
        @seed(round_seed)
        @given(_request(methods))
        def attempt(generated: tuple[tuple[str, Descriptor, str], Any]) -> None:
            nonlocal restored
            (method, _, kind), request_ = generated
            before = facts()
            answer = _call(channel, method, request_, kind)
            _check_answer(method, answer)
            counts[answer[0].name] = counts.get(answer[0].name, 0) + 1
            after = facts()
            if answer[0] != grpc.StatusCode.OK:
                assert after == before, f"{method} was refused ({answer}) but {before} -> {after}"
            elif after[0] != namenode_pb2.ACTIVE:
                # An accepted transition (a source hypothesis chose): make it active again.
                if after[0] == namenode_pb2.OBSERVER:
                    nn.transition_to_standby()
                nn.transition_to_active()
                restored += 1

        attempt()

    try:
        rounds = _run_for(minutes, fuzz_seed + 20_000, one_round)
    finally:
        channel.close()
    print(
        f"NameNode HA and NamenodeProtocol: {rounds} rounds, answers "
        f"{dict(sorted(counts.items()))}, made active again {restored} times"
    )
    with HaFsClient(cluster.settings()) as fs:
        assert fs.stat("/seeded/dir").is_dir
    _check_alive_and_clean(cluster)


def _check_alive_and_clean(cluster: NameNodeProcessCluster) -> None:
    daemons = [*cluster.journal, cluster["nn1"]]
    for daemon in daemons:
        assert daemon.running, f"{daemon.name} died: {daemon.log_text()[-2000:]}"
        log_text = daemon.log_text()
        assert "Traceback" not in log_text, f"{daemon.name} logged a traceback:\n{log_text[-4000:]}"
    with HaFsClient(cluster.settings()) as fs:
        fs.mkdirs(f"/alive-{time.monotonic_ns()}")


def test_the_fuzz_strategies_reach_every_method() -> None:
    for service in SERVICES:
        for method, input_type, _ in _methods(service):
            if input_type.full_name not in _classes:
                pytest.fail(f"{method}: no message class for {input_type.full_name}")


