"""Data-plane sessions: a token for one Workspace's processes and files.

A session is what a program hands an agent instead of its API key: the
token works for one Workspace's current execution, for the scopes it was
issued with, until it expires, is revoked or the execution ends. The agent
reaches the Workspace with it as

    k = Kibotos(session.endpoint, session.token)
    ws = k.workspace(session.workspace_id)   # no read: the token cannot
    ws.exec(["ls"])                          # read the Workspace record
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, List, Optional, Sequence

from kibotos.ctrl.v1 import session_pb2

if TYPE_CHECKING:
    from kibotos import _rpc

# The scopes by name, as ctrl spells them without their prefix.
SCOPES = ("process", "file", "desktop", "service", "metrics")


def _scope(name: str) -> int:
    if name.lower() not in SCOPES:
        raise ValueError(f"scope {name!r}: want one of {', '.join(SCOPES)}")
    return session_pb2.DataPlaneScope.Value("DATA_PLANE_SCOPE_" + name.upper())


def _ttl(request, ttl: Optional[float]) -> None:
    if ttl is not None:
        request.ttl.FromTimedelta(datetime.timedelta(seconds=ttl))


class Session:
    """One data-plane session: id, workspace_id, generation (the execution
    it is bound to), scopes (names), token, expires_at (an aware datetime)
    and endpoint (the base URL to use the token at)."""

    def __init__(self, conn: "_rpc.Connection", msg: session_pb2.DataPlaneSession):
        self._conn = conn
        self._set(msg)

    def _set(self, msg: session_pb2.DataPlaneSession) -> None:
        self.id = msg.session_id
        self.workspace_id = msg.workspace_id
        self.generation = msg.generation
        self.scopes: List[str] = [
            session_pb2.DataPlaneScope.Name(s).removeprefix("DATA_PLANE_SCOPE_").lower() for s in msg.scopes
        ]
        self.token = msg.token
        self.expires_at = msg.expires_at.ToDatetime(tzinfo=datetime.timezone.utc)
        self.endpoint = msg.endpoint

    def __repr__(self) -> str:
        return f"Session({self.id!r}, workspace={self.workspace_id!r}, scopes={self.scopes}, expires_at={self.expires_at.isoformat()})"

    def rotate(self, *, ttl: Optional[float] = None) -> "Session":
        """A new token valid for ttl seconds (None: 15 minutes); the old one
        works for at most a minute more. Returns this session, updated."""
        req = session_pb2.RotateDataPlaneSessionRequest(workspace_id=self.workspace_id, session_id=self.id)
        _ttl(req, ttl)
        self._set(self._conn.call(self._conn.sessions.RotateDataPlaneSession, req).session)
        return self

    def revoke(self) -> None:
        """Ends the session now: its tokens stop working, its streams end."""
        self._conn.call(
            self._conn.sessions.RevokeDataPlaneSession,
            session_pb2.RevokeDataPlaneSessionRequest(workspace_id=self.workspace_id, session_id=self.id),
        )


def issue(conn: "_rpc.Connection", workspace_id: str, scopes: Optional[Sequence[str]], ttl: Optional[float]) -> Session:
    req = session_pb2.IssueDataPlaneSessionRequest(
        workspace_id=workspace_id, scopes=[_scope(s) for s in scopes or ()]
    )
    _ttl(req, ttl)
    return Session(conn, conn.call(conn.sessions.IssueDataPlaneSession, req).session)
