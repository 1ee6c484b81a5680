"""The NameNode's errors travel over gRPC as a status plus their class name, and come back as
the same class; anything else the client sees is NamenodeUnavailableError."""

from __future__ import annotations

from typing import Any

import grpc
import pytest

from hanamenode import errors
from hanamenode.errors import (
    ERROR_CLASS_KEY,
    NamenodeError,
    NamenodeUnavailableError,
    StandbyError,
    from_rpc_error,
    to_status,
)

ALL = list(errors.CODEC.classes)


class FakeCall(grpc.RpcError, grpc.Call):
    """What a grpc stub raises: an RpcError that is also the finished Call."""

    def __init__(
        self, code: grpc.StatusCode, details: str, trailing: tuple[tuple[str, str], ...] = ()
    ) -> None:
        self._code, self._details, self._trailing = code, details, trailing

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def trailing_metadata(self) -> Any:
        return self._trailing

    def initial_metadata(self) -> Any:
        return ()

    def is_active(self) -> bool:
        return False

    def time_remaining(self) -> float:
        return 0.0

    def cancel(self) -> bool:
        return False

    def add_callback(self, callback: Any) -> bool:
        return False


@pytest.mark.parametrize("cls", ALL, ids=[cls.__name__ for cls in ALL])
def test_every_error_survives_the_round_trip(cls: type[NamenodeError]) -> None:
    original = cls("cannot delete /a: directory is not empty")
    code, details, trailing = to_status(original)
    assert code is cls.code
    assert trailing == ((ERROR_CLASS_KEY, cls.__name__),)
    rebuilt = from_rpc_error(FakeCall(code, details, trailing))
    assert type(rebuilt) is cls
    assert str(rebuilt) == str(original)


def test_every_error_class_is_registered() -> None:
    def subclasses(cls: type[NamenodeError]) -> set[type[NamenodeError]]:
        found = set(cls.__subclasses__())
        for sub in list(found):
            found |= subclasses(sub)
        return found

    assert subclasses(NamenodeError) | {NamenodeError} == set(ALL)


def test_status_codes_the_client_relies_on() -> None:
    assert errors.InvalidPathError.code is grpc.StatusCode.INVALID_ARGUMENT
    assert errors.PathNotFoundError.code is grpc.StatusCode.NOT_FOUND
    assert errors.PathExistsError.code is grpc.StatusCode.ALREADY_EXISTS
    assert errors.DirectoryNotEmptyError.code is grpc.StatusCode.FAILED_PRECONDITION
    assert errors.StandbyError.code is grpc.StatusCode.UNAVAILABLE
    assert errors.CorruptImageError.code is grpc.StatusCode.DATA_LOSS


def test_standby_error_speaks_like_hdfs() -> None:
    error = StandbyError.for_category("WRITE", "standby")
    assert str(error) == "Operation category WRITE is not supported in state standby"


def test_other_failures_are_unavailable() -> None:
    timeout = from_rpc_error(FakeCall(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded"))
    assert type(timeout) is NamenodeUnavailableError
    assert str(timeout) == "DEADLINE_EXCEEDED: Deadline Exceeded"
    unknown = from_rpc_error(
        FakeCall(grpc.StatusCode.INTERNAL, "boom", ((ERROR_CLASS_KEY, "NoSuchClass"),))
    )
    assert type(unknown) is NamenodeUnavailableError
    bare = from_rpc_error(grpc.RpcError("socket closed"))
    assert type(bare) is NamenodeUnavailableError
    assert "socket closed" in str(bare)


def test_replay_error_keeps_its_txid_in_process() -> None:
    error = errors.EditLogReplayError("cannot apply txid 9 (...)", txid=9)
    assert error.txid == 9
