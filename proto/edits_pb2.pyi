from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class MkdirOp(_message.Message):
    __slots__ = ("path", "mtime_ms", "permission", "owner", "group", "create_parent")
    PATH_FIELD_NUMBER: _ClassVar[int]
    MTIME_MS_FIELD_NUMBER: _ClassVar[int]
    PERMISSION_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    CREATE_PARENT_FIELD_NUMBER: _ClassVar[int]
    path: str
    mtime_ms: int
    permission: int
    owner: str
    group: str
    create_parent: bool
    def __init__(self, path: _Optional[str] = ..., mtime_ms: _Optional[int] = ..., permission: _Optional[int] = ..., owner: _Optional[str] = ..., group: _Optional[str] = ..., create_parent: _Optional[bool] = ...) -> None: ...

class CreateOp(_message.Message):
    __slots__ = ("path", "mtime_ms", "permission", "owner", "group", "overwrite", "length", "replication")
    PATH_FIELD_NUMBER: _ClassVar[int]
    MTIME_MS_FIELD_NUMBER: _ClassVar[int]
    PERMISSION_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    OVERWRITE_FIELD_NUMBER: _ClassVar[int]
    LENGTH_FIELD_NUMBER: _ClassVar[int]
    REPLICATION_FIELD_NUMBER: _ClassVar[int]
    path: str
    mtime_ms: int
    permission: int
    owner: str
    group: str
    overwrite: bool
    length: int
    replication: int
    def __init__(self, path: _Optional[str] = ..., mtime_ms: _Optional[int] = ..., permission: _Optional[int] = ..., owner: _Optional[str] = ..., group: _Optional[str] = ..., overwrite: _Optional[bool] = ..., length: _Optional[int] = ..., replication: _Optional[int] = ...) -> None: ...

class DeleteOp(_message.Message):
    __slots__ = ("path", "recursive", "mtime_ms")
    PATH_FIELD_NUMBER: _ClassVar[int]
    RECURSIVE_FIELD_NUMBER: _ClassVar[int]
    MTIME_MS_FIELD_NUMBER: _ClassVar[int]
    path: str
    recursive: bool
    mtime_ms: int
    def __init__(self, path: _Optional[str] = ..., recursive: _Optional[bool] = ..., mtime_ms: _Optional[int] = ...) -> None: ...

class RenameOp(_message.Message):
    __slots__ = ("src", "dst", "mtime_ms")
    SRC_FIELD_NUMBER: _ClassVar[int]
    DST_FIELD_NUMBER: _ClassVar[int]
    MTIME_MS_FIELD_NUMBER: _ClassVar[int]
    src: str
    dst: str
    mtime_ms: int
    def __init__(self, src: _Optional[str] = ..., dst: _Optional[str] = ..., mtime_ms: _Optional[int] = ...) -> None: ...

class StartLogSegmentOp(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class EndLogSegmentOp(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class NoOp(_message.Message):
    __slots__ = ("payload",)
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    payload: bytes
    def __init__(self, payload: _Optional[bytes] = ...) -> None: ...

class MultiEntry(_message.Message):
    __slots__ = ("mkdir", "create", "delete", "rename", "unchanged")
    MKDIR_FIELD_NUMBER: _ClassVar[int]
    CREATE_FIELD_NUMBER: _ClassVar[int]
    DELETE_FIELD_NUMBER: _ClassVar[int]
    RENAME_FIELD_NUMBER: _ClassVar[int]
    UNCHANGED_FIELD_NUMBER: _ClassVar[int]
    mkdir: MkdirOp
    create: CreateOp
    delete: DeleteOp
    rename: RenameOp
    unchanged: NoOp
    def __init__(self, mkdir: _Optional[_Union[MkdirOp, _Mapping]] = ..., create: _Optional[_Union[CreateOp, _Mapping]] = ..., delete: _Optional[_Union[DeleteOp, _Mapping]] = ..., rename: _Optional[_Union[RenameOp, _Mapping]] = ..., unchanged: _Optional[_Union[NoOp, _Mapping]] = ...) -> None: ...

class MultiOp(_message.Message):
    __slots__ = ("entries",)
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[MultiEntry]
    def __init__(self, entries: _Optional[_Iterable[_Union[MultiEntry, _Mapping]]] = ...) -> None: ...

class EditOp(_message.Message):
    __slots__ = ("txid", "client_id", "call_id", "mkdir", "create", "delete", "rename", "start_log_segment", "end_log_segment", "noop", "multi")
    TXID_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    MKDIR_FIELD_NUMBER: _ClassVar[int]
    CREATE_FIELD_NUMBER: _ClassVar[int]
    DELETE_FIELD_NUMBER: _ClassVar[int]
    RENAME_FIELD_NUMBER: _ClassVar[int]
    START_LOG_SEGMENT_FIELD_NUMBER: _ClassVar[int]
    END_LOG_SEGMENT_FIELD_NUMBER: _ClassVar[int]
    NOOP_FIELD_NUMBER: _ClassVar[int]
    MULTI_FIELD_NUMBER: _ClassVar[int]
    txid: int
    client_id: bytes
    call_id: int
    mkdir: MkdirOp
    create: CreateOp
    delete: DeleteOp
    rename: RenameOp
    start_log_segment: StartLogSegmentOp
    end_log_segment: EndLogSegmentOp
    noop: NoOp
    multi: MultiOp
    def __init__(self, txid: _Optional[int] = ..., client_id: _Optional[bytes] = ..., call_id: _Optional[int] = ..., mkdir: _Optional[_Union[MkdirOp, _Mapping]] = ..., create: _Optional[_Union[CreateOp, _Mapping]] = ..., delete: _Optional[_Union[DeleteOp, _Mapping]] = ..., rename: _Optional[_Union[RenameOp, _Mapping]] = ..., start_log_segment: _Optional[_Union[StartLogSegmentOp, _Mapping]] = ..., end_log_segment: _Optional[_Union[EndLogSegmentOp, _Mapping]] = ..., noop: _Optional[_Union[NoOp, _Mapping]] = ..., multi: _Optional[_Union[MultiOp, _Mapping]] = ...) -> None: ...
