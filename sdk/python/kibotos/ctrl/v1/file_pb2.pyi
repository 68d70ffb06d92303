from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor
FILE_EVENT_KIND_ATTRIBUTES_CHANGED: FileEventKind
FILE_EVENT_KIND_CREATED: FileEventKind
FILE_EVENT_KIND_DELETED: FileEventKind
FILE_EVENT_KIND_MODIFIED: FileEventKind
FILE_EVENT_KIND_OVERFLOW: FileEventKind
FILE_EVENT_KIND_RENAMED: FileEventKind
FILE_EVENT_KIND_UNSPECIFIED: FileEventKind
FILE_TYPE_DIRECTORY: FileType
FILE_TYPE_OTHER: FileType
FILE_TYPE_REGULAR: FileType
FILE_TYPE_SYMLINK: FileType
FILE_TYPE_UNSPECIFIED: FileType

class DeleteFileRequest(_message.Message):
    __slots__ = ["allow_missing", "path", "recursive", "user", "workspace_id"]
    ALLOW_MISSING_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    RECURSIVE_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    allow_missing: bool
    path: str
    recursive: bool
    user: str
    workspace_id: str
    def __init__(self, workspace_id: _Optional[str] = ..., path: _Optional[str] = ..., recursive: bool = ..., allow_missing: bool = ..., user: _Optional[str] = ...) -> None: ...

class DeleteFileResponse(_message.Message):
    __slots__ = ["deleted"]
    DELETED_FIELD_NUMBER: _ClassVar[int]
    deleted: bool
    def __init__(self, deleted: bool = ...) -> None: ...

