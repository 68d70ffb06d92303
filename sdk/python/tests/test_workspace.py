"""The SDK against a real `kibotos dev`: one Workspace through create, exec,
files, stop, start and delete, on a real VM."""

from __future__ import annotations

import hashlib
import re
import threading
import time

import pytest

import kibotos
from kibotos import Exit, Output, Started
from kibotos.ctrl.v1 import file_pb2, types_pb2, workspace_pb2


@pytest.fixture(scope="module")
def ws(client):
    ws = client.workspaces.create(memory="256Mi", labels={"suite": "sdk-py"}, network="public-internet",
                                  deny=["0.0.0.0/0", "::/0"], expire_in=3600)
    yield ws
    if ws.refresh().state != "DELETED":
        ws.delete()


def test_create_waits_until_available(client, ws):
    assert ws.state == "AVAILABLE"
    assert ws.info.spec.resources.memory_bytes == 256 << 20
    assert ws.info.generation == 1
    # What create asked for beside the defaults, as ctrl keeps it.
    policy = ws.info.spec.network_policy
    assert policy.mode == types_pb2.NETWORK_POLICY_MODE_PUBLIC_INTERNET and list(policy.deny) == ["0.0.0.0/0", "::/0"]
    assert ws.info.expiration.policy.action == types_pb2.WORKSPACE_EXPIRATION_ACTION_STOP
    assert 3500 < ws.info.expiration.policy.deadline.seconds - time.time() <= 3600
    got = client.workspaces.get(ws.id)
    assert got.id == ws.id and got.state == "AVAILABLE"
    assert [w.id for w in client.workspaces.list("suite=sdk-py")] == [ws.id]


def test_exec_returns_output_and_exit_code(ws):
    r = ws.exec(["sh", "-c", "echo out; echo err >&2; exit 3"])
    assert (r.stdout, r.stderr, r.exit_code) == (b"out\n", b"err\n", 3)
    assert r.process_id

    r = ws.exec(["sh", "-c", 'echo "$GREETING from $(pwd)"; cat'], env={"GREETING": "hello"},
                cwd="/tmp", input="from stdin\n", text=True)
    assert r.stdout == "hello from /tmp\nfrom stdin\n"
    assert r.exit_code == 0

    # A signal is a shell's 128+N.
    assert ws.exec(["sh", "-c", "kill -TERM $$"]).exit_code == 128 + 15

    with pytest.raises(kibotos.ProcessError) as e:
        ws.exec(["false"], check=True)
    assert e.value.result.exit_code == 1


def test_exec_timeout_kills_the_process(ws):
    with pytest.raises(kibotos.DeadlineExceeded):
        ws.exec(["sleep", "300"], timeout=5)
    # SIGKILL was delivered before exec raised; the guest's agent reaps it.
    deadline = time.monotonic() + 30
    while ws.exec(["sh", "-c", "grep -qsx sleep /proc/[0-9]*/comm"]).exit_code == 0:
        assert time.monotonic() < deadline, "the timed-out process still runs"


def test_exec_stream_yields_events_as_they_come(ws):
    events = list(ws.exec_stream(["sh", "-c", "echo one; sleep 0.2; echo two >&2"]))
    assert isinstance(events[0], Started) and events[0].process_id
    assert isinstance(events[-1], Exit) and events[-1].exit_code == 0 and events[-1].cause == "EXITED"
    outputs = [e for e in events if isinstance(e, Output)]
    assert b"".join(o.data for o in outputs if o.stream == "stdout") == b"one\n"
    assert b"".join(o.data for o in outputs if o.stream == "stderr") == b"two\n"


