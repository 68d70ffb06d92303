from google.protobuf import timestamp_pb2 as _timestamp_pb2
from kibotos.ctrl.v1 import types_pb2 as _types_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor
PROCESS_END_CAUSE_EXITED: ProcessEndCause
PROCESS_END_CAUSE_MEMORY_KILLED: ProcessEndCause
PROCESS_END_CAUSE_SIGNALED: ProcessEndCause
PROCESS_END_CAUSE_UNSPECIFIED: ProcessEndCause
PROCESS_OUTPUT_STREAM_STDERR: ProcessOutputStream
PROCESS_OUTPUT_STREAM_STDOUT: ProcessOutputStream
PROCESS_OUTPUT_STREAM_UNSPECIFIED: ProcessOutputStream
PROCESS_SIGNAL_SIGCONT: ProcessSignal
PROCESS_SIGNAL_SIGHUP: ProcessSignal
PROCESS_SIGNAL_SIGINT: ProcessSignal
PROCESS_SIGNAL_SIGKILL: ProcessSignal
PROCESS_SIGNAL_SIGQUIT: ProcessSignal
PROCESS_SIGNAL_SIGSTOP: ProcessSignal
PROCESS_SIGNAL_SIGTERM: ProcessSignal
PROCESS_SIGNAL_SIGUSR1: ProcessSignal
PROCESS_SIGNAL_SIGUSR2: ProcessSignal
PROCESS_SIGNAL_UNSPECIFIED: ProcessSignal
PROCESS_STATE_EXITED: ProcessState
PROCESS_STATE_RUNNING: ProcessState
PROCESS_STATE_UNSPECIFIED: ProcessState

class ExecProcessRequest(_message.Message):
    __slots__ = ["command", "spec", "workspace_id"]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    command: _types_pb2.CommandMetadata
    spec: ProcessSpec
    workspace_id: str
    def __init__(self, command: _Optional[_Union[_types_pb2.CommandMetadata, _Mapping]] = ..., workspace_id: _Optional[str] = ..., spec: _Optional[_Union[ProcessSpec, _Mapping]] = ...) -> None: ...

class ExecProcessResponse(_message.Message):
    __slots__ = ["exit", "keepalive", "output", "started"]
    EXIT_FIELD_NUMBER: _ClassVar[int]
    KEEPALIVE_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    STARTED_FIELD_NUMBER: _ClassVar[int]
    exit: ProcessExitStatus
    keepalive: ProcessKeepalive
    output: ProcessOutputChunk
    started: ProcessStarted
    def __init__(self, started: _Optional[_Union[ProcessStarted, _Mapping]] = ..., output: _Optional[_Union[ProcessOutputChunk, _Mapping]] = ..., exit: _Optional[_Union[ProcessExitStatus, _Mapping]] = ..., keepalive: _Optional[_Union[ProcessKeepalive, _Mapping]] = ...) -> None: ...

class GetProcessRequest(_message.Message):
    __slots__ = ["process_id", "workspace_id"]
    PROCESS_ID_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    process_id: str
    workspace_id: str
    def __init__(self, workspace_id: _Optional[str] = ..., process_id: _Optional[str] = ...) -> None: ...

class GetProcessResponse(_message.Message):
    __slots__ = ["process"]
    PROCESS_FIELD_NUMBER: _ClassVar[int]
    process: Process
    def __init__(self, process: _Optional[_Union[Process, _Mapping]] = ...) -> None: ...

class ListProcessesRequest(_message.Message):
    __slots__ = ["include_exited", "workspace_id"]
    INCLUDE_EXITED_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    include_exited: bool
    workspace_id: str
    def __init__(self, workspace_id: _Optional[str] = ..., include_exited: bool = ...) -> None: ...

class ListProcessesResponse(_message.Message):
    __slots__ = ["processes"]
    PROCESSES_FIELD_NUMBER: _ClassVar[int]
    processes: _containers.RepeatedCompositeFieldContainer[Process]
    def __init__(self, processes: _Optional[_Iterable[_Union[Process, _Mapping]]] = ...) -> None: ...

