// The Kibotos TypeScript SDK: `new Kibotos()`, `kibotos.workspaces`, and the
// types they answer with. The generated messages and clients of the API
// are under "@kibotos/sdk/gen/<file>_pb" (e.g. "@kibotos/sdk/gen/types_pb").
export { Kibotos, type KibotosOptions } from "./client.js";
export type { RetryOptions } from "./api.js";
export { configPath, loadConfig, parseEnvFile, type ClientConfig } from "./config.js";
export { ApiError, CommandFailedError, KibotosError, type FailureInfo } from "./errors.js";
export type { ExecEvent, ExecExit, ExecOptions, ExecResult } from "./exec.js";
export { Process, Processes, signalOf, type SignalName, type StartOptions } from "./process.js";
export { Egress, Egresses, Resolver, Resolvers, type EgressCreateOptions, type ResolverCreateOptions, type ResolverPathText } from "./egress.js";
export { Files, Watch, type ListOptions, type ReadOptions, type UserOptions, type WriteOptions } from "./files.js";
export { Session, type Scope, type SessionOptions } from "./session.js";
export { Transfer, TransferFailedError, Transfers, type TransferWaitOptions } from "./transfer.js";
export { Volume, VolumeFailedError, Volumes, type VolumeCreateOptions } from "./volume.js";
export { parseSize, type Size } from "./size.js";
export { Workspace, Workspaces, type CommandOptions, type CreateOptions, type NetworkOptions, type RestoreOptions } from "./workspace.js";
export { Code } from "@connectrpc/connect";
export { FileType, type FileInfo } from "./gen/kibotos/ctrl/v1/file_pb.js";
export type { MetricsFilesystem, MetricsSample } from "./gen/kibotos/ctrl/v1/metrics_pb.js";
export { ProcessEndCause, ProcessState, type Process as ProcessInfo } from "./gen/kibotos/ctrl/v1/process_pb.js";
export { FailureReason, FailureStage, TransferState, VolumeState, WorkspaceState, type ErrorDetail, type WorkspaceFailure } from "./gen/kibotos/ctrl/v1/types_pb.js";
export { WorkspaceCommandKind, WorkspaceCommandState, type WorkspaceCommand } from "./gen/kibotos/ctrl/v1/workspace_pb.js";
