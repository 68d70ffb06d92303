from google.protobuf import timestamp_pb2 as _timestamp_pb2
from kibotos.ctrl.v1 import types_pb2 as _types_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor
RESOLVER_PROTOCOL_HTTPS: ResolverProtocol
RESOLVER_PROTOCOL_TCP: ResolverProtocol
RESOLVER_PROTOCOL_TLS: ResolverProtocol
RESOLVER_PROTOCOL_UDP: ResolverProtocol
RESOLVER_PROTOCOL_UNSPECIFIED: ResolverProtocol

class CreateResolverRequest(_message.Message):
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
    spec: ResolverSpec
    def __init__(self, command: _Optional[_Union[_types_pb2.CommandMetadata, _Mapping]] = ..., spec: _Optional[_Union[ResolverSpec, _Mapping]] = ..., labels: _Optional[_Mapping[str, str]] = ...) -> None: ...

class CreateResolverResponse(_message.Message):
    __slots__ = ["resolver"]
    RESOLVER_FIELD_NUMBER: _ClassVar[int]
    resolver: Resolver
    def __init__(self, resolver: _Optional[_Union[Resolver, _Mapping]] = ...) -> None: ...

class DeleteResolverRequest(_message.Message):
    __slots__ = ["command", "resolver_id"]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    RESOLVER_ID_FIELD_NUMBER: _ClassVar[int]
    command: _types_pb2.CommandMetadata
    resolver_id: str
    def __init__(self, command: _Optional[_Union[_types_pb2.CommandMetadata, _Mapping]] = ..., resolver_id: _Optional[str] = ...) -> None: ...

class DeleteResolverResponse(_message.Message):
    __slots__ = ["resolver"]
    RESOLVER_FIELD_NUMBER: _ClassVar[int]
    resolver: Resolver
    def __init__(self, resolver: _Optional[_Union[Resolver, _Mapping]] = ...) -> None: ...

class GetResolverRequest(_message.Message):
    __slots__ = ["resolver_id"]
    RESOLVER_ID_FIELD_NUMBER: _ClassVar[int]
    resolver_id: str
    def __init__(self, resolver_id: _Optional[str] = ...) -> None: ...

class GetResolverResponse(_message.Message):
    __slots__ = ["resolver"]
    RESOLVER_FIELD_NUMBER: _ClassVar[int]
    resolver: Resolver
    def __init__(self, resolver: _Optional[_Union[Resolver, _Mapping]] = ...) -> None: ...

class ListResolversRequest(_message.Message):
    __slots__ = ["label_selector", "page_size", "page_token"]
    LABEL_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    label_selector: str
    page_size: int
    page_token: str
    def __init__(self, label_selector: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListResolversResponse(_message.Message):
    __slots__ = ["next_page_token", "resolvers"]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    RESOLVERS_FIELD_NUMBER: _ClassVar[int]
    next_page_token: str
    resolvers: _containers.RepeatedCompositeFieldContainer[Resolver]
    def __init__(self, resolvers: _Optional[_Iterable[_Union[Resolver, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class Resolver(_message.Message):
    __slots__ = ["created_at", "deleted", "labels", "resolver_id", "revision", "spec", "updated_at"]
    class LabelsEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    DELETED_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    RESOLVER_ID_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    created_at: _timestamp_pb2.Timestamp
    deleted: bool
    labels: _containers.ScalarMap[str, str]
    resolver_id: str
    revision: int
    spec: ResolverSpec
    updated_at: _timestamp_pb2.Timestamp
    def __init__(self, resolver_id: _Optional[str] = ..., spec: _Optional[_Union[ResolverSpec, _Mapping]] = ..., revision: _Optional[int] = ..., created_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., updated_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., deleted: bool = ..., labels: _Optional[_Mapping[str, str]] = ...) -> None: ...

class ResolverSpec(_message.Message):
    __slots__ = ["address", "protocol", "server_name", "url"]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    SERVER_NAME_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    address: str
    protocol: ResolverProtocol
    server_name: str
    url: str
    def __init__(self, protocol: _Optional[_Union[ResolverProtocol, str]] = ..., address: _Optional[str] = ..., url: _Optional[str] = ..., server_name: _Optional[str] = ...) -> None: ...

class UpdateResolverRequest(_message.Message):
    __slots__ = ["command", "expected_revision", "resolver_id", "spec"]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_REVISION_FIELD_NUMBER: _ClassVar[int]
    RESOLVER_ID_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    command: _types_pb2.CommandMetadata
    expected_revision: int
    resolver_id: str
    spec: ResolverSpec
    def __init__(self, command: _Optional[_Union[_types_pb2.CommandMetadata, _Mapping]] = ..., resolver_id: _Optional[str] = ..., expected_revision: _Optional[int] = ..., spec: _Optional[_Union[ResolverSpec, _Mapping]] = ...) -> None: ...

class UpdateResolverResponse(_message.Message):
    __slots__ = ["resolver"]
    RESOLVER_FIELD_NUMBER: _ClassVar[int]
    resolver: Resolver
    def __init__(self, resolver: _Optional[_Union[Resolver, _Mapping]] = ...) -> None: ...

class ResolverProtocol(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
