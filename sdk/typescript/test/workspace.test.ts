// The SDK against a real `kibotos dev` with real VMs: the one the client
// configuration names ($KIBOTOS_HOME/config.env; scripts/test-sdk-ts.sh
// starts one on its own state and ports).
import assert from "node:assert/strict";
import { mkdtemp, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { createClient } from "@connectrpc/connect";
import { FileEventKind } from "@kibotos/sdk/gen/file_pb";
import { NetworkPolicyMode, WorkspaceExpirationAction, WorkspaceVolumeMode } from "@kibotos/sdk/gen/types_pb";
import { VolumeService } from "@kibotos/sdk/gen/volume_pb";
import {
  ApiError,
  Code,
  FailureReason,
  FailureStage,
  FileType,
  Kibotos,
  ProcessEndCause,
  ProcessState,
  TransferState,
  VolumeState,
  WorkspaceCommandKind,
  WorkspaceCommandState,
  WorkspaceState,
  signalOf,
  type ExecEvent,
} from "@kibotos/sdk";

const kibotos = new Kibotos();

test("a Workspace's life: create, exec, files, stop, start, delete", async (t) => {
  const ws = await kibotos.workspaces.create({
    template: "busybox", memory: "256Mi", labels: { suite: "sdk-ts" },
    network: "public-internet", deny: ["0.0.0.0/0", "::/0"], expireInSeconds: 3600,
  });
  t.after(() => ws.delete().catch(() => {}));
  assert.equal(ws.state, WorkspaceState.AVAILABLE);
  assert.match(ws.id, /^ws-/);
  assert.equal(ws.info.spec?.resources?.memoryBytes, 256n << 20n);
  // What create asked for beside the defaults, as ctrl keeps it.
  assert.deepEqual([ws.info.spec?.networkPolicy?.mode, ws.info.spec?.networkPolicy?.deny], [NetworkPolicyMode.PUBLIC_INTERNET, ["0.0.0.0/0", "::/0"]]);
  assert.equal(ws.info.expiration?.policy?.action, WorkspaceExpirationAction.STOP);
  const left = Number(ws.info.expiration?.policy?.deadline?.seconds) - Date.now() / 1000;
  assert.ok(left > 3500 && left <= 3600, `the deadline is ${left} s away`);

  await t.test("exec returns the exit code, stdout and stderr", async () => {
    const r = await ws.exec(["sh", "-c", "echo out; echo err >&2; exit 3"]);
    assert.deepEqual([r.exitCode, r.stdout, r.stderr, r.cause], [3, "out\n", "err\n", ProcessEndCause.EXITED]);
    assert.match(r.processId, /./);
  });

  await t.test("exec with env, cwd and stdin", async () => {
    const r = await ws.exec(["sh", "-c", 'pwd; echo "$GREETING"; tr a-z A-Z'], { env: { GREETING: "hello" }, cwd: "/tmp", stdin: "from stdin\n" });
    assert.equal(r.stdout, "/tmp\nhello\nFROM STDIN\n");
    assert.equal(r.exitCode, 0);
    // More than one SendProcessInput takes (1 MiB): sent a chunk a call.
    const big = await ws.exec(["wc", "-c"], { stdin: new Uint8Array(3 << 20).fill(97) });
    assert.deepEqual([big.exitCode, big.stdout.trim()], [0, String(3 << 20)]);
  });

  await t.test("a process a signal ends exits 128+N", async () => {
    const r = await ws.exec(["sh", "-c", "kill -TERM $$"]);
    assert.deepEqual([r.exitCode, r.signal, r.cause], [143, 15, ProcessEndCause.SIGNALED]);
  });

  await t.test("execStream yields started, the output as it comes, then exit", async () => {
    const events: ExecEvent[] = [];
    for await (const ev of ws.execStream(["sh", "-c", "for i in 1 2 3; do echo line $i; done; echo oops >&2"])) events.push(ev);
    assert.equal(events[0].type, "started");
    const last = events[events.length - 1];
    assert.ok(last.type === "exit" && last.exitCode === 0, JSON.stringify(last));
    const text = (type: string) => Buffer.concat(events.flatMap((e) => (e.type === type && "data" in e ? [e.data] : []))).toString();
    assert.equal(text("stdout"), "line 1\nline 2\nline 3\n");
    assert.equal(text("stderr"), "oops\n");
  });

  await t.test("a background process is found, signalled and waited for", async () => {
    const p = await ws.processes.start(["sh", "-c", "trap 'echo bye; exit 7' TERM; echo ready; while :; do sleep 1; done"]);
    assert.ok(p.id && p.pid > 0 && p.state === ProcessState.RUNNING && p.info.argv[0] === "sh", `${p.id} ${p.pid} ${p.state} ${p.info.argv.join(" ")}`);
    assert.ok((await ws.processes.list()).some((q) => q.id === p.id));
    for await (const ev of p.output()) {
      if (ev.type === "stdout" && Buffer.from(ev.data).includes("ready")) break; // live: the trap is set
    }
    assert.equal(await p.signal("TERM"), true);
    assert.deepEqual(await p.wait(), { exitCode: 7, signal: 0, cause: ProcessEndCause.EXITED });
    // Ended: its output whole, its record, no longer listed as running.
    const events: ExecEvent[] = [];
    for await (const ev of p.output()) events.push(ev);
    const stdout = Buffer.concat(events.flatMap((e) => (e.type === "stdout" ? [e.data] : []))).toString();
    assert.equal(stdout, "ready\nbye\n");
    assert.ok(events.at(-1)?.type === "exit");
    assert.equal((await p.refresh()).state, ProcessState.EXITED);
    assert.equal(p.info.exit?.exitCode, 7);
    assert.equal(await p.kill(), false); // already ended: harmless
    assert.ok(!(await ws.processes.list()).some((q) => q.id === p.id));
    assert.ok((await ws.processes.list({ includeExited: true })).some((q) => q.id === p.id));

    const cat = await ws.processes.start(["cat"], { stdin: true });
    await cat.sendInput("one ");
    await cat.sendInput(new TextEncoder().encode("two"), { close: true });
    assert.equal((await cat.wait()).exitCode, 0);
    assert.equal((await ws.processes.get(cat.id)).info.stdoutEndOffset, 7n);

    const sleeper = await ws.processes.start(["sleep", "300"]);
    await assert.rejects(sleeper.wait({ signal: AbortSignal.timeout(500) }));
    assert.equal((await sleeper.refresh()).state, ProcessState.RUNNING); // a wait given up leaves it running
    assert.equal(await sleeper.signal(9), true);
    assert.equal((await sleeper.wait()).signal, 9);
    assert.throws(() => signalOf("SIGWINCH"), TypeError);
  });

  await t.test("a process on a pty sees its size, then the size a resize set", async () => {
    const p = await ws.processes.start(["sh", "-c", "stty size; read line; stty size"], { pty: { cols: 100, rows: 30 } });
    assert.deepEqual([p.info.pty?.cols, p.info.pty?.rows], [100, 30]);
    let seen = "";
    for await (const ev of p.output()) {
      if (ev.type === "stdout") seen += Buffer.from(ev.data).toString();
      if (seen.includes("30 100")) break; // the first stty ran; sh waits in read
    }
    await p.resize({ cols: 120, rows: 40 });
    await p.sendInput("go\n"); // a pty takes input without stdin: true
    assert.equal((await p.wait()).exitCode, 0);
    let all = "";
    for await (const ev of p.output()) if (ev.type === "stdout") all += Buffer.from(ev.data).toString();
    assert.match(all, /30 100\r\n[\s\S]*40 120\r\n/);
    assert.deepEqual([(await p.refresh()).info.pty?.cols, p.info.pty?.rows], [120, 40]);
    const plain = await ws.processes.start(["sleep", "60"]);
    const refused = await plain.resize({ cols: 80, rows: 24 }).catch((e: unknown) => e);
    assert.ok(refused instanceof ApiError && refused.code === Code.FailedPrecondition, String(refused)); // no pty
    await plain.kill();
  });

  await t.test("files: write, read, list, stat, remove", async () => {
    const bytes = new Uint8Array(1 << 20).map((_, i) => (i * 7) % 251); // two WriteFile chunks
    await ws.files.write("/data/dir/blob.bin", bytes, { createParents: true });
    await ws.files.write("/data/dir/note.txt", "one\n");
    await ws.files.write("/data/dir/note.txt", "two\n", { append: true });
    assert.ok(Buffer.from(await ws.files.readBytes("/data/dir/blob.bin")).equals(bytes), "the bytes read back differ");
    assert.equal(await ws.files.read("/data/dir/note.txt"), "one\ntwo\n");
    assert.equal(await ws.files.read("/data/dir/note.txt", { offset: 4, length: 3 }), "two");
    const entries = await ws.files.list("/data/dir");
    assert.deepEqual(entries.map((e) => [e.name, e.type, e.sizeBytes]), [
      ["blob.bin", FileType.REGULAR, 1n << 20n],
      ["note.txt", FileType.REGULAR, 8n],
    ]);
    assert.equal((await ws.files.stat("/data/dir")).type, FileType.DIRECTORY);
    assert.equal((await ws.exec(["cat", "/data/dir/note.txt"])).stdout, "one\ntwo\n", "the guest sees what files wrote");
    // What a reader gets plus the gaps before its chunks is the whole
    // stream, however a fast writer's race with the reader went.
    let got = 0n, dropped = 0n, end = 0n;
    for await (const ev of ws.execStream(["cat", "/data/dir/blob.bin"])) {
      if (ev.type !== "stdout") continue;
      dropped += ev.offset > end ? ev.offset - end : 0n;
      end = ev.offset + BigInt(ev.data.length);
      got += BigInt(ev.data.length);
    }
    assert.equal(got + dropped, 1n << 20n);
    assert.equal(await ws.files.remove("/data/dir/blob.bin"), true);
    assert.equal(await ws.files.remove("/data/dir/blob.bin", { allowMissing: true }), false);

    assert.equal((await ws.files.mkdir("/root/made/deep", { createParents: true, mode: 0o700 })).type, FileType.DIRECTORY);
    assert.equal((await ws.files.stat("/root/made/deep")).mode & 0o777, 0o700);
    const exists = await ws.files.mkdir("/root/made").catch((e: unknown) => e);
    assert.ok(exists instanceof ApiError && exists.code === Code.AlreadyExists, String(exists));
    // Across filesystems (the Volume to the layer), as mv does.
    const moved = await ws.files.move("/data/dir/note.txt", "/root/made/deep/note.txt");
    assert.deepEqual([moved.path, moved.sizeBytes], ["/root/made/deep/note.txt", 8n]);
    assert.equal((await ws.exec(["cat", "/root/made/deep/note.txt"])).stdout, "one\ntwo\n");
    const gone = await ws.files.stat("/data/dir/note.txt").catch((e: unknown) => e);
    assert.ok(gone instanceof ApiError && gone.code === Code.NotFound, String(gone));
    await ws.files.write("/data/dir/note.txt", "three\n");
    const taken = await ws.files.move("/data/dir/note.txt", "/root/made/deep/note.txt").catch((e: unknown) => e);
    assert.ok(taken instanceof ApiError && taken.code === Code.AlreadyExists, String(taken));
    await ws.files.move("/root/made/deep/note.txt", "/data/dir/note.txt", { overwrite: true });
    assert.equal(await ws.files.read("/data/dir/note.txt"), "one\ntwo\n");
  });

  await t.test("watch sees every change made after it resolves", async () => {
    await ws.files.mkdir("/root/watched/sub", { createParents: true });
    const w = await ws.files.watch("/root/watched", { recursive: true });
    const watchdog = setTimeout(() => w.close(), 60_000); // nothing waits on a watch that misses an event
    await ws.files.write("/root/watched/a.txt", "a\n");
    const run = await ws.exec(["sh", "-c", "mv /root/watched/a.txt /root/watched/b.txt && echo x > /root/watched/sub/c.txt && rm /root/watched/b.txt"]);
    assert.equal(run.exitCode, 0);
    const want = [
      `${FileEventKind.RENAMED} /root/watched/a.txt /root/watched/b.txt`,
      `${FileEventKind.CREATED} /root/watched/sub/c.txt `,
      `${FileEventKind.DELETED} /root/watched/b.txt `,
    ];
    const seen: string[] = [];
    for await (const ev of w) {
      seen.push(`${ev.kind} ${ev.path} ${ev.newPath}`);
      if (want.every((x) => seen.includes(x))) break; // leaving the loop closes the watch
    }
    clearTimeout(watchdog);
    assert.ok(want.every((x) => seen.includes(x)), `seen: ${seen.join(", ")}`);
    assert.ok(seen.indexOf(want[0]) < seen.indexOf(want[2]), "the rename before the deletion of its new path");
    const notDir = await ws.files.watch("/data/dir/note.txt").catch((e: unknown) => e);
    assert.ok(notDir instanceof ApiError && notDir.code === Code.FailedPrecondition, String(notDir));
  });

  await t.test("metrics sample the running guest", async () => {
    const sample = await ws.metrics();
    assert.equal(sample.generation, ws.info.generation);
    assert.ok(sample.memoryUsedBytes > 0n && sample.memoryUsedBytes < sample.memoryTotalBytes && sample.memoryTotalBytes <= 256n << 20n);
    assert.ok(sample.processCount > 0);
    const root = sample.filesystems.find((f) => f.path === "/");
    assert.ok(root && root.usedBytes > 0n && root.usedBytes < root.capacityBytes);
    assert.ok(sample.filesystems.some((f) => f.path === "/data"), "the Volume's filesystem");
  });

  await t.test("a session's token reaches its scopes alone, until revoked", async () => {
    const s = await ws.issueSession({ scopes: ["file"], ttlSeconds: 300 });
    assert.deepEqual([s.workspaceId, s.scopes, s.generation], [ws.id, ["file"], ws.info.generation]);
    assert.ok(s.token && s.expiresAt > new Date(), `token set, expiring ${s.expiresAt.toISOString()}`);
    const held = new Kibotos({ baseUrl: s.endpoint, apiKey: s.token, retry: { attempts: 1 } }).workspace(s.workspaceId);
    assert.equal(await held.files.read("/data/dir/note.txt"), "one\ntwo\n");
    const denied = await held.exec(["true"]).catch((e: unknown) => e);
    assert.ok(denied instanceof ApiError, String(denied));
    assert.deepEqual([denied.code, denied.stage], [Code.PermissionDenied, FailureStage.AUTHORIZING_DATA_PLANE]);
    const noRecord = await held.refresh().catch((e: unknown) => e);
    assert.ok(noRecord instanceof ApiError && noRecord.code === Code.Unauthenticated, String(noRecord));

    const old = s.token;
    await s.rotate({ ttlSeconds: 120 });
    assert.notEqual(s.token, old);
    const rotated = new Kibotos({ baseUrl: s.endpoint, apiKey: s.token, retry: { attempts: 1 } }).workspace(ws.id);
    assert.equal((await rotated.files.stat("/data/dir")).type, FileType.DIRECTORY);
    await s.revoke();
    const revoked = await rotated.files.stat("/data/dir").catch((e: unknown) => e);
    assert.ok(revoked instanceof ApiError, String(revoked));
    assert.deepEqual([revoked.code, revoked.reason], [Code.Unauthenticated, FailureReason.SESSION_REVOKED]);
    await assert.rejects(ws.issueSession({ scopes: ["shell" as "file"] }), TypeError);
  });

  await t.test("setNetwork waits until the node applied it", async () => {
    const stale = await kibotos.workspaces.get(ws.id);
    const before = ws.info.spec?.networkPolicy?.revision ?? 0n;
    await ws.setNetwork({ network: "public-internet", allow: ["192.0.2.1"], deny: ["0.0.0.0/0", "::/0"] });
    const policy = ws.info.spec?.networkPolicy;
    assert.deepEqual([policy?.revision, policy?.mode, policy?.allow], [before + 1n, NetworkPolicyMode.PUBLIC_INTERNET, ["192.0.2.1"]]);
    assert.equal(ws.info.networkPolicyStatus?.appliedRevision, policy?.revision);
    const refused = await stale.setNetwork({ network: "deny-all" }).catch((e: unknown) => e);
    assert.ok(refused instanceof ApiError && refused.code === Code.FailedPrecondition, String(refused));
    await assert.rejects(ws.setNetwork({ network: "open" as "deny-all" }), TypeError);
  });

  await t.test("setExpiration, setLabels and setMemory; a stale revision is refused", async () => {
    const stale = await kibotos.workspaces.get(ws.id);
    await ws.setExpiration({ inSeconds: 600, action: "delete" });
    assert.equal(ws.info.expiration?.policy?.action, WorkspaceExpirationAction.DELETE);
    const left = Number(ws.info.expiration?.policy?.deadline?.seconds) - Date.now() / 1000;
    assert.ok(left > 500 && left <= 600, `the deadline is ${left} s away`);
    await ws.setExpiration(null);
    assert.equal(ws.info.expiration?.policy, undefined);
    assert.equal((await kibotos.workspaces.get(ws.id)).info.expiration?.policy, undefined);

    await ws.setLabels({ suite: "sdk-ts", role: "builder" });
    assert.deepEqual((await kibotos.workspaces.list("role=builder")).map((w) => w.id), [ws.id]);
    const refused = await stale.setLabels({ suite: "sdk-ts" }).catch((e: unknown) => e);
    assert.ok(refused instanceof ApiError && refused.code === Code.FailedPrecondition && refused.message.includes("expected_labels_revision"), String(refused));
    assert.deepEqual((await (await stale.refresh()).setLabels({ suite: "sdk-ts" })).info.labels, { suite: "sdk-ts" });

    await ws.setAnnotations({ owner: "sdk tests" });
    assert.deepEqual(ws.info.annotations, { owner: "sdk tests" });
    assert.deepEqual((await kibotos.workspaces.get(ws.id)).info.annotations, { owner: "sdk tests" });

    await (await ws.refresh()).setMemory("320Mi"); // the next start boots with it
    assert.equal(ws.info.spec?.resources?.memoryBytes, 320n << 20n);
    const layer = ws.layerCapacity ?? 0n;
    assert.ok(layer > 0n && ws.info.spec?.resources?.writableLayerCapacityBytes === 0n, "created with the default layer");
    const notLarger = await ws.setDisk(layer).catch((e: unknown) => e);
    assert.ok(notLarger instanceof ApiError && notLarger.code === Code.InvalidArgument, String(notLarger)); // it only grows
    await ws.setDisk(layer + (256n << 20n)); // so does the larger layer
    assert.equal(ws.info.spec?.resources?.writableLayerCapacityBytes, layer + (256n << 20n));
  });

  await t.test("stop: STOPPED, and the data plane says failed_precondition", async () => {
    await ws.stop({ wait: false }); // returns at admission; follow() waits for the same command
    const stopId = ws.lastCommandId ?? "";
    assert.match(stopId, /^ts-/);
    assert.equal((await ws.command(stopId)).kind, WorkspaceCommandKind.STOP);
    const done = await ws.follow(stopId);
    assert.deepEqual([done.state, done.commandId], [WorkspaceCommandState.SUCCEEDED, stopId]);
    assert.equal(ws.state, WorkspaceState.STOPPED);
    assert.equal((await ws.command(stopId)).state, WorkspaceCommandState.SUCCEEDED);
    const err = await ws.exec(["true"]).catch((e: unknown) => e);
    assert.ok(err instanceof ApiError, String(err));
    assert.equal(err.code, Code.FailedPrecondition);
    assert.equal(err.stage, FailureStage.STARTING_PROCESS);
  });

  await t.test("start: AVAILABLE again, the Volume's file kept", async () => {
    await ws.start();
    assert.equal(ws.state, WorkspaceState.AVAILABLE);
    assert.equal(await ws.files.read("/data/dir/note.txt"), "one\ntwo\n");
    assert.equal(ws.layerCapacity, ws.info.spec?.resources?.writableLayerCapacityBytes);
    const root = (await ws.metrics()).filesystems.find((f) => f.path === "/");
    assert.ok(root && root.capacityBytes > (ws.layerCapacity ?? 0n) - (256n << 20n), "the guest's / grew with its layer");
  });

  await t.test("get and list find it", async () => {
    assert.equal((await kibotos.workspaces.get(ws.id)).state, WorkspaceState.AVAILABLE);
    assert.deepEqual((await kibotos.workspaces.list("suite=sdk-ts")).map((w) => w.id), [ws.id]);
  });

  await t.test("kibotos.transport reaches the services the SDK does not wrap", async () => {
    const volumeId = ws.info.spec?.volume?.volumeId ?? "";
    assert.match(volumeId, /^vol-/);
    const res = await createClient(VolumeService, kibotos.transport).getVolume({ volumeId });
    assert.equal(res.volume?.volumeId, volumeId);
  });

  await t.test("delete: DELETED", async () => {
    await ws.delete();
    assert.equal(ws.state, WorkspaceState.DELETED);
    assert.equal((await kibotos.workspaces.get(ws.id)).state, WorkspaceState.DELETED);
  });
});

test("a create sent twice under one command_id admits one Workspace", async (t) => {
  const commandId = `ts-replay-${process.pid}-${Date.now()}`;
  const first = await kibotos.workspaces.create({ memory: "256Mi", volume: false, commandId, wait: false });
  t.after(() => first.delete().catch(() => {}));
  assert.equal(first.lastCommandId, commandId);
  const again = await kibotos.workspaces.create({ memory: "256Mi", volume: false, commandId });
  assert.equal(again.id, first.id);
  assert.equal(again.state, WorkspaceState.AVAILABLE);
  const missing = await first.command("ts-no-such-command").catch((e: unknown) => e);
  assert.ok(missing instanceof ApiError, String(missing));
  assert.equal(missing.code, Code.NotFound);
  const other = await kibotos.workspaces.create({ memory: "512Mi", volume: false, commandId }).catch((e: unknown) => e);
  assert.ok(other instanceof ApiError, String(other));
  assert.deepEqual([other.code, other.reason, other.field, other.commandId], [Code.AlreadyExists, FailureReason.CONFLICT, "command.command_id", commandId]);
  await again.delete();
});

test("refusals are ApiErrors carrying the ErrorDetail", async (t) => {
  await t.test("an unknown template is not_found naming the field", async () => {
    const err = await kibotos.workspaces.create({ template: "no-such-template" }).catch((e: unknown) => e);
    assert.ok(err instanceof ApiError, String(err));
    assert.deepEqual([err.code, err.codeName, err.reason, err.field], [Code.NotFound, "not_found", FailureReason.NOT_FOUND, "spec.template.template"]);
    assert.match(err.message, /no-such-template/);
  });
  await t.test("memory below the minimum is invalid_argument at VALIDATING", async () => {
    const err = await kibotos.workspaces.create({ memory: "64Mi" }).catch((e: unknown) => e);
    assert.ok(err instanceof ApiError, String(err));
    assert.deepEqual([err.code, err.stage, err.stageName, err.reason, err.field, err.retryable], [
      Code.InvalidArgument, FailureStage.VALIDATING, "VALIDATING", FailureReason.INVALID_REQUEST, "spec.resources.memory_bytes", false,
    ]);
  });
  await t.test("a Workspace that does not exist is not_found", async () => {
    const err = await kibotos.workspaces.get("ws-0000000000000000").catch((e: unknown) => e);
    assert.ok(err instanceof ApiError && err.code === Code.NotFound, String(err));
  });
  await t.test("a wrong API key is unauthenticated", async () => {
    const err = await new Kibotos({ apiKey: "kbt_wrong" }).workspaces.list().catch((e: unknown) => e);
    assert.ok(err instanceof ApiError && err.code === Code.Unauthenticated, String(err));
  });
});

test("a Volume outlives the Workspace bound to it and carries its data to the next", async (t) => {
  const vol = await kibotos.volumes.create({ size: "64Mi", labels: { suite: "sdk-ts-volume" } });
  t.after(() => vol.delete().catch(() => {}));
  assert.deepEqual([vol.state, vol.capacity], [VolumeState.AVAILABLE, 64n << 20n]);
  assert.deepEqual((await kibotos.volumes.list("suite=sdk-ts-volume")).map((v) => v.id), [vol.id]);
  await vol.resize("128Mi");
  assert.deepEqual([vol.state, vol.capacity], [VolumeState.AVAILABLE, 128n << 20n]);
  await vol.setLabels({ suite: "sdk-ts-volume", tier: "hot" });
  await vol.setAnnotations({ why: "sdk tests" });
  const got = (await kibotos.volumes.get(vol.id)).info;
  assert.deepEqual([got.labels, got.annotations], [{ suite: "sdk-ts-volume", tier: "hot" }, { why: "sdk tests" }]);

  const ws = await kibotos.workspaces.create({ memory: "256Mi", volume: { volumeId: vol.id } });
  try {
    assert.equal((await ws.exec(["sh", "-c", "echo kept > /data/kept && sync"])).exitCode, 0);
    await vol.refresh();
    assert.deepEqual([vol.state, vol.boundWorkspaceId], [VolumeState.ATTACHED, ws.id]);
    const refused = await vol.delete().catch((e: unknown) => e);
    assert.ok(refused instanceof ApiError && refused.code === Code.FailedPrecondition, String(refused));
  } finally {
    await ws.delete();
  }
  // A Workspace made without a Volume binds it while stopped, and releases
  // it, keeping it.
  const again = await kibotos.workspaces.create({ memory: "256Mi", volume: false });
  try {
    const running = await again.setVolume(vol.id).catch((e: unknown) => e);
    assert.ok(running instanceof ApiError && running.code === Code.FailedPrecondition, String(running)); // an execution runs
    await again.stop();
    await again.setVolume(vol.id, { mountPath: "/mnt/vol" });
    assert.equal(again.info.spec?.volume?.volumeId, vol.id);
    await again.start();
    assert.equal(await again.files.read("/mnt/vol/kept"), "kept\n");
    const held = await vol.export().catch((e: unknown) => e);
    assert.ok(held instanceof ApiError && held.code === Code.FailedPrecondition, String(held)); // an execution holds it
    await again.stop();
    await again.setVolume(null);
    assert.equal(again.info.spec?.volume?.mode, WorkspaceVolumeMode.NONE);
    await vol.refresh();
    assert.deepEqual([vol.state, vol.boundWorkspaceId], [VolumeState.AVAILABLE, ""]);
  } finally {
    await again.delete();
  }
  const exported = await vol.export();
  assert.ok(exported.state === TransferState.COMPLETE && exported.info.totalBytes > 0n);
  await exported.delete();
  await vol.delete();
  assert.equal(vol.state, VolumeState.DELETED);
  assert.equal((await kibotos.volumes.get(vol.id)).state, VolumeState.DELETED);
});

test("a stopped Workspace exported, downloaded, uploaded and restored with both tiers' files", async (t) => {
  const ws = await kibotos.workspaces.create({ memory: "256Mi", volume: { size: "64Mi" }, labels: { suite: "sdk-ts-transfer" } });
  let restored: Awaited<ReturnType<typeof kibotos.workspaces.restore>> | undefined;
  t.after(async () => {
    await ws.delete().catch(() => {});
    await restored?.delete().catch(() => {});
  });
  assert.equal((await ws.exec(["sh", "-c", "echo volume > /data/v && echo layer > /root/l && sync"])).exitCode, 0);
  const running = await ws.export().catch((e: unknown) => e);
  assert.ok(running instanceof ApiError && running.code === Code.FailedPrecondition, String(running)); // only with no execution
  await ws.stop();

  const seen: TransferState[] = [];
  const exported = await ws.export({ includeWritableLayer: true, progress: (tr) => seen.push(tr.state) });
  assert.equal(exported.state, TransferState.COMPLETE);
  assert.ok(exported.info.totalBytes > 0n && seen.at(-1) === TransferState.COMPLETE);
  assert.ok((await kibotos.transfers.list()).some((tr) => tr.id === exported.id));

  const dir = await mkdtemp(join(tmpdir(), "kibotos-sdk-ts-"));
  t.after(() => rm(dir, { recursive: true, force: true }));
  const archive = join(dir, "ws.kbx");
  const size = await exported.download(archive);
  assert.ok(size > 0n && BigInt((await stat(archive)).size) === size);

  const uploaded = await kibotos.transfers.upload(archive, { labels: { from: "sdk-ts" } });
  assert.deepEqual([uploaded.state, uploaded.info.labels.from], [TransferState.IMPORTED, "sdk-ts"]);
  assert.equal((await kibotos.transfers.get(uploaded.id)).state, TransferState.IMPORTED);

  restored = await kibotos.workspaces.restore(uploaded.id, { memory: "320Mi", cpuMillis: 500, labels: { suite: "sdk-ts-restored" } });
  assert.equal(restored.state, WorkspaceState.AVAILABLE);
  assert.notEqual(restored.id, ws.id);
  assert.equal(restored.info.spec?.resources?.memoryBytes, 320n << 20n);
  assert.equal(restored.info.spec?.resources?.cpuMillis, 500);
  assert.deepEqual(restored.info.labels, { suite: "sdk-ts-restored" });
  assert.equal(await restored.files.read("/data/v"), "volume\n");
  assert.equal(await restored.files.read("/root/l"), "layer\n");

  await exported.delete();
  assert.ok([TransferState.DELETING, TransferState.DELETED].includes(exported.state));
});

test("an Egress and a Resolver in a running Workspace's policy; deletion refused while named", async (t) => {
  const e = await kibotos.egresses.create({ protocol: "socks5", endpoint: "192.0.2.10:1080", username: "u", password: "secret", udp: true, labels: { suite: "sdk-ts-egress" } });
  const r = await kibotos.resolvers.create({ protocol: "udp", address: "192.0.2.53:53", labels: { suite: "sdk-ts-egress" } });
  t.after(async () => {
    await e.delete().catch(() => {});
    await r.delete().catch(() => {});
  });
  assert.ok(e.info.passwordSet && e.info.spec?.password === "", "the password is never returned");
  assert.deepEqual((await kibotos.egresses.list("suite=sdk-ts-egress")).map((x) => x.id), [e.id]);
  assert.deepEqual((await kibotos.resolvers.list("suite=sdk-ts-egress")).map((x) => x.id), [r.id]);
  assert.equal((await kibotos.egresses.get(e.id)).info.spec?.endpoint, "192.0.2.10:1080");
  await assert.rejects(kibotos.egresses.create({ protocol: "ftp" as "socks5", endpoint: "192.0.2.10:21" }), TypeError);
  await assert.rejects(kibotos.workspaces.create({ memory: "256Mi", network: "public-internet", resolvers: { [r.id]: "via" as "direct" } }), TypeError);

  const ws = await kibotos.workspaces.create({
    memory: "256Mi", volume: false, network: "public-internet",
    egresses: { [e.id]: ["192.0.2.0/24"] }, resolvers: { [r.id]: `egress:${e.id}` },
  });
  t.after(() => ws.delete().catch(() => {}));
  const policy = ws.info.spec?.networkPolicy;
  assert.deepEqual(policy?.egresses.map((x) => [x.egressId, x.destinations]), [[e.id, ["192.0.2.0/24"]]]);
  assert.deepEqual([policy?.resolvers[0]?.resolverId, policy?.resolvers[0]?.path?.kind.case, policy?.resolvers[0]?.path?.kind.value], [r.id, "egressId", e.id]);
  assert.equal(ws.info.networkPolicyStatus?.appliedRevision, policy?.revision);
  const named = await e.delete().catch((err: unknown) => err);
  assert.ok(named instanceof ApiError && named.code === Code.FailedPrecondition, String(named));

  await ws.setNetwork({ network: "public-internet" });
  assert.deepEqual([ws.info.spec?.networkPolicy?.egresses.length, ws.info.spec?.networkPolicy?.resolvers.length], [0, 0]);
  assert.equal(ws.info.networkPolicyStatus?.appliedRevision, ws.info.spec?.networkPolicy?.revision);
  assert.equal((await e.delete()).info.deleted, true);
  await ws.delete();
  assert.equal((await r.delete()).info.deleted, true);
});
