// Unit tests: what needs no deployment. The retry rule runs against an
// in-memory WorkspaceService (connect's router transport): a fake, for the
// one thing a real ctrl cannot be made to do on demand, fail `unavailable`
// and then answer.
import assert from "node:assert/strict";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError, createRouterTransport } from "@connectrpc/connect";
import { ProcessEndCause, ProcessOutputStream, ProcessService } from "@kibotos/sdk/gen/process_pb";
import { WorkspaceCommandSchema, WorkspaceCommandState, WorkspaceService } from "@kibotos/sdk/gen/workspace_pb";
import {
  NetworkPolicyMode,
  WorkspaceExpirationAction,
  WorkspaceSchema,
  WorkspaceState,
  WorkspaceVolumeMode,
  type WorkspaceCreateSpec,
} from "@kibotos/sdk/gen/types_pb";
import { ApiError, Kibotos, loadConfig, parseEnvFile, parseSize } from "@kibotos/sdk";

test("parseEnvFile reads what clientconfig writes", () => {
  const got = parseEnvFile(["# Written by kibotos.", "", "KIBOTOS_WORKSPACE_ENDPOINT=http://127.0.0.1:7670", "export KIBOTOS_TOKEN='kbt_a'\\''b c'", 'X="q"'].join("\n"));
  assert.deepEqual(got, { KIBOTOS_WORKSPACE_ENDPOINT: "http://127.0.0.1:7670", KIBOTOS_TOKEN: "kbt_a'b c", X: "q" });
  assert.throws(() => parseEnvFile("NOT A PAIR", "bad.env"), /bad.env:1: want KEY=VALUE/);
});

test("loadConfig: $KIBOTOS_HOME/config.env, the environment wins, a missing file is empty", () => {
  const home = mkdtempSync(join(tmpdir(), "kibotos-sdk-"));
  writeFileSync(join(home, "config.env"), "KIBOTOS_WORKSPACE_ENDPOINT=http://127.0.0.1:1\nKIBOTOS_TOKEN=kbt_file\n");
  assert.deepEqual(loadConfig({ KIBOTOS_HOME: home }), { baseUrl: "http://127.0.0.1:1", apiKey: "kbt_file" });
  assert.deepEqual(loadConfig({ KIBOTOS_HOME: home, KIBOTOS_TOKEN: "kbt_env" }), { baseUrl: "http://127.0.0.1:1", apiKey: "kbt_env" });
  assert.deepEqual(loadConfig({ KIBOTOS_CONFIG: join(home, "none.env") }), { baseUrl: undefined, apiKey: undefined });
});

test("parseSize reads sizes as the CLI does", () => {
  assert.equal(parseSize("512Mi"), 512n << 20n);
  assert.equal(parseSize("1G"), 1n << 30n);
  assert.equal(parseSize("4GiB"), 4n << 30n);
  assert.equal(parseSize("1.5g"), 3n << 29n);
  assert.equal(parseSize("256"), 256n << 20n, "a string of digits is MiB");
  assert.equal(parseSize(4096), 4096n, "a number is bytes");
  assert.throws(() => parseSize("lots", "memory"), /memory "lots": want a number with a unit/);
});

test("a create cut by `unavailable` is sent again under the same command_id", async () => {
  const seen: string[] = [];
  const transport = createRouterTransport(({ service }) => {
    service(WorkspaceService, {
      createWorkspace(req) {
        seen.push(req.command?.commandId ?? "");
        if (seen.length < 3) throw new ConnectError("ctrl restarting", Code.Unavailable);
        return { workspace: create(WorkspaceSchema, { workspaceId: "ws-1", state: WorkspaceState.CREATING }) };
      },
    });
  });
  const kibotos = new Kibotos({ transport, retry: { initialDelayMs: 1 } });
  const ws = await kibotos.workspaces.create({ wait: false });
  assert.equal(ws.id, "ws-1");
  assert.equal(seen.length, 3);
  assert.match(seen[0], /^ts-[0-9a-f-]{36}$/);
  assert.ok(seen.every((id) => id === seen[0]), `command ids ${seen}`);
});

test("a list follows every page, reading again a page cut by `unavailable`", async () => {
  const pages: Record<string, [string[], string]> = { "": [["ws-1", "ws-2"], "t2"], t2: [["ws-3"], "t3"], t3: [[], ""] };
  const asked: string[] = [];
  const transport = createRouterTransport(({ service }) => {
    service(WorkspaceService, {
      listWorkspaces(req) {
        asked.push(req.pageToken);
        assert.equal(req.labelSelector, "team=ml");
        if (asked.length === 2) throw new ConnectError("ctrl restarting", Code.Unavailable);
        const [ids, nextPageToken] = pages[req.pageToken];
        return { workspaces: ids.map((workspaceId) => create(WorkspaceSchema, { workspaceId })), nextPageToken };
      },
    });
  });
  const got = await new Kibotos({ transport, retry: { initialDelayMs: 1 } }).workspaces.list("team=ml");
  assert.deepEqual(got.map((w) => w.id), ["ws-1", "ws-2", "ws-3"]);
  assert.deepEqual(asked, ["", "t2", "t2", "t3"]);
});

/** failingGet is a WorkspaceService whose GetWorkspace always fails with code, counting its calls. */
function failingGet(code: Code) {
  const counter = { calls: 0 };
  const transport = createRouterTransport(({ service }) => {
    service(WorkspaceService, {
      getWorkspace() {
        counter.calls++;
        throw new ConnectError("refused", code);
      },
    });
  });
  return { transport, counter };
}

