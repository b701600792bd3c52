import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RetryStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RETRY_STATUS_UNSPECIFIED: _ClassVar[RetryStatus]
    RETRY_STATUS_SCHEDULED: _ClassVar[RetryStatus]
    RETRY_STATUS_SUCCEEDED: _ClassVar[RetryStatus]
    RETRY_STATUS_DEAD: _ClassVar[RetryStatus]
    RETRY_STATUS_CANCELLED: _ClassVar[RetryStatus]
    RETRY_STATUS_IN_FLIGHT: _ClassVar[RetryStatus]

class AttemptOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ATTEMPT_OUTCOME_UNSPECIFIED: _ClassVar[AttemptOutcome]
    ATTEMPT_OUTCOME_SUCCEEDED: _ClassVar[AttemptOutcome]
    ATTEMPT_OUTCOME_RETRY: _ClassVar[AttemptOutcome]
    ATTEMPT_OUTCOME_FAILED: _ClassVar[AttemptOutcome]
    ATTEMPT_OUTCOME_DEADLINE_EXPIRED: _ClassVar[AttemptOutcome]
    ATTEMPT_OUTCOME_HELD: _ClassVar[AttemptOutcome]
    ATTEMPT_OUTCOME_SNOOZED: _ClassVar[AttemptOutcome]
    ATTEMPT_OUTCOME_RUN_NOW: _ClassVar[AttemptOutcome]
    ATTEMPT_OUTCOME_RESCHEDULED: _ClassVar[AttemptOutcome]
    ATTEMPT_OUTCOME_CANCELLED: _ClassVar[AttemptOutcome]
    ATTEMPT_OUTCOME_DEAD_LETTERED: _ClassVar[AttemptOutcome]
RETRY_STATUS_UNSPECIFIED: RetryStatus
RETRY_STATUS_SCHEDULED: RetryStatus
RETRY_STATUS_SUCCEEDED: RetryStatus
RETRY_STATUS_DEAD: RetryStatus
RETRY_STATUS_CANCELLED: RetryStatus
RETRY_STATUS_IN_FLIGHT: RetryStatus
ATTEMPT_OUTCOME_UNSPECIFIED: AttemptOutcome
ATTEMPT_OUTCOME_SUCCEEDED: AttemptOutcome
ATTEMPT_OUTCOME_RETRY: AttemptOutcome
ATTEMPT_OUTCOME_FAILED: AttemptOutcome
ATTEMPT_OUTCOME_DEADLINE_EXPIRED: AttemptOutcome
ATTEMPT_OUTCOME_HELD: AttemptOutcome
ATTEMPT_OUTCOME_SNOOZED: AttemptOutcome
ATTEMPT_OUTCOME_RUN_NOW: AttemptOutcome
ATTEMPT_OUTCOME_RESCHEDULED: AttemptOutcome
ATTEMPT_OUTCOME_CANCELLED: AttemptOutcome
ATTEMPT_OUTCOME_DEAD_LETTERED: AttemptOutcome

class RetryPolicy(_message.Message):
    __slots__ = ("max_attempts", "initial_backoff", "max_backoff", "multiplier", "jitter", "max_retry_duration", "ack_timeout", "max_deliveries_per_attempt", "non_retryable_error_classes", "unlimited_attempts")
    MAX_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    INITIAL_BACKOFF_FIELD_NUMBER: _ClassVar[int]
    MAX_BACKOFF_FIELD_NUMBER: _ClassVar[int]
    MULTIPLIER_FIELD_NUMBER: _ClassVar[int]
    JITTER_FIELD_NUMBER: _ClassVar[int]
    MAX_RETRY_DURATION_FIELD_NUMBER: _ClassVar[int]
    ACK_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    MAX_DELIVERIES_PER_ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    NON_RETRYABLE_ERROR_CLASSES_FIELD_NUMBER: _ClassVar[int]
    UNLIMITED_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    max_attempts: int
    initial_backoff: _duration_pb2.Duration
    max_backoff: _duration_pb2.Duration
    multiplier: float
    jitter: float
    max_retry_duration: _duration_pb2.Duration
    ack_timeout: _duration_pb2.Duration
    max_deliveries_per_attempt: int
    non_retryable_error_classes: _containers.RepeatedScalarFieldContainer[str]
    unlimited_attempts: bool
    def __init__(self, max_attempts: _Optional[int] = ..., initial_backoff: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., max_backoff: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., multiplier: _Optional[float] = ..., jitter: _Optional[float] = ..., max_retry_duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., ack_timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., max_deliveries_per_attempt: _Optional[int] = ..., non_retryable_error_classes: _Optional[_Iterable[str]] = ..., unlimited_attempts: _Optional[bool] = ...) -> None: ...

class Location(_message.Message):
    __slots__ = ("day", "window", "instance", "bucket")
    DAY_FIELD_NUMBER: _ClassVar[int]
    WINDOW_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_FIELD_NUMBER: _ClassVar[int]
    BUCKET_FIELD_NUMBER: _ClassVar[int]
    day: str
    window: int
    instance: str
    bucket: int
    def __init__(self, day: _Optional[str] = ..., window: _Optional[int] = ..., instance: _Optional[str] = ..., bucket: _Optional[int] = ...) -> None: ...

