// Data-plane sessions: a token for one Workspace's processes and files,
// which a program hands an agent instead of its API key. The agent reaches
// the Workspace with it as
//
//   const agent = new Kibotos({ baseUrl: session.endpoint, apiKey: session.token });
//   const ws = agent.workspace(session.workspaceId); // no read: the token cannot read the record
//   await ws.exec(["ls"]);
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { DataPlaneScope, type DataPlaneSession } from "./gen/kibotos/ctrl/v1/session_pb.js";
import type { Api } from "./api.js";

/** The scopes a session can have, by the names the SDK takes and gives. */
export type Scope = "process" | "file" | "desktop" | "service" | "metrics";

const scopes: Record<Scope, DataPlaneScope> = {
  process: DataPlaneScope.PROCESS,
  file: DataPlaneScope.FILE,
  desktop: DataPlaneScope.DESKTOP,
  service: DataPlaneScope.SERVICE,
  metrics: DataPlaneScope.METRICS,
};

/** What issueSession takes; every field has a default. */
export interface SessionOptions {
  /** What the session may use; default: every scope. */
  scopes?: Scope[];
  /** How long its token is valid, 60 to 86400 seconds; default ctrl's 15 minutes. */
  ttlSeconds?: number;
}

function ttl(seconds: number | undefined): { seconds: bigint } | undefined {
  return seconds === undefined ? undefined : { seconds: BigInt(Math.round(seconds)) };
}

/** scopeValues reads scope names, refusing an unknown one before anything is sent. */
function scopeValues(names: Scope[] = []): DataPlaneScope[] {
  return names.map((n) => {
    const v = scopes[n];
    if (v === undefined) throw new TypeError(`scope "${n}": want one of ${Object.keys(scopes).join(", ")}`);
    return v;
  });
}

/** Session is one data-plane session. Its token is only in the object that issued or rotated it: treat it as a password. */
export class Session {
  id = "";
  workspaceId = "";
  /** The Workspace.generation of the execution it is bound to: a stop, a delete or the next start ends it. */
  generation = 0n;
  scopes: Scope[] = [];
  token = "";
  expiresAt = new Date(0);
  /** The base URL to send calls with this session's token to. */
  endpoint = "";

  constructor(private readonly api: Api, message: DataPlaneSession) {
    this.set(message);
  }

  private set(m: DataPlaneSession): void {
    this.id = m.sessionId;
    this.workspaceId = m.workspaceId;
    this.generation = m.generation;
    this.scopes = m.scopes.map((v) => (Object.keys(scopes) as Scope[]).find((n) => scopes[n] === v)!).filter(Boolean);
    this.token = m.token;
    this.expiresAt = m.expiresAt ? timestampDate(m.expiresAt) : new Date(0);
    this.endpoint = m.endpoint;
  }

  /** rotate gives the session a new token (the old one works for at most a minute more) and returns this session, updated. */
  async rotate(opts: { ttlSeconds?: number } = {}): Promise<this> {
    // A retry rotates again, which ctrl calls harmless.
    const res = await this.api.call(() => this.api.sessions.rotateDataPlaneSession({ workspaceId: this.workspaceId, sessionId: this.id, ttl: ttl(opts.ttlSeconds) }));
    this.set(res.session!);
    return this;
  }

  /** revoke ends the session now: its tokens stop working and its streams end. */
  async revoke(): Promise<void> {
    await this.api.call(() => this.api.sessions.revokeDataPlaneSession({ workspaceId: this.workspaceId, sessionId: this.id }));
  }
}

/** issueSession issues a session for a Workspace's current execution. Not retried: a retry would issue a second one. */
export async function issueSession(api: Api, workspaceId: string, opts: SessionOptions): Promise<Session> {
  const req = { workspaceId, scopes: scopeValues(opts.scopes), ttl: ttl(opts.ttlSeconds) };
  const res = await api.call(() => api.sessions.issueDataPlaneSession(req), undefined, false);
  return new Session(api, res.session!);
}
