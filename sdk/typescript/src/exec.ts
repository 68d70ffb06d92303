// Processes: run one in the guest and take its output as it comes
// (execStream) or whole at its end (exec). ExecProcess runs under a
// command_id, so a call cut before the process started is sent again under
// the same id and attaches to the same process; one cut after it started
// resumes with StreamProcessOutput from the offsets already received, the
// reconnect the API defines.
import type { MessageInitShape } from "@bufbuild/protobuf";
import {
  ProcessEndCause,
  ProcessOutputStream,
  type ProcessExitStatus,
  type ProcessOutputChunk,
  type ProcessSpecSchema,
} from "./gen/kibotos/ctrl/v1/process_pb.js";
import { newCommandId, type Api } from "./api.js";

type ProcessSpecInit = MessageInitShape<typeof ProcessSpecSchema>;

/** How a process runs. */
export interface ExecOptions {
  env?: Record<string, string>;
  /** Working directory in the guest. */
  cwd?: string;
  /** Guest user, a name or uid; default: the template's. */
  user?: string;
  /** Bytes for the process's standard input, which is then closed; without it the process has no stdin. */
  stdin?: string | Uint8Array;
  /** The command_id of the process start; default: a new one. */
  commandId?: string;
  /** Stops following the output. The process is not signalled: it keeps running in the guest. */
  signal?: AbortSignal;
}

/** How a process ended. */
export interface ExecExit {
  /** The exit status; 128+N when signal N ended it, as a shell reports it. */
  exitCode: number;
  /** The signal that ended it, 0 if none. */
  signal: number;
  /** EXITED, SIGNALED or MEMORY_KILLED (the guest's memory watch killed it). */
  cause: ProcessEndCause;
}

/** An event of execStream: the start, a chunk of output, the end (always last). */
export type ExecEvent =
  | { type: "started"; processId: string; pid: number }
  /**
   * offset is data's place in its stream. The guest keeps the last MiB of
   * each stream and never waits for a reader: an offset past the end of
   * the stream's last chunk means the bytes between were dropped.
   */
  | { type: "stdout" | "stderr"; data: Uint8Array; offset: bigint }
  | ({ type: "exit" } & ExecExit);

/** What exec returns: the exit and the output, decoded as UTF-8. */
export interface ExecResult extends ExecExit {
  processId: string;
  stdout: string;
  stderr: string;
  /**
   * The bytes of each stream the guest dropped before they were read (it
   * keeps the last MiB of each and never waits for a reader): when either
   * is not 0, the output is not whole. Large output belongs in a file
   * (ws.files.read).
   */
  stdoutDropped: number;
  stderrDropped: number;
}

/** exec runs argv to its end and collects its output. */
export async function exec(api: Api, workspaceId: string, argv: string[], opts: ExecOptions): Promise<ExecResult> {
  const out: Record<"stdout" | "stderr", Buffer[]> = { stdout: [], stderr: [] };
  const end = { stdout: 0n, stderr: 0n }; // the offset after each stream's last byte received
  const dropped = { stdout: 0n, stderr: 0n };
  let processId = "";
  for await (const ev of execStream(api, workspaceId, argv, opts)) {
    switch (ev.type) {
      case "started":
        processId = ev.processId;
        break;
      case "stdout":
      case "stderr":
        if (ev.offset > end[ev.type]) dropped[ev.type] += ev.offset - end[ev.type];
        end[ev.type] = ev.offset + BigInt(ev.data.length);
        out[ev.type].push(Buffer.from(ev.data));
        break;
      case "exit": {
        const { type: _, ...exit } = ev;
        return {
          ...exit, processId, stdout: Buffer.concat(out.stdout).toString("utf8"), stderr: Buffer.concat(out.stderr).toString("utf8"),
          stdoutDropped: Number(dropped.stdout), stderrDropped: Number(dropped.stderr),
        };
      }
    }
  }
  throw new Error("unreachable: execStream ends with an exit event or throws");
}

/** execStream runs argv and yields its events; the stream ends after `exit`. */
export function execStream(api: Api, workspaceId: string, argv: string[], opts: ExecOptions): AsyncGenerator<ExecEvent, void, undefined> {
  const commandId = opts.commandId ?? newCommandId();
  const spec = { argv, env: opts.env ?? {}, cwd: opts.cwd ?? "", user: opts.user ?? "", stdin: opts.stdin !== undefined };
  return underOwnSignal(opts.signal, (signal) => follow(api, workspaceId, spec, commandId, opts.stdin, signal, ""));
}

/**
 * outputOf yields the output of a process already started, from the first
 * byte the guest retains, then live, then its exit (no `started`).
 */
export function outputOf(api: Api, workspaceId: string, processId: string, signal?: AbortSignal): AsyncGenerator<ExecEvent, void, undefined> {
  return underOwnSignal(signal, (own) => follow(api, workspaceId, {}, "", undefined, own, processId));
}