def test_a_background_process_is_found_signalled_and_waited_for(ws):
    p = ws.processes.start(["sh", "-c", "trap 'echo bye; exit 7' TERM; echo ready; while :; do sleep 1; done"])
    assert p.id and p.pid > 0 and p.state == "RUNNING" and list(p.info.argv)[0] == "sh"
    assert p.id in [q.id for q in ws.processes.list()]
    for event in p.output():  # live: until the trap is set
        if isinstance(event, Output) and b"ready" in event.data:
            break
    assert p.signal("TERM") is True
    end = p.wait(timeout=60)
    assert (end.exit_code, end.cause) == (7, "EXITED")
    # Ended: its output whole, its record, no longer listed as running.
    events = list(p.output())
    assert b"".join(e.data for e in events if isinstance(e, Output) and e.stream == "stdout") == b"ready\nbye\n"
    assert isinstance(events[-1], Exit) and events[-1].exit_code == 7
    assert p.refresh().state == "EXITED" and p.info.exit.exit_code == 7
    assert p.kill() is False  # already ended: harmless
    assert p.id not in [q.id for q in ws.processes.list()]
    assert p.id in [q.id for q in ws.processes.list(include_exited=True)]

    cat = ws.processes.start(["cat"], stdin=True)
    cat.send_input("one ")
    cat.send_input(b"two", close=True)
    assert cat.wait(timeout=60).exit_code == 0
    assert ws.processes.get(cat.id).info.stdout_end_offset == len("one two")
    assert b"".join(e.data for e in cat.output() if isinstance(e, Output)) == b"one two"

    sleeper = ws.processes.start(["sleep", "300"])
    with pytest.raises(kibotos.DeadlineExceeded):
        sleeper.wait(timeout=1)
    assert sleeper.refresh().state == "RUNNING"  # a wait that ran out leaves it running
    assert sleeper.signal(9) is True
    assert sleeper.wait(timeout=60).signal == 9
    with pytest.raises(ValueError):
        sleeper.signal("WINCH")


def test_a_process_on_a_pty_sees_its_size_then_a_resize(ws):
    p = ws.processes.start(["sh", "-c", "stty size; read line; stty size"], pty=(100, 30))
    assert (p.info.pty.cols, p.info.pty.rows) == (100, 30)
    seen = b""
    for ev in p.output():
        if isinstance(ev, Output):
            seen += ev.data
        if b"30 100" in seen:
            break  # the first stty ran; sh waits in read
    p.resize(120, 40)
    p.send_input("go\n")  # a pty takes input without stdin=True
    assert p.wait(timeout=60).exit_code == 0
    out = b"".join(ev.data for ev in p.output() if isinstance(ev, Output))
    assert re.search(rb"30 100\r\n.*40 120\r\n", out, re.S), out
    assert (p.refresh().info.pty.cols, p.info.pty.rows) == (120, 40)
    plain = ws.processes.start(["sleep", "60"])
    with pytest.raises(kibotos.FailedPrecondition):
        plain.resize(80, 24)  # no pty
    plain.kill()


def test_files_write_read_list(ws):
    info = ws.files.write("/root/data/notes.txt", "first line\n", create_parents=True, mode=0o600)
    assert info.size_bytes == len("first line\n") and info.mode & 0o777 == 0o600
    assert ws.files.read("/root/data/notes.txt") == b"first line\n"

    blob = bytes(range(256)) * 8192  # 2 MiB: more than one WriteFile and ReadFile message
    ws.files.write("/root/data/blob.bin", blob)
    assert ws.files.read("/root/data/blob.bin") == blob
    # The guest sees what the API wrote.
    digest = ws.exec(["sha256sum", "/root/data/blob.bin"], text=True).stdout.split()[0]
    assert digest == hashlib.sha256(blob).hexdigest()

    ws.files.make_dir("/root/data/sub")
    assert [e.name for e in ws.files.list("/root/data")] == ["blob.bin", "notes.txt", "sub"]
    assert ws.files.stat("/root/data/sub").type == file_pb2.FILE_TYPE_DIRECTORY
    ws.files.remove("/root/data/sub")
    with pytest.raises(kibotos.NotFound):
        ws.files.stat("/root/data/sub")

    moved = ws.files.move("/root/data/notes.txt", "/root/moved/notes.txt", create_parents=True)
    assert moved.path == "/root/moved/notes.txt" and moved.size_bytes == len("first line\n")
    assert ws.exec(["cat", "/root/moved/notes.txt"], text=True).stdout == "first line\n"
    with pytest.raises(kibotos.NotFound):
        ws.files.stat("/root/data/notes.txt")
    ws.files.write("/root/data/notes.txt", "second\n")
    with pytest.raises(kibotos.AlreadyExists):
        ws.files.move("/root/data/notes.txt", "/root/moved/notes.txt")
    ws.files.move("/root/data/notes.txt", "/root/moved/notes.txt", overwrite=True)
    assert ws.files.read_text("/root/moved/notes.txt") == "second\n"


