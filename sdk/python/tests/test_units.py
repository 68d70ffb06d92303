"""Unit tests of the SDK's own rules, without a server."""

from __future__ import annotations

import time

import grpc
import pytest

from kibotos import _config, _rpc, errors, process
from kibotos.ctrl.v1 import process_pb2, transfer_pb2, types_pb2, workspace_pb2
from kibotos.workspace import Workspaces, parse_size


def test_parse_size():
    assert parse_size("512Mi") == 512 << 20
    assert parse_size("512MiB") == 512 << 20
    assert parse_size("1G") == 1 << 30
    assert parse_size("1.5g") == 3 << 29
    assert parse_size(4096) == 4096
    for bad in ("512", "Mi", "12x", ""):
        with pytest.raises(ValueError):
            parse_size(bad)


def test_config_precedence(tmp_path, monkeypatch):
    for k in ("KIBOTOS_WORKSPACE_ENDPOINT", "KIBOTOS_TOKEN", "KIBOTOS_CONFIG"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("KIBOTOS_HOME", str(tmp_path))
    (tmp_path / "config.env").write_text(
        "# written by kibotos\n"
        "KIBOTOS_WORKSPACE_ENDPOINT=http://127.0.0.1:1\n"
        "export KIBOTOS_TOKEN='kbt_a'\\''b'\n"
    )
    assert _config.load() == _config.Config("http://127.0.0.1:1", "kbt_a'b")
    monkeypatch.setenv("KIBOTOS_TOKEN", "kbt_env")
    assert _config.load().api_key == "kbt_env"
    assert _config.load(api_key="kbt_arg").api_key == "kbt_arg"
    monkeypatch.setenv("KIBOTOS_HOME", str(tmp_path / "none"))
    monkeypatch.delenv("KIBOTOS_TOKEN")
    with pytest.raises(ValueError, match="no workspace endpoint"):
        _config.load()
    with pytest.raises(FileNotFoundError):
        _config.load(config_file=tmp_path / "missing.env")


def test_endpoints():
    for bad in ("ftp://h:1", "http://h:1/prefix"):
        with pytest.raises(ValueError):
            _rpc.channel_for(bad)


class _RpcError(grpc.RpcError, grpc.Call):
    """What grpcio raises for a failed call, reduced to what the SDK reads."""

    def __init__(self, code, trailers=()):
        self._code, self._trailers = code, trailers

    def code(self):
        return self._code

    def details(self):
        return "refused"

    def trailing_metadata(self):
        return self._trailers

    def initial_metadata(self):
        return ()

    def time_remaining(self):
        return None

    def cancel(self):
        return False

    def is_active(self):
        return False

    def add_callback(self, cb):
        return False


def test_a_retried_command_keeps_its_command_id(monkeypatch):
    monkeypatch.setattr(_rpc, "_BACKOFF", 0)
    conn = _rpc.Connection("http://127.0.0.1:1", "kbt_x", timeout=1, retries=3)
    sent = []

    def create(request, metadata, timeout):
        sent.append(request.command.command_id)
        if len(sent) < 3:
            raise _RpcError(grpc.StatusCode.UNAVAILABLE)
        return workspace_pb2.CreateWorkspaceResponse()

    conn.mutate(create, lambda c: workspace_pb2.CreateWorkspaceRequest(command=c))
    assert len(sent) == 3 and len(set(sent)) == 1 and sent[0].startswith("py-")

    again = []
    conn.mutate(lambda r, metadata, timeout: again.append(r.command.command_id), lambda c: workspace_pb2.CreateWorkspaceRequest(command=c))
    assert again[0] != sent[0], "each call is a new command"


def test_a_list_follows_every_page_and_retries_a_page(monkeypatch):
    monkeypatch.setattr(_rpc, "_BACKOFF", 0)
    conn = _rpc.Connection("http://127.0.0.1:1", "kbt_x", timeout=1, retries=3)
    pages = {"": (["ws-1", "ws-2"], "t2"), "t2": (["ws-3"], "t3"), "t3": ([], "")}
    asked = []

    def list_workspaces(request, metadata, timeout):
        asked.append(request.page_token)
        if len(asked) == 2:
            raise _RpcError(grpc.StatusCode.UNAVAILABLE)
        ids, token = pages[request.page_token]
        return workspace_pb2.ListWorkspacesResponse(
            workspaces=[types_pb2.Workspace(workspace_id=i) for i in ids], next_page_token=token
        )

    req = workspace_pb2.ListWorkspacesRequest(label_selector="team=ml", page_size=1000)
    got = conn.every_page(list_workspaces, req, lambda res: (w.workspace_id for w in res.workspaces))
    assert got == ["ws-1", "ws-2", "ws-3"]
    assert asked == ["", "t2", "t2", "t3"], "the page cut by unavailable is read again, the others once"


def test_retries_end(monkeypatch):
    monkeypatch.setattr(_rpc, "_BACKOFF", 0)
    conn = _rpc.Connection("http://127.0.0.1:1", "", timeout=1, retries=2)
    calls = []

    def refuse(request, metadata, timeout):
        calls.append(request)
        raise _RpcError(grpc.StatusCode.UNAVAILABLE)

    with pytest.raises(errors.Unavailable):
        conn.mutate(refuse, lambda c: workspace_pb2.StopWorkspaceRequest(command=c))
    assert len(calls) == 3

    def invalid(request, metadata, timeout):
        calls.append(request)
        raise _RpcError(grpc.StatusCode.INVALID_ARGUMENT)

    calls.clear()
    with pytest.raises(errors.InvalidArgument):
        conn.mutate(invalid, lambda c: workspace_pb2.StopWorkspaceRequest(command=c))
    assert len(calls) == 1, "a refusal is not retried"


def test_error_detail_from_trailers():
    detail = types_pb2.ErrorDetail(
        stage=types_pb2.FAILURE_STAGE_PLACING, reason=types_pb2.FAILURE_REASON_UNAVAILABLE, retryable=True, field="x"
    )
    status = errors._Status(code=14, message="refused")
    status.details.add().Pack(detail)
    err = errors.from_rpc_error(
        _RpcError(grpc.StatusCode.UNAVAILABLE, (("other-bin", b"\0"), ("grpc-status-details-bin", status.SerializeToString())))
    )
    assert isinstance(err, errors.Unavailable)
    assert (err.stage, err.reason, err.retryable, err.field) == ("PLACING", "UNAVAILABLE", True, "x")
    assert errors.from_rpc_error(_RpcError(grpc.StatusCode.NOT_FOUND)).detail is None


class _FakeProcesses:
    """ExecProcess cut after some output, then StreamProcessOutput: the
    ProcessService a stream resumes against."""

    def __init__(self):
        self.exec_ids, self.resumed_from = [], []

    def ExecProcess(self, request, metadata, timeout):
        self.exec_ids.append(request.command.command_id)
        if len(self.exec_ids) == 1:
            return self._events(_RpcError(grpc.StatusCode.UNAVAILABLE))  # before `started`
        return self._events(
            process_pb2.ExecProcessResponse(started=process_pb2.ProcessStarted(process_id="p-1", pid=7)),
            process_pb2.ExecProcessResponse(output=_chunk(process_pb2.PROCESS_OUTPUT_STREAM_STDOUT, 0, b"ab")),
            process_pb2.ExecProcessResponse(output=_chunk(process_pb2.PROCESS_OUTPUT_STREAM_STDERR, 0, b"e")),
            _RpcError(grpc.StatusCode.UNAVAILABLE),
        )

    def StreamProcessOutput(self, request, metadata, timeout):
        self.resumed_from.append((request.process_id, request.stdout_offset, request.stderr_offset))
        return self._events(
            process_pb2.StreamProcessOutputResponse(output=_chunk(process_pb2.PROCESS_OUTPUT_STREAM_STDOUT, 2, b"cd")),
            process_pb2.StreamProcessOutputResponse(exit=process_pb2.ProcessExitStatus(exit_code=4)),
        )

    @staticmethod
    def _events(*items):
        for item in items:
            if isinstance(item, Exception):
                raise item
            yield item


def _chunk(stream, offset, data):
    return process_pb2.ProcessOutputChunk(stream=stream, offset=offset, data=data)


def test_exec_retries_with_its_command_id_and_resumes_from_offsets(monkeypatch):
    monkeypatch.setattr(_rpc, "_BACKOFF", 0)
    conn = _rpc.Connection("http://127.0.0.1:1", "", timeout=1, retries=3)
    conn.processes = fake = _FakeProcesses()
    spec = process.spec(["true"], None, None, None, stdin=False)
    result = process.collect(process.stream(conn, "ws-1", spec, None, None), text=True)
    assert len(fake.exec_ids) == 2 and len(set(fake.exec_ids)) == 1
    assert fake.resumed_from == [("p-1", 2, 1)]
    assert (result.stdout, result.stderr, result.exit_code, result.process_id) == ("abcd", "e", 4, "p-1")


class _FakeWorkspaces:
    """A WorkspaceService that answers a create, then WaitWorkspace with
    progress and then the end, and refuses GetWorkspace."""

    def __init__(self):
        self.waits, self.gets, self.created = [], 0, []

    def CreateWorkspace(self, request, metadata, timeout):
        self.created.append(request)
        return workspace_pb2.CreateWorkspaceResponse(
            workspace=types_pb2.Workspace(workspace_id="ws-1", state=types_pb2.WORKSPACE_STATE_CREATING),
            command=workspace_pb2.WorkspaceCommand(command_id=request.command.command_id),
        )

    def WaitWorkspace(self, request, metadata, timeout):
        self.waits.append((request.workspace_id, request.command_id))
        done = len(self.waits) > 1  # the first answer is progress: the wait's time ran out
        return workspace_pb2.WaitWorkspaceResponse(
            workspace=types_pb2.Workspace(
                workspace_id="ws-1", state=types_pb2.WORKSPACE_STATE_AVAILABLE if done else types_pb2.WORKSPACE_STATE_CREATING
            ),
            command=workspace_pb2.WorkspaceCommand(
                command_id=request.command_id,
                state=workspace_pb2.WORKSPACE_COMMAND_STATE_SUCCEEDED if done else workspace_pb2.WORKSPACE_COMMAND_STATE_RUNNING,
            ),
        )

    def RestoreWorkspace(self, request, metadata, timeout):
        self.created.append(request)
        return workspace_pb2.RestoreWorkspaceResponse(
            workspace=types_pb2.Workspace(workspace_id="ws-1", state=types_pb2.WORKSPACE_STATE_CREATING),
            command=workspace_pb2.WorkspaceCommand(command_id=request.command.command_id),
        )

    def GetWorkspace(self, request, metadata, timeout):
        self.gets += 1
        raise _RpcError(grpc.StatusCode.INTERNAL)


class _FakeTransfers:
    """A TransferService whose one Transfer archived these resources."""

    def __init__(self, resources):
        self.resources = resources

    def GetTransfer(self, request, metadata, timeout):
        manifest = types_pb2.TransferManifest(resources=self.resources) if self.resources else types_pb2.TransferManifest()
        return transfer_pb2.GetTransferResponse(transfer=types_pb2.Transfer(transfer_id=request.transfer_id, manifest=manifest))


def test_create_follows_with_wait_workspace_and_never_polls():
    conn = _rpc.Connection("http://127.0.0.1:1", "", timeout=1, retries=0)
    conn.workspaces = fake = _FakeWorkspaces()
    ws = Workspaces(conn).create()
    assert ws.info.state == types_pb2.WORKSPACE_STATE_AVAILABLE
    assert fake.gets == 0, "a follower polled GetWorkspace"
    assert len(fake.waits) == 2 and fake.waits[0][0] == "ws-1" and fake.waits[0][1].startswith("py-")
    # What it asks for when not told: the CLI's defaults.
    resources = fake.created[-1].spec.resources
    assert (resources.memory_bytes, resources.cpu_millis) == (512 << 20, 1000)


def test_create_asks_for_the_volume_network_and_expiration_given():
    conn = _rpc.Connection("http://127.0.0.1:1", "", timeout=1, retries=0)
    conn.workspaces = fake = _FakeWorkspaces()
    before = time.time()
    Workspaces(conn).create(volume={"size": "64Mi", "mount_path": "/work"}, network="public-internet",
                            allow=["10.1.2.3"], deny=["10.0.0.0/8"], expire_in=3600, expire_action="delete")
    spec = fake.created[-1].spec
    assert spec.volume.mode == types_pb2.WORKSPACE_VOLUME_MODE_NEW and spec.volume.mount_path == "/work"
    assert spec.volume.new_volume.capacity_bytes == 64 << 20
    assert spec.network_policy.mode == types_pb2.NETWORK_POLICY_MODE_PUBLIC_INTERNET
    assert list(spec.network_policy.allow) == ["10.1.2.3"] and list(spec.network_policy.deny) == ["10.0.0.0/8"]
    assert spec.expiration.action == types_pb2.WORKSPACE_EXPIRATION_ACTION_DELETE
    assert before + 3600 <= spec.expiration.deadline.seconds + 1 <= time.time() + 3601

    Workspaces(conn).create(volume="vol-1")
    spec = fake.created[-1].spec
    assert (spec.volume.mode, spec.volume.volume_id) == (types_pb2.WORKSPACE_VOLUME_MODE_BOUND, "vol-1")
    assert spec.network_policy.mode == types_pb2.NETWORK_POLICY_MODE_DENY_ALL and not spec.HasField("expiration")
    Workspaces(conn).create(volume=False)
    assert fake.created[-1].spec.volume.mode == types_pb2.WORKSPACE_VOLUME_MODE_NONE

    sent = len(fake.created)
    for bad in ({"network": "open"}, {"expire_in": 60, "expire_action": "pause"}, {"expire_in": -1}, {"volume": {"sise": "1G"}}):
        with pytest.raises(ValueError):
            Workspaces(conn).create(**bad)
    assert len(fake.created) == sent, "a refused option sent a create"


def test_collect_counts_the_output_the_guest_dropped():
    events = [
        process.Started(process_id="proc-1", pid=7),
        process.Output(stream="stdout", data=b"ab", offset=0),
        process.Output(stream="stdout", data=b"cd", offset=5),  # bytes 2 to 4 dropped
        process.Output(stream="stderr", data=b"e", offset=0),
        process.Exit(exit_code=0, signal=0, cause="EXITED"),
    ]
    r = process.collect(iter(events), text=False)
    assert (r.stdout, r.stdout_dropped, r.stderr, r.stderr_dropped) == (b"abcd", 3, b"e", 0)
    assert "dropped 3 bytes of its stdout" in str(errors.ProcessError(["cat", "big"], r))
    whole = process.collect(iter(events[:2] + events[3:]), text=True)
    assert (whole.stdout, whole.stdout_dropped) == ("ab", 0)


def test_a_restore_sends_the_archived_resources_with_those_given_in_place():
    # ctrl replaces a restore's resources whole: the SDK sends the
    # archive's, each one given in its place, and none when none is given.
    conn = _rpc.Connection("http://127.0.0.1:1", "", timeout=1, retries=0)
    conn.workspaces = fake = _FakeWorkspaces()
    archived = types_pb2.ResourceRequest(cpu_millis=2000, memory_bytes=1 << 30, writable_layer_capacity_bytes=8 << 30)
    conn.transfers = _FakeTransfers(archived)
    Workspaces(conn).restore("tr-1", memory="320Mi")
    sent = fake.created[-1].spec.resources
    assert (sent.cpu_millis, sent.memory_bytes, sent.writable_layer_capacity_bytes) == (2000, 320 << 20, 8 << 30)
    Workspaces(conn).restore("tr-1", cpu_millis=500, disk="16Gi")
    sent = fake.created[-1].spec.resources
    assert (sent.cpu_millis, sent.memory_bytes, sent.writable_layer_capacity_bytes) == (500, 1 << 30, 16 << 30)
    Workspaces(conn).restore("tr-1", labels={"a": "b"})
    assert not fake.created[-1].spec.HasField("resources")
    conn.transfers = _FakeTransfers(None)  # a Volume's archive: create's defaults
    Workspaces(conn).restore("tr-1", cpu_millis=500)
    sent = fake.created[-1].spec.resources
    assert (sent.cpu_millis, sent.memory_bytes) == (500, 512 << 20)
