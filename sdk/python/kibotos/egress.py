"""Egresses and Resolvers: k.egresses, k.resolvers.

An Egress is a caller-owned proxy (SOCKS5 or HTTP CONNECT) that a
PUBLIC_INTERNET policy sends chosen destinations through; a Resolver is a
DNS upstream (udp, tcp, tls, https) the guest's queries go to instead of
the deployment's. A Workspace names them in its policy: create's and
set_network's egresses ({EGRESS_ID: [CIDR, ...]}) and resolvers
({RESOLVER_ID: "direct" or "egress:EGRESS_ID"}), as the CLI's --egress and
--resolver take them. ctrl never returns an Egress's password
(info.password_set says whether one is set).
"""

from __future__ import annotations

from typing import Dict, List, Mapping, Optional, Sequence

from kibotos import _rpc
from kibotos.ctrl.v1 import egress_pb2, resolver_pb2, types_pb2

_EGRESS_PROTOCOLS = {"socks5": egress_pb2.EGRESS_PROTOCOL_SOCKS5, "http-connect": egress_pb2.EGRESS_PROTOCOL_HTTP_CONNECT}
_RESOLVER_PROTOCOLS = {
    "udp": resolver_pb2.RESOLVER_PROTOCOL_UDP,
    "tcp": resolver_pb2.RESOLVER_PROTOCOL_TCP,
    "tls": resolver_pb2.RESOLVER_PROTOCOL_TLS,
    "https": resolver_pb2.RESOLVER_PROTOCOL_HTTPS,
}


def _protocol(table: Dict[str, int], protocol: str) -> int:
    if protocol not in table:
        raise ValueError(f"protocol {protocol!r}: want one of {', '.join(table)}")
    return table[protocol]


class Egress:
    """One Egress: id and info (the API's Egress message as last read)."""

    def __init__(self, conn: _rpc.Connection, info: egress_pb2.Egress):
        self._conn = conn
        self.info = info

    @property
    def id(self) -> str:
        return self.info.egress_id

    def __repr__(self) -> str:
        return f"Egress({self.id!r}, {self.info.spec.endpoint!r})"

    def delete(self) -> "Egress":
        """Deletes it; one a Workspace's policy names is refused
        (FailedPrecondition naming the Workspaces)."""
        self.info = self._conn.mutate(
            self._conn.egresses.DeleteEgress, lambda cmd: egress_pb2.DeleteEgressRequest(command=cmd, egress_id=self.id)
        ).egress
        return self


class Egresses:
    """k.egresses: create, get and list Egresses."""

    def __init__(self, conn: _rpc.Connection):
        self._conn = conn

    def create(self, protocol: str, endpoint: str, *, tls: bool = False, server_name: str = "", username: str = "",
               password: str = "", udp: bool = False, labels: Optional[Dict[str, str]] = None) -> Egress:
        """protocol is "socks5" or "http-connect"; endpoint is HOST:PORT.
        tls wraps the connection to the proxy (server_name checks its
        certificate); udp lets a socks5 Egress carry UDP (a udp Resolver
        through it needs that)."""
        spec = egress_pb2.EgressSpec(protocol=_protocol(_EGRESS_PROTOCOLS, protocol), endpoint=endpoint, tls=tls,
                                     server_name=server_name, username=username, password=password, udp_enabled=udp)
        res = self._conn.mutate(self._conn.egresses.CreateEgress,
                                lambda cmd: egress_pb2.CreateEgressRequest(command=cmd, spec=spec, labels=labels or {}))
        return Egress(self._conn, res.egress)

    def get(self, egress_id: str) -> Egress:
        req = egress_pb2.GetEgressRequest(egress_id=egress_id)
        return Egress(self._conn, self._conn.retrying(lambda: self._conn.call(self._conn.egresses.GetEgress, req)).egress)

    def list(self, label_selector: str = "") -> List[Egress]:
        req = egress_pb2.ListEgressesRequest(label_selector=label_selector, page_size=1000)
        return self._conn.every_page(self._conn.egresses.ListEgresses, req,
                                     lambda res: (Egress(self._conn, e) for e in res.egresses))


class Resolver:
    """One Resolver: id and info (the API's Resolver message as last read)."""

    def __init__(self, conn: _rpc.Connection, info: resolver_pb2.Resolver):
        self._conn = conn
        self.info = info

    @property
    def id(self) -> str:
        return self.info.resolver_id

    def __repr__(self) -> str:
        return f"Resolver({self.id!r}, {self.info.spec.address or self.info.spec.url!r})"

    def delete(self) -> "Resolver":
        """Deletes it; one a Workspace's policy names is refused."""
        self.info = self._conn.mutate(
            self._conn.resolvers.DeleteResolver, lambda cmd: resolver_pb2.DeleteResolverRequest(command=cmd, resolver_id=self.id)
        ).resolver
        return self


class Resolvers:
    """k.resolvers: create, get and list Resolvers."""

    def __init__(self, conn: _rpc.Connection):
        self._conn = conn

    def create(self, protocol: str, *, address: str = "", url: str = "", server_name: str = "",
               labels: Optional[Dict[str, str]] = None) -> Resolver:
        """protocol is "udp", "tcp", "tls" (address IP:PORT, server_name
        for tls) or "https" (url)."""
        spec = resolver_pb2.ResolverSpec(protocol=_protocol(_RESOLVER_PROTOCOLS, protocol), address=address, url=url,
                                         server_name=server_name)
        res = self._conn.mutate(self._conn.resolvers.CreateResolver,
                                lambda cmd: resolver_pb2.CreateResolverRequest(command=cmd, spec=spec, labels=labels or {}))
        return Resolver(self._conn, res.resolver)

    def get(self, resolver_id: str) -> Resolver:
        req = resolver_pb2.GetResolverRequest(resolver_id=resolver_id)
        return Resolver(self._conn, self._conn.retrying(lambda: self._conn.call(self._conn.resolvers.GetResolver, req)).resolver)

    def list(self, label_selector: str = "") -> List[Resolver]:
        req = resolver_pb2.ListResolversRequest(label_selector=label_selector, page_size=1000)
        return self._conn.every_page(self._conn.resolvers.ListResolvers, req,
                                     lambda res: (Resolver(self._conn, r) for r in res.resolvers))


def policy_entries(policy: types_pb2.NetworkPolicy, egresses: Optional[Mapping[str, Sequence[str]]],
                   resolvers: Optional[Mapping[str, str]]) -> None:
    """Adds to policy the entries create's and set_network's egresses and
    resolvers ask for."""
    for egress_id, destinations in (egresses or {}).items():
        if isinstance(destinations, str):
            raise ValueError(f"egresses[{egress_id!r}]: a list of addresses or CIDRs, not one string")
        policy.egresses.add(egress_id=egress_id, destinations=list(destinations))
    for resolver_id, path in (resolvers or {}).items():
        entry = policy.resolvers.add(resolver_id=resolver_id)
        if path == "direct":
            entry.path.direct.SetInParent()
        elif path.startswith("egress:") and len(path) > len("egress:"):
            entry.path.egress_id = path.removeprefix("egress:")
        else:
            raise ValueError(f"resolvers[{resolver_id!r}] {path!r}: want \"direct\" or \"egress:EGRESS_ID\"")
