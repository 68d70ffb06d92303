// Background processes: ws.processes starts one (StartProcess, a command
// under a command_id) and finds it again by its id; a Process reads its
// output from the first byte the guest retains (the resume exec uses),
// writes its stdin at tracked offsets, signals its group and waits for its
// exit.
import {
  ProcessSignal,
  ProcessState,
  type Process as ProcessMessage,
} from "./gen/kibotos/ctrl/v1/process_pb.js";
import { newCommandId, type Api } from "./api.js";
import { exitOf, outputOf, sendInput, type ExecEvent, type ExecExit } from "./exec.js";

/** How a background process runs. */
export interface StartOptions {
  env?: Record<string, string>;
  /** Working directory in the guest. */
  cwd?: string;
  /** Guest user, a name or uid; default: the template's. */
  user?: string;
  /** true keeps its stdin open for sendInput; default: no stdin. */
  stdin?: boolean;
  /**
   * A pseudo-terminal of this size to run it on: stdout and stderr are then
   * one stream (reported as stdout), input is always accepted, and
   * resize() changes the size.
   */
  pty?: { cols: number; rows: number };
  /** The command_id of the start; default: a new one. */
  commandId?: string;
  signal?: AbortSignal;
}

/** A signal the API delivers: a name ("TERM", "SIGTERM") or its number. */
export type SignalName = "HUP" | "INT" | "QUIT" | "KILL" | "USR1" | "USR2" | "TERM" | "CONT" | "STOP" | `SIG${string}` | number;

/** signalOf is the API's ProcessSignal for a name or number; a TypeError for another. */
export function signalOf(sig: SignalName): ProcessSignal {
  const known = Object.values(ProcessSignal).filter((v): v is number => typeof v === "number" && v !== 0);
  if (typeof sig === "number") {
    if (known.includes(sig)) return sig as ProcessSignal;
  } else {
    const name = sig.toUpperCase().replace(/^SIG/, "");
    const value = (ProcessSignal as unknown as Record<string, number>)[`SIG${name}`];
    if (value !== undefined && value !== 0) return value as ProcessSignal;
  }
  const names = known.map((v) => ProcessSignal[v].replace(/^SIG/, ""));
  throw new TypeError(`signal ${String(sig)}: want one of ${names.join(", ")} (or its number)`);
}

/** Processes is `ws.processes`: the processes of the Workspace's current execution. */
export class Processes {
  constructor(private readonly api: Api, private readonly workspaceId: string) {}

  /** start runs argv (no shell) in the background and returns once the guest executed it. */
  async start(argv: string[], opts: StartOptions = {}): Promise<Process> {
    const commandId = opts.commandId ?? newCommandId();
    const spec = { argv, env: opts.env ?? {}, cwd: opts.cwd ?? "", user: opts.user ?? "", stdin: opts.stdin ?? false, pty: opts.pty };
    const res = await this.api.call(
      () => this.api.processes.startProcess({ command: { commandId }, workspaceId: this.workspaceId, spec }, { signal: opts.signal }),
      opts.signal,
    );
    return this.get(res.processId);
  }

  /** get finds a process of the current execution by its id. */
  async get(processId: string): Promise<Process> {
    const res = await this.api.call(() => this.api.processes.getProcess({ workspaceId: this.workspaceId, processId }));
    return new Process(this.api, this.workspaceId, res.process!);
  }

  /** list lists the processes started through the API in the current execution, oldest first (running ones, unless includeExited). */
  async list(opts: { includeExited?: boolean } = {}): Promise<Process[]> {
    const res = await this.api.call(() => this.api.processes.listProcesses({ workspaceId: this.workspaceId, includeExited: opts.includeExited ?? false }));
    return res.processes.map((p) => new Process(this.api, this.workspaceId, p));
  }
}

/** Process is one process in a Workspace: what ctrl last said of it, and what can be done with it. */
export class Process {
  readonly id: string;
  readonly pid: number;
  private message: ProcessMessage;
  private stdinOffset: bigint;

  constructor(private readonly api: Api, private readonly workspaceId: string, message: ProcessMessage) {
    this.id = message.processId;
    this.pid = message.pid;
    this.message = message;
    this.stdinOffset = message.stdinOffset;
  }

  /** The process as ctrl last answered it (refresh() asks again). */
  get info(): ProcessMessage {
    return this.message;
  }

  get state(): ProcessState {
    return this.message.state;
  }

  /** refresh reads the process again. */
  async refresh(): Promise<this> {
    const res = await this.api.call(() => this.api.processes.getProcess({ workspaceId: this.workspaceId, processId: this.id }));
    this.message = res.process!;
    return this;
  }

  /** signal sends sig (default TERM) to the process's group, its children too; false when it had already ended. */
  async signal(sig: SignalName = "TERM"): Promise<boolean> {
    const signal = signalOf(sig);
    const res = await this.api.call(() => this.api.processes.signalProcess({ workspaceId: this.workspaceId, processId: this.id, signal }));
    return res.delivered;
  }

  /** kill is signal("KILL"). */
  kill(): Promise<boolean> {
    return this.signal("KILL");
  }

  /** wait returns how the process ended, once it has; an aborted signal stops waiting and leaves it running. */
  async wait(opts: { signal?: AbortSignal } = {}): Promise<ExecExit> {
    const res = await this.api.call(
      () => this.api.processes.waitProcess({ workspaceId: this.workspaceId, processId: this.id }, { signal: opts.signal }),
      opts.signal,
    );
    return exitOf(res.exit!);
  }

  /** output yields the process's output from the first byte the guest retains (its last MiB of each stream), then live, then its exit. */
  output(opts: { signal?: AbortSignal } = {}): AsyncGenerator<ExecEvent, void, undefined> {
    return outputOf(this.api, this.workspaceId, this.id, opts.signal);
  }

  /** resize sets its terminal's size (started with a pty) and sends it SIGWINCH; without a pty, or ended, it is failed_precondition. */
  async resize(size: { cols: number; rows: number }, opts: { signal?: AbortSignal } = {}): Promise<void> {
    await this.api.call(
      () => this.api.processes.resizeProcessPty({ workspaceId: this.workspaceId, processId: this.id, size }, { signal: opts.signal }),
      opts.signal,
    );
  }

  /** sendInput writes to the process's stdin (started with stdin: true); close: true closes it after, as EOF. */
  async sendInput(data: string | Uint8Array, opts: { close?: boolean; signal?: AbortSignal } = {}): Promise<void> {
    this.stdinOffset = await sendInput(this.api, this.workspaceId, this.id, data, opts.signal, this.stdinOffset, opts.close ?? false);
  }
}
