from google.protobuf import timestamp_pb2 as _timestamp_pb2
from kibotos.ctrl.v1 import types_pb2 as _types_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor
EXPOSURE_ACCESS_PUBLIC: ExposureAccess
EXPOSURE_ACCESS_SESSION: ExposureAccess
EXPOSURE_ACCESS_UNSPECIFIED: ExposureAccess
EXPOSURE_PROTOCOL_HTTP: ExposureProtocol
EXPOSURE_PROTOCOL_TCP: ExposureProtocol
EXPOSURE_PROTOCOL_UNSPECIFIED: ExposureProtocol
EXPOSURE_STATE_ACTIVE: ExposureState
EXPOSURE_STATE_REVOKED: ExposureState
EXPOSURE_STATE_UNSPECIFIED: ExposureState

class ConnectServiceRequest(_message.Message):
    __slots__ = ["close_write", "data", "open", "workspace_id"]
    CLOSE_WRITE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    OPEN_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    close_write: bool
    data: bytes
    open: ServiceConnectionOpen
    workspace_id: str
    def __init__(self, workspace_id: _Optional[str] = ..., open: _Optional[_Union[ServiceConnectionOpen, _Mapping]] = ..., data: _Optional[bytes] = ..., close_write: bool = ...) -> None: ...

class ConnectServiceResponse(_message.Message):
    __slots__ = ["connected", "data"]
    CONNECTED_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    connected: ServiceConnectionEstablished
    data: bytes
    def __init__(self, connected: _Optional[_Union[ServiceConnectionEstablished, _Mapping]] = ..., data: _Optional[bytes] = ...) -> None: ...

class CreateExposureRequest(_message.Message):
    __slots__ = ["access", "command", "port", "protocol", "workspace_id"]
    ACCESS_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    access: ExposureAccess
    command: _types_pb2.CommandMetadata
    port: int
    protocol: ExposureProtocol
    workspace_id: str
    def __init__(self, command: _Optional[_Union[_types_pb2.CommandMetadata, _Mapping]] = ..., workspace_id: _Optional[str] = ..., port: _Optional[int] = ..., protocol: _Optional[_Union[ExposureProtocol, str]] = ..., access: _Optional[_Union[ExposureAccess, str]] = ...) -> None: ...

class CreateExposureResponse(_message.Message):
    __slots__ = ["exposure"]
    EXPOSURE_FIELD_NUMBER: _ClassVar[int]
    exposure: Exposure
    def __init__(self, exposure: _Optional[_Union[Exposure, _Mapping]] = ...) -> None: ...

class Exposure(_message.Message):
    __slots__ = ["access", "created_at", "exposure_id", "port", "protocol", "revoked_at", "state", "url", "workspace_id"]
    ACCESS_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    EXPOSURE_ID_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    REVOKED_AT_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    access: ExposureAccess
    created_at: _timestamp_pb2.Timestamp
    exposure_id: str
    port: int
    protocol: ExposureProtocol
    revoked_at: _timestamp_pb2.Timestamp
    state: ExposureState
    url: str
    workspace_id: str
    def __init__(self, exposure_id: _Optional[str] = ..., workspace_id: _Optional[str] = ..., port: _Optional[int] = ..., protocol: _Optional[_Union[ExposureProtocol, str]] = ..., access: _Optional[_Union[ExposureAccess, str]] = ..., state: _Optional[_Union[ExposureState, str]] = ..., url: _Optional[str] = ..., created_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., revoked_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class GetExposureRequest(_message.Message):
    __slots__ = ["exposure_id", "workspace_id"]
    EXPOSURE_ID_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    exposure_id: str
    workspace_id: str
    def __init__(self, workspace_id: _Optional[str] = ..., exposure_id: _Optional[str] = ...) -> None: ...

class GetExposureResponse(_message.Message):
    __slots__ = ["exposure"]
    EXPOSURE_FIELD_NUMBER: _ClassVar[int]
    exposure: Exposure
    def __init__(self, exposure: _Optional[_Union[Exposure, _Mapping]] = ...) -> None: ...

class ListExposuresRequest(_message.Message):
    __slots__ = ["include_revoked", "page_size", "page_token", "workspace_id"]
    INCLUDE_REVOKED_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    include_revoked: bool
    page_size: int
    page_token: str
    workspace_id: str
    def __init__(self, workspace_id: _Optional[str] = ..., include_revoked: bool = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListExposuresResponse(_message.Message):
    __slots__ = ["exposures", "next_page_token"]
    EXPOSURES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    exposures: _containers.RepeatedCompositeFieldContainer[Exposure]
    next_page_token: str
    def __init__(self, exposures: _Optional[_Iterable[_Union[Exposure, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class RevokeExposureRequest(_message.Message):
    __slots__ = ["command", "exposure_id", "workspace_id"]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    EXPOSURE_ID_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    command: _types_pb2.CommandMetadata
    exposure_id: str
    workspace_id: str
    def __init__(self, command: _Optional[_Union[_types_pb2.CommandMetadata, _Mapping]] = ..., workspace_id: _Optional[str] = ..., exposure_id: _Optional[str] = ...) -> None: ...

class RevokeExposureResponse(_message.Message):
    __slots__ = ["exposure"]
    EXPOSURE_FIELD_NUMBER: _ClassVar[int]
    exposure: Exposure
    def __init__(self, exposure: _Optional[_Union[Exposure, _Mapping]] = ...) -> None: ...

class ServiceConnectionEstablished(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class ServiceConnectionOpen(_message.Message):
    __slots__ = ["port"]
    PORT_FIELD_NUMBER: _ClassVar[int]
    port: int
    def __init__(self, port: _Optional[int] = ...) -> None: ...

class ExposureProtocol(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class ExposureAccess(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class ExposureState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
