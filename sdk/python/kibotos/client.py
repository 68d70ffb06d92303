"""Kibotos: the client a program makes first."""

from __future__ import annotations

import os
from typing import Optional

from kibotos import _config, _rpc
from kibotos.ctrl.v1 import types_pb2
from kibotos.egress import Egresses, Resolvers
from kibotos.transfer import Transfers
from kibotos.volume import Volumes
from kibotos.workspace import Workspace, Workspaces


class Kibotos:
    """A client of ctrl's Workspace endpoint.

    endpoint and api_key default to the client configuration `kibotos dev`
    writes ($KIBOTOS_HOME/config.env), overridden by KIBOTOS_WORKSPACE_ENDPOINT
    and KIBOTOS_TOKEN in the environment; config_file reads another file of
    that format (e.g. the endpoints.env in ctrl's state directory). timeout
    is each unary call's deadline in seconds; retries is how many times a
    command (create, start, stop, delete, exec) that failed transiently is
    sent again, with the same command_id.
    """

    def __init__(
        self,
        endpoint: Optional[str] = None,
        api_key: Optional[str] = None,
        *,
        config_file: Optional[os.PathLike] = None,
        timeout: float = 30.0,
        retries: int = 3,
    ):
        cfg = _config.load(endpoint, api_key, config_file)
        self.endpoint = cfg.endpoint
        self._conn = _rpc.Connection(cfg.endpoint, cfg.api_key, timeout, retries)
        self.workspaces = Workspaces(self._conn)
        self.volumes = Volumes(self._conn)
        self.transfers = Transfers(self._conn)
        self.egresses = Egresses(self._conn)
        self.resolvers = Resolvers(self._conn)

    def workspace(self, workspace_id: str) -> Workspace:
        """A handle on a Workspace without reading it: what a client holding
        a data-plane session's token uses (the token reaches exec, files
        and metrics, not the Workspace record). Its info holds only the id
        until refresh(), which needs an API key."""
        return Workspace(self._conn, types_pb2.Workspace(workspace_id=workspace_id))

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> "Kibotos":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
