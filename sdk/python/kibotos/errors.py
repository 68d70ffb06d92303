"""Errors as typed exceptions carrying ctrl's ErrorDetail.

ctrl answers a failed call with a canonical code and, in most cases, a
kibotos.ctrl.v1.ErrorDetail (internal/ctrl/apierr). Over gRPC the detail
arrives in the grpc-status-details-bin trailer: a google.rpc.Status whose
`details` are Any messages. Each code has its own exception class, all
subclasses of KibotosError, so a caller catches what it can handle:

    try:
        k.workspaces.create(memory="64Mi")
    except kibotos.InvalidArgument as e:
        print(e.field)          # spec.resources.memory_bytes

A lifecycle command that ctrl admitted and that failed later (a create that
found no node, a start whose VM did not boot) is CommandFailed, carrying
the command's WorkspaceFailure.
"""

from __future__ import annotations

from typing import Dict, Optional, Type

import grpc
from google.protobuf import any_pb2, descriptor_pb2, descriptor_pool, message_factory

from kibotos.ctrl.v1 import types_pb2

_STAGE_PREFIX = "FAILURE_STAGE_"
_REASON_PREFIX = "FAILURE_REASON_"


def _status_class():
    """google.rpc.Status, built in a private descriptor pool.

    Debian has no package of googleapis-common-protos (where
    google.rpc.status_pb2 lives), and the message is three fields of wire
    contract: code = 1, message = 2, repeated Any details = 3. A private
    pool keeps it from clashing with a google.rpc.Status another library
    registers in the default one.
    """
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(any_pb2.DESCRIPTOR.serialized_pb)
    f = descriptor_pb2.FileDescriptorProto(
        name="kibotos_sdk/google_rpc_status.proto",
        package="google.rpc",
        syntax="proto3",
        dependency=["google/protobuf/any.proto"],
    )
    m = f.message_type.add(name="Status")
    fd = descriptor_pb2.FieldDescriptorProto
    m.field.add(name="code", number=1, type=fd.TYPE_INT32, label=fd.LABEL_OPTIONAL)
    m.field.add(name="message", number=2, type=fd.TYPE_STRING, label=fd.LABEL_OPTIONAL)
    m.field.add(
        name="details",
        number=3,
        type=fd.TYPE_MESSAGE,
        label=fd.LABEL_REPEATED,
        type_name=".google.protobuf.Any",
    )
    pool.Add(f)
    return message_factory.MessageFactory(pool).GetPrototype(pool.FindMessageTypeByName("google.rpc.Status"))


_Status = _status_class()


class KibotosError(Exception):
    """A call ctrl refused or that failed; the base of every SDK error.

    code is the canonical code as Connect spells it ("invalid_argument");
    detail is the ErrorDetail ctrl attached (None when it attached none);
    stage and reason are its enum names without their prefix
    ("VALIDATING", "INVALID_REQUEST"), "" when unset.
    """

    code = "unknown"

    def __init__(self, message: str, detail: Optional[types_pb2.ErrorDetail] = None):
        super().__init__(message)
        self.message = message
        self.detail = detail

    @property
    def stage(self) -> str:
        return _enum_name(types_pb2.FailureStage, self.detail.stage if self.detail else 0, _STAGE_PREFIX)

    @property
    def reason(self) -> str:
        return _enum_name(types_pb2.FailureReason, self.detail.reason if self.detail else 0, _REASON_PREFIX)

    @property
    def field(self) -> str:
        return self.detail.field if self.detail else ""

    @property
    def retryable(self) -> bool:
        """ctrl's word when it gave one; else whether the code is transient."""
        if self.detail is not None and self.detail.retryable:
            return True
        return self.code == "unavailable"

    @property
    def command_id(self) -> str:
        return self.detail.command_id if self.detail else ""

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


def _enum_name(enum, value: int, prefix: str) -> str:
    if value == 0:
        return ""
    try:
        return enum.Name(value).removeprefix(prefix)
    except ValueError:
        return str(value)


class Canceled(KibotosError):
    code = "canceled"


class Unknown(KibotosError):
    code = "unknown"


