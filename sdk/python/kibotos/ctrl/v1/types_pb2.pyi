from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

COMPLETENESS_COMPLETE: Completeness
COMPLETENESS_PARTIAL: Completeness
COMPLETENESS_UNKNOWN: Completeness
COMPLETENESS_UNSPECIFIED: Completeness
DESCRIPTOR: _descriptor.FileDescriptor
EGRESS_OBSERVATION_KIND_AUTHENTICATION_FAILED: EgressObservationKind
EGRESS_OBSERVATION_KIND_ENDPOINT_UNREACHABLE: EgressObservationKind
EGRESS_OBSERVATION_KIND_HANDSHAKE_FAILED: EgressObservationKind
EGRESS_OBSERVATION_KIND_TLS_VERIFICATION_FAILED: EgressObservationKind
EGRESS_OBSERVATION_KIND_UDP_ASSOCIATION_FAILED: EgressObservationKind
EGRESS_OBSERVATION_KIND_UNSPECIFIED: EgressObservationKind
FAILURE_REASON_CANCELLED: FailureReason
FAILURE_REASON_CAPABILITY_UNAVAILABLE: FailureReason
FAILURE_REASON_CONFLICT: FailureReason
FAILURE_REASON_INTERNAL: FailureReason
FAILURE_REASON_INVALID_REQUEST: FailureReason
FAILURE_REASON_NOT_FOUND: FailureReason
FAILURE_REASON_PERMISSION_DENIED: FailureReason
FAILURE_REASON_PROTOCOL_INCOMPATIBLE: FailureReason
FAILURE_REASON_RESOURCE_EXHAUSTED: FailureReason
FAILURE_REASON_SESSION_EXPIRED: FailureReason
FAILURE_REASON_SESSION_REVOKED: FailureReason
FAILURE_REASON_TIMED_OUT: FailureReason
FAILURE_REASON_UNAUTHENTICATED: FailureReason
FAILURE_REASON_UNAVAILABLE: FailureReason
FAILURE_REASON_UNSPECIFIED: FailureReason
FAILURE_REASON_UNSUPPORTED: FailureReason
FAILURE_REASON_VOLUME_LOST: FailureReason
FAILURE_STAGE_APPLYING_NETWORK: FailureStage
FAILURE_STAGE_AUTHORIZING_DATA_PLANE: FailureStage
FAILURE_STAGE_CAPTURING_SCREEN: FailureStage
FAILURE_STAGE_CONNECTING_SERVICE: FailureStage
FAILURE_STAGE_CREATING: FailureStage
FAILURE_STAGE_CREATING_DIRECTORY: FailureStage
FAILURE_STAGE_CREATING_EXPOSURE: FailureStage
FAILURE_STAGE_CREATING_VOLUME: FailureStage
FAILURE_STAGE_DELETING: FailureStage
FAILURE_STAGE_DELETING_FILE: FailureStage
FAILURE_STAGE_DELETING_TRANSFER: FailureStage
FAILURE_STAGE_DELETING_VOLUME: FailureStage
FAILURE_STAGE_DELIVERING_INPUT: FailureStage
FAILURE_STAGE_EXPORTING_WORKSPACE: FailureStage
FAILURE_STAGE_IMPORTING_TRANSFER: FailureStage
FAILURE_STAGE_INSPECTING_FILE: FailureStage
FAILURE_STAGE_ISSUING_SESSION: FailureStage
FAILURE_STAGE_MOVING_FILE: FailureStage
FAILURE_STAGE_OBSERVING_CLEANUP: FailureStage
FAILURE_STAGE_PLACING: FailureStage
FAILURE_STAGE_READING_FILE: FailureStage
FAILURE_STAGE_READING_METRICS: FailureStage
FAILURE_STAGE_RESIZING_VOLUME: FailureStage
FAILURE_STAGE_RESIZING_WRITABLE_LAYER: FailureStage
FAILURE_STAGE_RESTORING_WORKSPACE: FailureStage
FAILURE_STAGE_REVOKING_EXPOSURE: FailureStage
FAILURE_STAGE_ROTATING_DATA_PLANE: FailureStage
FAILURE_STAGE_STARTING: FailureStage
FAILURE_STAGE_STARTING_PROCESS: FailureStage
FAILURE_STAGE_STOPPING: FailureStage
FAILURE_STAGE_STREAMING_PROCESS: FailureStage
FAILURE_STAGE_UNSPECIFIED: FailureStage
FAILURE_STAGE_USING_PROCESS: FailureStage
FAILURE_STAGE_USING_SERVICE: FailureStage
FAILURE_STAGE_VALIDATING: FailureStage
FAILURE_STAGE_WAITING_FOR_READINESS: FailureStage
FAILURE_STAGE_WATCHING_DIRECTORY: FailureStage
FAILURE_STAGE_WRITING_FILE: FailureStage
GUEST_CONDITION_RESPONDING: GuestCondition
GUEST_CONDITION_UNRESPONSIVE: GuestCondition
GUEST_CONDITION_UNSPECIFIED: GuestCondition
GUEST_MEMORY_CONDITION_NORMAL: GuestMemoryCondition
GUEST_MEMORY_CONDITION_SATURATED: GuestMemoryCondition
GUEST_MEMORY_CONDITION_UNSPECIFIED: GuestMemoryCondition
NETWORK_POLICY_MODE_DENY_ALL: NetworkPolicyMode
NETWORK_POLICY_MODE_PUBLIC_INTERNET: NetworkPolicyMode
NETWORK_POLICY_MODE_UNSPECIFIED: NetworkPolicyMode
REESTABLISH_REQUIREMENT_CREDENTIAL: ReestablishRequirement
REESTABLISH_REQUIREMENT_DATA_PLANE_SESSION: ReestablishRequirement
REESTABLISH_REQUIREMENT_LOGIN_STATE: ReestablishRequirement
REESTABLISH_REQUIREMENT_PROCESS: ReestablishRequirement
REESTABLISH_REQUIREMENT_UNSPECIFIED: ReestablishRequirement
RESOLVER_OBSERVATION_KIND_HTTP_ERROR_STATUS: ResolverObservationKind
RESOLVER_OBSERVATION_KIND_TLS_VERIFICATION_FAILED: ResolverObservationKind
RESOLVER_OBSERVATION_KIND_UNSPECIFIED: ResolverObservationKind
RESOLVER_OBSERVATION_KIND_UPSTREAM_TIMEOUT: ResolverObservationKind
RESOLVER_OBSERVATION_KIND_UPSTREAM_UNREACHABLE: ResolverObservationKind
RETENTION_AVAILABILITY_AVAILABLE: RetentionAvailability
RETENTION_AVAILABILITY_NOT_DECLARED: RetentionAvailability
RETENTION_AVAILABILITY_UNAVAILABLE: RetentionAvailability
RETENTION_AVAILABILITY_UNSPECIFIED: RetentionAvailability
RETENTION_CONTINUITY_CONTINUED: RetentionContinuity
RETENTION_CONTINUITY_RESET: RetentionContinuity
RETENTION_CONTINUITY_UNKNOWN: RetentionContinuity
RETENTION_CONTINUITY_UNSPECIFIED: RetentionContinuity
RETENTION_RESET_REASON_FIRST_START: RetentionResetReason
RETENTION_RESET_REASON_LAYER_UNAVAILABLE: RetentionResetReason
RETENTION_RESET_REASON_TEMPLATE_CHANGED: RetentionResetReason
RETENTION_RESET_REASON_UNSPECIFIED: RetentionResetReason
RETENTION_TIER_KIND_BEST_EFFORT: RetentionTierKind
RETENTION_TIER_KIND_NONE: RetentionTierKind
RETENTION_TIER_KIND_PROMISED: RetentionTierKind
RETENTION_TIER_KIND_UNSPECIFIED: RetentionTierKind
STOP_CAUSE_EXPIRED: StopCause
STOP_CAUSE_GUEST_SHUTDOWN: StopCause
STOP_CAUSE_HOST_MEMORY_EXHAUSTED: StopCause
STOP_CAUSE_REQUESTED: StopCause
STOP_CAUSE_UNSPECIFIED: StopCause
STOP_DURABILITY_CONFIRMED: StopDurability
STOP_DURABILITY_UNCONFIRMED: StopDurability
STOP_DURABILITY_UNSPECIFIED: StopDurability
TEMPLATE_DELIVERY_REASON_CAPABILITY_MISMATCH: TemplateDeliveryReason
TEMPLATE_DELIVERY_REASON_DISTRIBUTING: TemplateDeliveryReason
TEMPLATE_DELIVERY_REASON_NO_SUPPORTED_PATH: TemplateDeliveryReason
TEMPLATE_DELIVERY_REASON_OBSERVATION_STALE: TemplateDeliveryReason
TEMPLATE_DELIVERY_REASON_PREPARATION_FAILED: TemplateDeliveryReason
TEMPLATE_DELIVERY_REASON_UNSPECIFIED: TemplateDeliveryReason
TEMPLATE_DELIVERY_STATE_NOT_READY: TemplateDeliveryState
TEMPLATE_DELIVERY_STATE_READY: TemplateDeliveryState
TEMPLATE_DELIVERY_STATE_UNKNOWN: TemplateDeliveryState
TEMPLATE_DELIVERY_STATE_UNSPECIFIED: TemplateDeliveryState
TRANSFER_STATE_COMPLETE: TransferState
TRANSFER_STATE_DELETED: TransferState
TRANSFER_STATE_DELETING: TransferState
TRANSFER_STATE_EXPIRED: TransferState
TRANSFER_STATE_EXPORTING: TransferState
TRANSFER_STATE_FAILED: TransferState
TRANSFER_STATE_IMPORTED: TransferState
TRANSFER_STATE_IMPORTING: TransferState
TRANSFER_STATE_RESTORED: TransferState
TRANSFER_STATE_RESTORING: TransferState
TRANSFER_STATE_UNKNOWN: TransferState
TRANSFER_STATE_UNSPECIFIED: TransferState
VOLUME_CONDITION_DAMAGED: VolumeCondition
VOLUME_CONDITION_HEALTHY: VolumeCondition
VOLUME_CONDITION_UNSPECIFIED: VolumeCondition
VOLUME_STATE_ATTACHED: VolumeState
VOLUME_STATE_AVAILABLE: VolumeState
VOLUME_STATE_CREATING: VolumeState
VOLUME_STATE_DELETED: VolumeState
VOLUME_STATE_DELETING: VolumeState
VOLUME_STATE_FAILED: VolumeState
VOLUME_STATE_LOST: VolumeState
VOLUME_STATE_RESIZING: VolumeState
VOLUME_STATE_UNKNOWN: VolumeState
VOLUME_STATE_UNSPECIFIED: VolumeState
WORKSPACE_EXPIRATION_ACTION_DELETE: WorkspaceExpirationAction
WORKSPACE_EXPIRATION_ACTION_STOP: WorkspaceExpirationAction
WORKSPACE_EXPIRATION_ACTION_UNSPECIFIED: WorkspaceExpirationAction
WORKSPACE_STATE_AVAILABLE: WorkspaceState
WORKSPACE_STATE_CREATING: WorkspaceState
WORKSPACE_STATE_DELETED: WorkspaceState
WORKSPACE_STATE_DELETING: WorkspaceState
WORKSPACE_STATE_FAILED: WorkspaceState
WORKSPACE_STATE_STARTING: WorkspaceState
WORKSPACE_STATE_STOPPED: WorkspaceState
WORKSPACE_STATE_STOPPING: WorkspaceState
WORKSPACE_STATE_UNKNOWN: WorkspaceState
WORKSPACE_STATE_UNSPECIFIED: WorkspaceState
WORKSPACE_VOLUME_MODE_BOUND: WorkspaceVolumeMode
WORKSPACE_VOLUME_MODE_NEW: WorkspaceVolumeMode
WORKSPACE_VOLUME_MODE_NONE: WorkspaceVolumeMode
WORKSPACE_VOLUME_MODE_UNSPECIFIED: WorkspaceVolumeMode