class Process(_message.Message):
    __slots__ = ["argv", "command_id", "cwd", "env_keys", "exit", "generation", "pid", "process_id", "pty", "started_at", "state", "stderr_end_offset", "stdin_offset", "stdin_open", "stdout_end_offset", "user"]
    ARGV_FIELD_NUMBER: _ClassVar[int]
    COMMAND_ID_FIELD_NUMBER: _ClassVar[int]
    CWD_FIELD_NUMBER: _ClassVar[int]
    ENV_KEYS_FIELD_NUMBER: _ClassVar[int]
    EXIT_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    PROCESS_ID_FIELD_NUMBER: _ClassVar[int]
    PTY_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    STDERR_END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    STDIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    STDIN_OPEN_FIELD_NUMBER: _ClassVar[int]
    STDOUT_END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    argv: _containers.RepeatedScalarFieldContainer[str]
    command_id: str
    cwd: str
    env_keys: _containers.RepeatedScalarFieldContainer[str]
    exit: ProcessExitStatus
    generation: int
    pid: int
    process_id: str
    pty: ProcessPty
    started_at: _timestamp_pb2.Timestamp
    state: ProcessState
    stderr_end_offset: int
    stdin_offset: int
    stdin_open: bool
    stdout_end_offset: int
    user: str
    def __init__(self, process_id: _Optional[str] = ..., pid: _Optional[int] = ..., command_id: _Optional[str] = ..., generation: _Optional[int] = ..., argv: _Optional[_Iterable[str]] = ..., env_keys: _Optional[_Iterable[str]] = ..., cwd: _Optional[str] = ..., user: _Optional[str] = ..., pty: _Optional[_Union[ProcessPty, _Mapping]] = ..., stdin_open: bool = ..., state: _Optional[_Union[ProcessState, str]] = ..., started_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., exit: _Optional[_Union[ProcessExitStatus, _Mapping]] = ..., stdout_end_offset: _Optional[int] = ..., stderr_end_offset: _Optional[int] = ..., stdin_offset: _Optional[int] = ...) -> None: ...

