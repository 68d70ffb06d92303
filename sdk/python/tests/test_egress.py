"""Egresses and Resolvers through the SDK against a real `kibotos dev`: made,
named in a running Workspace's policy (applied by the node), refused
deletion while named, deleted once not."""

from __future__ import annotations

import pytest

import kibotos


def test_egress_and_resolver_in_a_workspace_policy(client):
    e = client.egresses.create("socks5", "192.0.2.10:1080", username="u", password="secret", udp=True,
                               labels={"suite": "sdk-py-egress"})
    assert e.id and e.info.password_set and e.info.spec.password == ""  # never returned
    r = client.resolvers.create("udp", address="192.0.2.53:53", labels={"suite": "sdk-py-egress"})
    assert [x.id for x in client.egresses.list("suite=sdk-py-egress")] == [e.id]
    assert [x.id for x in client.resolvers.list("suite=sdk-py-egress")] == [r.id]
    assert client.egresses.get(e.id).info.spec.endpoint == "192.0.2.10:1080"

    with pytest.raises(ValueError):
        client.egresses.create("ftp", "192.0.2.10:21")
    with pytest.raises(ValueError):
        client.workspaces.create(memory="256Mi", network="public-internet", resolvers={r.id: "via-somewhere"})

    ws = client.workspaces.create(memory="256Mi", volume=False, network="public-internet",
                                  egresses={e.id: ["192.0.2.0/24"]}, resolvers={r.id: "egress:" + e.id})
    try:
        policy = ws.info.spec.network_policy
        assert [(x.egress_id, list(x.destinations)) for x in policy.egresses] == [(e.id, ["192.0.2.0/24"])]
        assert policy.resolvers[0].resolver_id == r.id and policy.resolvers[0].path.egress_id == e.id
        assert ws.info.network_policy_status.applied_revision == policy.revision
        with pytest.raises(kibotos.FailedPrecondition):
            e.delete()  # a running Workspace's policy names it

        with pytest.raises(kibotos.InvalidArgument) as bad:
            ws.set_network("public-internet", resolvers={r.id: "direct"})  # a TEST-NET upstream the direct path never reaches
        assert bad.value.field.startswith("network_policy.resolvers[0].path")
        ws.refresh().set_network("public-internet")
        assert not ws.info.spec.network_policy.egresses and not ws.info.spec.network_policy.resolvers
        assert ws.info.network_policy_status.applied_revision == ws.info.spec.network_policy.revision
        assert e.delete().info.deleted
    finally:
        ws.delete()
    assert r.delete().info.deleted