class FileEvent(_message.Message):
    __slots__ = ["kind", "new_path", "observed_at", "path", "type"]
    KIND_FIELD_NUMBER: _ClassVar[int]
    NEW_PATH_FIELD_NUMBER: _ClassVar[int]
    OBSERVED_AT_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    kind: FileEventKind
    new_path: str
    observed_at: _timestamp_pb2.Timestamp
    path: str
    type: FileType
    def __init__(self, kind: _Optional[_Union[FileEventKind, str]] = ..., path: _Optional[str] = ..., new_path: _Optional[str] = ..., type: _Optional[_Union[FileType, str]] = ..., observed_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class FileInfo(_message.Message):
    __slots__ = ["gid", "group", "mode", "modified_at", "name", "owner", "path", "size_bytes", "symlink_target", "type", "uid"]
    GID_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    MODIFIED_AT_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    SYMLINK_TARGET_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    UID_FIELD_NUMBER: _ClassVar[int]
    gid: int
    group: str
    mode: int
    modified_at: _timestamp_pb2.Timestamp
    name: str
    owner: str
    path: str
    size_bytes: int
    symlink_target: str
    type: FileType
    uid: int
    def __init__(self, path: _Optional[str] = ..., name: _Optional[str] = ..., type: _Optional[_Union[FileType, str]] = ..., size_bytes: _Optional[int] = ..., mode: _Optional[int] = ..., uid: _Optional[int] = ..., gid: _Optional[int] = ..., owner: _Optional[str] = ..., group: _Optional[str] = ..., modified_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., symlink_target: _Optional[str] = ...) -> None: ...

class FileWatchKeepalive(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class FileWatchStarted(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class ListDirectoryRequest(_message.Message):
    __slots__ = ["depth", "page_size", "page_token", "path", "user", "workspace_id"]
    DEPTH_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    depth: int
    page_size: int
    page_token: str
    path: str
    user: str
    workspace_id: str
    def __init__(self, workspace_id: _Optional[str] = ..., path: _Optional[str] = ..., depth: _Optional[int] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., user: _Optional[str] = ...) -> None: ...

class ListDirectoryResponse(_message.Message):
    __slots__ = ["entries", "next_page_token"]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[FileInfo]
    next_page_token: str
    def __init__(self, entries: _Optional[_Iterable[_Union[FileInfo, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class MakeDirectoryRequest(_message.Message):
    __slots__ = ["create_parents", "mode", "path", "user", "workspace_id"]
    CREATE_PARENTS_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    create_parents: bool
    mode: int
    path: str
    user: str
    workspace_id: str
    def __init__(self, workspace_id: _Optional[str] = ..., path: _Optional[str] = ..., mode: _Optional[int] = ..., create_parents: bool = ..., user: _Optional[str] = ...) -> None: ...

class MakeDirectoryResponse(_message.Message):
    __slots__ = ["info"]
    INFO_FIELD_NUMBER: _ClassVar[int]
    info: FileInfo
    def __init__(self, info: _Optional[_Union[FileInfo, _Mapping]] = ...) -> None: ...

class MoveFileRequest(_message.Message):
    __slots__ = ["create_parents", "destination_path", "overwrite", "source_path", "user", "workspace_id"]
    CREATE_PARENTS_FIELD_NUMBER: _ClassVar[int]
    DESTINATION_PATH_FIELD_NUMBER: _ClassVar[int]
    OVERWRITE_FIELD_NUMBER: _ClassVar[int]
    SOURCE_PATH_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    create_parents: bool
    destination_path: str
    overwrite: bool
    source_path: str
    user: str
    workspace_id: str
    def __init__(self, workspace_id: _Optional[str] = ..., source_path: _Optional[str] = ..., destination_path: _Optional[str] = ..., overwrite: bool = ..., create_parents: bool = ..., user: _Optional[str] = ...) -> None: ...

class MoveFileResponse(_message.Message):
    __slots__ = ["info"]
    INFO_FIELD_NUMBER: _ClassVar[int]
    info: FileInfo
    def __init__(self, info: _Optional[_Union[FileInfo, _Mapping]] = ...) -> None: ...

class ReadFileRequest(_message.Message):
    __slots__ = ["length", "offset", "path", "user", "workspace_id"]
    LENGTH_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    length: int
    offset: int
    path: str
    user: str
    workspace_id: str
    def __init__(self, workspace_id: _Optional[str] = ..., path: _Optional[str] = ..., offset: _Optional[int] = ..., length: _Optional[int] = ..., user: _Optional[str] = ...) -> None: ...

class ReadFileResponse(_message.Message):
    __slots__ = ["data", "info", "offset"]
    DATA_FIELD_NUMBER: _ClassVar[int]
    INFO_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    info: FileInfo
    offset: int
    def __init__(self, info: _Optional[_Union[FileInfo, _Mapping]] = ..., offset: _Optional[int] = ..., data: _Optional[bytes] = ...) -> None: ...

class StatFileRequest(_message.Message):
    __slots__ = ["follow_symlinks", "path", "user", "workspace_id"]
    FOLLOW_SYMLINKS_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    follow_symlinks: bool
    path: str
    user: str
    workspace_id: str
    def __init__(self, workspace_id: _Optional[str] = ..., path: _Optional[str] = ..., follow_symlinks: bool = ..., user: _Optional[str] = ...) -> None: ...

class StatFileResponse(_message.Message):
    __slots__ = ["info"]
    INFO_FIELD_NUMBER: _ClassVar[int]
    info: FileInfo
    def __init__(self, info: _Optional[_Union[FileInfo, _Mapping]] = ...) -> None: ...

class WatchDirectoryRequest(_message.Message):
    __slots__ = ["path", "recursive", "user", "workspace_id"]
    PATH_FIELD_NUMBER: _ClassVar[int]
    RECURSIVE_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    path: str
    recursive: bool
    user: str
    workspace_id: str
    def __init__(self, workspace_id: _Optional[str] = ..., path: _Optional[str] = ..., recursive: bool = ..., user: _Optional[str] = ...) -> None: ...

class WatchDirectoryResponse(_message.Message):
    __slots__ = ["event", "keepalive", "started"]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    KEEPALIVE_FIELD_NUMBER: _ClassVar[int]
    STARTED_FIELD_NUMBER: _ClassVar[int]
    event: FileEvent
    keepalive: FileWatchKeepalive
    started: FileWatchStarted
    def __init__(self, started: _Optional[_Union[FileWatchStarted, _Mapping]] = ..., event: _Optional[_Union[FileEvent, _Mapping]] = ..., keepalive: _Optional[_Union[FileWatchKeepalive, _Mapping]] = ...) -> None: ...

class WriteFileHeader(_message.Message):
    __slots__ = ["append", "create_parents", "exclusive", "mode", "path", "size_bytes", "user"]
    APPEND_FIELD_NUMBER: _ClassVar[int]
    CREATE_PARENTS_FIELD_NUMBER: _ClassVar[int]
    EXCLUSIVE_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    append: bool
    create_parents: bool
    exclusive: bool
    mode: int
    path: str
    size_bytes: int
    user: str
    def __init__(self, path: _Optional[str] = ..., mode: _Optional[int] = ..., create_parents: bool = ..., append: bool = ..., exclusive: bool = ..., size_bytes: _Optional[int] = ..., user: _Optional[str] = ...) -> None: ...

class WriteFileRequest(_message.Message):
    __slots__ = ["data", "header", "workspace_id"]
    DATA_FIELD_NUMBER: _ClassVar[int]
    HEADER_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    header: WriteFileHeader
    workspace_id: str
    def __init__(self, workspace_id: _Optional[str] = ..., header: _Optional[_Union[WriteFileHeader, _Mapping]] = ..., data: _Optional[bytes] = ...) -> None: ...

class WriteFileResponse(_message.Message):
    __slots__ = ["info", "written_bytes"]
    INFO_FIELD_NUMBER: _ClassVar[int]
    WRITTEN_BYTES_FIELD_NUMBER: _ClassVar[int]
    info: FileInfo
    written_bytes: int
    def __init__(self, info: _Optional[_Union[FileInfo, _Mapping]] = ..., written_bytes: _Optional[int] = ...) -> None: ...

class FileType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class FileEventKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
