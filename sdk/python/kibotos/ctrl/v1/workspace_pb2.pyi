from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from kibotos.ctrl.v1 import types_pb2 as _types_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor
STOP_MODE_FORCE: StopMode
STOP_MODE_NORMAL: StopMode
STOP_MODE_UNSPECIFIED: StopMode
WORKSPACE_COMMAND_KIND_CREATE: WorkspaceCommandKind
WORKSPACE_COMMAND_KIND_DELETE: WorkspaceCommandKind
WORKSPACE_COMMAND_KIND_EXPORT: WorkspaceCommandKind
WORKSPACE_COMMAND_KIND_MOVE_WRITABLE_LAYER: WorkspaceCommandKind
WORKSPACE_COMMAND_KIND_RESIZE_WRITABLE_LAYER: WorkspaceCommandKind
WORKSPACE_COMMAND_KIND_RESTORE: WorkspaceCommandKind
WORKSPACE_COMMAND_KIND_START: WorkspaceCommandKind
WORKSPACE_COMMAND_KIND_STOP: WorkspaceCommandKind
WORKSPACE_COMMAND_KIND_UNSPECIFIED: WorkspaceCommandKind
WORKSPACE_COMMAND_KIND_UPDATE_ANNOTATIONS: WorkspaceCommandKind
WORKSPACE_COMMAND_KIND_UPDATE_EXPIRATION: WorkspaceCommandKind
WORKSPACE_COMMAND_KIND_UPDATE_LABELS: WorkspaceCommandKind
WORKSPACE_COMMAND_KIND_UPDATE_MEMORY: WorkspaceCommandKind
WORKSPACE_COMMAND_KIND_UPDATE_NETWORK_POLICY: WorkspaceCommandKind
WORKSPACE_COMMAND_KIND_UPDATE_VOLUME_BINDING: WorkspaceCommandKind
WORKSPACE_COMMAND_STATE_ADMITTED: WorkspaceCommandState
WORKSPACE_COMMAND_STATE_FAILED: WorkspaceCommandState
WORKSPACE_COMMAND_STATE_RUNNING: WorkspaceCommandState
WORKSPACE_COMMAND_STATE_SUCCEEDED: WorkspaceCommandState
WORKSPACE_COMMAND_STATE_UNSPECIFIED: WorkspaceCommandState
WORKSPACE_COMMAND_STATE_WAITING: WorkspaceCommandState

class CreateWorkspaceRequest(_message.Message):
    __slots__ = ["command", "spec"]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    command: _types_pb2.CommandMetadata
    spec: _types_pb2.WorkspaceCreateSpec
    def __init__(self, command: _Optional[_Union[_types_pb2.CommandMetadata, _Mapping]] = ..., spec: _Optional[_Union[_types_pb2.WorkspaceCreateSpec, _Mapping]] = ...) -> None: ...

class CreateWorkspaceResponse(_message.Message):
    __slots__ = ["command", "workspace"]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_FIELD_NUMBER: _ClassVar[int]
    command: WorkspaceCommand
    workspace: _types_pb2.Workspace
    def __init__(self, workspace: _Optional[_Union[_types_pb2.Workspace, _Mapping]] = ..., command: _Optional[_Union[WorkspaceCommand, _Mapping]] = ...) -> None: ...

class DeleteWorkspaceRequest(_message.Message):
    __slots__ = ["command", "workspace_id"]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    command: _types_pb2.CommandMetadata
    workspace_id: str
    def __init__(self, command: _Optional[_Union[_types_pb2.CommandMetadata, _Mapping]] = ..., workspace_id: _Optional[str] = ...) -> None: ...

class DeleteWorkspaceResponse(_message.Message):
    __slots__ = ["command", "workspace"]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_FIELD_NUMBER: _ClassVar[int]
    command: WorkspaceCommand
    workspace: _types_pb2.Workspace
    def __init__(self, workspace: _Optional[_Union[_types_pb2.Workspace, _Mapping]] = ..., command: _Optional[_Union[WorkspaceCommand, _Mapping]] = ...) -> None: ...

