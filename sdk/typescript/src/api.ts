// The connection to a Native Workspace endpoint: the generated clients over
// one Connect transport, and the retry rule every call of the SDK follows.
import { randomUUID } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";
import { Code, ConnectError, createClient, type Client, type Interceptor, type Transport } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { EgressService } from "./gen/kibotos/ctrl/v1/egress_pb.js";
import { FileService } from "./gen/kibotos/ctrl/v1/file_pb.js";
import { MetricsService } from "./gen/kibotos/ctrl/v1/metrics_pb.js";
import { ProcessService } from "./gen/kibotos/ctrl/v1/process_pb.js";
import { ResolverService } from "./gen/kibotos/ctrl/v1/resolver_pb.js";
import { SessionService } from "./gen/kibotos/ctrl/v1/session_pb.js";
import { TransferService } from "./gen/kibotos/ctrl/v1/transfer_pb.js";
import { VolumeService } from "./gen/kibotos/ctrl/v1/volume_pb.js";
import { WorkspaceService } from "./gen/kibotos/ctrl/v1/workspace_pb.js";
import { toError } from "./errors.js";

/** How a call that failed `unavailable` (ctrl restarting, a node reconnecting) is tried again. */
export interface RetryOptions {
  /** Tries in all, the first included; 1 never retries. Default 5. */
  attempts?: number;
  /** The first wait between tries, doubled each time up to 2 s. Default 200 ms. */
  initialDelayMs?: number;
}

/** Api is what the SDK's objects share: the generated clients and the retry rule. */
export class Api {
  readonly workspaces: Client<typeof WorkspaceService>;
  readonly processes: Client<typeof ProcessService>;
  readonly files: Client<typeof FileService>;
  readonly sessions: Client<typeof SessionService>;
  readonly volumes: Client<typeof VolumeService>;
  readonly transfers: Client<typeof TransferService>;
  readonly egresses: Client<typeof EgressService>;
  readonly resolvers: Client<typeof ResolverService>;
  readonly metrics: Client<typeof MetricsService>;
  private readonly attempts: number;
  private readonly initialDelayMs: number;

  constructor(transport: Transport, retry: RetryOptions = {}) {
    this.workspaces = createClient(WorkspaceService, transport);
    this.processes = createClient(ProcessService, transport);
    this.files = createClient(FileService, transport);
    this.sessions = createClient(SessionService, transport);
    this.volumes = createClient(VolumeService, transport);
    this.transfers = createClient(TransferService, transport);
    this.egresses = createClient(EgressService, transport);
    this.resolvers = createClient(ResolverService, transport);
    this.metrics = createClient(MetricsService, transport);
    this.attempts = Math.max(1, retry.attempts ?? 5);
    this.initialDelayMs = retry.initialDelayMs ?? 200;
  }

  /**
   * call runs fn, again while it fails `unavailable` and tries remain, and
   * throws what the last try threw as an ApiError. Only calls that are safe
   * to repeat come here: reads, and commands under a command_id fixed
   * before the first try, so that ctrl answers a repeat with the first
   * admission instead of doing the work twice. retry false sends fn once.
   */
  async call<T>(fn: () => Promise<T>, signal?: AbortSignal, retry = true): Promise<T> {
    for (let attempt = 1; ; attempt++) {
      try {
        return await fn();
      } catch (err) {
        if (!retry) throw toError(err);
        await this.backoff(err, attempt, signal);
      }
    }
  }

  /**
   * everyPage returns the items of every page of a list call: page reads
   * one page (a read, retried as call does) from a page token, "" for the
   * first, and the pages are followed until one has no nextPageToken.
   */
  async everyPage<P extends { nextPageToken: string }, T>(
    page: (pageToken: string) => Promise<P>,
    items: (res: P) => T[],
    signal?: AbortSignal,
  ): Promise<T[]> {
    const out: T[] = [];
    let pageToken = "";
    do {
      const res = await this.call(() => page(pageToken), signal);
      out.push(...items(res));
      pageToken = res.nextPageToken;
    } while (pageToken !== "");
    return out;
  }

  /**
   * backoff returns after the wait before try attempt+1 when err is worth
   * another try, and throws err (as an ApiError) when it is not.
   */
  async backoff(err: unknown, attempt: number, signal?: AbortSignal): Promise<void> {
    if (!(err instanceof ConnectError) || err.code !== Code.Unavailable || attempt >= this.attempts || signal?.aborted) {
      throw toError(err);
    }
    await sleep(Math.min(2000, this.initialDelayMs * 2 ** (attempt - 1)), undefined, { signal });
  }
}

/** newCommandId makes the command_id of one mutation; its retries send the same one. */
export function newCommandId(): string {
  return "ts-" + randomUUID();
}

/** transportFor connects to baseUrl over HTTP/2 without TLS (h2c), as ctrl's endpoints serve it, with the API key as a bearer token. */
export function transportFor(baseUrl: string, apiKey: string | undefined): Transport {
  const bearer: Interceptor = (next) => (req) => {
    if (apiKey) req.header.set("Authorization", `Bearer ${apiKey}`);
    return next(req);
  };
  // HTTP/2 for the client stream of WriteFile and one connection for all
  // calls; the binary format for file and output bytes.
  return createConnectTransport({ baseUrl, httpVersion: "2", useBinaryFormat: true, interceptors: [bearer] });
}
