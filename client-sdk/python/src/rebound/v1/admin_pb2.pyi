import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from rebound.v1 import types_pb2 as _types_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ListServicesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ServiceLimits(_message.Message):
    __slots__ = ("max_dispatch_per_second", "dispatch_burst", "max_concurrent")
    MAX_DISPATCH_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    DISPATCH_BURST_FIELD_NUMBER: _ClassVar[int]
    MAX_CONCURRENT_FIELD_NUMBER: _ClassVar[int]
    max_dispatch_per_second: float
    dispatch_burst: int
    max_concurrent: int
    def __init__(self, max_dispatch_per_second: _Optional[float] = ..., dispatch_burst: _Optional[int] = ..., max_concurrent: _Optional[int] = ...) -> None: ...

class ServiceInfo(_message.Message):
    __slots__ = ("service", "paused", "policy", "limits", "paused_at", "updated_at", "effective_policy", "push_target")
    SERVICE_FIELD_NUMBER: _ClassVar[int]
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    PAUSED_AT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    EFFECTIVE_POLICY_FIELD_NUMBER: _ClassVar[int]
    PUSH_TARGET_FIELD_NUMBER: _ClassVar[int]
    service: str
    paused: bool
    policy: _types_pb2.RetryPolicy
    limits: ServiceLimits
    paused_at: _timestamp_pb2.Timestamp
    updated_at: _timestamp_pb2.Timestamp
    effective_policy: _types_pb2.RetryPolicy
    push_target: PushTarget
    def __init__(self, service: _Optional[str] = ..., paused: _Optional[bool] = ..., policy: _Optional[_Union[_types_pb2.RetryPolicy, _Mapping]] = ..., limits: _Optional[_Union[ServiceLimits, _Mapping]] = ..., paused_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., updated_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., effective_policy: _Optional[_Union[_types_pb2.RetryPolicy, _Mapping]] = ..., push_target: _Optional[_Union[PushTarget, _Mapping]] = ...) -> None: ...

class ListServicesResponse(_message.Message):
    __slots__ = ("services",)
    SERVICES_FIELD_NUMBER: _ClassVar[int]
    services: _containers.RepeatedCompositeFieldContainer[ServiceInfo]
    def __init__(self, services: _Optional[_Iterable[_Union[ServiceInfo, _Mapping]]] = ...) -> None: ...

class GetServiceRequest(_message.Message):
    __slots__ = ("service",)
    SERVICE_FIELD_NUMBER: _ClassVar[int]
    service: str
    def __init__(self, service: _Optional[str] = ...) -> None: ...

class GetStatsRequest(_message.Message):
    __slots__ = ("service", "local_only")
    SERVICE_FIELD_NUMBER: _ClassVar[int]
    LOCAL_ONLY_FIELD_NUMBER: _ClassVar[int]
    service: str
    local_only: bool
    def __init__(self, service: _Optional[str] = ..., local_only: _Optional[bool] = ...) -> None: ...