class CapabilityRequirements(_message.Message):
    __slots__ = ["required"]
    REQUIRED_FIELD_NUMBER: _ClassVar[int]
    required: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, required: _Optional[_Iterable[str]] = ...) -> None: ...

class CommandMetadata(_message.Message):
    __slots__ = ["command_id"]
    COMMAND_ID_FIELD_NUMBER: _ClassVar[int]
    command_id: str
    def __init__(self, command_id: _Optional[str] = ...) -> None: ...

class EgressObservation(_message.Message):
    __slots__ = ["egress_id", "failing_since", "kind", "message", "observed_at"]
    EGRESS_ID_FIELD_NUMBER: _ClassVar[int]
    FAILING_SINCE_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    OBSERVED_AT_FIELD_NUMBER: _ClassVar[int]
    egress_id: str
    failing_since: _timestamp_pb2.Timestamp
    kind: EgressObservationKind
    message: str
    observed_at: _timestamp_pb2.Timestamp
    def __init__(self, egress_id: _Optional[str] = ..., kind: _Optional[_Union[EgressObservationKind, str]] = ..., failing_since: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., observed_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., message: _Optional[str] = ...) -> None: ...

class ErrorDetail(_message.Message):
    __slots__ = ["command_id", "field", "observed_volume", "observed_workspace", "reason", "retryable", "stage", "workspace_ids"]
    COMMAND_ID_FIELD_NUMBER: _ClassVar[int]
    FIELD_FIELD_NUMBER: _ClassVar[int]
    OBSERVED_VOLUME_FIELD_NUMBER: _ClassVar[int]
    OBSERVED_WORKSPACE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    RETRYABLE_FIELD_NUMBER: _ClassVar[int]
    STAGE_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_IDS_FIELD_NUMBER: _ClassVar[int]
    command_id: str
    field: str
    observed_volume: Volume
    observed_workspace: Workspace
    reason: FailureReason
    retryable: bool
    stage: FailureStage
    workspace_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, stage: _Optional[_Union[FailureStage, str]] = ..., reason: _Optional[_Union[FailureReason, str]] = ..., retryable: bool = ..., field: _Optional[str] = ..., command_id: _Optional[str] = ..., observed_workspace: _Optional[_Union[Workspace, _Mapping]] = ..., observed_volume: _Optional[_Union[Volume, _Mapping]] = ..., workspace_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class GuestMemoryKill(_message.Message):
    __slots__ = ["command", "full_stall_permille", "killed_at", "pid", "rss_bytes", "saturated_for", "window"]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    FULL_STALL_PERMILLE_FIELD_NUMBER: _ClassVar[int]
    KILLED_AT_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    RSS_BYTES_FIELD_NUMBER: _ClassVar[int]
    SATURATED_FOR_FIELD_NUMBER: _ClassVar[int]
    WINDOW_FIELD_NUMBER: _ClassVar[int]
    command: str
    full_stall_permille: int
    killed_at: _timestamp_pb2.Timestamp
    pid: int
    rss_bytes: int
    saturated_for: _duration_pb2.Duration
    window: _duration_pb2.Duration
    def __init__(self, killed_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., pid: _Optional[int] = ..., command: _Optional[str] = ..., rss_bytes: _Optional[int] = ..., full_stall_permille: _Optional[int] = ..., window: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., saturated_for: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class GuestObservation(_message.Message):
    __slots__ = ["condition", "error", "last_reset_at", "latest_memory_kill", "memory_condition", "memory_kill_count", "memory_saturated_since", "observed_at", "rebooted", "restart_count", "unresponsive_since"]
    CONDITION_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    LAST_RESET_AT_FIELD_NUMBER: _ClassVar[int]
    LATEST_MEMORY_KILL_FIELD_NUMBER: _ClassVar[int]
    MEMORY_CONDITION_FIELD_NUMBER: _ClassVar[int]
    MEMORY_KILL_COUNT_FIELD_NUMBER: _ClassVar[int]
    MEMORY_SATURATED_SINCE_FIELD_NUMBER: _ClassVar[int]
    OBSERVED_AT_FIELD_NUMBER: _ClassVar[int]
    REBOOTED_FIELD_NUMBER: _ClassVar[int]
    RESTART_COUNT_FIELD_NUMBER: _ClassVar[int]
    UNRESPONSIVE_SINCE_FIELD_NUMBER: _ClassVar[int]
    condition: GuestCondition
    error: str
    last_reset_at: _timestamp_pb2.Timestamp
    latest_memory_kill: GuestMemoryKill
    memory_condition: GuestMemoryCondition
    memory_kill_count: int
    memory_saturated_since: _timestamp_pb2.Timestamp
    observed_at: _timestamp_pb2.Timestamp
    rebooted: bool
    restart_count: int
    unresponsive_since: _timestamp_pb2.Timestamp
    def __init__(self, observed_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., condition: _Optional[_Union[GuestCondition, str]] = ..., unresponsive_since: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., error: _Optional[str] = ..., rebooted: bool = ..., memory_condition: _Optional[_Union[GuestMemoryCondition, str]] = ..., memory_saturated_since: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., memory_kill_count: _Optional[int] = ..., latest_memory_kill: _Optional[_Union[GuestMemoryKill, _Mapping]] = ..., restart_count: _Optional[int] = ..., last_reset_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class NetworkPolicy(_message.Message):
    __slots__ = ["allow", "deny", "egresses", "mode", "resolvers", "revision"]
    ALLOW_FIELD_NUMBER: _ClassVar[int]
    DENY_FIELD_NUMBER: _ClassVar[int]
    EGRESSES_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    RESOLVERS_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    allow: _containers.RepeatedScalarFieldContainer[str]
    deny: _containers.RepeatedScalarFieldContainer[str]
    egresses: _containers.RepeatedCompositeFieldContainer[NetworkPolicyEgress]
    mode: NetworkPolicyMode
    resolvers: _containers.RepeatedCompositeFieldContainer[NetworkPolicyResolver]
    revision: int
    def __init__(self, mode: _Optional[_Union[NetworkPolicyMode, str]] = ..., revision: _Optional[int] = ..., allow: _Optional[_Iterable[str]] = ..., deny: _Optional[_Iterable[str]] = ..., egresses: _Optional[_Iterable[_Union[NetworkPolicyEgress, _Mapping]]] = ..., resolvers: _Optional[_Iterable[_Union[NetworkPolicyResolver, _Mapping]]] = ...) -> None: ...

class NetworkPolicyEgress(_message.Message):
    __slots__ = ["destinations", "egress_id"]
    DESTINATIONS_FIELD_NUMBER: _ClassVar[int]
    EGRESS_ID_FIELD_NUMBER: _ClassVar[int]
    destinations: _containers.RepeatedScalarFieldContainer[str]
    egress_id: str
    def __init__(self, egress_id: _Optional[str] = ..., destinations: _Optional[_Iterable[str]] = ...) -> None: ...

class NetworkPolicyEgressStatus(_message.Message):
    __slots__ = ["applied_revision", "draining_revision", "egress_id"]
    APPLIED_REVISION_FIELD_NUMBER: _ClassVar[int]
    DRAINING_REVISION_FIELD_NUMBER: _ClassVar[int]
    EGRESS_ID_FIELD_NUMBER: _ClassVar[int]
    applied_revision: int
    draining_revision: int
    egress_id: str
    def __init__(self, egress_id: _Optional[str] = ..., applied_revision: _Optional[int] = ..., draining_revision: _Optional[int] = ...) -> None: ...

class NetworkPolicyResolver(_message.Message):
    __slots__ = ["path", "resolver_id"]
    PATH_FIELD_NUMBER: _ClassVar[int]
    RESOLVER_ID_FIELD_NUMBER: _ClassVar[int]
    path: ResolverPath
    resolver_id: str
    def __init__(self, resolver_id: _Optional[str] = ..., path: _Optional[_Union[ResolverPath, _Mapping]] = ...) -> None: ...

class NetworkPolicyResolverStatus(_message.Message):
    __slots__ = ["applied_revision", "path", "resolver_id"]
    APPLIED_REVISION_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    RESOLVER_ID_FIELD_NUMBER: _ClassVar[int]
    applied_revision: int
    path: ResolverPath
    resolver_id: str
    def __init__(self, resolver_id: _Optional[str] = ..., path: _Optional[_Union[ResolverPath, _Mapping]] = ..., applied_revision: _Optional[int] = ...) -> None: ...

class NetworkPolicyStatus(_message.Message):
    __slots__ = ["applied_at", "applied_revision", "draining_revision", "egresses", "resolvers"]
    APPLIED_AT_FIELD_NUMBER: _ClassVar[int]
    APPLIED_REVISION_FIELD_NUMBER: _ClassVar[int]
    DRAINING_REVISION_FIELD_NUMBER: _ClassVar[int]
    EGRESSES_FIELD_NUMBER: _ClassVar[int]
    RESOLVERS_FIELD_NUMBER: _ClassVar[int]
    applied_at: _timestamp_pb2.Timestamp
    applied_revision: int
    draining_revision: int
    egresses: _containers.RepeatedCompositeFieldContainer[NetworkPolicyEgressStatus]
    resolvers: _containers.RepeatedCompositeFieldContainer[NetworkPolicyResolverStatus]
    def __init__(self, applied_revision: _Optional[int] = ..., applied_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., egresses: _Optional[_Iterable[_Union[NetworkPolicyEgressStatus, _Mapping]]] = ..., draining_revision: _Optional[int] = ..., resolvers: _Optional[_Iterable[_Union[NetworkPolicyResolverStatus, _Mapping]]] = ...) -> None: ...

class ResolverDirectPath(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class ResolverObservation(_message.Message):
    __slots__ = ["failing_since", "kind", "message", "observed_at", "path", "resolver_id"]
    FAILING_SINCE_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    OBSERVED_AT_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    RESOLVER_ID_FIELD_NUMBER: _ClassVar[int]
    failing_since: _timestamp_pb2.Timestamp
    kind: ResolverObservationKind
    message: str
    observed_at: _timestamp_pb2.Timestamp
    path: ResolverPath
    resolver_id: str
    def __init__(self, resolver_id: _Optional[str] = ..., path: _Optional[_Union[ResolverPath, _Mapping]] = ..., kind: _Optional[_Union[ResolverObservationKind, str]] = ..., failing_since: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., observed_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., message: _Optional[str] = ...) -> None: ...

class ResolverPath(_message.Message):
    __slots__ = ["direct", "egress_id"]
    DIRECT_FIELD_NUMBER: _ClassVar[int]
    EGRESS_ID_FIELD_NUMBER: _ClassVar[int]
    direct: ResolverDirectPath
    egress_id: str
    def __init__(self, direct: _Optional[_Union[ResolverDirectPath, _Mapping]] = ..., egress_id: _Optional[str] = ...) -> None: ...

class ResourceRequest(_message.Message):
    __slots__ = ["cpu_millis", "memory_bytes", "writable_layer_capacity_bytes"]
    CPU_MILLIS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    WRITABLE_LAYER_CAPACITY_BYTES_FIELD_NUMBER: _ClassVar[int]
    cpu_millis: int
    memory_bytes: int
    writable_layer_capacity_bytes: int
    def __init__(self, cpu_millis: _Optional[int] = ..., memory_bytes: _Optional[int] = ..., writable_layer_capacity_bytes: _Optional[int] = ...) -> None: ...

class RetentionTier(_message.Message):
    __slots__ = ["availability", "capacity_bytes", "continuity", "kind", "paths", "reset_reason"]
    AVAILABILITY_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_BYTES_FIELD_NUMBER: _ClassVar[int]
    CONTINUITY_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    PATHS_FIELD_NUMBER: _ClassVar[int]
    RESET_REASON_FIELD_NUMBER: _ClassVar[int]
    availability: RetentionAvailability
    capacity_bytes: int
    continuity: RetentionContinuity
    kind: RetentionTierKind
    paths: _containers.RepeatedScalarFieldContainer[str]
    reset_reason: RetentionResetReason
    def __init__(self, kind: _Optional[_Union[RetentionTierKind, str]] = ..., paths: _Optional[_Iterable[str]] = ..., availability: _Optional[_Union[RetentionAvailability, str]] = ..., continuity: _Optional[_Union[RetentionContinuity, str]] = ..., reset_reason: _Optional[_Union[RetentionResetReason, str]] = ..., capacity_bytes: _Optional[int] = ...) -> None: ...

class TemplateDeliveryObservation(_message.Message):
    __slots__ = ["delivered_bytes", "message", "observed_at", "reason", "started_at", "state", "total_bytes"]
    DELIVERED_BYTES_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    OBSERVED_AT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    delivered_bytes: int
    message: str
    observed_at: _timestamp_pb2.Timestamp
    reason: TemplateDeliveryReason
    started_at: _timestamp_pb2.Timestamp
    state: TemplateDeliveryState
    total_bytes: int
    def __init__(self, state: _Optional[_Union[TemplateDeliveryState, str]] = ..., reason: _Optional[_Union[TemplateDeliveryReason, str]] = ..., delivered_bytes: _Optional[int] = ..., total_bytes: _Optional[int] = ..., started_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., observed_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., message: _Optional[str] = ...) -> None: ...

class TemplateRef(_message.Message):
    __slots__ = ["revision", "template"]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    TEMPLATE_FIELD_NUMBER: _ClassVar[int]
    revision: str
    template: str
    def __init__(self, template: _Optional[str] = ..., revision: _Optional[str] = ...) -> None: ...

class TemplateSelector(_message.Message):
    __slots__ = ["revision", "template"]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    TEMPLATE_FIELD_NUMBER: _ClassVar[int]
    revision: str
    template: str
    def __init__(self, template: _Optional[str] = ..., revision: _Optional[str] = ...) -> None: ...

class Transfer(_message.Message):
    __slots__ = ["created_at", "done_bytes", "expires_at", "failure", "labels", "manifest", "restored_at", "state", "total_bytes", "transfer_id", "updated_at"]
    class LabelsEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    DONE_BYTES_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    FAILURE_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    MANIFEST_FIELD_NUMBER: _ClassVar[int]
    RESTORED_AT_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    TRANSFER_ID_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    created_at: _timestamp_pb2.Timestamp
    done_bytes: int
    expires_at: _timestamp_pb2.Timestamp
    failure: TransferFailure
    labels: _containers.ScalarMap[str, str]
    manifest: TransferManifest
    restored_at: _timestamp_pb2.Timestamp
    state: TransferState
    total_bytes: int
    transfer_id: str
    updated_at: _timestamp_pb2.Timestamp
    def __init__(self, transfer_id: _Optional[str] = ..., state: _Optional[_Union[TransferState, str]] = ..., manifest: _Optional[_Union[TransferManifest, _Mapping]] = ..., failure: _Optional[_Union[TransferFailure, _Mapping]] = ..., created_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., updated_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., expires_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., done_bytes: _Optional[int] = ..., total_bytes: _Optional[int] = ..., labels: _Optional[_Mapping[str, str]] = ..., restored_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class TransferFailure(_message.Message):
    __slots__ = ["failed_at", "message", "reason", "retryable", "stage"]
    FAILED_AT_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    RETRYABLE_FIELD_NUMBER: _ClassVar[int]
    STAGE_FIELD_NUMBER: _ClassVar[int]
    failed_at: _timestamp_pb2.Timestamp
    message: str
    reason: FailureReason
    retryable: bool
    stage: FailureStage
    def __init__(self, stage: _Optional[_Union[FailureStage, str]] = ..., reason: _Optional[_Union[FailureReason, str]] = ..., retryable: bool = ..., message: _Optional[str] = ..., failed_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class TransferManifest(_message.Message):
    __slots__ = ["completeness", "created_at", "digest", "resources", "size_bytes", "source_volume_id", "source_workspace_id", "template", "volume_capacity_bytes"]
    COMPLETENESS_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    SOURCE_VOLUME_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    TEMPLATE_FIELD_NUMBER: _ClassVar[int]
    VOLUME_CAPACITY_BYTES_FIELD_NUMBER: _ClassVar[int]
    completeness: Completeness
    created_at: _timestamp_pb2.Timestamp
    digest: str
    resources: ResourceRequest
    size_bytes: int
    source_volume_id: str
    source_workspace_id: str
    template: TemplateRef
    volume_capacity_bytes: int
    def __init__(self, source_workspace_id: _Optional[str] = ..., source_volume_id: _Optional[str] = ..., template: _Optional[_Union[TemplateRef, _Mapping]] = ..., resources: _Optional[_Union[ResourceRequest, _Mapping]] = ..., volume_capacity_bytes: _Optional[int] = ..., size_bytes: _Optional[int] = ..., completeness: _Optional[_Union[Completeness, str]] = ..., digest: _Optional[str] = ..., created_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class Volume(_message.Message):
    __slots__ = ["annotations", "annotations_revision", "bound_workspace_id", "created_at", "failure", "labels", "labels_revision", "observation", "spec", "state", "updated_at", "volume_id"]
    class AnnotationsEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class LabelsEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ANNOTATIONS_FIELD_NUMBER: _ClassVar[int]
    ANNOTATIONS_REVISION_FIELD_NUMBER: _ClassVar[int]
    BOUND_WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    FAILURE_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    LABELS_REVISION_FIELD_NUMBER: _ClassVar[int]
    OBSERVATION_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    VOLUME_ID_FIELD_NUMBER: _ClassVar[int]
    annotations: _containers.ScalarMap[str, str]
    annotations_revision: int
    bound_workspace_id: str
    created_at: _timestamp_pb2.Timestamp
    failure: VolumeFailure
    labels: _containers.ScalarMap[str, str]
    labels_revision: int
    observation: VolumeObservation
    spec: VolumeSpec
    state: VolumeState
    updated_at: _timestamp_pb2.Timestamp
    volume_id: str
    def __init__(self, volume_id: _Optional[str] = ..., spec: _Optional[_Union[VolumeSpec, _Mapping]] = ..., state: _Optional[_Union[VolumeState, str]] = ..., failure: _Optional[_Union[VolumeFailure, _Mapping]] = ..., created_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., updated_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., bound_workspace_id: _Optional[str] = ..., annotations: _Optional[_Mapping[str, str]] = ..., labels: _Optional[_Mapping[str, str]] = ..., labels_revision: _Optional[int] = ..., annotations_revision: _Optional[int] = ..., observation: _Optional[_Union[VolumeObservation, _Mapping]] = ...) -> None: ...

class VolumeFailure(_message.Message):
    __slots__ = ["command_id", "failed_at", "message", "reason", "retryable", "stage"]
    COMMAND_ID_FIELD_NUMBER: _ClassVar[int]
    FAILED_AT_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    RETRYABLE_FIELD_NUMBER: _ClassVar[int]
    STAGE_FIELD_NUMBER: _ClassVar[int]
    command_id: str
    failed_at: _timestamp_pb2.Timestamp
    message: str
    reason: FailureReason
    retryable: bool
    stage: FailureStage
    def __init__(self, stage: _Optional[_Union[FailureStage, str]] = ..., reason: _Optional[_Union[FailureReason, str]] = ..., retryable: bool = ..., message: _Optional[str] = ..., failed_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., command_id: _Optional[str] = ...) -> None: ...

class VolumeObservation(_message.Message):
    __slots__ = ["capacity_bytes", "condition", "message", "observed_at", "used_bytes"]
    CAPACITY_BYTES_FIELD_NUMBER: _ClassVar[int]
    CONDITION_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    OBSERVED_AT_FIELD_NUMBER: _ClassVar[int]
    USED_BYTES_FIELD_NUMBER: _ClassVar[int]
    capacity_bytes: int
    condition: VolumeCondition
    message: str
    observed_at: _timestamp_pb2.Timestamp
    used_bytes: int
    def __init__(self, condition: _Optional[_Union[VolumeCondition, str]] = ..., used_bytes: _Optional[int] = ..., capacity_bytes: _Optional[int] = ..., observed_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., message: _Optional[str] = ...) -> None: ...

class VolumeSpec(_message.Message):
    __slots__ = ["capacity_bytes", "storage_pool"]
    CAPACITY_BYTES_FIELD_NUMBER: _ClassVar[int]
    STORAGE_POOL_FIELD_NUMBER: _ClassVar[int]
    capacity_bytes: int
    storage_pool: str
    def __init__(self, storage_pool: _Optional[str] = ..., capacity_bytes: _Optional[int] = ...) -> None: ...

class Workspace(_message.Message):
    __slots__ = ["annotations", "annotations_revision", "created_at", "delivery", "egress_observations", "expiration", "failure", "generation", "guest_observation", "labels", "labels_revision", "last_stop", "network_policy_status", "persistent_paths", "reestablish", "resolver_observations", "retention_tiers", "spec", "state", "updated_at", "workspace_id"]
    class AnnotationsEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class LabelsEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ANNOTATIONS_FIELD_NUMBER: _ClassVar[int]
    ANNOTATIONS_REVISION_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    DELIVERY_FIELD_NUMBER: _ClassVar[int]
    EGRESS_OBSERVATIONS_FIELD_NUMBER: _ClassVar[int]
    EXPIRATION_FIELD_NUMBER: _ClassVar[int]
    FAILURE_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    GUEST_OBSERVATION_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    LABELS_REVISION_FIELD_NUMBER: _ClassVar[int]
    LAST_STOP_FIELD_NUMBER: _ClassVar[int]
    NETWORK_POLICY_STATUS_FIELD_NUMBER: _ClassVar[int]
    PERSISTENT_PATHS_FIELD_NUMBER: _ClassVar[int]
    REESTABLISH_FIELD_NUMBER: _ClassVar[int]
    RESOLVER_OBSERVATIONS_FIELD_NUMBER: _ClassVar[int]
    RETENTION_TIERS_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    annotations: _containers.ScalarMap[str, str]
    annotations_revision: int
    created_at: _timestamp_pb2.Timestamp
    delivery: TemplateDeliveryObservation
    egress_observations: _containers.RepeatedCompositeFieldContainer[EgressObservation]
    expiration: WorkspaceExpiration
    failure: WorkspaceFailure
    generation: int
    guest_observation: GuestObservation
    labels: _containers.ScalarMap[str, str]
    labels_revision: int
    last_stop: WorkspaceStop
    network_policy_status: NetworkPolicyStatus
    persistent_paths: _containers.RepeatedScalarFieldContainer[str]
    reestablish: _containers.RepeatedScalarFieldContainer[ReestablishRequirement]
    resolver_observations: _containers.RepeatedCompositeFieldContainer[ResolverObservation]
    retention_tiers: _containers.RepeatedCompositeFieldContainer[RetentionTier]
    spec: WorkspaceSpec
    state: WorkspaceState
    updated_at: _timestamp_pb2.Timestamp
    workspace_id: str
    def __init__(self, workspace_id: _Optional[str] = ..., spec: _Optional[_Union[WorkspaceSpec, _Mapping]] = ..., state: _Optional[_Union[WorkspaceState, str]] = ..., failure: _Optional[_Union[WorkspaceFailure, _Mapping]] = ..., created_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., updated_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., persistent_paths: _Optional[_Iterable[str]] = ..., generation: _Optional[int] = ..., retention_tiers: _Optional[_Iterable[_Union[RetentionTier, _Mapping]]] = ..., delivery: _Optional[_Union[TemplateDeliveryObservation, _Mapping]] = ..., network_policy_status: _Optional[_Union[NetworkPolicyStatus, _Mapping]] = ..., expiration: _Optional[_Union[WorkspaceExpiration, _Mapping]] = ..., annotations: _Optional[_Mapping[str, str]] = ..., labels: _Optional[_Mapping[str, str]] = ..., labels_revision: _Optional[int] = ..., annotations_revision: _Optional[int] = ..., guest_observation: _Optional[_Union[GuestObservation, _Mapping]] = ..., last_stop: _Optional[_Union[WorkspaceStop, _Mapping]] = ..., egress_observations: _Optional[_Iterable[_Union[EgressObservation, _Mapping]]] = ..., resolver_observations: _Optional[_Iterable[_Union[ResolverObservation, _Mapping]]] = ..., reestablish: _Optional[_Iterable[_Union[ReestablishRequirement, str]]] = ...) -> None: ...

class WorkspaceCreateSpec(_message.Message):
    __slots__ = ["annotations", "capabilities", "expiration", "labels", "network_policy", "platform_key", "resources", "template", "volume"]
    class AnnotationsEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class LabelsEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ANNOTATIONS_FIELD_NUMBER: _ClassVar[int]
    CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    EXPIRATION_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    NETWORK_POLICY_FIELD_NUMBER: _ClassVar[int]
    PLATFORM_KEY_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    TEMPLATE_FIELD_NUMBER: _ClassVar[int]
    VOLUME_FIELD_NUMBER: _ClassVar[int]
    annotations: _containers.ScalarMap[str, str]
    capabilities: CapabilityRequirements
    expiration: WorkspaceExpirationPolicy
    labels: _containers.ScalarMap[str, str]
    network_policy: NetworkPolicy
    platform_key: str
    resources: ResourceRequest
    template: TemplateSelector
    volume: WorkspaceVolumeBinding
    def __init__(self, template: _Optional[_Union[TemplateSelector, _Mapping]] = ..., resources: _Optional[_Union[ResourceRequest, _Mapping]] = ..., volume: _Optional[_Union[WorkspaceVolumeBinding, _Mapping]] = ..., capabilities: _Optional[_Union[CapabilityRequirements, _Mapping]] = ..., platform_key: _Optional[str] = ..., network_policy: _Optional[_Union[NetworkPolicy, _Mapping]] = ..., expiration: _Optional[_Union[WorkspaceExpirationPolicy, _Mapping]] = ..., labels: _Optional[_Mapping[str, str]] = ..., annotations: _Optional[_Mapping[str, str]] = ...) -> None: ...

class WorkspaceExpiration(_message.Message):
    __slots__ = ["policy", "revision"]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    policy: WorkspaceExpirationPolicy
    revision: int
    def __init__(self, policy: _Optional[_Union[WorkspaceExpirationPolicy, _Mapping]] = ..., revision: _Optional[int] = ...) -> None: ...

class WorkspaceExpirationChange(_message.Message):
    __slots__ = ["clear", "set"]
    CLEAR_FIELD_NUMBER: _ClassVar[int]
    SET_FIELD_NUMBER: _ClassVar[int]
    clear: bool
    set: WorkspaceExpirationPolicy
    def __init__(self, set: _Optional[_Union[WorkspaceExpirationPolicy, _Mapping]] = ..., clear: bool = ...) -> None: ...

class WorkspaceExpirationPolicy(_message.Message):
    __slots__ = ["action", "deadline"]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    action: WorkspaceExpirationAction
    deadline: _timestamp_pb2.Timestamp
    def __init__(self, action: _Optional[_Union[WorkspaceExpirationAction, str]] = ..., deadline: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class WorkspaceFailure(_message.Message):
    __slots__ = ["command_id", "failed_at", "message", "reason", "retryable", "stage"]
    COMMAND_ID_FIELD_NUMBER: _ClassVar[int]
    FAILED_AT_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    RETRYABLE_FIELD_NUMBER: _ClassVar[int]
    STAGE_FIELD_NUMBER: _ClassVar[int]
    command_id: str
    failed_at: _timestamp_pb2.Timestamp
    message: str
    reason: FailureReason
    retryable: bool
    stage: FailureStage
    def __init__(self, stage: _Optional[_Union[FailureStage, str]] = ..., reason: _Optional[_Union[FailureReason, str]] = ..., retryable: bool = ..., message: _Optional[str] = ..., failed_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., command_id: _Optional[str] = ...) -> None: ...

class WorkspaceSpec(_message.Message):
    __slots__ = ["binding_revision", "capabilities", "launch_binding_version", "launch_ref", "network_policy", "resources", "resources_revision", "template", "volume"]
    BINDING_REVISION_FIELD_NUMBER: _ClassVar[int]
    CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    LAUNCH_BINDING_VERSION_FIELD_NUMBER: _ClassVar[int]
    LAUNCH_REF_FIELD_NUMBER: _ClassVar[int]
    NETWORK_POLICY_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_REVISION_FIELD_NUMBER: _ClassVar[int]
    TEMPLATE_FIELD_NUMBER: _ClassVar[int]
    VOLUME_FIELD_NUMBER: _ClassVar[int]
    binding_revision: int
    capabilities: CapabilityRequirements
    launch_binding_version: int
    launch_ref: str
    network_policy: NetworkPolicy
    resources: ResourceRequest
    resources_revision: int
    template: TemplateRef
    volume: WorkspaceVolumeBinding
    def __init__(self, template: _Optional[_Union[TemplateRef, _Mapping]] = ..., resources: _Optional[_Union[ResourceRequest, _Mapping]] = ..., volume: _Optional[_Union[WorkspaceVolumeBinding, _Mapping]] = ..., capabilities: _Optional[_Union[CapabilityRequirements, _Mapping]] = ..., launch_ref: _Optional[str] = ..., network_policy: _Optional[_Union[NetworkPolicy, _Mapping]] = ..., resources_revision: _Optional[int] = ..., launch_binding_version: _Optional[int] = ..., binding_revision: _Optional[int] = ...) -> None: ...

class WorkspaceStop(_message.Message):
    __slots__ = ["cause", "command_id", "completed_at", "durability", "force", "requested_at"]
    CAUSE_FIELD_NUMBER: _ClassVar[int]
    COMMAND_ID_FIELD_NUMBER: _ClassVar[int]
    COMPLETED_AT_FIELD_NUMBER: _ClassVar[int]
    DURABILITY_FIELD_NUMBER: _ClassVar[int]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    REQUESTED_AT_FIELD_NUMBER: _ClassVar[int]
    cause: StopCause
    command_id: str
    completed_at: _timestamp_pb2.Timestamp
    durability: StopDurability
    force: bool
    requested_at: _timestamp_pb2.Timestamp
    def __init__(self, cause: _Optional[_Union[StopCause, str]] = ..., force: bool = ..., durability: _Optional[_Union[StopDurability, str]] = ..., command_id: _Optional[str] = ..., requested_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., completed_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class WorkspaceVolumeBinding(_message.Message):
    __slots__ = ["delete_with_workspace", "mode", "mount_path", "new_volume", "volume_id"]
    DELETE_WITH_WORKSPACE_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    MOUNT_PATH_FIELD_NUMBER: _ClassVar[int]
    NEW_VOLUME_FIELD_NUMBER: _ClassVar[int]
    VOLUME_ID_FIELD_NUMBER: _ClassVar[int]
    delete_with_workspace: bool
    mode: WorkspaceVolumeMode
    mount_path: str
    new_volume: VolumeSpec
    volume_id: str
    def __init__(self, volume_id: _Optional[str] = ..., mode: _Optional[_Union[WorkspaceVolumeMode, str]] = ..., mount_path: _Optional[str] = ..., delete_with_workspace: bool = ..., new_volume: _Optional[_Union[VolumeSpec, _Mapping]] = ...) -> None: ...

class WorkspaceState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class GuestCondition(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class GuestMemoryCondition(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class VolumeCondition(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class VolumeState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class Completeness(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class TemplateDeliveryState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class TemplateDeliveryReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class TransferState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class StopDurability(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class StopCause(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class RetentionTierKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class RetentionAvailability(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class RetentionContinuity(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class RetentionResetReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class ReestablishRequirement(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class FailureReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class FailureStage(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class WorkspaceVolumeMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class NetworkPolicyMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class EgressObservationKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class ResolverObservationKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class WorkspaceExpirationAction(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
