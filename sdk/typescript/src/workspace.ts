// Workspaces: create one and wait until it runs, use it, stop, start and
// delete it. Each lifecycle call is a command under a command_id made here
// and kept across its retries; the SDK follows the command to its end as
// `kibotos workspace create` does, with WaitWorkspace: ctrl answers as soon
// as the command ends, so nothing polls.
import type { MessageInitShape } from "@bufbuild/protobuf";
import {
  StopMode,
  WorkspaceCommandState,
  type WorkspaceCommand,
} from "./gen/kibotos/ctrl/v1/workspace_pb.js";
import { setTimeout as sleep } from "node:timers/promises";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import type { MetricsSample } from "./gen/kibotos/ctrl/v1/metrics_pb.js";
import {
  NetworkPolicyMode,
  RetentionTierKind,
  WorkspaceCreateSpecSchema,
  WorkspaceExpirationAction,
  WorkspaceVolumeMode,
  type Workspace as WorkspaceMessage,
  WorkspaceState,
} from "./gen/kibotos/ctrl/v1/types_pb.js";
import { newCommandId, type Api } from "./api.js";
import { CommandFailedError } from "./errors.js";
import { exec, execStream, type ExecEvent, type ExecOptions, type ExecResult } from "./exec.js";
import { policyEntries, type ResolverPathText } from "./egress.js";
import { Files } from "./files.js";
import { Processes } from "./process.js";
import { Transfer, type TransferWaitOptions } from "./transfer.js";
import { issueSession, type Session, type SessionOptions } from "./session.js";
import { parseSize, type Size } from "./size.js";

/** What create asks for when not told, as `kibotos workspace create` (ctrl has no default memory). */
const defaultMemory = "512Mi";
const defaultCpuMillis = 1000;

/** The longest one WaitWorkspace call waits before answering with the command's progress (ctrl allows 60 s). */
const waitStepSeconds = 30n;

/** What every lifecycle call takes. */
export interface CommandOptions {
  /** The command_id to send: a retry of a call that may have been admitted passes the id it used. Default: a new one. */
  commandId?: string;
  /** false returns once ctrl admitted the command instead of waiting for its end. Default true. */
  wait?: boolean;
  /** Gives up waiting (the command goes on in ctrl). */
  signal?: AbortSignal;
}

/** What a restore changes of the archived spec; what is not given is the archive's. */
export interface RestoreOptions extends CommandOptions {
  memory?: Size;
  cpuMillis?: number;
  /** The writable layer's capacity; raised to the archived layer's size when below it. */
  disk?: Size;
  labels?: Record<string, string>;
}

/** What a new Workspace is made of; every field has a default. */
export interface CreateOptions extends CommandOptions {
  /** "NAME" or "NAME@REVISION"; default: the deployment's default template at its default revision. */
  template?: string;
  /** Guest memory: "512Mi", "1G", or bytes. Default 512Mi, as the CLI's. */
  memory?: Size;
  /** CPU in thousandths of a vCPU. Default 1000. */
  cpuMillis?: number;
  /** Capacity of the writable layer (the root filesystem's changes); default: the storage profile's. */
  disk?: Size;
  /**
   * false: no Volume. `{ size, mountPath }`: a new Volume, deleted with the
   * Workspace. `{ volumeId, mountPath }`: an existing Volume bound to it,
   * kept when it is deleted. Default: a new Volume of the defaults at /data.
   */
  volume?: false | { size?: Size; mountPath?: string } | { volumeId: string; mountPath?: string };
  /** "deny-all" (the default) or "public-internet", which `allow` and `deny` refine. */
  network?: "deny-all" | "public-internet";
  /** With public-internet: addresses or CIDRs admitted even where `deny` covers them. */
  allow?: string[];
  /** With public-internet: addresses or CIDRs refused. */
  deny?: string[];
  /** With public-internet: { EGRESS_ID: [CIDR, ...] }, TCP to those destinations leaves through that Egress. */
  egresses?: Record<string, string[]>;
  /** With public-internet: { RESOLVER_ID: "direct" | "egress:EGRESS_ID" }, the guest's DNS goes to that Resolver. */
  resolvers?: Record<string, ResolverPathText>;
  /** Stop the Workspace this many seconds from now (or delete it: `expireAction: "delete"`). */
  expireInSeconds?: number;
  /** What `expireInSeconds` does: "stop" (the default) or "delete". */
  expireAction?: "stop" | "delete";
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
}

