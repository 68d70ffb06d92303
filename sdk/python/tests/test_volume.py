"""Volumes through the SDK against a real `kibotos dev`: one Volume
outlives the Workspace bound to it and carries its data to the next."""

from __future__ import annotations

import pytest

import kibotos
from kibotos.ctrl.v1 import types_pb2


def test_a_volume_outlives_the_workspace_bound_to_it(client):
    vol = client.volumes.create("64Mi", labels={"suite": "sdk-py-volume"})
    assert (vol.state, vol.capacity) == ("AVAILABLE", 64 << 20)
    assert [v.id for v in client.volumes.list("suite=sdk-py-volume")] == [vol.id]
    vol.resize("128Mi")
    assert (vol.state, vol.capacity) == ("AVAILABLE", 128 << 20)
    vol.set_labels({"suite": "sdk-py-volume", "tier": "hot"})
    vol.set_annotations({"why": "sdk tests"})
    got = client.volumes.get(vol.id).info
    assert (dict(got.labels), dict(got.annotations)) == ({"suite": "sdk-py-volume", "tier": "hot"}, {"why": "sdk tests"})

    ws = client.workspaces.create(memory="256Mi", volume=vol.id)
    try:
        ws.exec(["sh", "-c", "echo kept > /data/kept && sync"], check=True)
        assert vol.refresh().state == "ATTACHED" and vol.bound_workspace_id == ws.id
        with pytest.raises(kibotos.FailedPrecondition):
            vol.delete()
    finally:
        ws.delete()

    # A Workspace made without a Volume binds it while stopped, and
    # releases it, keeping it.
    again = client.workspaces.create(memory="256Mi", volume=False)
    try:
        with pytest.raises(kibotos.FailedPrecondition):
            again.set_volume(vol.id)  # an execution runs
        again.stop()
        again.set_volume(vol.id, mount_path="/mnt/vol")
        assert again.info.spec.volume.volume_id == vol.id
        again.start()
        assert again.files.read_text("/mnt/vol/kept") == "kept\n"
        with pytest.raises(kibotos.FailedPrecondition):
            vol.export()  # an execution holds it
        again.stop()
        again.set_volume(None)
        assert again.info.spec.volume.mode == types_pb2.WORKSPACE_VOLUME_MODE_NONE
        assert vol.refresh().state == "AVAILABLE" and vol.bound_workspace_id == ""
    finally:
        again.delete()
    exported = vol.export()
    assert exported.state == "COMPLETE" and exported.info.total_bytes > 0
    exported.delete()
    vol.delete()
    assert vol.state == "DELETED" and client.volumes.get(vol.id).state == "DELETED"
