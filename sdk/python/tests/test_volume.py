"""Volumes through the SDK against a real `kibotos dev`: one Volume
outlives the Workspace bound to it and carries its data to the next."""

from __future__ import annotations

import pytest

import kibotos


def test_a_volume_outlives_the_workspace_bound_to_it(client):
    vol = client.volumes.create("64Mi", labels={"suite": "sdk-py-volume"})
    assert (vol.state, vol.capacity) == ("AVAILABLE", 64 << 20)
    assert [v.id for v in client.volumes.list("suite=sdk-py-volume")] == [vol.id]
    vol.resize("128Mi")
    assert (vol.state, vol.capacity) == ("AVAILABLE", 128 << 20)

    ws = client.workspaces.create(memory="256Mi", volume=vol.id)
    try:
        ws.exec(["sh", "-c", "echo kept > /data/kept && sync"], check=True)
        assert vol.refresh().state == "ATTACHED" and vol.bound_workspace_id == ws.id
        with pytest.raises(kibotos.FailedPrecondition):
            vol.delete()
    finally:
        ws.delete()

    again = client.workspaces.create(memory="256Mi", volume=vol.id)
    try:
        assert again.files.read_text("/data/kept") == "kept\n"
        with pytest.raises(kibotos.FailedPrecondition):
            vol.export()  # an execution holds it
    finally:
        again.delete()
    exported = vol.export()
    assert exported.state == "COMPLETE" and exported.info.total_bytes > 0
    exported.delete()
    vol.delete()
    assert vol.state == "DELETED" and client.volumes.get(vol.id).state == "DELETED"