/** Workspaces is `kibotos.workspaces`. */
export class Workspaces {
  constructor(private readonly api: Api) {}

  /** create admits a Workspace and, unless `wait: false`, waits until it is AVAILABLE. */
  async create(opts: CreateOptions = {}): Promise<Workspace> {
    const spec = createSpec(opts);
    const commandId = opts.commandId ?? newCommandId();
    const res = await this.api.call(() => this.api.workspaces.createWorkspace({ command: { commandId }, spec }, { signal: opts.signal }), opts.signal);
    const ws = new Workspace(this.api, res.workspace!, commandId);
    if (opts.wait !== false) await ws.follow(commandId, opts.signal);
    return ws;
  }

  /**
   * restore makes a new Workspace from a COMPLETE or IMPORTED Transfer: the
   * spec its archive carries (memory, cpuMillis and disk, each when given,
   * in place of the archive's; the archive's others kept), its Volume
   * imported and bound, its writable layer when it was exported (disk
   * below its size is raised to it); labels label the new Workspace.
   * Unless `wait: false` it waits until AVAILABLE, as create does.
   */
  async restore(transferId: string, opts: RestoreOptions = {}): Promise<Workspace> {
    const commandId = opts.commandId ?? newCommandId();
    const given = {
      ...(opts.memory === undefined ? {} : { memoryBytes: parseSize(opts.memory, "memory") }),
      ...(opts.cpuMillis === undefined ? {} : { cpuMillis: opts.cpuMillis }),
      ...(opts.disk === undefined ? {} : { writableLayerCapacityBytes: parseSize(opts.disk, "disk") }),
    };
    const resources = Object.keys(given).length === 0 ? undefined : { ...(await this.archivedResources(transferId, opts.signal)), ...given };
    const spec = { labels: opts.labels ?? {}, resources };
    const res = await this.api.call(() => this.api.workspaces.restoreWorkspace({ command: { commandId }, transferId, spec }, { signal: opts.signal }), opts.signal);
    const ws = new Workspace(this.api, res.workspace!, commandId);
    if (opts.wait !== false) await ws.follow(commandId, opts.signal);
    return ws;
  }

  /**
   * archivedResources is what the Transfer's archive carries, or create's
   * defaults for an archive of a Volume alone. ctrl replaces a restore's
   * resources whole, so a restore that changes one of them sends the
   * others as archived (as `kibotos workspace restore`).
   */
  private async archivedResources(transferId: string, signal?: AbortSignal): Promise<{ cpuMillis: number; memoryBytes: bigint; writableLayerCapacityBytes: bigint }> {
    const res = await this.api.call(() => this.api.transfers.getTransfer({ transferId }, { signal }), signal);
    const r = res.transfer?.manifest?.resources;
    if (r) return { cpuMillis: r.cpuMillis, memoryBytes: r.memoryBytes, writableLayerCapacityBytes: r.writableLayerCapacityBytes };
    return { cpuMillis: defaultCpuMillis, memoryBytes: parseSize(defaultMemory, "memory"), writableLayerCapacityBytes: 0n };
  }

  /** get returns the Workspace with this id as ctrl has it now. */
  async get(workspaceId: string): Promise<Workspace> {
    const res = await this.api.call(() => this.api.workspaces.getWorkspace({ workspaceId }));
    return new Workspace(this.api, res.workspace!);
  }

  /** list returns every Workspace a label selector ("team=ml", "env in (a,b)"; "" for all) selects. */
  async list(labelSelector = ""): Promise<Workspace[]> {
    return this.api.everyPage(
      (pageToken) => this.api.workspaces.listWorkspaces({ labelSelector, pageSize: 1000, pageToken }),
      (res) => res.workspaces.map((w) => new Workspace(this.api, w)),
    );
  }
}

