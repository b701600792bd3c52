import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from rebound.v1 import types_pb2 as _types_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RetryAction(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RETRY_ACTION_UNSPECIFIED: _ClassVar[RetryAction]
    RETRY_ACTION_RUN_NOW: _ClassVar[RetryAction]
    RETRY_ACTION_RESCHEDULE: _ClassVar[RetryAction]
    RETRY_ACTION_CANCEL: _ClassVar[RetryAction]
    RETRY_ACTION_DEAD_LETTER: _ClassVar[RetryAction]
RETRY_ACTION_UNSPECIFIED: RetryAction
RETRY_ACTION_RUN_NOW: RetryAction
RETRY_ACTION_RESCHEDULE: RetryAction
RETRY_ACTION_CANCEL: RetryAction
RETRY_ACTION_DEAD_LETTER: RetryAction

class EnqueueRetryRequest(_message.Message):
    __slots__ = ("service", "transaction_id", "payload", "attributes", "delay", "due_time", "policy", "attempt", "last_error", "trace_context", "dependency", "compensations")
    class AttributesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SERVICE_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_ID_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTES_FIELD_NUMBER: _ClassVar[int]
    DELAY_FIELD_NUMBER: _ClassVar[int]
    DUE_TIME_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    TRACE_CONTEXT_FIELD_NUMBER: _ClassVar[int]
    DEPENDENCY_FIELD_NUMBER: _ClassVar[int]
    COMPENSATIONS_FIELD_NUMBER: _ClassVar[int]
    service: str
    transaction_id: str
    payload: bytes
    attributes: _containers.ScalarMap[str, str]
    delay: _duration_pb2.Duration
    due_time: _timestamp_pb2.Timestamp
    policy: _types_pb2.RetryPolicy
    attempt: int
    last_error: str
    trace_context: _types_pb2.TraceContext
    dependency: str
    compensations: _containers.RepeatedCompositeFieldContainer[_types_pb2.Compensation]
    def __init__(self, service: _Optional[str] = ..., transaction_id: _Optional[str] = ..., payload: _Optional[bytes] = ..., attributes: _Optional[_Mapping[str, str]] = ..., delay: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., due_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., policy: _Optional[_Union[_types_pb2.RetryPolicy, _Mapping]] = ..., attempt: _Optional[int] = ..., last_error: _Optional[str] = ..., trace_context: _Optional[_Union[_types_pb2.TraceContext, _Mapping]] = ..., dependency: _Optional[str] = ..., compensations: _Optional[_Iterable[_Union[_types_pb2.Compensation, _Mapping]]] = ...) -> None: ...

class EnqueueRetryResponse(_message.Message):
    __slots__ = ("transaction_id", "due_time", "generation", "deduplicated")
    TRANSACTION_ID_FIELD_NUMBER: _ClassVar[int]
    DUE_TIME_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    DEDUPLICATED_FIELD_NUMBER: _ClassVar[int]
    transaction_id: str
    due_time: _timestamp_pb2.Timestamp
    generation: int
    deduplicated: bool
    def __init__(self, transaction_id: _Optional[str] = ..., due_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., generation: _Optional[int] = ..., deduplicated: _Optional[bool] = ...) -> None: ...

class EnqueueRetryBatchRequest(_message.Message):
    __slots__ = ("requests",)
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    requests: _containers.RepeatedCompositeFieldContainer[EnqueueRetryRequest]
    def __init__(self, requests: _Optional[_Iterable[_Union[EnqueueRetryRequest, _Mapping]]] = ...) -> None: ...

class EnqueueRetryResult(_message.Message):
    __slots__ = ("response", "error")
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    response: EnqueueRetryResponse
    error: ItemError
    def __init__(self, response: _Optional[_Union[EnqueueRetryResponse, _Mapping]] = ..., error: _Optional[_Union[ItemError, _Mapping]] = ...) -> None: ...

class ItemError(_message.Message):
    __slots__ = ("code", "message")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    code: int
    message: str
    def __init__(self, code: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class EnqueueRetryBatchResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[EnqueueRetryResult]
    def __init__(self, results: _Optional[_Iterable[_Union[EnqueueRetryResult, _Mapping]]] = ...) -> None: ...

class GetRetryRequest(_message.Message):
    __slots__ = ("service", "transaction_id")
    SERVICE_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_ID_FIELD_NUMBER: _ClassVar[int]
    service: str
    transaction_id: str
    def __init__(self, service: _Optional[str] = ..., transaction_id: _Optional[str] = ...) -> None: ...

class CancelRetryRequest(_message.Message):
    __slots__ = ("service", "transaction_id")
    SERVICE_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_ID_FIELD_NUMBER: _ClassVar[int]
    service: str
    transaction_id: str
    def __init__(self, service: _Optional[str] = ..., transaction_id: _Optional[str] = ...) -> None: ...

class ListRetriesRequest(_message.Message):
    __slots__ = ("service", "statuses", "due_after", "due_before", "attributes", "dependency", "error_contains", "saga_transaction_id", "page_size", "page_token", "local_only")
    class AttributesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SERVICE_FIELD_NUMBER: _ClassVar[int]
    STATUSES_FIELD_NUMBER: _ClassVar[int]
    DUE_AFTER_FIELD_NUMBER: _ClassVar[int]
    DUE_BEFORE_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTES_FIELD_NUMBER: _ClassVar[int]
    DEPENDENCY_FIELD_NUMBER: _ClassVar[int]
    ERROR_CONTAINS_FIELD_NUMBER: _ClassVar[int]
    SAGA_TRANSACTION_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    LOCAL_ONLY_FIELD_NUMBER: _ClassVar[int]
    service: str
    statuses: _containers.RepeatedScalarFieldContainer[_types_pb2.RetryStatus]
    due_after: _timestamp_pb2.Timestamp
    due_before: _timestamp_pb2.Timestamp
    attributes: _containers.ScalarMap[str, str]
    dependency: str
    error_contains: str
    saga_transaction_id: str
    page_size: int
    page_token: str
    local_only: bool
    def __init__(self, service: _Optional[str] = ..., statuses: _Optional[_Iterable[_Union[_types_pb2.RetryStatus, str]]] = ..., due_after: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., due_before: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., attributes: _Optional[_Mapping[str, str]] = ..., dependency: _Optional[str] = ..., error_contains: _Optional[str] = ..., saga_transaction_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., local_only: _Optional[bool] = ...) -> None: ...

class ListRetriesResponse(_message.Message):
    __slots__ = ("retries", "next_page_token", "unreachable_nodes")
    RETRIES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    UNREACHABLE_NODES_FIELD_NUMBER: _ClassVar[int]
    retries: _containers.RepeatedCompositeFieldContainer[RetrySummary]
    next_page_token: str
    unreachable_nodes: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, retries: _Optional[_Iterable[_Union[RetrySummary, _Mapping]]] = ..., next_page_token: _Optional[str] = ..., unreachable_nodes: _Optional[_Iterable[str]] = ...) -> None: ...

class RetrySummary(_message.Message):
    __slots__ = ("transaction_id", "status", "attempt", "due_time", "last_error", "dependency", "chain_position", "saga_transaction_id", "enqueue_count", "delivery_count", "attributes", "delivery")
    class AttributesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TRANSACTION_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    DUE_TIME_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    DEPENDENCY_FIELD_NUMBER: _ClassVar[int]
    CHAIN_POSITION_FIELD_NUMBER: _ClassVar[int]
    SAGA_TRANSACTION_ID_FIELD_NUMBER: _ClassVar[int]
    ENQUEUE_COUNT_FIELD_NUMBER: _ClassVar[int]
    DELIVERY_COUNT_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTES_FIELD_NUMBER: _ClassVar[int]
    DELIVERY_FIELD_NUMBER: _ClassVar[int]
    transaction_id: str
    status: _types_pb2.RetryStatus
    attempt: int
    due_time: _timestamp_pb2.Timestamp
    last_error: str
    dependency: str
    chain_position: int
    saga_transaction_id: str
    enqueue_count: int
    delivery_count: int
    attributes: _containers.ScalarMap[str, str]
    delivery: InFlightDelivery
    def __init__(self, transaction_id: _Optional[str] = ..., status: _Optional[_Union[_types_pb2.RetryStatus, str]] = ..., attempt: _Optional[int] = ..., due_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., last_error: _Optional[str] = ..., dependency: _Optional[str] = ..., chain_position: _Optional[int] = ..., saga_transaction_id: _Optional[str] = ..., enqueue_count: _Optional[int] = ..., delivery_count: _Optional[int] = ..., attributes: _Optional[_Mapping[str, str]] = ..., delivery: _Optional[_Union[InFlightDelivery, _Mapping]] = ...) -> None: ...

class InFlightDelivery(_message.Message):
    __slots__ = ("node_id", "executor_id", "delivered_at", "ack_deadline")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    EXECUTOR_ID_FIELD_NUMBER: _ClassVar[int]
    DELIVERED_AT_FIELD_NUMBER: _ClassVar[int]
    ACK_DEADLINE_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    executor_id: str
    delivered_at: _timestamp_pb2.Timestamp
    ack_deadline: _timestamp_pb2.Timestamp
    def __init__(self, node_id: _Optional[str] = ..., executor_id: _Optional[str] = ..., delivered_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., ack_deadline: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ActOnRetriesRequest(_message.Message):
    __slots__ = ("selection", "transaction_ids", "action", "due_time", "max_items", "max_per_second", "reason")
    SELECTION_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_IDS_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    DUE_TIME_FIELD_NUMBER: _ClassVar[int]
    MAX_ITEMS_FIELD_NUMBER: _ClassVar[int]
    MAX_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    selection: ListRetriesRequest
    transaction_ids: _containers.RepeatedScalarFieldContainer[str]
    action: RetryAction
    due_time: _timestamp_pb2.Timestamp
    max_items: int
    max_per_second: int
    reason: str
    def __init__(self, selection: _Optional[_Union[ListRetriesRequest, _Mapping]] = ..., transaction_ids: _Optional[_Iterable[str]] = ..., action: _Optional[_Union[RetryAction, str]] = ..., due_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., max_items: _Optional[int] = ..., max_per_second: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class ActOnRetriesResponse(_message.Message):
    __slots__ = ("changed", "skipped", "next_page_token")
    CHANGED_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    changed: int
    skipped: int
    next_page_token: str
    def __init__(self, changed: _Optional[int] = ..., skipped: _Optional[int] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class CancelRetryResponse(_message.Message):
    __slots__ = ("status", "cancelled")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    CANCELLED_FIELD_NUMBER: _ClassVar[int]
    status: _types_pb2.RetryStatus
    cancelled: bool
    def __init__(self, status: _Optional[_Union[_types_pb2.RetryStatus, str]] = ..., cancelled: _Optional[bool] = ...) -> None: ...
