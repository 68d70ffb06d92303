from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class GetWorkspaceMetricsRequest(_message.Message):
    __slots__ = ["workspace_id"]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    workspace_id: str
    def __init__(self, workspace_id: _Optional[str] = ...) -> None: ...

class GetWorkspaceMetricsResponse(_message.Message):
    __slots__ = ["sample"]
    SAMPLE_FIELD_NUMBER: _ClassVar[int]
    sample: MetricsSample
    def __init__(self, sample: _Optional[_Union[MetricsSample, _Mapping]] = ...) -> None: ...

class MetricsFilesystem(_message.Message):
    __slots__ = ["capacity_bytes", "capacity_inodes", "path", "used_bytes", "used_inodes"]
    CAPACITY_BYTES_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_INODES_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    USED_BYTES_FIELD_NUMBER: _ClassVar[int]
    USED_INODES_FIELD_NUMBER: _ClassVar[int]
    capacity_bytes: int
    capacity_inodes: int
    path: str
    used_bytes: int
    used_inodes: int
    def __init__(self, path: _Optional[str] = ..., capacity_bytes: _Optional[int] = ..., used_bytes: _Optional[int] = ..., capacity_inodes: _Optional[int] = ..., used_inodes: _Optional[int] = ...) -> None: ...

class MetricsSample(_message.Message):
    __slots__ = ["cpu_limit_millis", "cpu_usage_millis", "filesystems", "generation", "memory_total_bytes", "memory_used_bytes", "network_received_bytes", "network_sent_bytes", "process_count", "sampled_at", "uptime"]
    CPU_LIMIT_MILLIS_FIELD_NUMBER: _ClassVar[int]
    CPU_USAGE_MILLIS_FIELD_NUMBER: _ClassVar[int]
    FILESYSTEMS_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    MEMORY_TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    MEMORY_USED_BYTES_FIELD_NUMBER: _ClassVar[int]
    NETWORK_RECEIVED_BYTES_FIELD_NUMBER: _ClassVar[int]
    NETWORK_SENT_BYTES_FIELD_NUMBER: _ClassVar[int]
    PROCESS_COUNT_FIELD_NUMBER: _ClassVar[int]
    SAMPLED_AT_FIELD_NUMBER: _ClassVar[int]
    UPTIME_FIELD_NUMBER: _ClassVar[int]
    cpu_limit_millis: int
    cpu_usage_millis: int
    filesystems: _containers.RepeatedCompositeFieldContainer[MetricsFilesystem]
    generation: int
    memory_total_bytes: int
    memory_used_bytes: int
    network_received_bytes: int
    network_sent_bytes: int
    process_count: int
    sampled_at: _timestamp_pb2.Timestamp
    uptime: _duration_pb2.Duration
    def __init__(self, generation: _Optional[int] = ..., sampled_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., uptime: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., cpu_limit_millis: _Optional[int] = ..., cpu_usage_millis: _Optional[int] = ..., memory_total_bytes: _Optional[int] = ..., memory_used_bytes: _Optional[int] = ..., filesystems: _Optional[_Iterable[_Union[MetricsFilesystem, _Mapping]]] = ..., network_received_bytes: _Optional[int] = ..., network_sent_bytes: _Optional[int] = ..., process_count: _Optional[int] = ...) -> None: ...