test("what is not `unavailable` is not retried and comes out as an ApiError with its code", async () => {
  const { transport, counter } = failingGet(Code.NotFound);
  const err = await new Kibotos({ transport }).workspaces.get("ws-x").catch((e: unknown) => e);
  assert.ok(err instanceof ApiError, String(err));
  assert.equal(err.code, Code.NotFound);
  assert.equal(err.codeName, "not_found");
  assert.equal(counter.calls, 1);
});

test("retries end: the last `unavailable` is thrown", async () => {
  const { transport, counter } = failingGet(Code.Unavailable);
  const err = await new Kibotos({ transport, retry: { attempts: 3, initialDelayMs: 1 } }).workspaces.get("ws-x").catch((e: unknown) => e);
  assert.ok(err instanceof ApiError && err.code === Code.Unavailable && err.retryable, String(err));
  assert.equal(counter.calls, 3);
});

test("create follows its command with WaitWorkspace and never polls GetWorkspace", async () => {
  const calls = { wait: 0, get: 0 };
  const transport = createRouterTransport(({ service }) => {
    service(WorkspaceService, {
      createWorkspace(req) {
        return { workspace: create(WorkspaceSchema, { workspaceId: "ws-1", state: WorkspaceState.CREATING }), command: { commandId: req.command?.commandId } };
      },
      waitWorkspace(req) {
        calls.wait++;
        assert.equal(req.workspaceId, "ws-1");
        assert.ok(req.commandId, "WaitWorkspace names the create's command");
        // The first answer is progress (the wait's time ran out); the second, the end.
        const done = calls.wait > 1;
        return {
          workspace: create(WorkspaceSchema, { workspaceId: "ws-1", state: done ? WorkspaceState.AVAILABLE : WorkspaceState.CREATING }),
          command: create(WorkspaceCommandSchema, { commandId: req.commandId, state: done ? WorkspaceCommandState.SUCCEEDED : WorkspaceCommandState.RUNNING }),
        };
      },
      getWorkspace() {
        calls.get++;
        throw new ConnectError("a follower polled GetWorkspace", Code.Internal);
      },
    });
  });
  const ws = await new Kibotos({ transport }).workspaces.create();
  assert.equal(ws.state, WorkspaceState.AVAILABLE);
  assert.deepEqual(calls, { wait: 2, get: 0 });
});

test("create asks for the Volume, network policy and expiration given, and refuses bad ones before sending", async () => {
  const specs: WorkspaceCreateSpec[] = [];
  const transport = createRouterTransport(({ service }) => {
    service(WorkspaceService, {
      createWorkspace(req) {
        specs.push(req.spec!);
        return { workspace: create(WorkspaceSchema, { workspaceId: "ws-1", state: WorkspaceState.CREATING }) };
      },
    });
  });
  const kibotos = new Kibotos({ transport });
  const before = Date.now();
  await kibotos.workspaces.create({
    wait: false, volume: { size: "64Mi", mountPath: "/work" }, network: "public-internet",
    allow: ["10.1.2.3"], deny: ["10.0.0.0/8"], expireInSeconds: 3600, expireAction: "delete",
  });
  let spec = specs[specs.length - 1];
  assert.deepEqual([spec.volume?.mode, spec.volume?.mountPath, spec.volume?.newVolume?.capacityBytes], [WorkspaceVolumeMode.NEW, "/work", 64n << 20n]);
  assert.deepEqual([spec.networkPolicy?.mode, spec.networkPolicy?.allow, spec.networkPolicy?.deny], [NetworkPolicyMode.PUBLIC_INTERNET, ["10.1.2.3"], ["10.0.0.0/8"]]);
  assert.equal(spec.expiration?.action, WorkspaceExpirationAction.DELETE);
  const deadline = Number(spec.expiration?.deadline?.seconds) * 1000;
  assert.ok(deadline >= before + 3599_000 && deadline <= Date.now() + 3600_000, `deadline ${deadline}`);

  await kibotos.workspaces.create({ wait: false, volume: { volumeId: "vol-1" } });
  spec = specs[specs.length - 1];
  assert.deepEqual([spec.volume?.mode, spec.volume?.volumeId, spec.networkPolicy?.mode, spec.expiration], [WorkspaceVolumeMode.BOUND, "vol-1", NetworkPolicyMode.DENY_ALL, undefined]);

  const sent = specs.length;
  for (const bad of [{ network: "open" }, { expireInSeconds: 60, expireAction: "pause" }, { expireInSeconds: -1 }, { expireAction: "delete" }]) {
    await assert.rejects(kibotos.workspaces.create({ wait: false, ...(bad as object) }), TypeError, JSON.stringify(bad));
  }
  assert.equal(specs.length, sent, "a refused option sent a create");
});

test("exec counts the output the guest dropped: a chunk past the last byte received", async () => {
  const chunk = (offset: bigint, text: string) => ({ case: "output" as const, value: { stream: ProcessOutputStream.STDOUT, offset, data: new TextEncoder().encode(text) } });
  const transport = createRouterTransport(({ service }) => {
    service(ProcessService, {
      async *execProcess() {
        yield { event: { case: "started" as const, value: { processId: "proc-1", pid: 7 } } };
        yield { event: chunk(0n, "ab") };
        yield { event: chunk(5n, "cd") }; // bytes 2 to 4 dropped
        yield { event: { case: "exit" as const, value: { cause: ProcessEndCause.EXITED, exitCode: 0 } } };
      },
    });
  });
  const ws = new Kibotos({ transport }).workspace("ws-1");
  const r = await ws.exec(["cat", "big"]);
  assert.deepEqual([r.exitCode, r.stdout, r.stdoutDropped, r.stderrDropped], [0, "abcd", 3, 0]);
  const offsets: bigint[] = [];
  for await (const ev of ws.execStream(["cat", "big"])) if (ev.type === "stdout") offsets.push(ev.offset);
  assert.deepEqual(offsets, [0n, 5n]);
});