def test_watch_sees_every_change_made_after_it_returns(ws):
    ws.files.make_dir("/root/watched/sub", create_parents=True)
    kinds = file_pb2.FileEventKind
    with ws.files.watch("/root/watched", recursive=True) as w:
        # Nothing waits on a watch that misses an event: the test ends it.
        watchdog = threading.Timer(60, w.close)
        watchdog.start()
        ws.files.write("/root/watched/a.txt", "a\n")
        ws.exec(["sh", "-c", "mv /root/watched/a.txt /root/watched/b.txt && echo x > /root/watched/sub/c.txt && rm /root/watched/b.txt"], check=True)
        want = [
            (kinds.Value("FILE_EVENT_KIND_RENAMED"), "/root/watched/a.txt", "/root/watched/b.txt"),
            (kinds.Value("FILE_EVENT_KIND_CREATED"), "/root/watched/sub/c.txt", ""),
            (kinds.Value("FILE_EVENT_KIND_DELETED"), "/root/watched/b.txt", ""),
        ]
        seen = []
        for ev in w:
            seen.append((ev.kind, ev.path, ev.new_path))
            if all(x in seen for x in want):
                break
        watchdog.cancel()
    assert all(x in seen for x in want), seen
    # In order: the rename before the deletion of its new path.
    assert seen.index(want[0]) < seen.index(want[2])
    with pytest.raises(kibotos.FailedPrecondition):
        ws.files.watch("/root/moved/notes.txt")  # not a directory


def test_metrics_sample_the_running_guest(ws):
    sample = ws.metrics()
    assert sample.generation == ws.info.generation
    assert 0 < sample.memory_used_bytes < sample.memory_total_bytes <= 256 << 20
    assert sample.process_count > 0 and sample.uptime.seconds >= 0
    root = [f for f in sample.filesystems if f.path == "/"]
    assert root and 0 < root[0].used_bytes < root[0].capacity_bytes


def test_a_session_token_reaches_its_scopes_alone(ws):
    s = ws.issue_session(scopes=["file"], ttl=300)
    assert s.workspace_id == ws.id and s.scopes == ["file"] and s.token and s.generation == ws.info.generation
    with kibotos.Kibotos(s.endpoint, s.token) as agent:
        held = agent.workspace(s.workspace_id)
        ws.files.write("/root/for-agent.txt", "hello agent\n")
        assert held.files.read_text("/root/for-agent.txt") == "hello agent\n"
        with pytest.raises(kibotos.PermissionDenied) as e:
            held.exec(["true"])
        assert e.value.stage == "AUTHORIZING_DATA_PLANE"
        with pytest.raises(kibotos.Unauthenticated):
            held.refresh()  # the record needs an API key

        old = s.token
        assert s.rotate(ttl=120).token != old
        with kibotos.Kibotos(s.endpoint, s.token) as rotated:
            assert rotated.workspace(ws.id).files.stat("/root/for-agent.txt").size_bytes == len("hello agent\n")
            s.revoke()
            with pytest.raises(kibotos.Unauthenticated) as e:
                rotated.workspace(ws.id).files.stat("/root")
            assert e.value.reason == "SESSION_REVOKED"

    with pytest.raises(ValueError):
        ws.issue_session(scopes=["shell"])


def test_exec_output_is_whole_or_says_what_was_dropped(ws):
    # The guest keeps the last MiB of each stream and never waits for a
    # reader: what a fast writer's reader gets plus what it is told was
    # dropped is the whole stream, whichever way the race went.
    size = int(ws.exec(["wc", "-c", "/root/data/blob.bin"], text=True).stdout.split()[0])
    r = ws.exec(["cat", "/root/data/blob.bin"])
    assert r.exit_code == 0 and len(r.stdout) + r.stdout_dropped == size == 2 << 20
    if r.stdout_dropped == 0:
        assert r.stdout == ws.files.read("/root/data/blob.bin")


def test_set_network_waits_until_the_node_applied_it(client, ws):
    stale = client.workspaces.get(ws.id)
    before = ws.info.spec.network_policy.revision
    ws.set_network("public-internet", allow=["192.0.2.1"], deny=["0.0.0.0/0", "::/0"])
    policy = ws.info.spec.network_policy
    assert policy.revision == before + 1 and list(policy.allow) == ["192.0.2.1"]
    assert policy.mode == types_pb2.NETWORK_POLICY_MODE_PUBLIC_INTERNET
    assert ws.info.network_policy_status.applied_revision == policy.revision
    with pytest.raises(kibotos.FailedPrecondition):
        stale.set_network("deny-all")
    with pytest.raises(ValueError):
        ws.set_network("open")


