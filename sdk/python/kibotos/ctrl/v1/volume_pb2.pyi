from kibotos.ctrl.v1 import types_pb2 as _types_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class CreateVolumeRequest(_message.Message):
    __slots__ = ["annotations", "command", "labels", "spec"]
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
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    annotations: _containers.ScalarMap[str, str]
    command: _types_pb2.CommandMetadata
    labels: _containers.ScalarMap[str, str]
    spec: _types_pb2.VolumeSpec
    def __init__(self, command: _Optional[_Union[_types_pb2.CommandMetadata, _Mapping]] = ..., spec: _Optional[_Union[_types_pb2.VolumeSpec, _Mapping]] = ..., labels: _Optional[_Mapping[str, str]] = ..., annotations: _Optional[_Mapping[str, str]] = ...) -> None: ...

class CreateVolumeResponse(_message.Message):
    __slots__ = ["volume"]
    VOLUME_FIELD_NUMBER: _ClassVar[int]
    volume: _types_pb2.Volume
    def __init__(self, volume: _Optional[_Union[_types_pb2.Volume, _Mapping]] = ...) -> None: ...

class DeleteVolumeRequest(_message.Message):
    __slots__ = ["command", "volume_id"]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    VOLUME_ID_FIELD_NUMBER: _ClassVar[int]
    command: _types_pb2.CommandMetadata
    volume_id: str
    def __init__(self, command: _Optional[_Union[_types_pb2.CommandMetadata, _Mapping]] = ..., volume_id: _Optional[str] = ...) -> None: ...

class DeleteVolumeResponse(_message.Message):
    __slots__ = ["volume"]
    VOLUME_FIELD_NUMBER: _ClassVar[int]
    volume: _types_pb2.Volume
    def __init__(self, volume: _Optional[_Union[_types_pb2.Volume, _Mapping]] = ...) -> None: ...

class ExportVolumeRequest(_message.Message):
    __slots__ = ["command", "volume_id"]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    VOLUME_ID_FIELD_NUMBER: _ClassVar[int]
    command: _types_pb2.CommandMetadata
    volume_id: str
    def __init__(self, command: _Optional[_Union[_types_pb2.CommandMetadata, _Mapping]] = ..., volume_id: _Optional[str] = ...) -> None: ...

class ExportVolumeResponse(_message.Message):
    __slots__ = ["transfer"]
    TRANSFER_FIELD_NUMBER: _ClassVar[int]
    transfer: _types_pb2.Transfer
    def __init__(self, transfer: _Optional[_Union[_types_pb2.Transfer, _Mapping]] = ...) -> None: ...

class GetVolumeRequest(_message.Message):
    __slots__ = ["volume_id"]
    VOLUME_ID_FIELD_NUMBER: _ClassVar[int]
    volume_id: str
    def __init__(self, volume_id: _Optional[str] = ...) -> None: ...

class GetVolumeResponse(_message.Message):
    __slots__ = ["volume"]
    VOLUME_FIELD_NUMBER: _ClassVar[int]
    volume: _types_pb2.Volume
    def __init__(self, volume: _Optional[_Union[_types_pb2.Volume, _Mapping]] = ...) -> None: ...

class ListVolumesRequest(_message.Message):
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

class ListVolumesResponse(_message.Message):
    __slots__ = ["next_page_token", "volumes"]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    VOLUMES_FIELD_NUMBER: _ClassVar[int]
    next_page_token: str
    volumes: _containers.RepeatedCompositeFieldContainer[_types_pb2.Volume]
    def __init__(self, volumes: _Optional[_Iterable[_Union[_types_pb2.Volume, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ResizeVolumeRequest(_message.Message):
    __slots__ = ["capacity_bytes", "command", "volume_id"]
    CAPACITY_BYTES_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    VOLUME_ID_FIELD_NUMBER: _ClassVar[int]
    capacity_bytes: int
    command: _types_pb2.CommandMetadata
    volume_id: str
    def __init__(self, command: _Optional[_Union[_types_pb2.CommandMetadata, _Mapping]] = ..., volume_id: _Optional[str] = ..., capacity_bytes: _Optional[int] = ...) -> None: ...

class ResizeVolumeResponse(_message.Message):
    __slots__ = ["volume"]
    VOLUME_FIELD_NUMBER: _ClassVar[int]
    volume: _types_pb2.Volume
    def __init__(self, volume: _Optional[_Union[_types_pb2.Volume, _Mapping]] = ...) -> None: ...

class UpdateVolumeAnnotationsRequest(_message.Message):
    __slots__ = ["annotations", "command", "expected_annotations_revision", "volume_id"]
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
    VOLUME_ID_FIELD_NUMBER: _ClassVar[int]
    annotations: _containers.ScalarMap[str, str]
    command: _types_pb2.CommandMetadata
    expected_annotations_revision: int
    volume_id: str
    def __init__(self, command: _Optional[_Union[_types_pb2.CommandMetadata, _Mapping]] = ..., volume_id: _Optional[str] = ..., expected_annotations_revision: _Optional[int] = ..., annotations: _Optional[_Mapping[str, str]] = ...) -> None: ...

class UpdateVolumeAnnotationsResponse(_message.Message):
    __slots__ = ["volume"]
    VOLUME_FIELD_NUMBER: _ClassVar[int]
    volume: _types_pb2.Volume
    def __init__(self, volume: _Optional[_Union[_types_pb2.Volume, _Mapping]] = ...) -> None: ...

class UpdateVolumeLabelsRequest(_message.Message):
    __slots__ = ["command", "expected_labels_revision", "labels", "volume_id"]
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
    VOLUME_ID_FIELD_NUMBER: _ClassVar[int]
    command: _types_pb2.CommandMetadata
    expected_labels_revision: int
    labels: _containers.ScalarMap[str, str]
    volume_id: str
    def __init__(self, command: _Optional[_Union[_types_pb2.CommandMetadata, _Mapping]] = ..., volume_id: _Optional[str] = ..., expected_labels_revision: _Optional[int] = ..., labels: _Optional[_Mapping[str, str]] = ...) -> None: ...

class UpdateVolumeLabelsResponse(_message.Message):
    __slots__ = ["volume"]
    VOLUME_FIELD_NUMBER: _ClassVar[int]
    volume: _types_pb2.Volume
    def __init__(self, volume: _Optional[_Union[_types_pb2.Volume, _Mapping]] = ...) -> None: ...