class ExportWorkspaceRequest(_message.Message):
    __slots__ = ["command", "include_template_image", "include_writable_layer", "workspace_id"]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_TEMPLATE_IMAGE_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_WRITABLE_LAYER_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    command: _types_pb2.CommandMetadata
    include_template_image: bool
    include_writable_layer: bool
    workspace_id: str
    def __init__(self, command: _Optional[_Union[_types_pb2.CommandMetadata, _Mapping]] = ..., workspace_id: _Optional[str] = ..., include_writable_layer: bool = ..., include_template_image: bool = ...) -> None: ...

class ExportWorkspaceResponse(_message.Message):
    __slots__ = ["command", "transfer"]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    TRANSFER_FIELD_NUMBER: _ClassVar[int]
    command: WorkspaceCommand
    transfer: _types_pb2.Transfer
    def __init__(self, transfer: _Optional[_Union[_types_pb2.Transfer, _Mapping]] = ..., command: _Optional[_Union[WorkspaceCommand, _Mapping]] = ...) -> None: ...

class GetWorkspaceCommandRequest(_message.Message):
    __slots__ = ["command_id", "workspace_id"]
    COMMAND_ID_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    command_id: str
    workspace_id: str
    def __init__(self, workspace_id: _Optional[str] = ..., command_id: _Optional[str] = ...) -> None: ...

class GetWorkspaceCommandResponse(_message.Message):
    __slots__ = ["command"]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    command: WorkspaceCommand
    def __init__(self, command: _Optional[_Union[WorkspaceCommand, _Mapping]] = ...) -> None: ...

class GetWorkspaceRequest(_message.Message):
    __slots__ = ["workspace_id"]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    workspace_id: str
    def __init__(self, workspace_id: _Optional[str] = ...) -> None: ...

class GetWorkspaceResponse(_message.Message):
    __slots__ = ["workspace"]
    WORKSPACE_FIELD_NUMBER: _ClassVar[int]
    workspace: _types_pb2.Workspace
    def __init__(self, workspace: _Optional[_Union[_types_pb2.Workspace, _Mapping]] = ...) -> None: ...

class ListWorkspacesRequest(_message.Message):
    __slots__ = ["include_deleted", "label_selector", "page_size", "page_token"]
    INCLUDE_DELETED_FIELD_NUMBER: _ClassVar[int]
    LABEL_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    include_deleted: bool
    label_selector: str
    page_size: int
    page_token: str
    def __init__(self, label_selector: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., include_deleted: bool = ...) -> None: ...