class InvalidArgument(KibotosError):
    code = "invalid_argument"


class DeadlineExceeded(KibotosError):
    code = "deadline_exceeded"


class NotFound(KibotosError):
    code = "not_found"


class AlreadyExists(KibotosError):
    code = "already_exists"


class PermissionDenied(KibotosError):
    code = "permission_denied"


class ResourceExhausted(KibotosError):
    code = "resource_exhausted"


class FailedPrecondition(KibotosError):
    code = "failed_precondition"


class Aborted(KibotosError):
    code = "aborted"


class OutOfRange(KibotosError):
    code = "out_of_range"


class Unimplemented(KibotosError):
    code = "unimplemented"


class Internal(KibotosError):
    code = "internal"


class Unavailable(KibotosError):
    code = "unavailable"


class DataLoss(KibotosError):
    code = "data_loss"


class Unauthenticated(KibotosError):
    code = "unauthenticated"


_BY_STATUS: Dict[grpc.StatusCode, Type[KibotosError]] = {
    grpc.StatusCode.CANCELLED: Canceled,
    grpc.StatusCode.UNKNOWN: Unknown,
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceeded,
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExists,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhausted,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPrecondition,
    grpc.StatusCode.ABORTED: Aborted,
    grpc.StatusCode.OUT_OF_RANGE: OutOfRange,
    grpc.StatusCode.UNIMPLEMENTED: Unimplemented,
    grpc.StatusCode.INTERNAL: Internal,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
    grpc.StatusCode.DATA_LOSS: DataLoss,
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
}


def from_rpc_error(err: grpc.RpcError) -> KibotosError:
    """The typed exception for a failed gRPC call."""
    code = err.code() if hasattr(err, "code") else grpc.StatusCode.UNKNOWN
    message = err.details() if hasattr(err, "details") else str(err)
    cls = _BY_STATUS.get(code, Unknown)
    trailers = err.trailing_metadata() if hasattr(err, "trailing_metadata") else None
    return cls(message or "", error_detail(trailers or ()))


def error_detail(trailers) -> Optional[types_pb2.ErrorDetail]:
    """The ErrorDetail in a call's trailers, or None."""
    for key, value in trailers:
        if key != "grpc-status-details-bin":
            continue
        status = _Status.FromString(value)
        for any_msg in status.details:
            if any_msg.Is(types_pb2.ErrorDetail.DESCRIPTOR):
                detail = types_pb2.ErrorDetail()
                any_msg.Unpack(detail)
                return detail
    return None


class CommandFailed(KibotosError):
    """A Workspace command ctrl admitted failed while it ran.

    No call failed, so there is no canonical code: code is
    "command_failed". failure is the command's WorkspaceFailure; stage,
    reason, retryable and command_id read it.
    """

    code = "command_failed"

    def __init__(self, workspace_id: str, failure: types_pb2.WorkspaceFailure):
        self.workspace_id = workspace_id
        self.failure = failure
        detail = types_pb2.ErrorDetail(
            stage=failure.stage,
            reason=failure.reason,
            retryable=failure.retryable,
            command_id=failure.command_id,
        )
        stage = _enum_name(types_pb2.FailureStage, failure.stage, _STAGE_PREFIX)
        reason = _enum_name(types_pb2.FailureReason, failure.reason, _REASON_PREFIX)
        super().__init__(f"{workspace_id} failed at {stage or 'UNSPECIFIED'} ({reason}): {failure.message}", detail)

    @property
    def retryable(self) -> bool:
        return self.failure.retryable

    def __str__(self) -> str:
        return self.message


class ProcessError(Exception):
    """exec(..., check=True) of a process that did not exit with 0, or whose
    output the guest dropped in part (result.stdout_dropped,
    result.stderr_dropped)."""

    def __init__(self, argv, result):
        self.argv = list(argv)
        self.result = result
        if result.exit_code != 0:
            said = f"exited with {result.exit_code}"
        else:
            said = (f"exited with 0, but the guest dropped {result.stdout_dropped} bytes of its stdout and "
                    f"{result.stderr_dropped} of its stderr before they were read")
        super().__init__(f"{self.argv!r} {said}")