class Retry(_message.Message):
    __slots__ = ("service", "transaction_id", "status", "attempt", "generation", "due_time", "last_error", "payload", "attributes", "policy", "first_enqueued_at", "last_enqueued_at", "updated_at", "location", "enqueue_count", "delivery_count", "dependency", "compensations", "chain", "attempts", "attempts_dropped")
    class AttributesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SERVICE_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    DUE_TIME_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTES_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    FIRST_ENQUEUED_AT_FIELD_NUMBER: _ClassVar[int]
    LAST_ENQUEUED_AT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    LOCATION_FIELD_NUMBER: _ClassVar[int]
    ENQUEUE_COUNT_FIELD_NUMBER: _ClassVar[int]
    DELIVERY_COUNT_FIELD_NUMBER: _ClassVar[int]
    DEPENDENCY_FIELD_NUMBER: _ClassVar[int]
    COMPENSATIONS_FIELD_NUMBER: _ClassVar[int]
    CHAIN_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_DROPPED_FIELD_NUMBER: _ClassVar[int]
    service: str
    transaction_id: str
    status: RetryStatus
    attempt: int
    generation: int
    due_time: _timestamp_pb2.Timestamp
    last_error: str
    payload: bytes
    attributes: _containers.ScalarMap[str, str]
    policy: RetryPolicy
    first_enqueued_at: _timestamp_pb2.Timestamp
    last_enqueued_at: _timestamp_pb2.Timestamp
    updated_at: _timestamp_pb2.Timestamp
    location: Location
    enqueue_count: int
    delivery_count: int
    dependency: str
    compensations: _containers.RepeatedCompositeFieldContainer[Compensation]
    chain: CompensationChain
    attempts: _containers.RepeatedCompositeFieldContainer[Attempt]
    attempts_dropped: int
    def __init__(self, service: _Optional[str] = ..., transaction_id: _Optional[str] = ..., status: _Optional[_Union[RetryStatus, str]] = ..., attempt: _Optional[int] = ..., generation: _Optional[int] = ..., due_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., last_error: _Optional[str] = ..., payload: _Optional[bytes] = ..., attributes: _Optional[_Mapping[str, str]] = ..., policy: _Optional[_Union[RetryPolicy, _Mapping]] = ..., first_enqueued_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., last_enqueued_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., updated_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., location: _Optional[_Union[Location, _Mapping]] = ..., enqueue_count: _Optional[int] = ..., delivery_count: _Optional[int] = ..., dependency: _Optional[str] = ..., compensations: _Optional[_Iterable[_Union[Compensation, _Mapping]]] = ..., chain: _Optional[_Union[CompensationChain, _Mapping]] = ..., attempts: _Optional[_Iterable[_Union[Attempt, _Mapping]]] = ..., attempts_dropped: _Optional[int] = ...) -> None: ...

class Attempt(_message.Message):
    __slots__ = ("attempt", "delivered_at", "ended_at", "node_id", "executor_id", "outcome", "error", "error_class", "retry_after", "duration", "deliveries")
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    DELIVERED_AT_FIELD_NUMBER: _ClassVar[int]
    ENDED_AT_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    EXECUTOR_ID_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ERROR_CLASS_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_FIELD_NUMBER: _ClassVar[int]
    DURATION_FIELD_NUMBER: _ClassVar[int]
    DELIVERIES_FIELD_NUMBER: _ClassVar[int]
    attempt: int
    delivered_at: _timestamp_pb2.Timestamp
    ended_at: _timestamp_pb2.Timestamp
    node_id: str
    executor_id: str
    outcome: AttemptOutcome
    error: str
    error_class: str
    retry_after: _duration_pb2.Duration
    duration: _duration_pb2.Duration
    deliveries: int
    def __init__(self, attempt: _Optional[int] = ..., delivered_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., ended_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., node_id: _Optional[str] = ..., executor_id: _Optional[str] = ..., outcome: _Optional[_Union[AttemptOutcome, str]] = ..., error: _Optional[str] = ..., error_class: _Optional[str] = ..., retry_after: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., deliveries: _Optional[int] = ...) -> None: ...

class Compensation(_message.Message):
    __slots__ = ("service", "transaction_id", "payload", "attributes", "policy")
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
    POLICY_FIELD_NUMBER: _ClassVar[int]
    service: str
    transaction_id: str
    payload: bytes
    attributes: _containers.ScalarMap[str, str]
    policy: RetryPolicy
    def __init__(self, service: _Optional[str] = ..., transaction_id: _Optional[str] = ..., payload: _Optional[bytes] = ..., attributes: _Optional[_Mapping[str, str]] = ..., policy: _Optional[_Union[RetryPolicy, _Mapping]] = ...) -> None: ...

class CompensationChain(_message.Message):
    __slots__ = ("saga_service", "saga_transaction_id", "position", "compensations")
    SAGA_SERVICE_FIELD_NUMBER: _ClassVar[int]
    SAGA_TRANSACTION_ID_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    COMPENSATIONS_FIELD_NUMBER: _ClassVar[int]
    saga_service: str
    saga_transaction_id: str
    position: int
    compensations: _containers.RepeatedCompositeFieldContainer[CompensationProgress]
    def __init__(self, saga_service: _Optional[str] = ..., saga_transaction_id: _Optional[str] = ..., position: _Optional[int] = ..., compensations: _Optional[_Iterable[_Union[CompensationProgress, _Mapping]]] = ...) -> None: ...

class CompensationProgress(_message.Message):
    __slots__ = ("service", "transaction_id", "status")
    SERVICE_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    service: str
    transaction_id: str
    status: RetryStatus
    def __init__(self, service: _Optional[str] = ..., transaction_id: _Optional[str] = ..., status: _Optional[_Union[RetryStatus, str]] = ...) -> None: ...

class TraceContext(_message.Message):
    __slots__ = ("traceparent", "tracestate")
    TRACEPARENT_FIELD_NUMBER: _ClassVar[int]
    TRACESTATE_FIELD_NUMBER: _ClassVar[int]
    traceparent: str
    tracestate: str
    def __init__(self, traceparent: _Optional[str] = ..., tracestate: _Optional[str] = ...) -> None: ...
