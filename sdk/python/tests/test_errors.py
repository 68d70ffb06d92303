"""Errors as typed exceptions carrying ctrl's ErrorDetail, from a real
`kibotos dev`."""

from __future__ import annotations

import pytest

import kibotos


def test_invalid_argument_names_the_field_and_admits_nothing(client):
    before = client.workspaces.list(include_deleted=True)
    with pytest.raises(kibotos.InvalidArgument) as e:
        client.workspaces.create(memory="100Mi")
    err = e.value
    assert isinstance(err, kibotos.KibotosError)
    assert err.code == "invalid_argument"
    assert err.field == "spec.resources.memory_bytes"
    assert (err.stage, err.reason, err.retryable) == ("VALIDATING", "INVALID_REQUEST", False)
    assert "at least 128 MiB" in str(err)
    assert len(client.workspaces.list(include_deleted=True)) == len(before)


def test_not_found(client):
    with pytest.raises(kibotos.NotFound) as e:
        client.workspaces.create(template="no-such-template", memory="256Mi")
    assert (e.value.field, e.value.reason) == ("spec.template.template", "NOT_FOUND")

    with pytest.raises(kibotos.NotFound) as e:
        client.workspaces.get("ws-0000000000000000")
    assert e.value.reason == "NOT_FOUND"


def test_wrong_api_key_is_unauthenticated(dev):
    with dev.client(api_key="kbt_wrong") as k, pytest.raises(kibotos.Unauthenticated):
        k.workspaces.list()


def test_a_create_no_node_can_take_fails_at_placing(client):
    # No node has a TiB of memory: the command is admitted, waits for a
    # node, and fails once the placement timeout (3 s for this dev) ends.
    with pytest.raises(kibotos.CommandFailed) as e:
        client.workspaces.create(memory="1Ti")
    err = e.value
    assert (err.stage, err.reason) == ("PLACING", "RESOURCE_EXHAUSTED")
    assert err.retryable
    assert err.command_id.startswith("py-")
    assert client.workspaces.get(err.workspace_id).state == "FAILED"
