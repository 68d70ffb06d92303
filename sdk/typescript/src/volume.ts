// Volumes: storage that outlives the Workspaces bound to it. Create one,
// bind it with workspaces.create({ volume: { volumeId } }), delete the
// Workspace, bind it to the next. VolumeService has no wait call
// (WaitWorkspace's counterpart), so a command is followed by reading the
// Volume until it leaves its command's state, as the CLI does.
import { setTimeout as sleep } from "node:timers/promises";
import { FailureReason, FailureStage, VolumeState, type Volume as VolumeMessage, type VolumeFailure } from "./gen/kibotos/ctrl/v1/types_pb.js";
import { newCommandId, type Api } from "./api.js";
import { KibotosError } from "./errors.js";
import { parseSize, type Size } from "./size.js";
import { Transfer, type TransferWaitOptions } from "./transfer.js";

/** How often a command's follow reads the Volume again. */
const pollMs = 200;

/** VolumeFailedError is a Volume command ctrl admitted that failed while it ran: the Volume is FAILED. */
export class VolumeFailedError extends KibotosError {
  readonly volumeId: string;
  readonly failure: VolumeFailure | undefined;

  constructor(volumeId: string, failure: VolumeFailure | undefined) {
    const stage = failure?.stage ?? FailureStage.UNSPECIFIED;
    const reason = failure?.reason ?? FailureReason.UNSPECIFIED;
    super(`${volumeId} failed at ${FailureStage[stage]} (${FailureReason[reason]}): ${failure?.message ?? "no failure recorded"}`, {
      stage, reason, retryable: failure?.retryable ?? false, field: "", commandId: failure?.commandId ?? "",
    });
    this.volumeId = volumeId;
    this.failure = failure;
  }
}

/** What create takes; every field has a default. */
export interface VolumeCreateOptions {
  /** Capacity: "1Gi", "512Mi", or bytes; default: the storage profile's. */
  size?: Size;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
  /** false returns once admitted (CREATING). Default true: wait until a node made it. */
  wait?: boolean;
  signal?: AbortSignal;
}

/** Volumes is `kibotos.volumes`. */
export class Volumes {
  constructor(private readonly api: Api) {}

  /** create admits a Volume and, unless `wait: false`, waits until a node made it (AVAILABLE). */
  async create(opts: VolumeCreateOptions = {}): Promise<Volume> {
    const commandId = newCommandId();
    const spec = { capacityBytes: opts.size === undefined ? 0n : parseSize(opts.size, "size") };
    const res = await this.api.call(
      () => this.api.volumes.createVolume({ command: { commandId }, spec, labels: opts.labels ?? {}, annotations: opts.annotations ?? {} }, { signal: opts.signal }),
      opts.signal,
    );
    const v = new Volume(this.api, res.volume!);
    if (opts.wait !== false) await v.waitOutOf(VolumeState.CREATING, opts.signal);
    return v;
  }

  /** get returns the Volume with this id as ctrl has it now. */
  async get(volumeId: string): Promise<Volume> {
    const res = await this.api.call(() => this.api.volumes.getVolume({ volumeId }));
    return new Volume(this.api, res.volume!);
  }

  /** list returns every Volume a label selector ("" for all) selects, ordered by id. */
  async list(labelSelector = ""): Promise<Volume[]> {
    return this.api.everyPage(
      (pageToken) => this.api.volumes.listVolumes({ labelSelector, pageSize: 1000, pageToken }),
      (res) => res.volumes.map((v) => new Volume(this.api, v)),
    );
  }
}

/** Volume is one Volume: its id, what ctrl last said of it, and what can be done with it. */
export class Volume {
  readonly id: string;
  private message: VolumeMessage;

  constructor(private readonly api: Api, message: VolumeMessage) {
    this.id = message.volumeId;
    this.message = message;
  }

  /** The Volume as ctrl last answered it (refresh() asks again). */
  get info(): VolumeMessage {
    return this.message;
  }

  get state(): VolumeState {
    return this.message.state;
  }

  /** Capacity in bytes. */
  get capacity(): bigint {
    return this.message.spec?.capacityBytes ?? 0n;
  }

