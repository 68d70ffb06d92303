// Transfers: archives of Workspaces and Volumes. ws.export captures a
// stopped Workspace into one; kibotos.workspaces.restore makes a new
// Workspace from a COMPLETE or IMPORTED one; an archive downloads to a file
// and uploads (imports) into another deployment. Export and import take
// time proportional to the bytes: wait() reads the Transfer until it has
// settled, and done_bytes and total_bytes say how far it is.
import { createHash } from "node:crypto";
import { createReadStream } from "node:fs";
import { open, stat } from "node:fs/promises";
import { setTimeout as sleep } from "node:timers/promises";
import { FailureReason, FailureStage, TransferState, type Transfer as TransferMessage, type TransferFailure } from "./gen/kibotos/ctrl/v1/types_pb.js";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { ImportTransferRequestSchema } from "./gen/kibotos/ctrl/v1/transfer_pb.js";
import { newCommandId, type Api } from "./api.js";
import { KibotosError } from "./errors.js";

/** How often wait() reads a Transfer that is still moving bytes. */
const pollMs = 500;
/** ImportTransfer takes at most 4 MiB of data a message. */
const chunkBytes = 4 << 20;
const moving = [TransferState.EXPORTING, TransferState.IMPORTING, TransferState.DELETING];

/** TransferFailedError is an export or import that failed: the Transfer is FAILED. */
export class TransferFailedError extends KibotosError {
  readonly transferId: string;
  readonly failure: TransferFailure | undefined;

  constructor(transferId: string, failure: TransferFailure | undefined) {
    const stage = failure?.stage ?? FailureStage.UNSPECIFIED;
    const reason = failure?.reason ?? FailureReason.UNSPECIFIED;
    super(`${transferId} failed at ${FailureStage[stage]} (${FailureReason[reason]}): ${failure?.message ?? "no failure recorded"}`, {
      stage, reason, retryable: failure?.retryable ?? false, field: "", commandId: "",
    });
    this.transferId = transferId;
    this.failure = failure;
  }
}

/** How a wait for a Transfer goes. */
export interface TransferWaitOptions {
  /** Called after each read of the Transfer (its doneBytes and totalBytes say how far it is). */
  progress?: (t: Transfer) => void;
  /** Gives up waiting; the export or import goes on in ctrl. */
  signal?: AbortSignal;
}

/** Transfer is one Transfer: what ctrl last said of it, and what can be done with it. */
export class Transfer {
  readonly id: string;
  private message: TransferMessage;

  constructor(private readonly api: Api, message: TransferMessage) {
    this.id = message.transferId;
    this.message = message;
  }

  /** The Transfer as ctrl last answered it (refresh() asks again). */
  get info(): TransferMessage {
    return this.message;
  }

  get state(): TransferState {
    return this.message.state;
  }

  /** refresh reads the Transfer again. */
  async refresh(): Promise<this> {
    const res = await this.api.call(() => this.api.transfers.getTransfer({ transferId: this.id }));
    this.message = res.transfer!;
    return this;
  }

  /** wait reads the Transfer until its export, import or deletion settled; FAILED throws TransferFailedError. */
  async wait(opts: TransferWaitOptions = {}): Promise<this> {
    for (;;) {
      opts.progress?.(this);
      if (this.message.state === TransferState.FAILED) throw new TransferFailedError(this.id, this.message.failure);
      if (!moving.includes(this.message.state)) return this;
      await sleep(pollMs, undefined, { signal: opts.signal });
      await this.refresh();
    }
  }

  /** download writes a COMPLETE Transfer's archive to path and returns its size; a stream cut as `unavailable` resumes from the bytes written. */
  async download(path: string, opts: { signal?: AbortSignal } = {}): Promise<bigint> {
    const file = await open(path, "w");
    try {
      let offset = 0n;
      for (let attempt = 1; ; attempt++) {
        try {
          for await (const msg of this.api.transfers.downloadTransfer({ transferId: this.id, offset }, { signal: opts.signal })) {
            await file.write(msg.data, 0, msg.data.length, Number(offset));
            offset += BigInt(msg.data.length);
          }
          return offset;
        } catch (err) {
          await this.api.backoff(err, attempt, opts.signal);
        }
      }
    } finally {
      await file.close();
    }
  }

  /** delete deletes the Transfer and its archive (DELETING, then DELETED). */
  async delete(): Promise<this> {
    const commandId = newCommandId();
    const res = await this.api.call(() => this.api.transfers.deleteTransfer({ command: { commandId }, transferId: this.id }));
    this.message = res.transfer!;
    return this;
  }
}

/** Transfers is `kibotos.transfers`: find Transfers, and upload (import) an archive. */
export class Transfers {
  constructor(private readonly api: Api) {}

  async get(transferId: string): Promise<Transfer> {
    const res = await this.api.call(() => this.api.transfers.getTransfer({ transferId }));
    return new Transfer(this.api, res.transfer!);
  }

  /** list returns every Transfer (not DELETED or EXPIRED) a label selector ("" for all) selects. */
  async list(labelSelector = ""): Promise<Transfer[]> {
    return this.api.everyPage(
      (pageToken) => this.api.transfers.listTransfers({ labelSelector, pageSize: 1000, pageToken }),
      (res) => res.transfers.map((t) => new Transfer(this.api, t)),
    );
  }

  /**
   * upload imports the archive at path (one download wrote): a new
   * Transfer, IMPORTING and then, unless `wait: false`, IMPORTED once ctrl
   * checked its digest; restore takes it. Retries send the same command_id.
   */
  async upload(path: string, opts: TransferWaitOptions & { labels?: Record<string, string>; wait?: boolean } = {}): Promise<Transfer> {
    const sizeBytes = BigInt((await stat(path)).size);
    const hash = createHash("sha256");
    for await (const block of createReadStream(path, { highWaterMark: chunkBytes })) hash.update(block as Buffer);
    const header = { command: { commandId: newCommandId() }, sizeBytes, digest: "sha256:" + hash.digest("hex"), labels: opts.labels ?? {} };
    async function* parts(): AsyncGenerator<MessageInitShape<typeof ImportTransferRequestSchema>> {
      yield { part: { case: "header", value: header } };
      for await (const block of createReadStream(path, { highWaterMark: chunkBytes })) yield { part: { case: "data", value: block as Buffer } };
    }
    const res = await this.api.call(() => this.api.transfers.importTransfer(parts(), { signal: opts.signal }), opts.signal);
    const t = new Transfer(this.api, res.transfer!);
    return opts.wait === false ? t : t.wait(opts);
  }
}
