from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DATA_PLANE_SCOPE_DESKTOP: DataPlaneScope
DATA_PLANE_SCOPE_FILE: DataPlaneScope
DATA_PLANE_SCOPE_METRICS: DataPlaneScope
DATA_PLANE_SCOPE_PROCESS: DataPlaneScope
DATA_PLANE_SCOPE_SERVICE: DataPlaneScope
DATA_PLANE_SCOPE_UNSPECIFIED: DataPlaneScope
DESCRIPTOR: _descriptor.FileDescriptor

class DataPlaneSession(_message.Message):
    __slots__ = ["endpoint", "expires_at", "generation", "issued_at", "scopes", "session_id", "token", "workspace_id"]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    ISSUED_AT_FIELD_NUMBER: _ClassVar[int]
    SCOPES_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    endpoint: str
    expires_at: _timestamp_pb2.Timestamp
    generation: int
    issued_at: _timestamp_pb2.Timestamp
    scopes: _containers.RepeatedScalarFieldContainer[DataPlaneScope]
    session_id: str
    token: str
    workspace_id: str
    def __init__(self, session_id: _Optional[str] = ..., workspace_id: _Optional[str] = ..., generation: _Optional[int] = ..., scopes: _Optional[_Iterable[_Union[DataPlaneScope, str]]] = ..., token: _Optional[str] = ..., issued_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., expires_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., endpoint: _Optional[str] = ...) -> None: ...

class IssueDataPlaneSessionRequest(_message.Message):
    __slots__ = ["scopes", "ttl", "workspace_id"]
    SCOPES_FIELD_NUMBER: _ClassVar[int]
    TTL_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    scopes: _containers.RepeatedScalarFieldContainer[DataPlaneScope]
    ttl: _duration_pb2.Duration
    workspace_id: str
    def __init__(self, workspace_id: _Optional[str] = ..., ttl: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., scopes: _Optional[_Iterable[_Union[DataPlaneScope, str]]] = ...) -> None: ...

class IssueDataPlaneSessionResponse(_message.Message):
    __slots__ = ["session"]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    session: DataPlaneSession
    def __init__(self, session: _Optional[_Union[DataPlaneSession, _Mapping]] = ...) -> None: ...

class RevokeDataPlaneSessionRequest(_message.Message):
    __slots__ = ["session_id", "workspace_id"]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    workspace_id: str
    def __init__(self, workspace_id: _Optional[str] = ..., session_id: _Optional[str] = ...) -> None: ...

class RevokeDataPlaneSessionResponse(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class RotateDataPlaneSessionRequest(_message.Message):
    __slots__ = ["session_id", "ttl", "workspace_id"]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TTL_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    ttl: _duration_pb2.Duration
    workspace_id: str
    def __init__(self, workspace_id: _Optional[str] = ..., session_id: _Optional[str] = ..., ttl: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class RotateDataPlaneSessionResponse(_message.Message):
    __slots__ = ["previous_token_expires_at", "session"]
    PREVIOUS_TOKEN_EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    previous_token_expires_at: _timestamp_pb2.Timestamp
    session: DataPlaneSession
    def __init__(self, session: _Optional[_Union[DataPlaneSession, _Mapping]] = ..., previous_token_expires_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class DataPlaneScope(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