/**
 * underOwnSignal runs events under the calls' own signal, aborted when the
 * generator ends however it ends (and when outer aborts): connect-node
 * counts a response stream left unread as open, and an open HTTP/2 stream
 * keeps the process alive.
 */
async function* underOwnSignal(outer: AbortSignal | undefined, events: (signal: AbortSignal) => AsyncGenerator<ExecEvent, void, undefined>): AsyncGenerator<ExecEvent, void, undefined> {
  const calls = new AbortController();
  const abort = () => calls.abort(outer?.reason);
  outer?.addEventListener("abort", abort, { once: true });
  try {
    yield* events(calls.signal);
  } finally {
    outer?.removeEventListener("abort", abort);
    calls.abort();
  }
}

/**
 * follow is execStream under one signal: ExecProcess under commandId until
 * the process started, StreamProcessOutput after; with processId given,
 * the process started already and only the second is used.
 */
async function* follow(api: Api, workspaceId: string, spec: ProcessSpecInit, commandId: string, stdin: string | Uint8Array | undefined, signal: AbortSignal, processId: string): AsyncGenerator<ExecEvent, void, undefined> {
  // The next byte of each stream not yet yielded: a replay or a resume
  // sends from the earliest byte the guest retains, which may be before it.
  const next = { stdout: 0n, stderr: 0n };
  for (let attempt = 1; ; attempt++) {
    try {
      const events =
        processId === ""
          ? api.processes.execProcess({ command: { commandId }, workspaceId, spec }, { signal })
          : api.processes.streamProcessOutput({ workspaceId, processId, stdoutOffset: next.stdout, stderrOffset: next.stderr }, { signal });
      let exit: ProcessExitStatus | undefined;
      // Read to the stream's end, past `exit`: a response stream left
      // unread stays open in connect-node (and ref'd, so it keeps the
      // process alive) even when the call's signal is aborted.
      for await (const { event } of events) {
        switch (event.case) {
          case "started":
            if (processId !== "") break; // a replay's: this process was started and announced already
            processId = event.value.processId;
            // Its own retries spent, a failed input ends the call (an
            // ApiError is no reason to resume): the process would wait for
            // input that never comes.
            if (stdin !== undefined) await sendInput(api, workspaceId, processId, stdin, signal);
            yield { type: "started", processId, pid: event.value.pid };
            break;
          case "output": {
            const chunk = unseen(event.value, next);
            if (chunk) yield chunk;
            break;
          }
          case "exit":
            exit = event.value;
            break;
        }
      }
      if (exit) {
        yield { type: "exit", ...exitOf(exit) };
        return;
      }
      throw new Error(`the output stream of process ${processId || "(not started)"} ended without its exit`);
    } catch (err) {
      await api.backoff(err, attempt, signal);
    }
  }
}

/** unseen is the part of a chunk past what was already yielded, advancing next; undefined when none is new. */
function unseen(c: ProcessOutputChunk, next: { stdout: bigint; stderr: bigint }): ExecEvent | undefined {
  const stream = c.stream === ProcessOutputStream.STDERR ? "stderr" : "stdout";
  const end = c.offset + BigInt(c.data.length);
  if (end <= next[stream]) return undefined;
  const skip = next[stream] > c.offset ? next[stream] - c.offset : 0n;
  next[stream] = end;
  return { type: stream, data: c.data.subarray(Number(skip)), offset: c.offset + skip };
}

/** SendProcessInput takes at most 1 MiB of data a call. */
const inputChunk = 1 << 20;

/**
 * sendInput writes all of stdin at offset (the stdin bytes written before
 * it), a chunk a call at its offset (which makes a retry exact), and
 * closes it with the last unless close is false; it returns the offset
 * after it.
 */
export async function sendInput(api: Api, workspaceId: string, processId: string, stdin: string | Uint8Array, signal?: AbortSignal, offset = 0n, close = true): Promise<bigint> {
  const data = typeof stdin === "string" ? new TextEncoder().encode(stdin) : stdin;
  let sent = 0;
  do {
    const chunk = data.subarray(sent, sent + inputChunk);
    const at = offset + BigInt(sent);
    const last = sent + chunk.length >= data.length;
    await api.call(() => api.processes.sendProcessInput({ workspaceId, processId, data: chunk, offset: at, close: close && last }, { signal }), signal);
    sent += chunk.length;
  } while (sent < data.length);
  return offset + BigInt(data.length);
}

/** exitOf is how a process ended, as the SDK reports it. */
export function exitOf(s: ProcessExitStatus): ExecExit {
  const signaled = s.cause !== ProcessEndCause.EXITED && s.signal !== 0;
  return { exitCode: signaled ? 128 + s.signal : s.exitCode, signal: s.signal, cause: s.cause };
}
