// Errors as the SDK throws them: every failure the API answers, and every
// lifecycle command that ends FAILED, is a KibotosError carrying what ctrl
// said of it (kibotos.ctrl.v1.ErrorDetail or the command's WorkspaceFailure).
import { Code, ConnectError } from "@connectrpc/connect";
import {
  ErrorDetailSchema,
  FailureReason,
  FailureStage,
  type ErrorDetail,
  type WorkspaceFailure,
} from "./gen/kibotos/ctrl/v1/types_pb.js";

/** What both kinds of failure tell: where it failed, why, and whether trying again may help. */
export interface FailureInfo {
  stage: FailureStage;
  reason: FailureReason;
  retryable: boolean;
  /** The request field that is wrong, as a dotted path ("spec.resources.memory_bytes"); "" when none is. */
  field: string;
  /** The command the failure belongs to, when there is one. */
  commandId: string;
}

/** KibotosError is the base of every error the SDK throws for the API. */
export class KibotosError extends Error implements FailureInfo {
  readonly stage: FailureStage;
  readonly reason: FailureReason;
  readonly retryable: boolean;
  readonly field: string;
  readonly commandId: string;

  constructor(message: string, info: FailureInfo, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
    ({ stage: this.stage, reason: this.reason, retryable: this.retryable, field: this.field, commandId: this.commandId } = info);
  }

  /** The stage and reason as their enum names ("VALIDATING", "NOT_FOUND"). */
  get stageName(): string {
    return FailureStage[this.stage];
  }
  get reasonName(): string {
    return FailureReason[this.reason];
  }
}

/**
 * ApiError is a call ctrl refused or failed: a canonical Connect code
 * (Code.NotFound, Code.InvalidArgument, ...) and, when ctrl attached one,
 * its ErrorDetail.
 */
export class ApiError extends KibotosError {
  readonly code: Code;
  readonly detail: ErrorDetail | undefined;

  constructor(cause: ConnectError) {
    const detail = cause.findDetails(ErrorDetailSchema)[0];
    super(cause.message, {
      stage: detail?.stage ?? FailureStage.UNSPECIFIED,
      reason: detail?.reason ?? FailureReason.UNSPECIFIED,
      retryable: detail?.retryable ?? cause.code === Code.Unavailable,
      field: detail?.field ?? "",
      commandId: detail?.commandId ?? "",
    }, { cause });
    this.code = cause.code;
    this.detail = detail;
  }

  /** The code's name as the API reference spells it: "not_found", "invalid_argument". */
  get codeName(): string {
    return Code[this.code].replace(/[A-Z]/g, (c, i: number) => (i ? "_" : "") + c.toLowerCase());
  }
}

/** CommandFailedError is a lifecycle command (create, start, stop, delete) that ctrl admitted and that then FAILED. */
export class CommandFailedError extends KibotosError {
  readonly workspaceId: string;
  readonly failure: WorkspaceFailure | undefined;

  constructor(workspaceId: string, commandId: string, failure: WorkspaceFailure | undefined) {
    const stage = failure?.stage ?? FailureStage.UNSPECIFIED;
    const reason = failure?.reason ?? FailureReason.UNSPECIFIED;
    super(`${workspaceId} failed at ${FailureStage[stage]} (${FailureReason[reason]}): ${failure?.message ?? "no failure recorded"}`, {
      stage, reason, retryable: failure?.retryable ?? false, field: "", commandId,
    });
    this.workspaceId = workspaceId;
    this.failure = failure;
  }
}

/** toError turns what a call threw into an ApiError; anything else (a bug in the caller) passes through. */
export function toError(err: unknown): unknown {
  return err instanceof ConnectError ? new ApiError(err) : err;
}
