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

class AckOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ACK_OUTCOME_UNSPECIFIED: _ClassVar[AckOutcome]
    ACK_OUTCOME_SUCCEEDED: _ClassVar[AckOutcome]
    ACK_OUTCOME_RETRY: _ClassVar[AckOutcome]
    ACK_OUTCOME_FAILED: _ClassVar[AckOutcome]
ACK_OUTCOME_UNSPECIFIED: AckOutcome
ACK_OUTCOME_SUCCEEDED: AckOutcome
ACK_OUTCOME_RETRY: AckOutcome
ACK_OUTCOME_FAILED: AckOutcome

class SubscribeRequest(_message.Message):
    __slots__ = ("service", "executor_id", "max_in_flight")
    SERVICE_FIELD_NUMBER: _ClassVar[int]
    EXECUTOR_ID_FIELD_NUMBER: _ClassVar[int]
    MAX_IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    service: str
    executor_id: str
    max_in_flight: int
    def __init__(self, service: _Optional[str] = ..., executor_id: _Optional[str] = ..., max_in_flight: _Optional[int] = ...) -> None: ...

class Delivery(_message.Message):
    __slots__ = ("delivery_id", "service", "transaction_id", "attempt", "payload", "attributes", "due_time", "first_enqueued_at", "ack_deadline", "last_error", "trace_context", "dependency")
    class AttributesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    DELIVERY_ID_FIELD_NUMBER: _ClassVar[int]
    SERVICE_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTES_FIELD_NUMBER: _ClassVar[int]
    DUE_TIME_FIELD_NUMBER: _ClassVar[int]
    FIRST_ENQUEUED_AT_FIELD_NUMBER: _ClassVar[int]
    ACK_DEADLINE_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    TRACE_CONTEXT_FIELD_NUMBER: _ClassVar[int]
    DEPENDENCY_FIELD_NUMBER: _ClassVar[int]
    delivery_id: str
    service: str
    transaction_id: str
    attempt: int
    payload: bytes
    attributes: _containers.ScalarMap[str, str]
    due_time: _timestamp_pb2.Timestamp
    first_enqueued_at: _timestamp_pb2.Timestamp
    ack_deadline: _timestamp_pb2.Timestamp
    last_error: str
    trace_context: _types_pb2.TraceContext
    dependency: str
    def __init__(self, delivery_id: _Optional[str] = ..., service: _Optional[str] = ..., transaction_id: _Optional[str] = ..., attempt: _Optional[int] = ..., payload: _Optional[bytes] = ..., attributes: _Optional[_Mapping[str, str]] = ..., due_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., first_enqueued_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., ack_deadline: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., last_error: _Optional[str] = ..., trace_context: _Optional[_Union[_types_pb2.TraceContext, _Mapping]] = ..., dependency: _Optional[str] = ...) -> None: ...

class AckRequest(_message.Message):
    __slots__ = ("delivery_id", "outcome", "retry_after", "error", "snooze", "error_class", "hold")
    DELIVERY_ID_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    SNOOZE_FIELD_NUMBER: _ClassVar[int]
    ERROR_CLASS_FIELD_NUMBER: _ClassVar[int]
    HOLD_FIELD_NUMBER: _ClassVar[int]
    delivery_id: str
    outcome: AckOutcome
    retry_after: _duration_pb2.Duration
    error: str
    snooze: bool
    error_class: str
    hold: DependencyHold
    def __init__(self, delivery_id: _Optional[str] = ..., outcome: _Optional[_Union[AckOutcome, str]] = ..., retry_after: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., error: _Optional[str] = ..., snooze: _Optional[bool] = ..., error_class: _Optional[str] = ..., hold: _Optional[_Union[DependencyHold, _Mapping]] = ...) -> None: ...

class DependencyHold(_message.Message):
    __slots__ = ("duration", "reason")
    DURATION_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    duration: _duration_pb2.Duration
    reason: str
    def __init__(self, duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., reason: _Optional[str] = ...) -> None: ...

class AckResponse(_message.Message):
    __slots__ = ("next_due_time", "dead_lettered", "snoozed")
    NEXT_DUE_TIME_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTERED_FIELD_NUMBER: _ClassVar[int]
    SNOOZED_FIELD_NUMBER: _ClassVar[int]
    next_due_time: _timestamp_pb2.Timestamp
    dead_lettered: bool
    snoozed: bool
    def __init__(self, next_due_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., dead_lettered: _Optional[bool] = ..., snoozed: _Optional[bool] = ...) -> None: ...

class AckBatchRequest(_message.Message):
    __slots__ = ("acks",)
    ACKS_FIELD_NUMBER: _ClassVar[int]
    acks: _containers.RepeatedCompositeFieldContainer[AckRequest]
    def __init__(self, acks: _Optional[_Iterable[_Union[AckRequest, _Mapping]]] = ...) -> None: ...

class AckBatchResult(_message.Message):
    __slots__ = ("response", "error")
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    response: AckResponse
    error: AckError
    def __init__(self, response: _Optional[_Union[AckResponse, _Mapping]] = ..., error: _Optional[_Union[AckError, _Mapping]] = ...) -> None: ...

class AckError(_message.Message):
    __slots__ = ("code", "message")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    code: int
    message: str
    def __init__(self, code: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class AckBatchResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[AckBatchResult]
    def __init__(self, results: _Optional[_Iterable[_Union[AckBatchResult, _Mapping]]] = ...) -> None: ...

class ExtendDeadlineRequest(_message.Message):
    __slots__ = ("delivery_id", "extension")
    DELIVERY_ID_FIELD_NUMBER: _ClassVar[int]
    EXTENSION_FIELD_NUMBER: _ClassVar[int]
    delivery_id: str
    extension: _duration_pb2.Duration
    def __init__(self, delivery_id: _Optional[str] = ..., extension: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class ExtendDeadlineResponse(_message.Message):
    __slots__ = ("ack_deadline",)
    ACK_DEADLINE_FIELD_NUMBER: _ClassVar[int]
    ack_deadline: _timestamp_pb2.Timestamp
    def __init__(self, ack_deadline: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class GetRingRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Ring(_message.Message):
    __slots__ = ("nodes",)
    NODES_FIELD_NUMBER: _ClassVar[int]
    nodes: _containers.RepeatedCompositeFieldContainer[RingNode]
    def __init__(self, nodes: _Optional[_Iterable[_Union[RingNode, _Mapping]]] = ...) -> None: ...

class RingNode(_message.Message):
    __slots__ = ("node_id", "address", "compactor", "ranges")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    COMPACTOR_FIELD_NUMBER: _ClassVar[int]
    RANGES_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    address: str
    compactor: bool
    ranges: _containers.RepeatedCompositeFieldContainer[TokenRange]
    def __init__(self, node_id: _Optional[str] = ..., address: _Optional[str] = ..., compactor: _Optional[bool] = ..., ranges: _Optional[_Iterable[_Union[TokenRange, _Mapping]]] = ...) -> None: ...

class TokenRange(_message.Message):
    __slots__ = ("start", "end")
    START_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    start: int
    end: int
    def __init__(self, start: _Optional[int] = ..., end: _Optional[int] = ...) -> None: ...
