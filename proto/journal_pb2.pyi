from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SubscriptionEnd(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SUBSCRIPTION_END_UNSPECIFIED: _ClassVar[SubscriptionEnd]
    SEGMENT_FINALIZED: _ClassVar[SubscriptionEnd]
    EPOCH_CHANGED: _ClassVar[SubscriptionEnd]
    SHUTTING_DOWN: _ClassVar[SubscriptionEnd]
    CACHE_MISS: _ClassVar[SubscriptionEnd]
    FELL_BEHIND: _ClassVar[SubscriptionEnd]
    LOG_REPLACED: _ClassVar[SubscriptionEnd]
SUBSCRIPTION_END_UNSPECIFIED: SubscriptionEnd
SEGMENT_FINALIZED: SubscriptionEnd
EPOCH_CHANGED: SubscriptionEnd
SHUTTING_DOWN: SubscriptionEnd
CACHE_MISS: SubscriptionEnd
FELL_BEHIND: SubscriptionEnd
LOG_REPLACED: SubscriptionEnd

class NamespaceInfo(_message.Message):
    __slots__ = ("cluster_id", "namespace_id", "ctime", "layout_version")
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_ID_FIELD_NUMBER: _ClassVar[int]
    CTIME_FIELD_NUMBER: _ClassVar[int]
    LAYOUT_VERSION_FIELD_NUMBER: _ClassVar[int]
    cluster_id: str
    namespace_id: int
    ctime: int
    layout_version: int
    def __init__(self, cluster_id: _Optional[str] = ..., namespace_id: _Optional[int] = ..., ctime: _Optional[int] = ..., layout_version: _Optional[int] = ...) -> None: ...

class RequestInfo(_message.Message):
    __slots__ = ("journal_id", "cluster_id", "epoch", "ipc_serial_number", "committed_txid")
    JOURNAL_ID_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    IPC_SERIAL_NUMBER_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_TXID_FIELD_NUMBER: _ClassVar[int]
    journal_id: str
    cluster_id: str
    epoch: int
    ipc_serial_number: int
    committed_txid: int
    def __init__(self, journal_id: _Optional[str] = ..., cluster_id: _Optional[str] = ..., epoch: _Optional[int] = ..., ipc_serial_number: _Optional[int] = ..., committed_txid: _Optional[int] = ...) -> None: ...

class SegmentState(_message.Message):
    __slots__ = ("start_txid", "end_txid", "is_in_progress", "md5")
    START_TXID_FIELD_NUMBER: _ClassVar[int]
    END_TXID_FIELD_NUMBER: _ClassVar[int]
    IS_IN_PROGRESS_FIELD_NUMBER: _ClassVar[int]
    MD5_FIELD_NUMBER: _ClassVar[int]
    start_txid: int
    end_txid: int
    is_in_progress: bool
    md5: bytes
    def __init__(self, start_txid: _Optional[int] = ..., end_txid: _Optional[int] = ..., is_in_progress: _Optional[bool] = ..., md5: _Optional[bytes] = ...) -> None: ...

class PersistedRecoveryPaxosData(_message.Message):
    __slots__ = ("segment_state", "accepted_in_epoch")
    SEGMENT_STATE_FIELD_NUMBER: _ClassVar[int]
    ACCEPTED_IN_EPOCH_FIELD_NUMBER: _ClassVar[int]
    segment_state: SegmentState
    accepted_in_epoch: int
    def __init__(self, segment_state: _Optional[_Union[SegmentState, _Mapping]] = ..., accepted_in_epoch: _Optional[int] = ...) -> None: ...

class Empty(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class IsFormattedRequest(_message.Message):
    __slots__ = ("journal_id",)
    JOURNAL_ID_FIELD_NUMBER: _ClassVar[int]
    journal_id: str
    def __init__(self, journal_id: _Optional[str] = ...) -> None: ...

class IsFormattedResponse(_message.Message):
    __slots__ = ("is_formatted", "namespace_info")
    IS_FORMATTED_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_INFO_FIELD_NUMBER: _ClassVar[int]
    is_formatted: bool
    namespace_info: NamespaceInfo
    def __init__(self, is_formatted: _Optional[bool] = ..., namespace_info: _Optional[_Union[NamespaceInfo, _Mapping]] = ...) -> None: ...

class FormatRequest(_message.Message):
    __slots__ = ("journal_id", "namespace_info", "force")
    JOURNAL_ID_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_INFO_FIELD_NUMBER: _ClassVar[int]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    journal_id: str
    namespace_info: NamespaceInfo
    force: bool
    def __init__(self, journal_id: _Optional[str] = ..., namespace_info: _Optional[_Union[NamespaceInfo, _Mapping]] = ..., force: _Optional[bool] = ...) -> None: ...

class GetJournalStateRequest(_message.Message):
    __slots__ = ("journal_id", "cluster_id")
    JOURNAL_ID_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    journal_id: str
    cluster_id: str
    def __init__(self, journal_id: _Optional[str] = ..., cluster_id: _Optional[str] = ...) -> None: ...

class GetJournalStateResponse(_message.Message):
    __slots__ = ("last_promised_epoch", "from_url", "edits_port")
    LAST_PROMISED_EPOCH_FIELD_NUMBER: _ClassVar[int]
    FROM_URL_FIELD_NUMBER: _ClassVar[int]
    EDITS_PORT_FIELD_NUMBER: _ClassVar[int]
    last_promised_epoch: int
    from_url: str
    edits_port: int
    def __init__(self, last_promised_epoch: _Optional[int] = ..., from_url: _Optional[str] = ..., edits_port: _Optional[int] = ...) -> None: ...

class NewEpochRequest(_message.Message):
    __slots__ = ("journal_id", "namespace_info", "epoch")
    JOURNAL_ID_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_INFO_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    journal_id: str
    namespace_info: NamespaceInfo
    epoch: int
    def __init__(self, journal_id: _Optional[str] = ..., namespace_info: _Optional[_Union[NamespaceInfo, _Mapping]] = ..., epoch: _Optional[int] = ...) -> None: ...

class NewEpochResponse(_message.Message):
    __slots__ = ("last_segment_txid",)
    LAST_SEGMENT_TXID_FIELD_NUMBER: _ClassVar[int]
    last_segment_txid: int
    def __init__(self, last_segment_txid: _Optional[int] = ...) -> None: ...

class StartLogSegmentRequest(_message.Message):
    __slots__ = ("req_info", "txid", "layout_version")
    REQ_INFO_FIELD_NUMBER: _ClassVar[int]
    TXID_FIELD_NUMBER: _ClassVar[int]
    LAYOUT_VERSION_FIELD_NUMBER: _ClassVar[int]
    req_info: RequestInfo
    txid: int
    layout_version: int
    def __init__(self, req_info: _Optional[_Union[RequestInfo, _Mapping]] = ..., txid: _Optional[int] = ..., layout_version: _Optional[int] = ...) -> None: ...

class JournalRequest(_message.Message):
    __slots__ = ("req_info", "first_txid", "num_txns", "records", "segment_txid")
    REQ_INFO_FIELD_NUMBER: _ClassVar[int]
    FIRST_TXID_FIELD_NUMBER: _ClassVar[int]
    NUM_TXNS_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    SEGMENT_TXID_FIELD_NUMBER: _ClassVar[int]
    req_info: RequestInfo
    first_txid: int
    num_txns: int
    records: bytes
    segment_txid: int
    def __init__(self, req_info: _Optional[_Union[RequestInfo, _Mapping]] = ..., first_txid: _Optional[int] = ..., num_txns: _Optional[int] = ..., records: _Optional[bytes] = ..., segment_txid: _Optional[int] = ...) -> None: ...

class JournalStreamResponse(_message.Message):
    __slots__ = ("code", "details", "error_class")
    CODE_FIELD_NUMBER: _ClassVar[int]
    DETAILS_FIELD_NUMBER: _ClassVar[int]
    ERROR_CLASS_FIELD_NUMBER: _ClassVar[int]
    code: int
    details: str
    error_class: str
    def __init__(self, code: _Optional[int] = ..., details: _Optional[str] = ..., error_class: _Optional[str] = ...) -> None: ...

class HeartbeatRequest(_message.Message):
    __slots__ = ("req_info",)
    REQ_INFO_FIELD_NUMBER: _ClassVar[int]
    req_info: RequestInfo
    def __init__(self, req_info: _Optional[_Union[RequestInfo, _Mapping]] = ...) -> None: ...

class FinalizeLogSegmentRequest(_message.Message):
    __slots__ = ("req_info", "start_txid", "end_txid", "md5")
    REQ_INFO_FIELD_NUMBER: _ClassVar[int]
    START_TXID_FIELD_NUMBER: _ClassVar[int]
    END_TXID_FIELD_NUMBER: _ClassVar[int]
    MD5_FIELD_NUMBER: _ClassVar[int]
    req_info: RequestInfo
    start_txid: int
    end_txid: int
    md5: bytes
    def __init__(self, req_info: _Optional[_Union[RequestInfo, _Mapping]] = ..., start_txid: _Optional[int] = ..., end_txid: _Optional[int] = ..., md5: _Optional[bytes] = ...) -> None: ...

class PurgeLogsRequest(_message.Message):
    __slots__ = ("req_info", "min_txid_to_keep")
    REQ_INFO_FIELD_NUMBER: _ClassVar[int]
    MIN_TXID_TO_KEEP_FIELD_NUMBER: _ClassVar[int]
    req_info: RequestInfo
    min_txid_to_keep: int
    def __init__(self, req_info: _Optional[_Union[RequestInfo, _Mapping]] = ..., min_txid_to_keep: _Optional[int] = ...) -> None: ...

class GetEditLogManifestRequest(_message.Message):
    __slots__ = ("journal_id", "cluster_id", "since_txid", "in_progress_ok")
    JOURNAL_ID_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    SINCE_TXID_FIELD_NUMBER: _ClassVar[int]
    IN_PROGRESS_OK_FIELD_NUMBER: _ClassVar[int]
    journal_id: str
    cluster_id: str
    since_txid: int
    in_progress_ok: bool
    def __init__(self, journal_id: _Optional[str] = ..., cluster_id: _Optional[str] = ..., since_txid: _Optional[int] = ..., in_progress_ok: _Optional[bool] = ...) -> None: ...

class RemoteEditLog(_message.Message):
    __slots__ = ("start_txid", "end_txid", "is_in_progress", "md5")
    START_TXID_FIELD_NUMBER: _ClassVar[int]
    END_TXID_FIELD_NUMBER: _ClassVar[int]
    IS_IN_PROGRESS_FIELD_NUMBER: _ClassVar[int]
    MD5_FIELD_NUMBER: _ClassVar[int]
    start_txid: int
    end_txid: int
    is_in_progress: bool
    md5: bytes
    def __init__(self, start_txid: _Optional[int] = ..., end_txid: _Optional[int] = ..., is_in_progress: _Optional[bool] = ..., md5: _Optional[bytes] = ...) -> None: ...

class GetEditLogManifestResponse(_message.Message):
    __slots__ = ("logs", "from_url", "committed_txid")
    LOGS_FIELD_NUMBER: _ClassVar[int]
    FROM_URL_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_TXID_FIELD_NUMBER: _ClassVar[int]
    logs: _containers.RepeatedCompositeFieldContainer[RemoteEditLog]
    from_url: str
    committed_txid: int
    def __init__(self, logs: _Optional[_Iterable[_Union[RemoteEditLog, _Mapping]]] = ..., from_url: _Optional[str] = ..., committed_txid: _Optional[int] = ...) -> None: ...

class PrepareRecoveryRequest(_message.Message):
    __slots__ = ("req_info", "segment_txid")
    REQ_INFO_FIELD_NUMBER: _ClassVar[int]
    SEGMENT_TXID_FIELD_NUMBER: _ClassVar[int]
    req_info: RequestInfo
    segment_txid: int
    def __init__(self, req_info: _Optional[_Union[RequestInfo, _Mapping]] = ..., segment_txid: _Optional[int] = ...) -> None: ...

class PrepareRecoveryResponse(_message.Message):
    __slots__ = ("segment_state", "accepted_in_epoch", "last_writer_epoch", "last_committed_txid")
    SEGMENT_STATE_FIELD_NUMBER: _ClassVar[int]
    ACCEPTED_IN_EPOCH_FIELD_NUMBER: _ClassVar[int]
    LAST_WRITER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    LAST_COMMITTED_TXID_FIELD_NUMBER: _ClassVar[int]
    segment_state: SegmentState
    accepted_in_epoch: int
    last_writer_epoch: int
    last_committed_txid: int
    def __init__(self, segment_state: _Optional[_Union[SegmentState, _Mapping]] = ..., accepted_in_epoch: _Optional[int] = ..., last_writer_epoch: _Optional[int] = ..., last_committed_txid: _Optional[int] = ...) -> None: ...

class AcceptRecoveryRequest(_message.Message):
    __slots__ = ("req_info", "state_to_accept", "from_url")
    REQ_INFO_FIELD_NUMBER: _ClassVar[int]
    STATE_TO_ACCEPT_FIELD_NUMBER: _ClassVar[int]
    FROM_URL_FIELD_NUMBER: _ClassVar[int]
    req_info: RequestInfo
    state_to_accept: SegmentState
    from_url: str
    def __init__(self, req_info: _Optional[_Union[RequestInfo, _Mapping]] = ..., state_to_accept: _Optional[_Union[SegmentState, _Mapping]] = ..., from_url: _Optional[str] = ...) -> None: ...

class GetSegmentRequest(_message.Message):
    __slots__ = ("journal_id", "cluster_id", "start_txid", "end_txid", "in_progress_ok")
    JOURNAL_ID_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    START_TXID_FIELD_NUMBER: _ClassVar[int]
    END_TXID_FIELD_NUMBER: _ClassVar[int]
    IN_PROGRESS_OK_FIELD_NUMBER: _ClassVar[int]
    journal_id: str
    cluster_id: str
    start_txid: int
    end_txid: int
    in_progress_ok: bool
    def __init__(self, journal_id: _Optional[str] = ..., cluster_id: _Optional[str] = ..., start_txid: _Optional[int] = ..., end_txid: _Optional[int] = ..., in_progress_ok: _Optional[bool] = ...) -> None: ...

class SegmentChunk(_message.Message):
    __slots__ = ("data",)
    DATA_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    def __init__(self, data: _Optional[bytes] = ...) -> None: ...

class GetSegmentMd5Request(_message.Message):
    __slots__ = ("journal_id", "cluster_id", "start_txid")
    JOURNAL_ID_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    START_TXID_FIELD_NUMBER: _ClassVar[int]
    journal_id: str
    cluster_id: str
    start_txid: int
    def __init__(self, journal_id: _Optional[str] = ..., cluster_id: _Optional[str] = ..., start_txid: _Optional[int] = ...) -> None: ...

class GetSegmentMd5Response(_message.Message):
    __slots__ = ("end_txid", "md5")
    END_TXID_FIELD_NUMBER: _ClassVar[int]
    MD5_FIELD_NUMBER: _ClassVar[int]
    end_txid: int
    md5: bytes
    def __init__(self, end_txid: _Optional[int] = ..., md5: _Optional[bytes] = ...) -> None: ...

class GetJournaledEditsRequest(_message.Message):
    __slots__ = ("journal_id", "cluster_id", "since_txid", "max_txns")
    JOURNAL_ID_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    SINCE_TXID_FIELD_NUMBER: _ClassVar[int]
    MAX_TXNS_FIELD_NUMBER: _ClassVar[int]
    journal_id: str
    cluster_id: str
    since_txid: int
    max_txns: int
    def __init__(self, journal_id: _Optional[str] = ..., cluster_id: _Optional[str] = ..., since_txid: _Optional[int] = ..., max_txns: _Optional[int] = ...) -> None: ...

class GetJournaledEditsResponse(_message.Message):
    __slots__ = ("txn_count", "records", "writer_epoch")
    TXN_COUNT_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    WRITER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    txn_count: int
    records: bytes
    writer_epoch: int
    def __init__(self, txn_count: _Optional[int] = ..., records: _Optional[bytes] = ..., writer_epoch: _Optional[int] = ...) -> None: ...

class SubscribeEditsRequest(_message.Message):
    __slots__ = ("journal_id", "cluster_id", "since_txid")
    JOURNAL_ID_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    SINCE_TXID_FIELD_NUMBER: _ClassVar[int]
    journal_id: str
    cluster_id: str
    since_txid: int
    def __init__(self, journal_id: _Optional[str] = ..., cluster_id: _Optional[str] = ..., since_txid: _Optional[int] = ...) -> None: ...

class SubscribedEdits(_message.Message):
    __slots__ = ("writer_epoch", "segment_txid", "first_txid", "txn_count", "records", "end", "end_details")
    WRITER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    SEGMENT_TXID_FIELD_NUMBER: _ClassVar[int]
    FIRST_TXID_FIELD_NUMBER: _ClassVar[int]
    TXN_COUNT_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    END_DETAILS_FIELD_NUMBER: _ClassVar[int]
    writer_epoch: int
    segment_txid: int
    first_txid: int
    txn_count: int
    records: bytes
    end: SubscriptionEnd
    end_details: str
    def __init__(self, writer_epoch: _Optional[int] = ..., segment_txid: _Optional[int] = ..., first_txid: _Optional[int] = ..., txn_count: _Optional[int] = ..., records: _Optional[bytes] = ..., end: _Optional[_Union[SubscriptionEnd, str]] = ..., end_details: _Optional[str] = ...) -> None: ...

class WirePush(_message.Message):
    __slots__ = ("subscribed_since", "edits", "refused")
    SUBSCRIBED_SINCE_FIELD_NUMBER: _ClassVar[int]
    EDITS_FIELD_NUMBER: _ClassVar[int]
    REFUSED_FIELD_NUMBER: _ClassVar[int]
    subscribed_since: int
    edits: SubscribedEdits
    refused: JournalStreamResponse
    def __init__(self, subscribed_since: _Optional[int] = ..., edits: _Optional[_Union[SubscribedEdits, _Mapping]] = ..., refused: _Optional[_Union[JournalStreamResponse, _Mapping]] = ...) -> None: ...

class WireStateAnswer(_message.Message):
    __slots__ = ("state", "refused")
    STATE_FIELD_NUMBER: _ClassVar[int]
    REFUSED_FIELD_NUMBER: _ClassVar[int]
    state: GetJournalStateResponse
    refused: JournalStreamResponse
    def __init__(self, state: _Optional[_Union[GetJournalStateResponse, _Mapping]] = ..., refused: _Optional[_Union[JournalStreamResponse, _Mapping]] = ...) -> None: ...
