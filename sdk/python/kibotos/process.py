"""Running processes in a Workspace: ws.exec and ws.exec_stream.

ExecProcess is one command (a command_id) that starts the process and
streams its output; its events are Started, Output and Exit here. A stream
cut by a transient fault is resumed with StreamProcessOutput from the
offsets already received, which is the API's reconnect, so no byte is
seen twice or lost (within the last MiB the guest keeps of each stream).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Dict, Iterator, Optional, Sequence, Union

import grpc

from kibotos import _rpc, errors
from kibotos.ctrl.v1 import process_pb2

STDOUT = "stdout"
STDERR = "stderr"

# SendProcessInput takes at most 1 MiB of data per call.
_INPUT_CHUNK = 1 << 20


@dataclass(frozen=True)
class Started:
    """The first event: the guest started the process."""

    process_id: str
    pid: int


@dataclass(frozen=True)
class Output:
    """A run of bytes from stdout or stderr.

    offset is the position of data's first byte in its stream. The guest
    keeps the last MiB of each stream and never holds the process back for
    a slow reader: an offset past the end of the stream's previous Output
    means the bytes between were dropped.
    """

    stream: str  # STDOUT or STDERR
    data: bytes
    offset: int = 0


@dataclass(frozen=True)
class Exit:
    """The last event: how the process ended.

    exit_code is a shell's $?: the exit status, or 128 plus the signal that
    ended the process (signal is then set).
    """

    exit_code: int
    signal: int
    cause: str  # EXITED, SIGNALED or MEMORY_KILLED


Event = Union[Started, Output, Exit]


@dataclass(frozen=True)
class ExecResult:
    """What ws.exec returns: the output (bytes, or str with text=True) and exit code.

    stdout_dropped and stderr_dropped count the bytes of each stream the
    guest dropped before they were read (it keeps the last MiB of each and
    never waits for a reader): when either is not zero, the output is not
    whole. Large output belongs in a file (ws.files.read).
    """

    process_id: str
    stdout: Union[bytes, str]
    stderr: Union[bytes, str]
    exit_code: int
    stdout_dropped: int = 0
    stderr_dropped: int = 0


def spec(
    argv: Sequence[str],
    env: Optional[Dict[str, str]],
    cwd: Optional[str],
    user: Optional[str],
    stdin: bool,
) -> process_pb2.ProcessSpec:
    if isinstance(argv, (str, bytes)):
        raise TypeError('argv is a list of strings, e.g. ["sh", "-c", "echo hi"]')
    return process_pb2.ProcessSpec(argv=list(argv), env=env or {}, cwd=cwd or "", user=user or "", stdin=stdin)


def stream(
    conn: _rpc.Connection,
    workspace_id: str,
    process_spec: process_pb2.ProcessSpec,
    input: Optional[bytes],
    timeout: Optional[float],
) -> Iterator[Event]:
    """The events of one ExecProcess, resumed across transient faults."""
    request = process_pb2.ExecProcessRequest(
        command=_rpc.command(_rpc.new_command_id()), workspace_id=workspace_id, spec=process_spec
    )
    process_id = ""
    offsets = {STDOUT: 0, STDERR: 0}
    retries = 0
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        try:
            for msg in _open(conn, request, process_id, offsets, deadline):
                event = _event(msg)
                if isinstance(event, Started):
                    process_id = event.process_id
                    if input is not None:
                        _send_input(conn, workspace_id, process_id, input)
                elif isinstance(event, Output):
                    offsets[event.stream] = msg.output.offset + len(event.data)
                if event is not None:
                    yield event
                if isinstance(event, Exit):
                    return
            raise errors.Unknown("the process's stream ended without its exit")
        except grpc.RpcError as e:
            err = errors.from_rpc_error(e)
            if isinstance(err, errors.DeadlineExceeded) and process_id:
                # As subprocess.run does on its timeout: the process goes too.
                _kill(conn, workspace_id, process_id)
            if not isinstance(err, errors.Unavailable) or retries == conn.retries:
                raise err from None
            _rpc.pause(retries)
            retries += 1


def _open(conn: _rpc.Connection, request, process_id: str, offsets, deadline: Optional[float]):
    """The stream to read: ExecProcess until the process started (the same
    command_id each time: a replay attaches to the process an earlier
    attempt may have started), then StreamProcessOutput from the offsets
    received. One deadline for the whole run, however often it resumes."""
    timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
    if not process_id:
        return conn.processes.ExecProcess(request, metadata=conn.metadata, timeout=timeout)
    resume = process_pb2.StreamProcessOutputRequest(
        workspace_id=request.workspace_id,
        process_id=process_id,
        stdout_offset=offsets[STDOUT],
        stderr_offset=offsets[STDERR],
    )
    return conn.processes.StreamProcessOutput(resume, metadata=conn.metadata, timeout=timeout)


def _event(msg) -> Optional[Event]:
    kind = msg.WhichOneof("event")
    if kind == "started":
        return Started(process_id=msg.started.process_id, pid=msg.started.pid)
    if kind == "output":
        name = STDERR if msg.output.stream == process_pb2.PROCESS_OUTPUT_STREAM_STDERR else STDOUT
        return Output(stream=name, data=msg.output.data, offset=msg.output.offset)
    if kind == "exit":
        s = msg.exit
        code = 128 + s.signal if s.signal else s.exit_code
        cause = process_pb2.ProcessEndCause.Name(s.cause).removeprefix("PROCESS_END_CAUSE_")
        return Exit(exit_code=code, signal=s.signal, cause=cause)
    return None  # keepalive


def _send_input(conn: _rpc.Connection, workspace_id: str, process_id: str, data: bytes) -> None:
    """Writes data to the process's stdin and closes it; each chunk at its
    offset, so a retried send writes nothing twice."""
    offset = 0
    while True:
        chunk = data[offset : offset + _INPUT_CHUNK]
        last = offset + len(chunk) >= len(data)
        req = process_pb2.SendProcessInputRequest(
            workspace_id=workspace_id, process_id=process_id, data=chunk, offset=offset, close=last
        )
        conn.retrying(lambda: conn.call(conn.processes.SendProcessInput, req))
        offset += len(chunk)
        if last:
            return


def _kill(conn: _rpc.Connection, workspace_id: str, process_id: str) -> None:
    req = process_pb2.SignalProcessRequest(
        workspace_id=workspace_id, process_id=process_id, signal=process_pb2.PROCESS_SIGNAL_SIGKILL
    )
    try:
        conn.call(conn.processes.SignalProcess, req)
    except errors.KibotosError:
        pass  # the timeout is what the caller hears about


def collect(events: Iterator[Event], text: bool) -> ExecResult:
    """ws.exec's result from ws.exec_stream's events."""
    process_id = ""
    out = {STDOUT: bytearray(), STDERR: bytearray()}
    end = {STDOUT: 0, STDERR: 0}  # the offset after each stream's last byte received
    dropped = {STDOUT: 0, STDERR: 0}
    for event in events:
        if isinstance(event, Started):
            process_id = event.process_id
        elif isinstance(event, Output):
            dropped[event.stream] += max(0, event.offset - end[event.stream])
            end[event.stream] = event.offset + len(event.data)
            out[event.stream] += event.data
        elif isinstance(event, Exit):
            stdout, stderr = bytes(out[STDOUT]), bytes(out[STDERR])
            if text:
                stdout, stderr = stdout.decode(errors="replace"), stderr.decode(errors="replace")
            return ExecResult(process_id=process_id, stdout=stdout, stderr=stderr, exit_code=event.exit_code,
                              stdout_dropped=dropped[STDOUT], stderr_dropped=dropped[STDERR])
    raise errors.Unknown("the process's stream ended without its exit")
