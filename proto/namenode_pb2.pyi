from proto import journal_pb2 as _journal_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class HAState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    HA_STATE_UNKNOWN: _ClassVar[HAState]
    INITIALIZING: _ClassVar[HAState]
    STANDBY: _ClassVar[HAState]
    ACTIVE: _ClassVar[HAState]
    STOPPING: _ClassVar[HAState]
    OBSERVER: _ClassVar[HAState]

class RequestSource(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    REQUEST_BY_USER: _ClassVar[RequestSource]
    REQUEST_BY_USER_FORCED: _ClassVar[RequestSource]
    REQUEST_BY_ZKFC: _ClassVar[RequestSource]
HA_STATE_UNKNOWN: HAState
INITIALIZING: HAState
STANDBY: HAState
ACTIVE: HAState
STOPPING: HAState
OBSERVER: HAState
REQUEST_BY_USER: RequestSource
REQUEST_BY_USER_FORCED: RequestSource
REQUEST_BY_ZKFC: RequestSource

class RpcHeader(_message.Message):
    __slots__ = ("client_id", "call_id", "allow_stale_read")
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    ALLOW_STALE_READ_FIELD_NUMBER: _ClassVar[int]
    client_id: bytes
    call_id: int
    allow_stale_read: bool
    def __init__(self, client_id: _Optional[bytes] = ..., call_id: _Optional[int] = ..., allow_stale_read: _Optional[bool] = ...) -> None: ...

class FileStatus(_message.Message):
    __slots__ = ("path", "is_dir", "length", "mtime_ms", "permission", "owner", "group", "replication", "children_num")
    PATH_FIELD_NUMBER: _ClassVar[int]
    IS_DIR_FIELD_NUMBER: _ClassVar[int]
    LENGTH_FIELD_NUMBER: _ClassVar[int]
    MTIME_MS_FIELD_NUMBER: _ClassVar[int]
    PERMISSION_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    REPLICATION_FIELD_NUMBER: _ClassVar[int]
    CHILDREN_NUM_FIELD_NUMBER: _ClassVar[int]
    path: str
    is_dir: bool
    length: int
    mtime_ms: int
    permission: int
    owner: str
    group: str
    replication: int
    children_num: int
    def __init__(self, path: _Optional[str] = ..., is_dir: _Optional[bool] = ..., length: _Optional[int] = ..., mtime_ms: _Optional[int] = ..., permission: _Optional[int] = ..., owner: _Optional[str] = ..., group: _Optional[str] = ..., replication: _Optional[int] = ..., children_num: _Optional[int] = ...) -> None: ...

class MkdirsRequest(_message.Message):
    __slots__ = ("header", "path", "create_parent", "permission")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    CREATE_PARENT_FIELD_NUMBER: _ClassVar[int]
    PERMISSION_FIELD_NUMBER: _ClassVar[int]
    header: RpcHeader
    path: str
    create_parent: bool
    permission: int
    def __init__(self, header: _Optional[_Union[RpcHeader, _Mapping]] = ..., path: _Optional[str] = ..., create_parent: _Optional[bool] = ..., permission: _Optional[int] = ...) -> None: ...

class MkdirsResponse(_message.Message):
    __slots__ = ("created", "txid")
    CREATED_FIELD_NUMBER: _ClassVar[int]
    TXID_FIELD_NUMBER: _ClassVar[int]
    created: bool
    txid: int
    def __init__(self, created: _Optional[bool] = ..., txid: _Optional[int] = ...) -> None: ...

class CreateRequest(_message.Message):
    __slots__ = ("header", "path", "overwrite", "permission", "length", "replication")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    OVERWRITE_FIELD_NUMBER: _ClassVar[int]
    PERMISSION_FIELD_NUMBER: _ClassVar[int]
    LENGTH_FIELD_NUMBER: _ClassVar[int]
    REPLICATION_FIELD_NUMBER: _ClassVar[int]
    header: RpcHeader
    path: str
    overwrite: bool
    permission: int
    length: int
    replication: int
    def __init__(self, header: _Optional[_Union[RpcHeader, _Mapping]] = ..., path: _Optional[str] = ..., overwrite: _Optional[bool] = ..., permission: _Optional[int] = ..., length: _Optional[int] = ..., replication: _Optional[int] = ...) -> None: ...

class CreateResponse(_message.Message):
    __slots__ = ("status", "txid")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    TXID_FIELD_NUMBER: _ClassVar[int]
    status: FileStatus
    txid: int
    def __init__(self, status: _Optional[_Union[FileStatus, _Mapping]] = ..., txid: _Optional[int] = ...) -> None: ...

class DeleteRequest(_message.Message):
    __slots__ = ("header", "path", "recursive")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    RECURSIVE_FIELD_NUMBER: _ClassVar[int]
    header: RpcHeader
    path: str
    recursive: bool
    def __init__(self, header: _Optional[_Union[RpcHeader, _Mapping]] = ..., path: _Optional[str] = ..., recursive: _Optional[bool] = ...) -> None: ...

class DeleteResponse(_message.Message):
    __slots__ = ("deleted", "txid")
    DELETED_FIELD_NUMBER: _ClassVar[int]
    TXID_FIELD_NUMBER: _ClassVar[int]
    deleted: bool
    txid: int
    def __init__(self, deleted: _Optional[bool] = ..., txid: _Optional[int] = ...) -> None: ...

class RenameRequest(_message.Message):
    __slots__ = ("header", "src", "dst")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    SRC_FIELD_NUMBER: _ClassVar[int]
    DST_FIELD_NUMBER: _ClassVar[int]
    header: RpcHeader
    src: str
    dst: str
    def __init__(self, header: _Optional[_Union[RpcHeader, _Mapping]] = ..., src: _Optional[str] = ..., dst: _Optional[str] = ...) -> None: ...

class RenameResponse(_message.Message):
    __slots__ = ("final_path", "txid")
    FINAL_PATH_FIELD_NUMBER: _ClassVar[int]
    TXID_FIELD_NUMBER: _ClassVar[int]
    final_path: str
    txid: int
    def __init__(self, final_path: _Optional[str] = ..., txid: _Optional[int] = ...) -> None: ...

class GetListingRequest(_message.Message):
    __slots__ = ("header", "path", "start_after", "limit")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    START_AFTER_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    header: RpcHeader
    path: str
    start_after: str
    limit: int
    def __init__(self, header: _Optional[_Union[RpcHeader, _Mapping]] = ..., path: _Optional[str] = ..., start_after: _Optional[str] = ..., limit: _Optional[int] = ...) -> None: ...

class GetListingResponse(_message.Message):
    __slots__ = ("entries", "has_more")
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    HAS_MORE_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[FileStatus]
    has_more: bool
    def __init__(self, entries: _Optional[_Iterable[_Union[FileStatus, _Mapping]]] = ..., has_more: _Optional[bool] = ...) -> None: ...

class GetFileInfoRequest(_message.Message):
    __slots__ = ("header", "path")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    header: RpcHeader
    path: str
    def __init__(self, header: _Optional[_Union[RpcHeader, _Mapping]] = ..., path: _Optional[str] = ...) -> None: ...

class GetFileInfoResponse(_message.Message):
    __slots__ = ("status",)
    STATUS_FIELD_NUMBER: _ClassVar[int]
    status: FileStatus
    def __init__(self, status: _Optional[_Union[FileStatus, _Mapping]] = ...) -> None: ...

class MsyncRequest(_message.Message):
    __slots__ = ("header",)
    HEADER_FIELD_NUMBER: _ClassVar[int]
    header: RpcHeader
    def __init__(self, header: _Optional[_Union[RpcHeader, _Mapping]] = ...) -> None: ...

class MsyncResponse(_message.Message):
    __slots__ = ("txid",)
    TXID_FIELD_NUMBER: _ClassVar[int]
    txid: int
    def __init__(self, txid: _Optional[int] = ...) -> None: ...

class MultiOp(_message.Message):
    __slots__ = ("mkdirs", "create", "delete", "rename")
    MKDIRS_FIELD_NUMBER: _ClassVar[int]
    CREATE_FIELD_NUMBER: _ClassVar[int]
    DELETE_FIELD_NUMBER: _ClassVar[int]
    RENAME_FIELD_NUMBER: _ClassVar[int]
    mkdirs: MkdirsRequest
    create: CreateRequest
    delete: DeleteRequest
    rename: RenameRequest
    def __init__(self, mkdirs: _Optional[_Union[MkdirsRequest, _Mapping]] = ..., create: _Optional[_Union[CreateRequest, _Mapping]] = ..., delete: _Optional[_Union[DeleteRequest, _Mapping]] = ..., rename: _Optional[_Union[RenameRequest, _Mapping]] = ...) -> None: ...

class MultiRequest(_message.Message):
    __slots__ = ("header", "ops")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    OPS_FIELD_NUMBER: _ClassVar[int]
    header: RpcHeader
    ops: _containers.RepeatedCompositeFieldContainer[MultiOp]
    def __init__(self, header: _Optional[_Union[RpcHeader, _Mapping]] = ..., ops: _Optional[_Iterable[_Union[MultiOp, _Mapping]]] = ...) -> None: ...

class MultiResult(_message.Message):
    __slots__ = ("mkdirs", "create", "delete", "rename")
    MKDIRS_FIELD_NUMBER: _ClassVar[int]
    CREATE_FIELD_NUMBER: _ClassVar[int]
    DELETE_FIELD_NUMBER: _ClassVar[int]
    RENAME_FIELD_NUMBER: _ClassVar[int]
    mkdirs: MkdirsResponse
    create: CreateResponse
    delete: DeleteResponse
    rename: RenameResponse
    def __init__(self, mkdirs: _Optional[_Union[MkdirsResponse, _Mapping]] = ..., create: _Optional[_Union[CreateResponse, _Mapping]] = ..., delete: _Optional[_Union[DeleteResponse, _Mapping]] = ..., rename: _Optional[_Union[RenameResponse, _Mapping]] = ...) -> None: ...

class MultiResponse(_message.Message):
    __slots__ = ("results", "txid")
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    TXID_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[MultiResult]
    txid: int
    def __init__(self, results: _Optional[_Iterable[_Union[MultiResult, _Mapping]]] = ..., txid: _Optional[int] = ...) -> None: ...

class SessionRequest(_message.Message):
    __slots__ = ("id", "seen_txid", "mkdirs", "create", "delete", "rename", "get_listing", "get_file_info", "msync", "multi", "batch")
    ID_FIELD_NUMBER: _ClassVar[int]
    SEEN_TXID_FIELD_NUMBER: _ClassVar[int]
    MKDIRS_FIELD_NUMBER: _ClassVar[int]
    CREATE_FIELD_NUMBER: _ClassVar[int]
    DELETE_FIELD_NUMBER: _ClassVar[int]
    RENAME_FIELD_NUMBER: _ClassVar[int]
    GET_LISTING_FIELD_NUMBER: _ClassVar[int]
    GET_FILE_INFO_FIELD_NUMBER: _ClassVar[int]
    MSYNC_FIELD_NUMBER: _ClassVar[int]
    MULTI_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    id: int
    seen_txid: int
    mkdirs: MkdirsRequest
    create: CreateRequest
    delete: DeleteRequest
    rename: RenameRequest
    get_listing: GetListingRequest
    get_file_info: GetFileInfoRequest
    msync: MsyncRequest
    multi: MultiRequest
    batch: _containers.RepeatedCompositeFieldContainer[SessionRequest]
    def __init__(self, id: _Optional[int] = ..., seen_txid: _Optional[int] = ..., mkdirs: _Optional[_Union[MkdirsRequest, _Mapping]] = ..., create: _Optional[_Union[CreateRequest, _Mapping]] = ..., delete: _Optional[_Union[DeleteRequest, _Mapping]] = ..., rename: _Optional[_Union[RenameRequest, _Mapping]] = ..., get_listing: _Optional[_Union[GetListingRequest, _Mapping]] = ..., get_file_info: _Optional[_Union[GetFileInfoRequest, _Mapping]] = ..., msync: _Optional[_Union[MsyncRequest, _Mapping]] = ..., multi: _Optional[_Union[MultiRequest, _Mapping]] = ..., batch: _Optional[_Iterable[_Union[SessionRequest, _Mapping]]] = ...) -> None: ...

class SessionError(_message.Message):
    __slots__ = ("code", "message", "trailers")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TRAILERS_FIELD_NUMBER: _ClassVar[int]
    code: int
    message: str
    trailers: _containers.RepeatedCompositeFieldContainer[SessionTrailer]
    def __init__(self, code: _Optional[int] = ..., message: _Optional[str] = ..., trailers: _Optional[_Iterable[_Union[SessionTrailer, _Mapping]]] = ...) -> None: ...

class SessionTrailer(_message.Message):
    __slots__ = ("key", "value")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    key: str
    value: str
    def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...

class SessionResponses(_message.Message):
    __slots__ = ("responses",)
    RESPONSES_FIELD_NUMBER: _ClassVar[int]
    responses: _containers.RepeatedCompositeFieldContainer[SessionResponse]
    def __init__(self, responses: _Optional[_Iterable[_Union[SessionResponse, _Mapping]]] = ...) -> None: ...

class SessionResponse(_message.Message):
    __slots__ = ("id", "state_txid", "error", "mkdirs", "create", "delete", "rename", "get_listing", "get_file_info", "msync", "multi")
    ID_FIELD_NUMBER: _ClassVar[int]
    STATE_TXID_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    MKDIRS_FIELD_NUMBER: _ClassVar[int]
    CREATE_FIELD_NUMBER: _ClassVar[int]
    DELETE_FIELD_NUMBER: _ClassVar[int]
    RENAME_FIELD_NUMBER: _ClassVar[int]
    GET_LISTING_FIELD_NUMBER: _ClassVar[int]
    GET_FILE_INFO_FIELD_NUMBER: _ClassVar[int]
    MSYNC_FIELD_NUMBER: _ClassVar[int]
    MULTI_FIELD_NUMBER: _ClassVar[int]
    id: int
    state_txid: int
    error: SessionError
    mkdirs: MkdirsResponse
    create: CreateResponse
    delete: DeleteResponse
    rename: RenameResponse
    get_listing: GetListingResponse
    get_file_info: GetFileInfoResponse
    msync: MsyncResponse
    multi: MultiResponse
    def __init__(self, id: _Optional[int] = ..., state_txid: _Optional[int] = ..., error: _Optional[_Union[SessionError, _Mapping]] = ..., mkdirs: _Optional[_Union[MkdirsResponse, _Mapping]] = ..., create: _Optional[_Union[CreateResponse, _Mapping]] = ..., delete: _Optional[_Union[DeleteResponse, _Mapping]] = ..., rename: _Optional[_Union[RenameResponse, _Mapping]] = ..., get_listing: _Optional[_Union[GetListingResponse, _Mapping]] = ..., get_file_info: _Optional[_Union[GetFileInfoResponse, _Mapping]] = ..., msync: _Optional[_Union[MsyncResponse, _Mapping]] = ..., multi: _Optional[_Union[MultiResponse, _Mapping]] = ...) -> None: ...

class HAEmpty(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ServiceStatus(_message.Message):
    __slots__ = ("state", "ready_to_become_active", "not_ready_reason", "last_applied_txid", "epoch", "namenode_id", "failover_note")
    STATE_FIELD_NUMBER: _ClassVar[int]
    READY_TO_BECOME_ACTIVE_FIELD_NUMBER: _ClassVar[int]
    NOT_READY_REASON_FIELD_NUMBER: _ClassVar[int]
    LAST_APPLIED_TXID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    NAMENODE_ID_FIELD_NUMBER: _ClassVar[int]
    FAILOVER_NOTE_FIELD_NUMBER: _ClassVar[int]
    state: HAState
    ready_to_become_active: bool
    not_ready_reason: str
    last_applied_txid: int
    epoch: int
    namenode_id: str
    failover_note: str
    def __init__(self, state: _Optional[_Union[HAState, str]] = ..., ready_to_become_active: _Optional[bool] = ..., not_ready_reason: _Optional[str] = ..., last_applied_txid: _Optional[int] = ..., epoch: _Optional[int] = ..., namenode_id: _Optional[str] = ..., failover_note: _Optional[str] = ...) -> None: ...

class TransitionRequest(_message.Message):
    __slots__ = ("source",)
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    source: RequestSource
    def __init__(self, source: _Optional[_Union[RequestSource, str]] = ...) -> None: ...

class CedeRequest(_message.Message):
    __slots__ = ("millis_to_cede",)
    MILLIS_TO_CEDE_FIELD_NUMBER: _ClassVar[int]
    millis_to_cede: int
    def __init__(self, millis_to_cede: _Optional[int] = ...) -> None: ...

class GracefulFailoverResponse(_message.Message):
    __slots__ = ("previous_active",)
    PREVIOUS_ACTIVE_FIELD_NUMBER: _ClassVar[int]
    previous_active: str
    def __init__(self, previous_active: _Optional[str] = ...) -> None: ...

class RollEditLogResponse(_message.Message):
    __slots__ = ("segment_txid",)
    SEGMENT_TXID_FIELD_NUMBER: _ClassVar[int]
    segment_txid: int
    def __init__(self, segment_txid: _Optional[int] = ...) -> None: ...

class CheckpointInfo(_message.Message):
    __slots__ = ("txid", "md5", "size")
    TXID_FIELD_NUMBER: _ClassVar[int]
    MD5_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    txid: int
    md5: str
    size: int
    def __init__(self, txid: _Optional[int] = ..., md5: _Optional[str] = ..., size: _Optional[int] = ...) -> None: ...

class GetImageRequest(_message.Message):
    __slots__ = ("txid",)
    TXID_FIELD_NUMBER: _ClassVar[int]
    txid: int
    def __init__(self, txid: _Optional[int] = ...) -> None: ...

class ImageChunk(_message.Message):
    __slots__ = ("data",)
    DATA_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    def __init__(self, data: _Optional[bytes] = ...) -> None: ...

class ImageUpload(_message.Message):
    __slots__ = ("info", "data")
    INFO_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    info: CheckpointInfo
    data: bytes
    def __init__(self, info: _Optional[_Union[CheckpointInfo, _Mapping]] = ..., data: _Optional[bytes] = ...) -> None: ...

class GetEditSegmentsRequest(_message.Message):
    __slots__ = ("since_txid",)
    SINCE_TXID_FIELD_NUMBER: _ClassVar[int]
    since_txid: int
    def __init__(self, since_txid: _Optional[int] = ...) -> None: ...

class PurgeRequest(_message.Message):
    __slots__ = ("min_txid_to_keep",)
    MIN_TXID_TO_KEEP_FIELD_NUMBER: _ClassVar[int]
    min_txid_to_keep: int
    def __init__(self, min_txid_to_keep: _Optional[int] = ...) -> None: ...

class NamespaceInfoResponse(_message.Message):
    __slots__ = ("namespace_info", "journal_uri")
    NAMESPACE_INFO_FIELD_NUMBER: _ClassVar[int]
    JOURNAL_URI_FIELD_NUMBER: _ClassVar[int]
    namespace_info: _journal_pb2.NamespaceInfo
    journal_uri: str
    def __init__(self, namespace_info: _Optional[_Union[_journal_pb2.NamespaceInfo, _Mapping]] = ..., journal_uri: _Optional[str] = ...) -> None: ...