/** createSpec is the WorkspaceCreateSpec the options ask for. */
function createSpec(opts: CreateOptions): MessageInitShape<typeof WorkspaceCreateSpecSchema> {
  const [template, revision = ""] = (opts.template ?? "").split("@", 2);
  let volume: MessageInitShape<typeof WorkspaceCreateSpecSchema>["volume"];
  if (opts.volume === false) {
    volume = { mode: WorkspaceVolumeMode.NONE };
  } else if (opts.volume && "volumeId" in opts.volume) {
    volume = { mode: WorkspaceVolumeMode.BOUND, volumeId: opts.volume.volumeId, mountPath: opts.volume.mountPath ?? "" };
  } else if (opts.volume) {
    volume = {
      mode: WorkspaceVolumeMode.NEW,
      mountPath: opts.volume.mountPath ?? "",
      newVolume: { capacityBytes: opts.volume.size === undefined ? 0n : parseSize(opts.volume.size, "volume.size") },
    };
  }
  return {
    template: { template, revision },
    resources: {
      memoryBytes: parseSize(opts.memory ?? defaultMemory, "memory"),
      cpuMillis: opts.cpuMillis ?? defaultCpuMillis,
      writableLayerCapacityBytes: opts.disk === undefined ? 0n : parseSize(opts.disk, "disk"),
    },
    volume,
    networkPolicy: networkPolicy(opts),
    expiration: expiration(opts),
    labels: opts.labels ?? {},
    annotations: opts.annotations ?? {},
  };
}

/** networkPolicy is the policy create's options ask for. */
function networkPolicy(opts: NetworkOptions): MessageInitShape<typeof WorkspaceCreateSpecSchema>["networkPolicy"] {
  const modes = { "deny-all": NetworkPolicyMode.DENY_ALL, "public-internet": NetworkPolicyMode.PUBLIC_INTERNET };
  const mode = modes[opts.network ?? "deny-all"];
  if (mode === undefined) throw new TypeError(`network "${opts.network}": want deny-all or public-internet`);
  return { mode, allow: opts.allow ?? [], deny: opts.deny ?? [], ...policyEntries(opts.egresses, opts.resolvers) };
}

/** The options that make a network policy, at create and in setNetwork. */
export type NetworkOptions = Pick<CreateOptions, "network" | "allow" | "deny" | "egresses" | "resolvers">;

/** expiration is the policy expireInSeconds and expireAction ask for, none without expireInSeconds. */
function expiration(opts: CreateOptions): MessageInitShape<typeof WorkspaceCreateSpecSchema>["expiration"] {
  if (opts.expireInSeconds === undefined) {
    if (opts.expireAction !== undefined) throw new TypeError("expireAction needs expireInSeconds");
    return undefined;
  }
  return expirationIn(opts.expireInSeconds, opts.expireAction);
}

/** expirationIn is the policy that stops (or deletes) a Workspace seconds from now. */
function expirationIn(seconds: number, action: "stop" | "delete" = "stop") {
  const actions = { stop: WorkspaceExpirationAction.STOP, delete: WorkspaceExpirationAction.DELETE };
  const a = actions[action];
  if (a === undefined || !(seconds > 0)) {
    throw new TypeError(`expireInSeconds ${seconds}, expireAction "${action}": want seconds from now and stop or delete`);
  }
  return { action: a, deadline: timestampFromMs(Date.now() + seconds * 1000) };
}

/** Workspace is one Workspace: its id, what ctrl last said of it, and what can be done with it. */
export class Workspace {
  readonly id: string;
  /** Files in the guest. */
  readonly files: Files;
  /** Background processes in the guest (exec runs one to its end). */
  readonly processes: Processes;
  private message: WorkspaceMessage;
  private lastCommand?: string;

  constructor(private readonly api: Api, message: WorkspaceMessage, lastCommandId?: string) {
    this.id = message.workspaceId;
    this.message = message;
    this.lastCommand = lastCommandId;
    this.files = new Files(api, this.id);
    this.processes = new Processes(api, this.id);
  }

  /** The Workspace as ctrl last answered it (refresh() asks again). */
  get info(): WorkspaceMessage {
    return this.message;
  }

  get state(): WorkspaceState {
    return this.message.state;
  }

  /**
   * The command_id of the last lifecycle command (create, restore, start,
   * stop, delete) sent through this object; undefined before one.
   * follow() or command() it after a call made with `wait: false`.
   */
  get lastCommandId(): string | undefined {
    return this.lastCommand;
  }