class ListWorkspacesResponse(_message.Message):
    __slots__ = ["next_page_token", "workspaces"]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    WORKSPACES_FIELD_NUMBER: _ClassVar[int]
    next_page_token: str
    workspaces: _containers.RepeatedCompositeFieldContainer[_types_pb2.Workspace]
    def __init__(self, workspaces: _Optional[_Iterable[_Union[_types_pb2.Workspace, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ResizeWorkspaceWritableLayerRequest(_message.Message):
    __slots__ = ["capacity_bytes", "command", "expected_resources_revision", "workspace_id"]
    CAPACITY_BYTES_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_RESOURCES_REVISION_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    capacity_bytes: int
    command: _types_pb2.CommandMetadata
    expected_resources_revision: int
    workspace_id: str
    def __init__(self, command: _Optional[_Union[_types_pb2.CommandMetadata, _Mapping]] = ..., workspace_id: _Optional[str] = ..., expected_resources_revision: _Optional[int] = ..., capacity_bytes: _Optional[int] = ...) -> None: ...

class ResizeWorkspaceWritableLayerResponse(_message.Message):
    __slots__ = ["command", "workspace"]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_FIELD_NUMBER: _ClassVar[int]
    command: WorkspaceCommand
    workspace: _types_pb2.Workspace
    def __init__(self, workspace: _Optional[_Union[_types_pb2.Workspace, _Mapping]] = ..., command: _Optional[_Union[WorkspaceCommand, _Mapping]] = ...) -> None: ...

class RestoreWorkspaceRequest(_message.Message):
    __slots__ = ["command", "spec", "transfer_id"]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    TRANSFER_ID_FIELD_NUMBER: _ClassVar[int]
    command: _types_pb2.CommandMetadata
    spec: _types_pb2.WorkspaceCreateSpec
    transfer_id: str
    def __init__(self, command: _Optional[_Union[_types_pb2.CommandMetadata, _Mapping]] = ..., transfer_id: _Optional[str] = ..., spec: _Optional[_Union[_types_pb2.WorkspaceCreateSpec, _Mapping]] = ...) -> None: ...

class RestoreWorkspaceResponse(_message.Message):
    __slots__ = ["command", "workspace"]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_FIELD_NUMBER: _ClassVar[int]
    command: WorkspaceCommand
    workspace: _types_pb2.Workspace
    def __init__(self, workspace: _Optional[_Union[_types_pb2.Workspace, _Mapping]] = ..., command: _Optional[_Union[WorkspaceCommand, _Mapping]] = ...) -> None: ...

class StartWorkspaceRequest(_message.Message):
    __slots__ = ["command", "workspace_id"]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    command: _types_pb2.CommandMetadata
    workspace_id: str
    def __init__(self, command: _Optional[_Union[_types_pb2.CommandMetadata, _Mapping]] = ..., workspace_id: _Optional[str] = ...) -> None: ...

class StartWorkspaceResponse(_message.Message):
    __slots__ = ["command", "workspace"]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_FIELD_NUMBER: _ClassVar[int]
    command: WorkspaceCommand
    workspace: _types_pb2.Workspace
    def __init__(self, workspace: _Optional[_Union[_types_pb2.Workspace, _Mapping]] = ..., command: _Optional[_Union[WorkspaceCommand, _Mapping]] = ...) -> None: ...

class StopWorkspaceRequest(_message.Message):
    __slots__ = ["command", "mode", "workspace_id"]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    command: _types_pb2.CommandMetadata
    mode: StopMode
    workspace_id: str
    def __init__(self, command: _Optional[_Union[_types_pb2.CommandMetadata, _Mapping]] = ..., workspace_id: _Optional[str] = ..., mode: _Optional[_Union[StopMode, str]] = ...) -> None: ...

class StopWorkspaceResponse(_message.Message):
    __slots__ = ["command", "workspace"]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_FIELD_NUMBER: _ClassVar[int]
    command: WorkspaceCommand
    workspace: _types_pb2.Workspace
    def __init__(self, workspace: _Optional[_Union[_types_pb2.Workspace, _Mapping]] = ..., command: _Optional[_Union[WorkspaceCommand, _Mapping]] = ...) -> None: ...

class UpdateWorkspaceAnnotationsRequest(_message.Message):
    __slots__ = ["annotations", "command", "expected_annotations_revision", "workspace_id"]
    class AnnotationsEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ANNOTATIONS_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_ANNOTATIONS_REVISION_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    annotations: _containers.ScalarMap[str, str]
    command: _types_pb2.CommandMetadata
    expected_annotations_revision: int
    workspace_id: str
    def __init__(self, command: _Optional[_Union[_types_pb2.CommandMetadata, _Mapping]] = ..., workspace_id: _Optional[str] = ..., expected_annotations_revision: _Optional[int] = ..., annotations: _Optional[_Mapping[str, str]] = ...) -> None: ...

class UpdateWorkspaceAnnotationsResponse(_message.Message):
    __slots__ = ["workspace"]
    WORKSPACE_FIELD_NUMBER: _ClassVar[int]
    workspace: _types_pb2.Workspace
    def __init__(self, workspace: _Optional[_Union[_types_pb2.Workspace, _Mapping]] = ...) -> None: ...

class UpdateWorkspaceExpirationRequest(_message.Message):
    __slots__ = ["change", "command", "expected_expiration_revision", "workspace_id"]
    CHANGE_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_EXPIRATION_REVISION_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    change: _types_pb2.WorkspaceExpirationChange
    command: _types_pb2.CommandMetadata
    expected_expiration_revision: int
    workspace_id: str
    def __init__(self, command: _Optional[_Union[_types_pb2.CommandMetadata, _Mapping]] = ..., workspace_id: _Optional[str] = ..., expected_expiration_revision: _Optional[int] = ..., change: _Optional[_Union[_types_pb2.WorkspaceExpirationChange, _Mapping]] = ...) -> None: ...

class UpdateWorkspaceExpirationResponse(_message.Message):
    __slots__ = ["workspace"]
    WORKSPACE_FIELD_NUMBER: _ClassVar[int]
    workspace: _types_pb2.Workspace
    def __init__(self, workspace: _Optional[_Union[_types_pb2.Workspace, _Mapping]] = ...) -> None: ...

class UpdateWorkspaceLabelsRequest(_message.Message):
    __slots__ = ["command", "expected_labels_revision", "labels", "workspace_id"]
    class LabelsEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_LABELS_REVISION_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    command: _types_pb2.CommandMetadata
    expected_labels_revision: int
    labels: _containers.ScalarMap[str, str]
    workspace_id: str
    def __init__(self, command: _Optional[_Union[_types_pb2.CommandMetadata, _Mapping]] = ..., workspace_id: _Optional[str] = ..., expected_labels_revision: _Optional[int] = ..., labels: _Optional[_Mapping[str, str]] = ...) -> None: ...

class UpdateWorkspaceLabelsResponse(_message.Message):
    __slots__ = ["workspace"]
    WORKSPACE_FIELD_NUMBER: _ClassVar[int]
    workspace: _types_pb2.Workspace
    def __init__(self, workspace: _Optional[_Union[_types_pb2.Workspace, _Mapping]] = ...) -> None: ...

class UpdateWorkspaceMemoryRequest(_message.Message):
    __slots__ = ["command", "expected_resources_revision", "memory_bytes", "workspace_id"]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_RESOURCES_REVISION_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    command: _types_pb2.CommandMetadata
    expected_resources_revision: int
    memory_bytes: int
    workspace_id: str
    def __init__(self, command: _Optional[_Union[_types_pb2.CommandMetadata, _Mapping]] = ..., workspace_id: _Optional[str] = ..., expected_resources_revision: _Optional[int] = ..., memory_bytes: _Optional[int] = ...) -> None: ...

class UpdateWorkspaceMemoryResponse(_message.Message):
    __slots__ = ["workspace"]
    WORKSPACE_FIELD_NUMBER: _ClassVar[int]
    workspace: _types_pb2.Workspace
    def __init__(self, workspace: _Optional[_Union[_types_pb2.Workspace, _Mapping]] = ...) -> None: ...

class UpdateWorkspaceNetworkPolicyRequest(_message.Message):
    __slots__ = ["command", "drain_seconds", "expected_revision", "network_policy", "workspace_id"]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    DRAIN_SECONDS_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_REVISION_FIELD_NUMBER: _ClassVar[int]
    NETWORK_POLICY_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    command: _types_pb2.CommandMetadata
    drain_seconds: int
    expected_revision: int
    network_policy: _types_pb2.NetworkPolicy
    workspace_id: str
    def __init__(self, command: _Optional[_Union[_types_pb2.CommandMetadata, _Mapping]] = ..., workspace_id: _Optional[str] = ..., expected_revision: _Optional[int] = ..., network_policy: _Optional[_Union[_types_pb2.NetworkPolicy, _Mapping]] = ..., drain_seconds: _Optional[int] = ...) -> None: ...

class UpdateWorkspaceNetworkPolicyResponse(_message.Message):
    __slots__ = ["workspace"]
    WORKSPACE_FIELD_NUMBER: _ClassVar[int]
    workspace: _types_pb2.Workspace
    def __init__(self, workspace: _Optional[_Union[_types_pb2.Workspace, _Mapping]] = ...) -> None: ...

class UpdateWorkspaceVolumeBindingRequest(_message.Message):
    __slots__ = ["command", "expected_binding_revision", "volume", "workspace_id"]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_BINDING_REVISION_FIELD_NUMBER: _ClassVar[int]
    VOLUME_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    command: _types_pb2.CommandMetadata
    expected_binding_revision: int
    volume: _types_pb2.WorkspaceVolumeBinding
    workspace_id: str
    def __init__(self, command: _Optional[_Union[_types_pb2.CommandMetadata, _Mapping]] = ..., workspace_id: _Optional[str] = ..., expected_binding_revision: _Optional[int] = ..., volume: _Optional[_Union[_types_pb2.WorkspaceVolumeBinding, _Mapping]] = ...) -> None: ...

class UpdateWorkspaceVolumeBindingResponse(_message.Message):
    __slots__ = ["workspace"]
    WORKSPACE_FIELD_NUMBER: _ClassVar[int]
    workspace: _types_pb2.Workspace
    def __init__(self, workspace: _Optional[_Union[_types_pb2.Workspace, _Mapping]] = ...) -> None: ...

class WaitWorkspaceRequest(_message.Message):
    __slots__ = ["command_id", "states", "timeout", "workspace_id"]
    COMMAND_ID_FIELD_NUMBER: _ClassVar[int]
    STATES_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    command_id: str
    states: _containers.RepeatedScalarFieldContainer[_types_pb2.WorkspaceState]
    timeout: _duration_pb2.Duration
    workspace_id: str
    def __init__(self, workspace_id: _Optional[str] = ..., states: _Optional[_Iterable[_Union[_types_pb2.WorkspaceState, str]]] = ..., command_id: _Optional[str] = ..., timeout: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class WaitWorkspaceResponse(_message.Message):
    __slots__ = ["command", "reached", "workspace"]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    REACHED_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_FIELD_NUMBER: _ClassVar[int]
    command: WorkspaceCommand
    reached: bool
    workspace: _types_pb2.Workspace
    def __init__(self, reached: bool = ..., workspace: _Optional[_Union[_types_pb2.Workspace, _Mapping]] = ..., command: _Optional[_Union[WorkspaceCommand, _Mapping]] = ...) -> None: ...

class WorkspaceCommand(_message.Message):
    __slots__ = ["admitted_at", "command_id", "completed_at", "failure", "kind", "progress", "state", "updated_at", "waiting_for", "workspace_id"]
    ADMITTED_AT_FIELD_NUMBER: _ClassVar[int]
    COMMAND_ID_FIELD_NUMBER: _ClassVar[int]
    COMPLETED_AT_FIELD_NUMBER: _ClassVar[int]
    FAILURE_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    WAITING_FOR_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    admitted_at: _timestamp_pb2.Timestamp
    command_id: str
    completed_at: _timestamp_pb2.Timestamp
    failure: _types_pb2.WorkspaceFailure
    kind: WorkspaceCommandKind
    progress: str
    state: WorkspaceCommandState
    updated_at: _timestamp_pb2.Timestamp
    waiting_for: str
    workspace_id: str
    def __init__(self, command_id: _Optional[str] = ..., workspace_id: _Optional[str] = ..., kind: _Optional[_Union[WorkspaceCommandKind, str]] = ..., state: _Optional[_Union[WorkspaceCommandState, str]] = ..., progress: _Optional[str] = ..., waiting_for: _Optional[str] = ..., failure: _Optional[_Union[_types_pb2.WorkspaceFailure, _Mapping]] = ..., admitted_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., updated_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., completed_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class WorkspaceCommandKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class WorkspaceCommandState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class StopMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