  /** The Workspace it is bound to, "" when none. */
  get boundWorkspaceId(): string {
    return this.message.boundWorkspaceId;
  }

  /** refresh reads the Volume again. */
  async refresh(): Promise<this> {
    const res = await this.api.call(() => this.api.volumes.getVolume({ volumeId: this.id }));
    this.message = res.volume!;
    return this;
  }

  /** setLabels replaces every label, with the revision last read (a change made meanwhile is failed_precondition; refresh() reads it). */
  async setLabels(labels: Record<string, string>, opts: { signal?: AbortSignal } = {}): Promise<this> {
    const expectedLabelsRevision = this.message.labelsRevision;
    return this.update(opts, (command, signal) => this.api.volumes.updateVolumeLabels({ command, volumeId: this.id, expectedLabelsRevision, labels }, { signal }));
  }

  /** setAnnotations replaces every annotation, as setLabels does labels. */
  async setAnnotations(annotations: Record<string, string>, opts: { signal?: AbortSignal } = {}): Promise<this> {
    const expectedAnnotationsRevision = this.message.annotationsRevision;
    return this.update(opts, (command, signal) =>
      this.api.volumes.updateVolumeAnnotations({ command, volumeId: this.id, expectedAnnotationsRevision, annotations }, { signal }));
  }

  /** update sends one change under one command_id (kept across retries) and keeps the Volume it answers. */
  private async update(
    opts: { signal?: AbortSignal },
    send: (command: { commandId: string }, signal?: AbortSignal) => Promise<{ volume?: VolumeMessage }>,
  ): Promise<this> {
    const command = { commandId: newCommandId() };
    const res = await this.api.call(() => send(command, opts.signal), opts.signal);
    this.message = res.volume!;
    return this;
  }

  /** resize grows it (Volumes only grow, and only while no execution holds them) and, unless `wait: false`, waits until the change committed. */
  async resize(size: Size, opts: { wait?: boolean; signal?: AbortSignal } = {}): Promise<this> {
    const commandId = newCommandId();
    const capacityBytes = parseSize(size, "size");
    const res = await this.api.call(() => this.api.volumes.resizeVolume({ command: { commandId }, volumeId: this.id, capacityBytes }, { signal: opts.signal }), opts.signal);
    this.message = res.volume!;
    if (opts.wait !== false) await this.waitOutOf(VolumeState.RESIZING, opts.signal);
    return this;
  }

  /**
   * export captures the Volume, which no execution may hold (AVAILABLE),
   * into a Transfer and, unless `wait: false`, waits until it is COMPLETE
   * (progress is called as its bytes advance); a failed export throws
   * TransferFailedError.
   */
  async export(opts: TransferWaitOptions & { wait?: boolean } = {}): Promise<Transfer> {
    const commandId = newCommandId();
    const res = await this.api.call(() => this.api.volumes.exportVolume({ command: { commandId }, volumeId: this.id }, { signal: opts.signal }), opts.signal);
    const t = new Transfer(this.api, res.transfer!);
    return opts.wait === false ? t : t.wait(opts);
  }

  /** delete deletes it (one an undeleted Workspace binds is failed_precondition) and, unless `wait: false`, waits until DELETED. */
  async delete(opts: { wait?: boolean; signal?: AbortSignal } = {}): Promise<this> {
    const commandId = newCommandId();
    const res = await this.api.call(() => this.api.volumes.deleteVolume({ command: { commandId }, volumeId: this.id }, { signal: opts.signal }), opts.signal);
    this.message = res.volume!;
    if (opts.wait !== false) await this.waitOutOf(VolumeState.DELETING, opts.signal);
    return this;
  }

  /** waitOutOf reads the Volume until it leaves state (its command's); one that ended FAILED throws VolumeFailedError. */
  async waitOutOf(state: VolumeState, signal?: AbortSignal): Promise<void> {
    while (this.message.state === state) {
      await sleep(pollMs, undefined, { signal });
      await this.refresh();
    }
    if (this.message.state === VolumeState.FAILED) throw new VolumeFailedError(this.id, this.message.failure);
  }
}