  /**
   * The capacity the writable layer has, in bytes (undefined until it
   * exists): the BEST_EFFORT retention tier's. The spec keeps what create
   * asked for, zero for the default.
   */
  get layerCapacity(): bigint | undefined {
    return this.message.retentionTiers.find((t) => t.kind === RetentionTierKind.BEST_EFFORT)?.capacityBytes;
  }

  /** refresh reads the Workspace again. */
  async refresh(): Promise<this> {
    const res = await this.api.call(() => this.api.workspaces.getWorkspace({ workspaceId: this.id }));
    this.message = res.workspace!;
    return this;
  }

  /** exec runs argv in the guest to its end and returns its exit code, stdout and stderr. */
  exec(argv: string[], opts: ExecOptions = {}): Promise<ExecResult> {
    return exec(this.api, this.id, argv, opts);
  }

  /** execStream runs argv in the guest and yields its output as it comes, then its exit. */
  execStream(argv: string[], opts: ExecOptions = {}): AsyncGenerator<ExecEvent, void, undefined> {
    return execStream(this.api, this.id, argv, opts);
  }

  /**
   * issueSession issues a data-plane session for the current execution: a
   * token for this Workspace's data plane alone, within its scopes, to hand
   * an agent instead of the API key. Needs an API key and an AVAILABLE
   * Workspace.
   */
  issueSession(opts: SessionOptions = {}): Promise<Session> {
    return issueSession(this.api, this.id, opts);
  }

  /**
   * setExpiration has ctrl stop the Workspace (or delete it: action
   * "delete") inSeconds from now, on ctrl's clock; null clears the policy.
   * Each set* sends the revision of what it replaces as last read (info):
   * a change made meanwhile elsewhere is refused (failed_precondition),
   * and refresh() reads the new one.
   */
  async setExpiration(expiry: { inSeconds: number; action?: "stop" | "delete" } | null, opts: { signal?: AbortSignal } = {}): Promise<this> {
    const change = expiry === null ? { case: "clear" as const, value: true } : { case: "set" as const, value: expirationIn(expiry.inSeconds, expiry.action) };
    const expectedExpirationRevision = this.message.expiration?.revision ?? 0n;
    return this.update(opts, (command, signal) =>
      this.api.workspaces.updateWorkspaceExpiration({ command, workspaceId: this.id, expectedExpirationRevision, change: { change } }, { signal }));
  }

  /** setLabels replaces every label (list's labelSelector matches them). */
  async setLabels(labels: Record<string, string>, opts: { signal?: AbortSignal } = {}): Promise<this> {
    const expectedLabelsRevision = this.message.labelsRevision;
    return this.update(opts, (command, signal) => this.api.workspaces.updateWorkspaceLabels({ command, workspaceId: this.id, expectedLabelsRevision, labels }, { signal }));
  }

  /** setAnnotations replaces every annotation (kept for callers, selected by nothing). */
  async setAnnotations(annotations: Record<string, string>, opts: { signal?: AbortSignal } = {}): Promise<this> {
    const expectedAnnotationsRevision = this.message.annotationsRevision;
    return this.update(opts, (command, signal) =>
      this.api.workspaces.updateWorkspaceAnnotations({ command, workspaceId: this.id, expectedAnnotationsRevision, annotations }, { signal }));
  }

  /** setDisk grows the writable layer to disk ("8Gi", or bytes), above its layerCapacity (it only grows); the next start boots with it. */
  async setDisk(disk: Size, opts: { signal?: AbortSignal } = {}): Promise<this> {
    const capacityBytes = parseSize(disk, "disk");
    const expectedResourcesRevision = this.message.spec?.resourcesRevision ?? 0n;
    return this.update(opts, (command, signal) =>
      this.api.workspaces.resizeWorkspaceWritableLayer({ command, workspaceId: this.id, expectedResourcesRevision, capacityBytes }, { signal }));
  }

