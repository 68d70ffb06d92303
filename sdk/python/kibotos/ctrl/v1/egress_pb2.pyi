from google.protobuf import timestamp_pb2 as _timestamp_pb2
from kibotos.ctrl.v1 import types_pb2 as _types_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor
EGRESS_PROTOCOL_HTTP_CONNECT: EgressProtocol
EGRESS_PROTOCOL_SOCKS5: EgressProtocol
EGRESS_PROTOCOL_UNSPECIFIED: EgressProtocol

class CreateEgressRequest(_message.Message):
    __slots__ = ["command", "labels", "spec"]
    class LabelsEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    command: _types_pb2.CommandMetadata
    labels: _containers.ScalarMap[str, str]
    spec: EgressSpec
    def __init__(self, command: _Optional[_Union[_types_pb2.CommandMetadata, _Mapping]] = ..., spec: _Optional[_Union[EgressSpec, _Mapping]] = ..., labels: _Optional[_Mapping[str, str]] = ...) -> None: ...

class CreateEgressResponse(_message.Message):
    __slots__ = ["egress"]
    EGRESS_FIELD_NUMBER: _ClassVar[int]
    egress: Egress
    def __init__(self, egress: _Optional[_Union[Egress, _Mapping]] = ...) -> None: ...

class DeleteEgressRequest(_message.Message):
    __slots__ = ["command", "egress_id"]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    EGRESS_ID_FIELD_NUMBER: _ClassVar[int]
    command: _types_pb2.CommandMetadata
    egress_id: str
    def __init__(self, command: _Optional[_Union[_types_pb2.CommandMetadata, _Mapping]] = ..., egress_id: _Optional[str] = ...) -> None: ...

class DeleteEgressResponse(_message.Message):
    __slots__ = ["egress"]
    EGRESS_FIELD_NUMBER: _ClassVar[int]
    egress: Egress
    def __init__(self, egress: _Optional[_Union[Egress, _Mapping]] = ...) -> None: ...

class Egress(_message.Message):
    __slots__ = ["created_at", "deleted", "egress_id", "labels", "password_set", "revision", "spec", "updated_at"]
    class LabelsEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    DELETED_FIELD_NUMBER: _ClassVar[int]
    EGRESS_ID_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    PASSWORD_SET_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    created_at: _timestamp_pb2.Timestamp
    deleted: bool
    egress_id: str
    labels: _containers.ScalarMap[str, str]
    password_set: bool
    revision: int
    spec: EgressSpec
    updated_at: _timestamp_pb2.Timestamp
    def __init__(self, egress_id: _Optional[str] = ..., spec: _Optional[_Union[EgressSpec, _Mapping]] = ..., revision: _Optional[int] = ..., created_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., updated_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., deleted: bool = ..., labels: _Optional[_Mapping[str, str]] = ..., password_set: bool = ...) -> None: ...

class EgressSpec(_message.Message):
    __slots__ = ["endpoint", "password", "protocol", "server_name", "tls", "udp_enabled", "username"]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    PASSWORD_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    SERVER_NAME_FIELD_NUMBER: _ClassVar[int]
    TLS_FIELD_NUMBER: _ClassVar[int]
    UDP_ENABLED_FIELD_NUMBER: _ClassVar[int]
    USERNAME_FIELD_NUMBER: _ClassVar[int]
    endpoint: str
    password: str
    protocol: EgressProtocol
    server_name: str
    tls: bool
    udp_enabled: bool
    username: str
    def __init__(self, protocol: _Optional[_Union[EgressProtocol, str]] = ..., endpoint: _Optional[str] = ..., tls: bool = ..., server_name: _Optional[str] = ..., username: _Optional[str] = ..., password: _Optional[str] = ..., udp_enabled: bool = ...) -> None: ...

class GetEgressRequest(_message.Message):
    __slots__ = ["egress_id"]
    EGRESS_ID_FIELD_NUMBER: _ClassVar[int]
    egress_id: str
    def __init__(self, egress_id: _Optional[str] = ...) -> None: ...

class GetEgressResponse(_message.Message):
    __slots__ = ["egress"]
    EGRESS_FIELD_NUMBER: _ClassVar[int]
    egress: Egress
    def __init__(self, egress: _Optional[_Union[Egress, _Mapping]] = ...) -> None: ...

class ListEgressesRequest(_message.Message):
    __slots__ = ["label_selector", "page_size", "page_token"]
    LABEL_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    label_selector: str
    page_size: int
    page_token: str
    def __init__(self, label_selector: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListEgressesResponse(_message.Message):
    __slots__ = ["egresses", "next_page_token"]
    EGRESSES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    egresses: _containers.RepeatedCompositeFieldContainer[Egress]
    next_page_token: str
    def __init__(self, egresses: _Optional[_Iterable[_Union[Egress, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class UpdateEgressRequest(_message.Message):
    __slots__ = ["command", "drain_seconds", "egress_id", "expected_revision", "spec"]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    DRAIN_SECONDS_FIELD_NUMBER: _ClassVar[int]
    EGRESS_ID_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_REVISION_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    command: _types_pb2.CommandMetadata
    drain_seconds: int
    egress_id: str
    expected_revision: int
    spec: EgressSpec
    def __init__(self, command: _Optional[_Union[_types_pb2.CommandMetadata, _Mapping]] = ..., egress_id: _Optional[str] = ..., expected_revision: _Optional[int] = ..., spec: _Optional[_Union[EgressSpec, _Mapping]] = ..., drain_seconds: _Optional[int] = ...) -> None: ...

class UpdateEgressResponse(_message.Message):
    __slots__ = ["egress"]
    EGRESS_FIELD_NUMBER: _ClassVar[int]
    egress: Egress
    def __init__(self, egress: _Optional[_Union[Egress, _Mapping]] = ...) -> None: ...

class EgressProtocol(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