class ProcessExitStatus(_message.Message):
    __slots__ = ["cause", "core_dumped", "ended_at", "exit_code", "signal"]
    CAUSE_FIELD_NUMBER: _ClassVar[int]
    CORE_DUMPED_FIELD_NUMBER: _ClassVar[int]
    ENDED_AT_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    SIGNAL_FIELD_NUMBER: _ClassVar[int]
    cause: ProcessEndCause
    core_dumped: bool
    ended_at: _timestamp_pb2.Timestamp
    exit_code: int
    signal: int
    def __init__(self, cause: _Optional[_Union[ProcessEndCause, str]] = ..., exit_code: _Optional[int] = ..., signal: _Optional[int] = ..., core_dumped: bool = ..., ended_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ProcessKeepalive(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class ProcessOutputChunk(_message.Message):
    __slots__ = ["data", "offset", "stream"]
    DATA_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    STREAM_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    offset: int
    stream: ProcessOutputStream
    def __init__(self, stream: _Optional[_Union[ProcessOutputStream, str]] = ..., offset: _Optional[int] = ..., data: _Optional[bytes] = ...) -> None: ...

class ProcessPty(_message.Message):
    __slots__ = ["cols", "rows"]
    COLS_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    cols: int
    rows: int
    def __init__(self, rows: _Optional[int] = ..., cols: _Optional[int] = ...) -> None: ...

class ProcessSpec(_message.Message):
    __slots__ = ["argv", "cwd", "env", "pty", "stdin", "user"]
    class EnvEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ARGV_FIELD_NUMBER: _ClassVar[int]
    CWD_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    PTY_FIELD_NUMBER: _ClassVar[int]
    STDIN_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    argv: _containers.RepeatedScalarFieldContainer[str]
    cwd: str
    env: _containers.ScalarMap[str, str]
    pty: ProcessPty
    stdin: bool
    user: str
    def __init__(self, argv: _Optional[_Iterable[str]] = ..., env: _Optional[_Mapping[str, str]] = ..., cwd: _Optional[str] = ..., user: _Optional[str] = ..., pty: _Optional[_Union[ProcessPty, _Mapping]] = ..., stdin: bool = ...) -> None: ...

class ProcessStarted(_message.Message):
    __slots__ = ["pid", "process_id", "started_at"]
    PID_FIELD_NUMBER: _ClassVar[int]
    PROCESS_ID_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    pid: int
    process_id: str
    started_at: _timestamp_pb2.Timestamp
    def __init__(self, process_id: _Optional[str] = ..., pid: _Optional[int] = ..., started_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ResizeProcessPtyRequest(_message.Message):
    __slots__ = ["process_id", "size", "workspace_id"]
    PROCESS_ID_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    process_id: str
    size: ProcessPty
    workspace_id: str
    def __init__(self, workspace_id: _Optional[str] = ..., process_id: _Optional[str] = ..., size: _Optional[_Union[ProcessPty, _Mapping]] = ...) -> None: ...

class ResizeProcessPtyResponse(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class SendProcessInputRequest(_message.Message):
    __slots__ = ["close", "data", "offset", "process_id", "workspace_id"]
    CLOSE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    PROCESS_ID_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    close: bool
    data: bytes
    offset: int
    process_id: str
    workspace_id: str
    def __init__(self, workspace_id: _Optional[str] = ..., process_id: _Optional[str] = ..., data: _Optional[bytes] = ..., offset: _Optional[int] = ..., close: bool = ...) -> None: ...

class SendProcessInputResponse(_message.Message):
    __slots__ = ["stdin_offset"]
    STDIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    stdin_offset: int
    def __init__(self, stdin_offset: _Optional[int] = ...) -> None: ...

class SignalProcessRequest(_message.Message):
    __slots__ = ["process_id", "signal", "workspace_id"]
    PROCESS_ID_FIELD_NUMBER: _ClassVar[int]
    SIGNAL_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    process_id: str
    signal: ProcessSignal
    workspace_id: str
    def __init__(self, workspace_id: _Optional[str] = ..., process_id: _Optional[str] = ..., signal: _Optional[_Union[ProcessSignal, str]] = ...) -> None: ...

class SignalProcessResponse(_message.Message):
    __slots__ = ["delivered"]
    DELIVERED_FIELD_NUMBER: _ClassVar[int]
    delivered: bool
    def __init__(self, delivered: bool = ...) -> None: ...

class StartProcessRequest(_message.Message):
    __slots__ = ["command", "spec", "workspace_id"]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    command: _types_pb2.CommandMetadata
    spec: ProcessSpec
    workspace_id: str
    def __init__(self, command: _Optional[_Union[_types_pb2.CommandMetadata, _Mapping]] = ..., workspace_id: _Optional[str] = ..., spec: _Optional[_Union[ProcessSpec, _Mapping]] = ...) -> None: ...

class StartProcessResponse(_message.Message):
    __slots__ = ["generation", "pid", "process_id", "started_at"]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    PROCESS_ID_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    generation: int
    pid: int
    process_id: str
    started_at: _timestamp_pb2.Timestamp
    def __init__(self, process_id: _Optional[str] = ..., pid: _Optional[int] = ..., started_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., generation: _Optional[int] = ...) -> None: ...

class StreamProcessOutputRequest(_message.Message):
    __slots__ = ["process_id", "snapshot", "stderr_offset", "stdout_offset", "workspace_id"]
    PROCESS_ID_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    STDERR_OFFSET_FIELD_NUMBER: _ClassVar[int]
    STDOUT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    process_id: str
    snapshot: bool
    stderr_offset: int
    stdout_offset: int
    workspace_id: str
    def __init__(self, workspace_id: _Optional[str] = ..., process_id: _Optional[str] = ..., stdout_offset: _Optional[int] = ..., stderr_offset: _Optional[int] = ..., snapshot: bool = ...) -> None: ...

class StreamProcessOutputResponse(_message.Message):
    __slots__ = ["exit", "keepalive", "output"]
    EXIT_FIELD_NUMBER: _ClassVar[int]
    KEEPALIVE_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    exit: ProcessExitStatus
    keepalive: ProcessKeepalive
    output: ProcessOutputChunk
    def __init__(self, output: _Optional[_Union[ProcessOutputChunk, _Mapping]] = ..., exit: _Optional[_Union[ProcessExitStatus, _Mapping]] = ..., keepalive: _Optional[_Union[ProcessKeepalive, _Mapping]] = ...) -> None: ...

class WaitProcessRequest(_message.Message):
    __slots__ = ["process_id", "workspace_id"]
    PROCESS_ID_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    process_id: str
    workspace_id: str
    def __init__(self, workspace_id: _Optional[str] = ..., process_id: _Optional[str] = ...) -> None: ...

class WaitProcessResponse(_message.Message):
    __slots__ = ["exit"]
    EXIT_FIELD_NUMBER: _ClassVar[int]
    exit: ProcessExitStatus
    def __init__(self, exit: _Optional[_Union[ProcessExitStatus, _Mapping]] = ...) -> None: ...

class ProcessState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class ProcessOutputStream(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class ProcessSignal(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class ProcessEndCause(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