  /**
   * setVolume binds the Volume volumeId (mounted at mountPath, default
   * /data; kept when the Workspace is deleted unless deleteWithWorkspace),
   * or releases the binding with null, which keeps the Volume. Only while
   * the Workspace holds no execution (stopped): otherwise
   * failed_precondition.
   */
  async setVolume(volumeId: string | null, opts: { mountPath?: string; deleteWithWorkspace?: boolean; signal?: AbortSignal } = {}): Promise<this> {
    if (volumeId === null && (opts.mountPath !== undefined || opts.deleteWithWorkspace !== undefined)) {
      throw new TypeError("setVolume(null) releases the binding: mountPath and deleteWithWorkspace must be unset");
    }
    const volume =
      volumeId === null
        ? { mode: WorkspaceVolumeMode.NONE }
        : { mode: WorkspaceVolumeMode.BOUND, volumeId, mountPath: opts.mountPath ?? "", deleteWithWorkspace: opts.deleteWithWorkspace };
    const expectedBindingRevision = this.message.spec?.bindingRevision ?? 0n;
    return this.update(opts, (command, signal) =>
      this.api.workspaces.updateWorkspaceVolumeBinding({ command, workspaceId: this.id, expectedBindingRevision, volume }, { signal }));
  }

  /**
   * metrics samples the running execution's usage now: CPU, memory, each
   * filesystem, the network counters and the process count. Only while
   * AVAILABLE; nothing is kept between calls.
   */
  async metrics(opts: { signal?: AbortSignal } = {}): Promise<MetricsSample> {
    const res = await this.api.call(() => this.api.metrics.getWorkspaceMetrics({ workspaceId: this.id }, { signal: opts.signal }), opts.signal);
    return res.sample!;
  }

  /** setMemory replaces the guest's memory ("768Mi", or bytes); the next start boots with it. */
  async setMemory(memory: Size, opts: { signal?: AbortSignal } = {}): Promise<this> {
    const memoryBytes = parseSize(memory, "memory");
    const expectedResourcesRevision = this.message.spec?.resourcesRevision ?? 0n;
    return this.update(opts, (command, signal) =>
      this.api.workspaces.updateWorkspaceMemory({ command, workspaceId: this.id, expectedResourcesRevision, memoryBytes }, { signal }));
  }

  /**
   * setNetwork replaces the egress policy, as create's network, allow and
   * deny ask for it, with the revision last read (a change made meanwhile
   * is refused: failed_precondition). On a running Workspace it waits
   * until the node confirms the new revision in force
   * (info.networkPolicyStatus.appliedRevision): judge enforcement by that,
   * never by the call having returned. A node that could not apply it
   * throws CommandFailedError. A Workspace not running takes the policy at
   * its next start. `wait: false` returns once ctrl admitted the change.
   */
  async setNetwork(policy: NetworkOptions, opts: { wait?: boolean; signal?: AbortSignal } = {}): Promise<this> {
    const wanted = networkPolicy(policy);
    const expectedRevision = this.message.spec?.networkPolicy?.revision ?? 0n;
    const commandId = newCommandId();
    await this.update(
      opts,
      (command, signal) => this.api.workspaces.updateWorkspaceNetworkPolicy({ command, workspaceId: this.id, expectedRevision, networkPolicy: wanted }, { signal }),
      commandId,
    );
    const revision = this.message.spec?.networkPolicy?.revision ?? 0n;
    if (opts.wait === false || revision === expectedRevision) return this;
    while (this.message.state === WorkspaceState.AVAILABLE && (this.message.networkPolicyStatus?.appliedRevision ?? 0n) < revision) {
      const res = await this.api.call(
        () => this.api.workspaces.waitWorkspace({ workspaceId: this.id, commandId, timeout: { seconds: waitStepSeconds } }, { signal: opts.signal }),
        opts.signal,
      );
      if (res.workspace) this.message = res.workspace;
      const c = res.command!;
      if (c.state === WorkspaceCommandState.FAILED) throw new CommandFailedError(this.id, commandId, c.failure);
      if (c.state === WorkspaceCommandState.SUCCEEDED) await sleep(200, undefined, { signal: opts.signal }); // the command ended: a wait on it answers at once
    }
    return this;
  }

