// Egresses and Resolvers: a caller-owned proxy (SOCKS5 or HTTP CONNECT)
// that a PUBLIC_INTERNET policy sends chosen destinations through, and a
// DNS upstream (udp, tcp, tls, https) the guest's queries go to instead of
// the deployment's. A Workspace names them in its policy: create's and
// setNetwork's `egresses` ({ EGRESS_ID: [CIDR, ...] }) and `resolvers`
// ({ RESOLVER_ID: "direct" | "egress:EGRESS_ID" }), as the CLI's --egress
// and --resolver take them. ctrl never returns an Egress's password
// (info.passwordSet says whether one is set).
import { EgressProtocol, type Egress as EgressMessage } from "./gen/kibotos/ctrl/v1/egress_pb.js";
import { ResolverProtocol, type Resolver as ResolverMessage } from "./gen/kibotos/ctrl/v1/resolver_pb.js";
import { newCommandId, type Api } from "./api.js";

/** What an Egress is: protocol "socks5" or "http-connect", endpoint HOST:PORT. */
export interface EgressCreateOptions {
  protocol: "socks5" | "http-connect";
  endpoint: string;
  /** Wrap the connection to the proxy in TLS; serverName checks its certificate. */
  tls?: boolean;
  serverName?: string;
  username?: string;
  password?: string;
  /** Let a socks5 Egress carry UDP (a udp Resolver through it needs that). */
  udp?: boolean;
  labels?: Record<string, string>;
}

/** What a Resolver is: "udp", "tcp", "tls" (address IP:PORT; serverName for tls) or "https" (url). */
export interface ResolverCreateOptions {
  protocol: "udp" | "tcp" | "tls" | "https";
  address?: string;
  url?: string;
  serverName?: string;
  labels?: Record<string, string>;
}

/** Egress is one Egress as ctrl last answered it. */
export class Egress {
  readonly id: string;
  constructor(private readonly api: Api, public info: EgressMessage) {
    this.id = info.egressId;
  }

  /** delete deletes it; one a Workspace's policy names is refused (failed_precondition). */
  async delete(): Promise<this> {
    const commandId = newCommandId();
    this.info = (await this.api.call(() => this.api.egresses.deleteEgress({ command: { commandId }, egressId: this.id }))).egress!;
    return this;
  }
}

/** Resolver is one Resolver as ctrl last answered it. */
export class Resolver {
  readonly id: string;
  constructor(private readonly api: Api, public info: ResolverMessage) {
    this.id = info.resolverId;
  }

  /** delete deletes it; one a Workspace's policy names is refused (failed_precondition). */
  async delete(): Promise<this> {
    const commandId = newCommandId();
    this.info = (await this.api.call(() => this.api.resolvers.deleteResolver({ command: { commandId }, resolverId: this.id }))).resolver!;
    return this;
  }
}

/** Egresses is `kibotos.egresses`. */
export class Egresses {
  constructor(private readonly api: Api) {}

  async create(opts: EgressCreateOptions): Promise<Egress> {
    const protocols = { socks5: EgressProtocol.SOCKS5, "http-connect": EgressProtocol.HTTP_CONNECT };
    const protocol = protocols[opts.protocol];
    if (protocol === undefined) throw new TypeError(`protocol "${opts.protocol}": want socks5 or http-connect`);
    const spec = {
      protocol, endpoint: opts.endpoint, tls: opts.tls ?? false, serverName: opts.serverName ?? "",
      username: opts.username ?? "", password: opts.password ?? "", udpEnabled: opts.udp ?? false,
    };
    const commandId = newCommandId();
    const res = await this.api.call(() => this.api.egresses.createEgress({ command: { commandId }, spec, labels: opts.labels ?? {} }));
    return new Egress(this.api, res.egress!);
  }

  async get(egressId: string): Promise<Egress> {
    return new Egress(this.api, (await this.api.call(() => this.api.egresses.getEgress({ egressId }))).egress!);
  }

  async list(labelSelector = ""): Promise<Egress[]> {
    return this.api.everyPage(
      (pageToken) => this.api.egresses.listEgresses({ labelSelector, pageSize: 1000, pageToken }),
      (res) => res.egresses.map((e) => new Egress(this.api, e)),
    );
  }
}

/** Resolvers is `kibotos.resolvers`. */
export class Resolvers {
  constructor(private readonly api: Api) {}

  async create(opts: ResolverCreateOptions): Promise<Resolver> {
    const protocols = { udp: ResolverProtocol.UDP, tcp: ResolverProtocol.TCP, tls: ResolverProtocol.TLS, https: ResolverProtocol.HTTPS };
    const protocol = protocols[opts.protocol];
    if (protocol === undefined) throw new TypeError(`protocol "${opts.protocol}": want udp, tcp, tls or https`);
    const spec = { protocol, address: opts.address ?? "", url: opts.url ?? "", serverName: opts.serverName ?? "" };
    const commandId = newCommandId();
    const res = await this.api.call(() => this.api.resolvers.createResolver({ command: { commandId }, spec, labels: opts.labels ?? {} }));
    return new Resolver(this.api, res.resolver!);
  }

  async get(resolverId: string): Promise<Resolver> {
    return new Resolver(this.api, (await this.api.call(() => this.api.resolvers.getResolver({ resolverId }))).resolver!);
  }

  async list(labelSelector = ""): Promise<Resolver[]> {
    return this.api.everyPage(
      (pageToken) => this.api.resolvers.listResolvers({ labelSelector, pageSize: 1000, pageToken }),
      (res) => res.resolvers.map((r) => new Resolver(this.api, r)),
    );
  }
}

/** A resolver entry's path: "direct", or "egress:EGRESS_ID". */
export type ResolverPathText = "direct" | `egress:${string}`;

/** policyEntries are the policy's egresses and resolvers create's and setNetwork's options ask for. */
export function policyEntries(egresses: Record<string, string[]> = {}, resolvers: Record<string, ResolverPathText> = {}) {
  return {
    egresses: Object.entries(egresses).map(([egressId, destinations]) => {
      if (!Array.isArray(destinations)) throw new TypeError(`egresses["${egressId}"]: a list of addresses or CIDRs`);
      return { egressId, destinations };
    }),
    resolvers: Object.entries(resolvers).map(([resolverId, path]) => {
      if (path === "direct") return { resolverId, path: { kind: { case: "direct" as const, value: {} } } };
      const egressId = typeof path === "string" && path.startsWith("egress:") ? path.slice("egress:".length) : "";
      if (egressId === "") throw new TypeError(`resolvers["${resolverId}"] "${path}": want "direct" or "egress:EGRESS_ID"`);
      return { resolverId, path: { kind: { case: "egressId" as const, value: egressId } } };
    }),
  };
}