def test_set_expiration_labels_and_memory(client, ws):
    stale = client.workspaces.get(ws.id)
    ws.set_expiration(600, action="delete")
    policy = ws.info.expiration.policy
    assert policy.action == types_pb2.WORKSPACE_EXPIRATION_ACTION_DELETE
    assert 500 < policy.deadline.seconds - time.time() <= 600
    ws.set_expiration(None)
    assert not ws.info.expiration.HasField("policy")
    assert not client.workspaces.get(ws.id).info.expiration.HasField("policy")

    ws.set_labels({"suite": "sdk-py", "role": "builder"})
    assert [w.id for w in client.workspaces.list("role=builder")] == [ws.id]
    # A change made meanwhile elsewhere is refused, not overwritten.
    with pytest.raises(kibotos.FailedPrecondition) as e:
        stale.set_labels({"suite": "sdk-py"})
    assert "expected_labels_revision" in str(e.value)
    assert stale.refresh().set_labels({"suite": "sdk-py"}).info.labels == {"suite": "sdk-py"}

    ws.set_annotations({"owner": "sdk tests"})
    assert ws.info.annotations == {"owner": "sdk tests"}
    assert client.workspaces.get(ws.id).info.annotations == {"owner": "sdk tests"}

    ws.refresh().set_memory("320Mi")  # the next start boots with it
    assert ws.info.spec.resources.memory_bytes == 320 << 20
    layer = ws.layer_capacity
    assert layer and ws.info.spec.resources.writable_layer_capacity_bytes == 0  # created with the default
    with pytest.raises(kibotos.InvalidArgument):
        ws.set_disk(layer)  # it only grows
    ws.set_disk(layer + (256 << 20))  # the next start boots with the larger layer too
    assert ws.info.spec.resources.writable_layer_capacity_bytes == layer + (256 << 20)


def test_stop_and_start_keep_the_writable_layer(ws):
    ws.files.write("/root/kept.txt", "still here\n")
    ws.stop(wait=False)  # returns at admission; follow() waits for the same command
    stop_id = ws.last_command_id
    assert stop_id.startswith("py-")
    assert ws.command(stop_id).kind == workspace_pb2.WORKSPACE_COMMAND_KIND_STOP
    done = ws.follow(stop_id)
    assert done.state == workspace_pb2.WORKSPACE_COMMAND_STATE_SUCCEEDED and done.command_id == stop_id
    assert ws.state == "STOPPED"
    assert ws.command(stop_id).state == workspace_pb2.WORKSPACE_COMMAND_STATE_SUCCEEDED

    with pytest.raises(kibotos.FailedPrecondition) as e:
        ws.exec(["true"])
    assert e.value.stage == "STARTING_PROCESS"

    ws.start()
    assert ws.state == "AVAILABLE" and ws.info.generation == 2
    assert ws.info.spec.resources.memory_bytes == 320 << 20
    assert ws.files.read_text("/root/kept.txt") == "still here\n"
    assert ws.layer_capacity == ws.info.spec.resources.writable_layer_capacity_bytes
    root = [f for f in ws.metrics().filesystems if f.path == "/"][0]
    assert root.capacity_bytes > ws.layer_capacity - (256 << 20), "the guest's / grew with its layer"


def test_delete(client, ws):
    ws.delete()
    assert ws.state == "DELETED"
    assert client.workspaces.get(ws.id).state == "DELETED"
    assert client.workspaces.list("suite=sdk-py") == []


def test_a_create_sent_twice_under_one_command_id_admits_one_workspace(client):
    command_id = f"py-replay-{time.time_ns()}"
    first = client.workspaces.create(memory="256Mi", volume=False, wait=False, command_id=command_id)
    try:
        assert first.last_command_id == command_id
        again = client.workspaces.create(memory="256Mi", volume=False, command_id=command_id)
        assert again.id == first.id and again.state == "AVAILABLE"
        assert first.follow(command_id).state == workspace_pb2.WORKSPACE_COMMAND_STATE_SUCCEEDED
        assert first.state == "AVAILABLE"
        with pytest.raises(kibotos.AlreadyExists) as e:
            client.workspaces.create(memory="512Mi", volume=False, command_id=command_id)
        assert (e.value.reason, e.value.field, e.value.command_id) == ("CONFLICT", "command.command_id", command_id)
        with pytest.raises(kibotos.NotFound):
            first.command("py-no-such-command")
    finally:
        first.delete()
