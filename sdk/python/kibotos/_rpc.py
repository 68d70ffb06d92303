"""The connection to ctrl's Workspace endpoint and the rules every call keeps.

ctrl's endpoints are Connect handlers served over HTTP/1.1 and cleartext
HTTP/2 (h2c), so grpcio reaches an http:// endpoint with an insecure
channel and an https:// one (TLS put in front of ctrl) with a secure one.
"""

from __future__ import annotations

import secrets
import time
from typing import Any, Callable, Iterable, List, Optional, Tuple, TypeVar
from urllib.parse import urlsplit

import grpc

from kibotos import errors
from kibotos.ctrl.v1 import (
    egress_pb2_grpc,
    file_pb2_grpc,
    metrics_pb2_grpc,
    process_pb2_grpc,
    resolver_pb2_grpc,
    session_pb2_grpc,
    transfer_pb2_grpc,
    types_pb2,
    volume_pb2_grpc,
    workspace_pb2_grpc,
)

T = TypeVar("T")

# A retried call waits this long, doubling, between attempts.
_BACKOFF = 0.25


def channel_for(endpoint: str) -> grpc.Channel:
    """A gRPC channel to an endpoint URL as `kibotos dev` writes it."""
    u = urlsplit(endpoint if "://" in endpoint else "http://" + endpoint)
    if u.path not in ("", "/") or u.query:
        raise ValueError(f"endpoint {endpoint!r}: gRPC takes a scheme, host and port only")
    if u.scheme == "http":
        return grpc.insecure_channel(u.netloc)
    if u.scheme == "https":
        return grpc.secure_channel(u.netloc, grpc.ssl_channel_credentials())
    raise ValueError(f"endpoint {endpoint!r}: want http:// or https://")


def new_command_id() -> str:
    """A fresh command_id: 1 to 128 of [A-Za-z0-9._:-], as ctrl requires."""
    return "py-" + secrets.token_hex(12)


def command(command_id: str) -> types_pb2.CommandMetadata:
    return types_pb2.CommandMetadata(command_id=command_id)


class Connection:
    """One channel, the API key, and the stubs of the Workspace endpoint."""

    def __init__(self, endpoint: str, api_key: str, timeout: float, retries: int):
        self.channel = channel_for(endpoint)
        self.metadata: Tuple[Tuple[str, str], ...] = (("authorization", "Bearer " + api_key),) if api_key else ()
        self.timeout = timeout
        self.retries = retries
        self.workspaces = workspace_pb2_grpc.WorkspaceServiceStub(self.channel)
        self.processes = process_pb2_grpc.ProcessServiceStub(self.channel)
        self.files = file_pb2_grpc.FileServiceStub(self.channel)
        self.sessions = session_pb2_grpc.SessionServiceStub(self.channel)
        self.volumes = volume_pb2_grpc.VolumeServiceStub(self.channel)
        self.transfers = transfer_pb2_grpc.TransferServiceStub(self.channel)
        self.egresses = egress_pb2_grpc.EgressServiceStub(self.channel)
        self.resolvers = resolver_pb2_grpc.ResolverServiceStub(self.channel)
        self.metrics = metrics_pb2_grpc.MetricsServiceStub(self.channel)

    def close(self) -> None:
        self.channel.close()

    def call(self, method, request, timeout: Optional[float] = None):
        """A unary call; a failure is the typed KibotosError."""
        try:
            return method(request, metadata=self.metadata, timeout=timeout or self.timeout)
        except grpc.RpcError as e:
            raise errors.from_rpc_error(e) from None

    def mutate(self, method, build: Callable[[types_pb2.CommandMetadata], object], command_id: Optional[str] = None):
        """A unary command: one command_id (command_id, or a new one),
        reused on every retry.

        ctrl records a command under its id with its effect, and answers a
        replay with the recorded result, so a call whose answer was lost
        (unavailable, deadline_exceeded) is sent again as it was.
        """
        request = build(command(command_id or new_command_id()))
        return self.retrying(lambda: self.call(method, request))

    def every_page(self, method, request, items: Callable[[Any], Iterable[T]]) -> List[T]:
        """Every item of a list call: items of each page, following
        next_page_token until the last. Each page is a read, retried after
        a transient failure; request's page_token is set as it goes."""
        out: List[T] = []
        while True:
            res = self.retrying(lambda: self.call(method, request))
            out.extend(items(res))
            if not res.next_page_token:
                return out
            request.page_token = res.next_page_token

    def retrying(self, attempt: Callable[[], T]) -> T:
        """attempt, again after a transient failure, at most retries times more."""
        for n in range(self.retries + 1):
            try:
                return attempt()
            except (errors.Unavailable, errors.DeadlineExceeded):
                if n == self.retries:
                    raise
                pause(n)
        raise AssertionError("unreachable")


def pause(n: int) -> None:
    """The wait before retry n (from 0): 0.25 s, doubling."""
    time.sleep(_BACKOFF * 2**n)
