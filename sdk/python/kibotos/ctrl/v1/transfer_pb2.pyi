from kibotos.ctrl.v1 import types_pb2 as _types_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class DeleteTransferRequest(_message.Message):
    __slots__ = ["command", "transfer_id"]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    TRANSFER_ID_FIELD_NUMBER: _ClassVar[int]
    command: _types_pb2.CommandMetadata
    transfer_id: str
    def __init__(self, command: _Optional[_Union[_types_pb2.CommandMetadata, _Mapping]] = ..., transfer_id: _Optional[str] = ...) -> None: ...

class DeleteTransferResponse(_message.Message):
    __slots__ = ["transfer"]
    TRANSFER_FIELD_NUMBER: _ClassVar[int]
    transfer: _types_pb2.Transfer
    def __init__(self, transfer: _Optional[_Union[_types_pb2.Transfer, _Mapping]] = ...) -> None: ...

class DownloadTransferRequest(_message.Message):
    __slots__ = ["offset", "transfer_id"]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    TRANSFER_ID_FIELD_NUMBER: _ClassVar[int]
    offset: int
    transfer_id: str
    def __init__(self, transfer_id: _Optional[str] = ..., offset: _Optional[int] = ...) -> None: ...

class DownloadTransferResponse(_message.Message):
    __slots__ = ["data", "offset"]
    DATA_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    offset: int
    def __init__(self, offset: _Optional[int] = ..., data: _Optional[bytes] = ...) -> None: ...

class GetTransferRequest(_message.Message):
    __slots__ = ["transfer_id"]
    TRANSFER_ID_FIELD_NUMBER: _ClassVar[int]
    transfer_id: str
    def __init__(self, transfer_id: _Optional[str] = ...) -> None: ...

class GetTransferResponse(_message.Message):
    __slots__ = ["transfer"]
    TRANSFER_FIELD_NUMBER: _ClassVar[int]
    transfer: _types_pb2.Transfer
    def __init__(self, transfer: _Optional[_Union[_types_pb2.Transfer, _Mapping]] = ...) -> None: ...

class ImportTransferHeader(_message.Message):
    __slots__ = ["command", "digest", "labels", "size_bytes"]
    class LabelsEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    command: _types_pb2.CommandMetadata
    digest: str
    labels: _containers.ScalarMap[str, str]
    size_bytes: int
    def __init__(self, command: _Optional[_Union[_types_pb2.CommandMetadata, _Mapping]] = ..., size_bytes: _Optional[int] = ..., digest: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ...) -> None: ...

class ImportTransferRequest(_message.Message):
    __slots__ = ["data", "header"]
    DATA_FIELD_NUMBER: _ClassVar[int]
    HEADER_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    header: ImportTransferHeader
    def __init__(self, header: _Optional[_Union[ImportTransferHeader, _Mapping]] = ..., data: _Optional[bytes] = ...) -> None: ...

class ImportTransferResponse(_message.Message):
    __slots__ = ["transfer"]
    TRANSFER_FIELD_NUMBER: _ClassVar[int]
    transfer: _types_pb2.Transfer
    def __init__(self, transfer: _Optional[_Union[_types_pb2.Transfer, _Mapping]] = ...) -> None: ...

class ListTransfersRequest(_message.Message):
    __slots__ = ["label_selector", "page_size", "page_token"]
    LABEL_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    label_selector: str
    page_size: int
    page_token: str
    def __init__(self, label_selector: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListTransfersResponse(_message.Message):
    __slots__ = ["next_page_token", "transfers"]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    TRANSFERS_FIELD_NUMBER: _ClassVar[int]
    next_page_token: str
    transfers: _containers.RepeatedCompositeFieldContainer[_types_pb2.Transfer]
    def __init__(self, transfers: _Optional[_Iterable[_Union[_types_pb2.Transfer, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...