class WindowCount(_message.Message):
    __slots__ = ("day", "window", "pending", "window_start")
    DAY_FIELD_NUMBER: _ClassVar[int]
    WINDOW_FIELD_NUMBER: _ClassVar[int]
    PENDING_FIELD_NUMBER: _ClassVar[int]
    WINDOW_START_FIELD_NUMBER: _ClassVar[int]
    day: str
    window: int
    pending: int
    window_start: _timestamp_pb2.Timestamp
    def __init__(self, day: _Optional[str] = ..., window: _Optional[int] = ..., pending: _Optional[int] = ..., window_start: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class DueBands(_message.Message):
    __slots__ = ("overdue", "within_minute", "within_hour", "within_day", "later")
    OVERDUE_FIELD_NUMBER: _ClassVar[int]
    WITHIN_MINUTE_FIELD_NUMBER: _ClassVar[int]
    WITHIN_HOUR_FIELD_NUMBER: _ClassVar[int]
    WITHIN_DAY_FIELD_NUMBER: _ClassVar[int]
    LATER_FIELD_NUMBER: _ClassVar[int]
    overdue: int
    within_minute: int
    within_hour: int
    within_day: int
    later: int
    def __init__(self, overdue: _Optional[int] = ..., within_minute: _Optional[int] = ..., within_hour: _Optional[int] = ..., within_day: _Optional[int] = ..., later: _Optional[int] = ...) -> None: ...

class ServiceStats(_message.Message):
    __slots__ = ("service", "pending", "in_flight", "dead_lettered", "oldest_due_age", "windows", "bands", "paused")
    SERVICE_FIELD_NUMBER: _ClassVar[int]
    PENDING_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTERED_FIELD_NUMBER: _ClassVar[int]
    OLDEST_DUE_AGE_FIELD_NUMBER: _ClassVar[int]
    WINDOWS_FIELD_NUMBER: _ClassVar[int]
    BANDS_FIELD_NUMBER: _ClassVar[int]
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    service: str
    pending: int
    in_flight: int
    dead_lettered: int
    oldest_due_age: _duration_pb2.Duration
    windows: _containers.RepeatedCompositeFieldContainer[WindowCount]
    bands: DueBands
    paused: bool
    def __init__(self, service: _Optional[str] = ..., pending: _Optional[int] = ..., in_flight: _Optional[int] = ..., dead_lettered: _Optional[int] = ..., oldest_due_age: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., windows: _Optional[_Iterable[_Union[WindowCount, _Mapping]]] = ..., bands: _Optional[_Union[DueBands, _Mapping]] = ..., paused: _Optional[bool] = ...) -> None: ...

class NodeStats(_message.Message):
    __slots__ = ("node_id", "address", "held_slots", "compactor", "in_flight", "subscribers", "reachable", "clock_offset_ms")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    HELD_SLOTS_FIELD_NUMBER: _ClassVar[int]
    COMPACTOR_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIBERS_FIELD_NUMBER: _ClassVar[int]
    REACHABLE_FIELD_NUMBER: _ClassVar[int]
    CLOCK_OFFSET_MS_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    address: str
    held_slots: int
    compactor: bool
    in_flight: int
    subscribers: int
    reachable: bool
    clock_offset_ms: int
    def __init__(self, node_id: _Optional[str] = ..., address: _Optional[str] = ..., held_slots: _Optional[int] = ..., compactor: _Optional[bool] = ..., in_flight: _Optional[int] = ..., subscribers: _Optional[int] = ..., reachable: _Optional[bool] = ..., clock_offset_ms: _Optional[int] = ...) -> None: ...

class GetStatsResponse(_message.Message):
    __slots__ = ("services", "nodes", "holds")
    SERVICES_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    HOLDS_FIELD_NUMBER: _ClassVar[int]
    services: _containers.RepeatedCompositeFieldContainer[ServiceStats]
    nodes: _containers.RepeatedCompositeFieldContainer[NodeStats]
    holds: _containers.RepeatedCompositeFieldContainer[DependencyHoldInfo]
    def __init__(self, services: _Optional[_Iterable[_Union[ServiceStats, _Mapping]]] = ..., nodes: _Optional[_Iterable[_Union[NodeStats, _Mapping]]] = ..., holds: _Optional[_Iterable[_Union[DependencyHoldInfo, _Mapping]]] = ...) -> None: ...

class PauseServiceRequest(_message.Message):
    __slots__ = ("service",)
    SERVICE_FIELD_NUMBER: _ClassVar[int]
    service: str
    def __init__(self, service: _Optional[str] = ...) -> None: ...

class PauseServiceResponse(_message.Message):
    __slots__ = ("service",)
    SERVICE_FIELD_NUMBER: _ClassVar[int]
    service: ServiceInfo
    def __init__(self, service: _Optional[_Union[ServiceInfo, _Mapping]] = ...) -> None: ...

class ResumeServiceRequest(_message.Message):
    __slots__ = ("service",)
    SERVICE_FIELD_NUMBER: _ClassVar[int]
    service: str
    def __init__(self, service: _Optional[str] = ...) -> None: ...

class ResumeServiceResponse(_message.Message):
    __slots__ = ("service",)
    SERVICE_FIELD_NUMBER: _ClassVar[int]
    service: ServiceInfo
    def __init__(self, service: _Optional[_Union[ServiceInfo, _Mapping]] = ...) -> None: ...

class SetServicePolicyRequest(_message.Message):
    __slots__ = ("service", "policy")
    SERVICE_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    service: str
    policy: _types_pb2.RetryPolicy
    def __init__(self, service: _Optional[str] = ..., policy: _Optional[_Union[_types_pb2.RetryPolicy, _Mapping]] = ...) -> None: ...

class SetServicePolicyResponse(_message.Message):
    __slots__ = ("policy", "effective_policy")
    POLICY_FIELD_NUMBER: _ClassVar[int]
    EFFECTIVE_POLICY_FIELD_NUMBER: _ClassVar[int]
    policy: _types_pb2.RetryPolicy
    effective_policy: _types_pb2.RetryPolicy
    def __init__(self, policy: _Optional[_Union[_types_pb2.RetryPolicy, _Mapping]] = ..., effective_policy: _Optional[_Union[_types_pb2.RetryPolicy, _Mapping]] = ...) -> None: ...

class SetServiceLimitsRequest(_message.Message):
    __slots__ = ("service", "limits")
    SERVICE_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    service: str
    limits: ServiceLimits
    def __init__(self, service: _Optional[str] = ..., limits: _Optional[_Union[ServiceLimits, _Mapping]] = ...) -> None: ...

class SetServiceLimitsResponse(_message.Message):
    __slots__ = ("limits",)
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    limits: ServiceLimits
    def __init__(self, limits: _Optional[_Union[ServiceLimits, _Mapping]] = ...) -> None: ...

class PurgeServiceRequest(_message.Message):
    __slots__ = ("service", "before", "max_buckets")
    SERVICE_FIELD_NUMBER: _ClassVar[int]
    BEFORE_FIELD_NUMBER: _ClassVar[int]
    MAX_BUCKETS_FIELD_NUMBER: _ClassVar[int]
    service: str
    before: _timestamp_pb2.Timestamp
    max_buckets: int
    def __init__(self, service: _Optional[str] = ..., before: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., max_buckets: _Optional[int] = ...) -> None: ...

class PurgeServiceResponse(_message.Message):
    __slots__ = ("cancelled", "buckets_deleted", "done", "buckets_kept", "before")
    CANCELLED_FIELD_NUMBER: _ClassVar[int]
    BUCKETS_DELETED_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    BUCKETS_KEPT_FIELD_NUMBER: _ClassVar[int]
    BEFORE_FIELD_NUMBER: _ClassVar[int]
    cancelled: int
    buckets_deleted: int
    done: bool
    buckets_kept: int
    before: _timestamp_pb2.Timestamp
    def __init__(self, cancelled: _Optional[int] = ..., buckets_deleted: _Optional[int] = ..., done: _Optional[bool] = ..., buckets_kept: _Optional[int] = ..., before: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class DeadLetter(_message.Message):
    __slots__ = ("service", "transaction_id", "attempt", "last_error", "dead_at", "redriven_at", "chain")
    SERVICE_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    DEAD_AT_FIELD_NUMBER: _ClassVar[int]
    REDRIVEN_AT_FIELD_NUMBER: _ClassVar[int]
    CHAIN_FIELD_NUMBER: _ClassVar[int]
    service: str
    transaction_id: str
    attempt: int
    last_error: str
    dead_at: _timestamp_pb2.Timestamp
    redriven_at: _timestamp_pb2.Timestamp
    chain: _types_pb2.CompensationChain
    def __init__(self, service: _Optional[str] = ..., transaction_id: _Optional[str] = ..., attempt: _Optional[int] = ..., last_error: _Optional[str] = ..., dead_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., redriven_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., chain: _Optional[_Union[_types_pb2.CompensationChain, _Mapping]] = ...) -> None: ...

class ListDeadLettersRequest(_message.Message):
    __slots__ = ("service", "to", "error_contains", "page_size", "page_token", "include_redriven")
    SERVICE_FIELD_NUMBER: _ClassVar[int]
    FROM_FIELD_NUMBER: _ClassVar[int]
    TO_FIELD_NUMBER: _ClassVar[int]
    ERROR_CONTAINS_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_REDRIVEN_FIELD_NUMBER: _ClassVar[int]
    service: str
    to: _timestamp_pb2.Timestamp
    error_contains: str
    page_size: int
    page_token: str
    include_redriven: bool
    def __init__(self, service: _Optional[str] = ..., to: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., error_contains: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., include_redriven: _Optional[bool] = ..., **kwargs) -> None: ...

class ListDeadLettersResponse(_message.Message):
    __slots__ = ("dead_letters", "next_page_token")
    DEAD_LETTERS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    dead_letters: _containers.RepeatedCompositeFieldContainer[DeadLetter]
    next_page_token: str
    def __init__(self, dead_letters: _Optional[_Iterable[_Union[DeadLetter, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class RedriveDeadLettersRequest(_message.Message):
    __slots__ = ("service", "to", "error_contains", "delay", "max_items", "max_per_second")
    SERVICE_FIELD_NUMBER: _ClassVar[int]
    FROM_FIELD_NUMBER: _ClassVar[int]
    TO_FIELD_NUMBER: _ClassVar[int]
    ERROR_CONTAINS_FIELD_NUMBER: _ClassVar[int]
    DELAY_FIELD_NUMBER: _ClassVar[int]
    MAX_ITEMS_FIELD_NUMBER: _ClassVar[int]
    MAX_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    service: str
    to: _timestamp_pb2.Timestamp
    error_contains: str
    delay: _duration_pb2.Duration
    max_items: int
    max_per_second: int
    def __init__(self, service: _Optional[str] = ..., to: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., error_contains: _Optional[str] = ..., delay: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., max_items: _Optional[int] = ..., max_per_second: _Optional[int] = ..., **kwargs) -> None: ...

class RedriveDeadLettersResponse(_message.Message):
    __slots__ = ("redriven", "skipped", "done")
    REDRIVEN_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    redriven: int
    skipped: int
    done: bool
    def __init__(self, redriven: _Optional[int] = ..., skipped: _Optional[int] = ..., done: _Optional[bool] = ...) -> None: ...

class PurgeDeadLettersRequest(_message.Message):
    __slots__ = ("service", "to")
    SERVICE_FIELD_NUMBER: _ClassVar[int]
    FROM_FIELD_NUMBER: _ClassVar[int]
    TO_FIELD_NUMBER: _ClassVar[int]
    service: str
    to: _timestamp_pb2.Timestamp
    def __init__(self, service: _Optional[str] = ..., to: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., **kwargs) -> None: ...

class PurgeDeadLettersResponse(_message.Message):
    __slots__ = ("purged",)
    PURGED_FIELD_NUMBER: _ClassVar[int]
    purged: int
    def __init__(self, purged: _Optional[int] = ...) -> None: ...

class InspectWindowRequest(_message.Message):
    __slots__ = ("day", "window")
    DAY_FIELD_NUMBER: _ClassVar[int]
    WINDOW_FIELD_NUMBER: _ClassVar[int]
    day: str
    window: int
    def __init__(self, day: _Optional[str] = ..., window: _Optional[int] = ...) -> None: ...

class InstanceEntry(_message.Message):
    __slots__ = ("instance_token", "service", "instance", "buckets")
    INSTANCE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    SERVICE_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_FIELD_NUMBER: _ClassVar[int]
    BUCKETS_FIELD_NUMBER: _ClassVar[int]
    instance_token: int
    service: str
    instance: str
    buckets: _containers.RepeatedCompositeFieldContainer[BucketEntry]
    def __init__(self, instance_token: _Optional[int] = ..., service: _Optional[str] = ..., instance: _Optional[str] = ..., buckets: _Optional[_Iterable[_Union[BucketEntry, _Mapping]]] = ...) -> None: ...

class BucketEntry(_message.Message):
    __slots__ = ("bucket", "pointers")
    BUCKET_FIELD_NUMBER: _ClassVar[int]
    POINTERS_FIELD_NUMBER: _ClassVar[int]
    bucket: int
    pointers: int
    def __init__(self, bucket: _Optional[int] = ..., pointers: _Optional[int] = ...) -> None: ...

class InspectWindowResponse(_message.Message):
    __slots__ = ("day_listed", "window_listed", "instances", "window_start", "window_end", "readable", "low_water", "window_seconds")
    DAY_LISTED_FIELD_NUMBER: _ClassVar[int]
    WINDOW_LISTED_FIELD_NUMBER: _ClassVar[int]
    INSTANCES_FIELD_NUMBER: _ClassVar[int]
    WINDOW_START_FIELD_NUMBER: _ClassVar[int]
    WINDOW_END_FIELD_NUMBER: _ClassVar[int]
    READABLE_FIELD_NUMBER: _ClassVar[int]
    LOW_WATER_FIELD_NUMBER: _ClassVar[int]
    WINDOW_SECONDS_FIELD_NUMBER: _ClassVar[int]
    day_listed: bool
    window_listed: bool
    instances: _containers.RepeatedCompositeFieldContainer[InstanceEntry]
    window_start: _timestamp_pb2.Timestamp
    window_end: _timestamp_pb2.Timestamp
    readable: bool
    low_water: int
    window_seconds: int
    def __init__(self, day_listed: _Optional[bool] = ..., window_listed: _Optional[bool] = ..., instances: _Optional[_Iterable[_Union[InstanceEntry, _Mapping]]] = ..., window_start: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., window_end: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., readable: _Optional[bool] = ..., low_water: _Optional[int] = ..., window_seconds: _Optional[int] = ...) -> None: ...

class PushTarget(_message.Message):
    __slots__ = ("url", "timeout", "headers", "signing_secrets", "max_concurrent", "updated_at")
    class HeadersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    URL_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    SIGNING_SECRETS_FIELD_NUMBER: _ClassVar[int]
    MAX_CONCURRENT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    url: str
    timeout: _duration_pb2.Duration
    headers: _containers.ScalarMap[str, str]
    signing_secrets: _containers.RepeatedScalarFieldContainer[str]
    max_concurrent: int
    updated_at: _timestamp_pb2.Timestamp
    def __init__(self, url: _Optional[str] = ..., timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., headers: _Optional[_Mapping[str, str]] = ..., signing_secrets: _Optional[_Iterable[str]] = ..., max_concurrent: _Optional[int] = ..., updated_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class SetPushTargetRequest(_message.Message):
    __slots__ = ("service", "target")
    SERVICE_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    service: str
    target: PushTarget
    def __init__(self, service: _Optional[str] = ..., target: _Optional[_Union[PushTarget, _Mapping]] = ...) -> None: ...

class SetPushTargetResponse(_message.Message):
    __slots__ = ("target",)
    TARGET_FIELD_NUMBER: _ClassVar[int]
    target: PushTarget
    def __init__(self, target: _Optional[_Union[PushTarget, _Mapping]] = ...) -> None: ...

class GetPushTargetRequest(_message.Message):
    __slots__ = ("service",)
    SERVICE_FIELD_NUMBER: _ClassVar[int]
    service: str
    def __init__(self, service: _Optional[str] = ...) -> None: ...

class ClearPushTargetRequest(_message.Message):
    __slots__ = ("service",)
    SERVICE_FIELD_NUMBER: _ClassVar[int]
    service: str
    def __init__(self, service: _Optional[str] = ...) -> None: ...

class ClearPushTargetResponse(_message.Message):
    __slots__ = ("cleared",)
    CLEARED_FIELD_NUMBER: _ClassVar[int]
    cleared: bool
    def __init__(self, cleared: _Optional[bool] = ...) -> None: ...

class HoldDependencyRequest(_message.Message):
    __slots__ = ("dependency", "duration", "reason")
    DEPENDENCY_FIELD_NUMBER: _ClassVar[int]
    DURATION_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    dependency: str
    duration: _duration_pb2.Duration
    reason: str
    def __init__(self, dependency: _Optional[str] = ..., duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., reason: _Optional[str] = ...) -> None: ...

class DependencyHoldInfo(_message.Message):
    __slots__ = ("dependency", "until", "reason", "held_at", "source")
    DEPENDENCY_FIELD_NUMBER: _ClassVar[int]
    UNTIL_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    HELD_AT_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    dependency: str
    until: _timestamp_pb2.Timestamp
    reason: str
    held_at: _timestamp_pb2.Timestamp
    source: str
    def __init__(self, dependency: _Optional[str] = ..., until: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., reason: _Optional[str] = ..., held_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., source: _Optional[str] = ...) -> None: ...

class ReleaseDependencyRequest(_message.Message):
    __slots__ = ("dependency",)
    DEPENDENCY_FIELD_NUMBER: _ClassVar[int]
    dependency: str
    def __init__(self, dependency: _Optional[str] = ...) -> None: ...

class ReleaseDependencyResponse(_message.Message):
    __slots__ = ("released",)
    RELEASED_FIELD_NUMBER: _ClassVar[int]
    released: bool
    def __init__(self, released: _Optional[bool] = ...) -> None: ...

class ListDependencyHoldsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListDependencyHoldsResponse(_message.Message):
    __slots__ = ("holds",)
    HOLDS_FIELD_NUMBER: _ClassVar[int]
    holds: _containers.RepeatedCompositeFieldContainer[DependencyHoldInfo]
    def __init__(self, holds: _Optional[_Iterable[_Union[DependencyHoldInfo, _Mapping]]] = ...) -> None: ...