  /**
   * export captures the Workspace, which must have no execution (STOPPED),
   * into a Transfer: its Volume always, its writable layer with
   * includeWritableLayer, the Template's image with includeTemplateImage.
   * Unless `wait: false` it waits until the Transfer is COMPLETE (progress
   * is called as its bytes advance); a failed export throws
   * TransferFailedError.
   */
  async export(opts: TransferWaitOptions & { includeWritableLayer?: boolean; includeTemplateImage?: boolean; wait?: boolean } = {}): Promise<Transfer> {
    const commandId = newCommandId();
    const res = await this.api.call(
      () => this.api.workspaces.exportWorkspace({
        command: { commandId }, workspaceId: this.id,
        includeWritableLayer: opts.includeWritableLayer ?? false, includeTemplateImage: opts.includeTemplateImage ?? false,
      }, { signal: opts.signal }),
      opts.signal,
    );
    const t = new Transfer(this.api, res.transfer!);
    return opts.wait === false ? t : t.wait(opts);
  }

  /** update sends one change under one command_id (kept across retries) and keeps the Workspace it answers. */
  private async update(
    opts: { signal?: AbortSignal },
    send: (command: { commandId: string }, signal?: AbortSignal) => Promise<{ workspace?: WorkspaceMessage }>,
    commandId = newCommandId(),
  ): Promise<this> {
    const command = { commandId };
    const res = await this.api.call(() => send(command, opts.signal), opts.signal);
    this.message = res.workspace!;
    return this;
  }

  /** start starts a stopped Workspace and, unless `wait: false`, waits until it is AVAILABLE again. */
  async start(opts: CommandOptions = {}): Promise<this> {
    return this.lifecycle(opts, (commandId) => this.api.workspaces.startWorkspace({ command: { commandId }, workspaceId: this.id }, { signal: opts.signal }));
  }

  /** stop stops the guest (force: at once, without its sync and unmount) and, unless `wait: false`, waits until STOPPED. */
  async stop(opts: CommandOptions & { force?: boolean } = {}): Promise<this> {
    const mode = opts.force ? StopMode.FORCE : StopMode.NORMAL;
    return this.lifecycle(opts, (commandId) => this.api.workspaces.stopWorkspace({ command: { commandId }, workspaceId: this.id, mode }, { signal: opts.signal }));
  }

  /** delete deletes the Workspace (and the Volume it made) and, unless `wait: false`, waits until DELETED. */
  async delete(opts: CommandOptions = {}): Promise<this> {
    return this.lifecycle(opts, (commandId) => this.api.workspaces.deleteWorkspace({ command: { commandId }, workspaceId: this.id }, { signal: opts.signal }));
  }

  /** lifecycle sends one lifecycle command under one command_id, then follows it. */
  private async lifecycle(opts: CommandOptions, send: (commandId: string) => Promise<{ workspace?: WorkspaceMessage }>): Promise<this> {
    const commandId = opts.commandId ?? newCommandId();
    const res = await this.api.call(() => send(commandId), opts.signal);
    this.message = res.workspace!;
    this.lastCommand = commandId;
    if (opts.wait !== false) await this.follow(commandId, opts.signal);
    return this;
  }

  /**
   * follow waits for a command on this Workspace to end: SUCCEEDED reads
   * the Workspace again, FAILED throws CommandFailedError. A command_id
   * that is not this Workspace's is not_found.
   */
  async follow(commandId: string, signal?: AbortSignal): Promise<WorkspaceCommand> {
    for (;;) {
      const res = await this.api.call(
        () => this.api.workspaces.waitWorkspace({ workspaceId: this.id, commandId, timeout: { seconds: waitStepSeconds } }, { signal }),
        signal,
      );
      const c = res.command!;
      if (res.workspace) this.message = res.workspace;
      if (c.state === WorkspaceCommandState.SUCCEEDED) return c;
      if (c.state === WorkspaceCommandState.FAILED) throw new CommandFailedError(this.id, commandId, c.failure);
    }
  }

  /**
   * command reads this Workspace's command commandId as it is now
   * (GetWorkspaceCommand): its kind, state, progress, what it waits for
   * and, once FAILED, its failure. It does not wait; follow() does.
   */
  async command(commandId: string, signal?: AbortSignal): Promise<WorkspaceCommand> {
    const res = await this.api.call(() => this.api.workspaces.getWorkspaceCommand({ workspaceId: this.id, commandId }, { signal }), signal);
    return res.command!;
  }

}
