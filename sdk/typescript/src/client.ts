import type { Transport } from "@connectrpc/connect";
import { Api, transportFor, type RetryOptions } from "./api.js";
import { ENV_TOKEN, ENV_WORKSPACE_ENDPOINT, configPath, loadConfig } from "./config.js";
import { create } from "@bufbuild/protobuf";
import { WorkspaceSchema } from "./gen/kibotos/ctrl/v1/types_pb.js";
import { Egresses, Resolvers } from "./egress.js";
import { Transfers } from "./transfer.js";
import { Volumes } from "./volume.js";
import { Workspace, Workspaces } from "./workspace.js";

/** Where the deployment is and how calls are retried; all optional. */
export interface KibotosOptions {
  /** The Native Workspace endpoint, e.g. http://127.0.0.1:7670. Default: $KIBOTOS_WORKSPACE_ENDPOINT, else the client configuration `kibotos dev` wrote. */
  baseUrl?: string;
  /** An API key of scope `workspace`. Default: $KIBOTOS_TOKEN, else the client configuration. */
  apiKey?: string;
  retry?: RetryOptions;
  /** A Connect transport of one's own (a proxy, a test's in-memory server); baseUrl and apiKey are then not used. */
  transport?: Transport;
}

/**
 * Kibotos is the SDK's entry point. `new Kibotos()` finds the deployment as
 * the CLI does: the environment, then $KIBOTOS_CONFIG or
 * $KIBOTOS_HOME/config.env (~/.kibotos/config.env), written by `kibotos dev`.
 */
export class Kibotos {
  readonly workspaces: Workspaces;
  readonly volumes: Volumes;
  readonly transfers: Transfers;
  readonly egresses: Egresses;
  readonly resolvers: Resolvers;
  /** The generated clients the SDK wraps, for the calls it does not (annotations, Volume binding, layer size...). */
  readonly api: Pick<Api, "workspaces" | "processes" | "files" | "sessions" | "volumes" | "transfers" | "egresses" | "resolvers">;
  /** The transport every call goes through: createClient(VolumeService, kibotos.transport) reaches the other services. */
  readonly transport: Transport;

  private readonly core: Api;

  constructor(opts: KibotosOptions = {}) {
    this.transport = opts.transport ?? configuredTransport(opts);
    const api = new Api(this.transport, opts.retry);
    this.api = api;
    this.core = api;
    this.workspaces = new Workspaces(api);
    this.volumes = new Volumes(api);
    this.transfers = new Transfers(api);
    this.egresses = new Egresses(api);
    this.resolvers = new Resolvers(api);
  }

  /**
   * workspace is a handle on a Workspace made without reading it: what a
   * client holding a data-plane session's token uses, since the token
   * reaches processes, files and metrics, not the Workspace record. Its
   * info holds only the id until refresh(), which needs an API key.
   */
  workspace(workspaceId: string): Workspace {
    return new Workspace(this.core, create(WorkspaceSchema, { workspaceId }));
  }
}

/** configuredTransport reaches the endpoint the options name, else the one the environment or the client configuration names. */
function configuredTransport(opts: KibotosOptions): Transport {
  const found = opts.baseUrl === undefined || opts.apiKey === undefined ? loadConfig() : {};
  const baseUrl = opts.baseUrl ?? found.baseUrl;
  if (!baseUrl) {
    throw new Error(`no Kibotos endpoint: pass baseUrl, set ${ENV_WORKSPACE_ENDPOINT} and ${ENV_TOKEN}, or run \`kibotos dev\` (which writes ${configPath()})`);
  }
  return transportFor(baseUrl, opts.apiKey ?? found.apiKey);
}
