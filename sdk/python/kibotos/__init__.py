"""The Kibotos Python SDK: Workspaces over ctrl's gRPC API.

    from kibotos import Kibotos

    k = Kibotos()                      # the endpoint and key `kibotos dev` wrote
    ws = k.workspaces.create(memory="512Mi")
    print(ws.exec(["uname", "-a"], text=True).stdout)
    ws.delete()

See sdk/python/README.md.
"""

from kibotos.client import Kibotos
from kibotos.errors import (
    Aborted,
    AlreadyExists,
    Canceled,
    CommandFailed,
    DataLoss,
    DeadlineExceeded,
    FailedPrecondition,
    Internal,
    InvalidArgument,
    KibotosError,
    NotFound,
    OutOfRange,
    PermissionDenied,
    ProcessError,
    ResourceExhausted,
    Unauthenticated,
    Unavailable,
    Unimplemented,
    Unknown,
)
from kibotos.egress import Egress, Egresses, Resolver, Resolvers
from kibotos.files import Files, Watch
from kibotos.process import ExecResult, Exit, Output, Process, Processes, Started
from kibotos.session import Session
from kibotos.transfer import Transfer, TransferFailed, Transfers
from kibotos.volume import Volume, VolumeFailed, Volumes
from kibotos.workspace import Workspace, Workspaces

__all__ = [
    "Kibotos",
    "Workspace",
    "Workspaces",
    "Files",
    "Watch",
    "Egress",
    "Egresses",
    "Resolver",
    "Resolvers",
    "Session",
    "Transfer",
    "Transfers",
    "TransferFailed",
    "Volume",
    "Volumes",
    "VolumeFailed",
    "ExecResult",
    "Process",
    "Processes",
    "Started",
    "Output",
    "Exit",
    "KibotosError",
    "CommandFailed",
    "ProcessError",
    "Canceled",
    "Unknown",
    "InvalidArgument",
    "DeadlineExceeded",
    "NotFound",
    "AlreadyExists",
    "PermissionDenied",
    "ResourceExhausted",
    "FailedPrecondition",
    "Aborted",
    "OutOfRange",
    "Unimplemented",
    "Internal",
    "Unavailable",
    "DataLoss",
    "Unauthenticated",
]
