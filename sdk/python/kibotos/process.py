"""Running processes in a Workspace: ws.exec, ws.exec_stream and ws.processes.

ExecProcess is one command (a command_id) that starts the process and
streams its output; its events are Started, Output and Exit here. A stream
cut by a transient fault is resumed with StreamProcessOutput from the
offsets already received, which is the API's reconnect, so no byte is
seen twice or lost (within the last MiB the guest keeps of each stream).
ws.processes starts a process in the background (StartProcess) and finds
it again by its id: its output, input, signals and exit.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Dict, Iterator, List, Optional, Sequence, Tuple, Union

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
    process_spec: Optional[process_pb2.ProcessSpec],
    input: Optional[bytes],
    timeout: Optional[float],
    process_id: str = "",
) -> Iterator[Event]:
    """The events of one ExecProcess, resumed across transient faults; with
    process_id, those of a process already started, from its first byte
    retained (StreamProcessOutput: no Started)."""
    request = process_pb2.ExecProcessRequest(
        command=_rpc.command(_rpc.new_command_id()), workspace_id=workspace_id, spec=process_spec
    )
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
        return _exit(msg.exit)
    return None  # keepalive


def _exit(s: process_pb2.ProcessExitStatus) -> Exit:
    code = 128 + s.signal if s.signal else s.exit_code
    cause = process_pb2.ProcessEndCause.Name(s.cause).removeprefix("PROCESS_END_CAUSE_")
    return Exit(exit_code=code, signal=s.signal, cause=cause)


def _send_input(conn: _rpc.Connection, workspace_id: str, process_id: str, data: bytes, offset: int = 0,
                close: bool = True) -> int:
    """Writes data to the process's stdin at offset (the stdin bytes written
    before it) and, with close, closes it; each chunk at its offset, so a
    retried send writes nothing twice. Returns the offset after data."""
    start = offset
    while True:
        chunk = data[offset - start : offset - start + _INPUT_CHUNK]
        last = offset - start + len(chunk) >= len(data)
        req = process_pb2.SendProcessInputRequest(
            workspace_id=workspace_id, process_id=process_id, data=chunk, offset=offset, close=close and last
        )
        conn.retrying(lambda: conn.call(conn.processes.SendProcessInput, req))
        offset += len(chunk)
        if last:
            return offset


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


def signal_value(sig: Union[str, int]) -> int:
    """The ProcessSignal of "TERM", "SIGTERM" or 15 (HUP, INT, QUIT, KILL,
    USR1, USR2, TERM, CONT, STOP: the signals the API delivers)."""
    names = {v: n.removeprefix("PROCESS_SIGNAL_SIG") for n, v in process_pb2.ProcessSignal.items() if v}
    if isinstance(sig, int) and sig in names:
        return sig
    if isinstance(sig, str):
        name = sig.upper().removeprefix("SIG")
        for value, n in names.items():
            if n == name:
                return value
    raise ValueError(f"signal {sig!r}: want one of {', '.join(names.values())} (or its number)")


class Process:
    """A process in a Workspace's current execution, started in the
    background (ws.processes.start) or found by its id (get, list).

    info is the API's Process message as last read (refresh() reads it
    again): argv, state, exit, the bytes each stream produced, ...
    """

    def __init__(self, conn: _rpc.Connection, workspace_id: str, info: process_pb2.Process):
        self._conn = conn
        self._workspace_id = workspace_id
        self.info = info
        self._stdin_offset = info.stdin_offset

    @property
    def id(self) -> str:
        return self.info.process_id

    @property
    def pid(self) -> int:
        return self.info.pid

    @property
    def state(self) -> str:
        """RUNNING or EXITED, as last read."""
        return process_pb2.ProcessState.Name(self.info.state).removeprefix("PROCESS_STATE_")

    def __repr__(self) -> str:
        return f"Process({self.id!r}, pid={self.pid}, state={self.state!r})"

    def refresh(self) -> "Process":
        req = process_pb2.GetProcessRequest(workspace_id=self._workspace_id, process_id=self.id)
        self.info = self._conn.retrying(lambda: self._conn.call(self._conn.processes.GetProcess, req)).process
        return self

    def signal(self, sig: Union[str, int] = "TERM") -> bool:
        """Sends sig to the process's group (its children too). False when
        the process had already ended, so a second kill is harmless."""
        req = process_pb2.SignalProcessRequest(workspace_id=self._workspace_id, process_id=self.id,
                                               signal=signal_value(sig))
        return self._conn.retrying(lambda: self._conn.call(self._conn.processes.SignalProcess, req)).delivered

    def kill(self) -> bool:
        """signal("KILL")."""
        return self.signal("KILL")

    def wait(self, timeout: Optional[float] = None) -> Exit:
        """Waits until the process ends and returns how. timeout (seconds)
        raises DeadlineExceeded and leaves the process running."""
        req = process_pb2.WaitProcessRequest(workspace_id=self._workspace_id, process_id=self.id)
        deadline = None if timeout is None else time.monotonic() + timeout

        def attempt():
            left = None if deadline is None else max(0.001, deadline - time.monotonic())
            try:
                return self._conn.processes.WaitProcess(req, metadata=self._conn.metadata, timeout=left)
            except grpc.RpcError as e:
                raise errors.from_rpc_error(e) from None

        for n in range(self._conn.retries + 1):
            try:
                return _exit(attempt().exit)
            except errors.Unavailable:  # ctrl restarting: the process runs on
                if n == self._conn.retries:
                    raise
                _rpc.pause(n)
        raise AssertionError("unreachable")

    def output(self) -> Iterator[Event]:
        """Its output from the first byte the guest retains (the last MiB of
        each stream), then live, then its Exit: Output events, then Exit."""
        return stream(self._conn, self._workspace_id, None, None, None, process_id=self.id)

    def resize(self, columns: int, lines: int) -> None:
        """Sets its terminal's size (started with pty=) and sends it
        SIGWINCH; a process without a pty, or ended, is
        FailedPrecondition."""
        req = process_pb2.ResizeProcessPtyRequest(workspace_id=self._workspace_id, process_id=self.id,
                                                  size=process_pb2.ProcessPty(cols=columns, rows=lines))
        self._conn.retrying(lambda: self._conn.call(self._conn.processes.ResizeProcessPty, req))

    def send_input(self, data: Union[bytes, str], *, close: bool = False) -> None:
        """Writes data to the process's stdin (started with stdin=True);
        close=True closes it after, as EOF."""
        if isinstance(data, str):
            data = data.encode()
        self._stdin_offset = _send_input(self._conn, self._workspace_id, self.id, data, self._stdin_offset, close)


class Processes:
    """The processes of one Workspace's current execution: ws.processes."""

    def __init__(self, conn: _rpc.Connection, workspace_id: str):
        self._conn = conn
        self._id = workspace_id

    def start(
        self,
        argv: Sequence[str],
        *,
        env: Optional[Dict[str, str]] = None,
        cwd: Optional[str] = None,
        user: Optional[str] = None,
        stdin: bool = False,
        pty: Optional[Tuple[int, int]] = None,
    ) -> Process:
        """Starts argv (no shell) in the background and returns once the
        guest executed it; stdin=True keeps its stdin open for send_input.
        pty=(columns, lines), os.get_terminal_size()'s order, runs it on a
        pseudo-terminal of that size: stdout and stderr are then one
        stream (reported as stdout), input is always accepted, and
        resize() changes the size."""
        req = spec(argv, env, cwd, user, stdin)
        if pty is not None:
            cols, rows = pty
            req.pty.CopyFrom(process_pb2.ProcessPty(cols=cols, rows=rows))
        res = self._conn.mutate(
            self._conn.processes.StartProcess,
            lambda cmd: process_pb2.StartProcessRequest(command=cmd, workspace_id=self._id, spec=req),
        )
        return self.get(res.process_id)

    def get(self, process_id: str) -> Process:
        """A process of the current execution, by its id."""
        req = process_pb2.GetProcessRequest(workspace_id=self._id, process_id=process_id)
        res = self._conn.retrying(lambda: self._conn.call(self._conn.processes.GetProcess, req))
        return Process(self._conn, self._id, res.process)

    def list(self, *, include_exited: bool = False) -> List[Process]:
        """The processes started through the API in the current execution,
        oldest first (running ones only, unless include_exited)."""
        req = process_pb2.ListProcessesRequest(workspace_id=self._id, include_exited=include_exited)
        res = self._conn.retrying(lambda: self._conn.call(self._conn.processes.ListProcesses, req))
        return [Process(self._conn, self._id, p) for p in res.processes]
