"""Transfers through the SDK against a real `kibotos dev`: a stopped
Workspace exported, its archive downloaded and uploaded again, and a new
Workspace restored from the upload with the data of both tiers."""

from __future__ import annotations

import pytest

import kibotos


def test_export_download_upload_restore(client, tmp_path):
    ws = client.workspaces.create(memory="256Mi", volume={"size": "64Mi"}, labels={"suite": "sdk-py-transfer"})
    restored = None
    try:
        ws.exec(["sh", "-c", "echo volume > /data/v && echo layer > /root/l && sync"], check=True)
        with pytest.raises(kibotos.FailedPrecondition):
            ws.export()  # only a Workspace with no execution exports
        ws.stop()

        seen = []
        exported = ws.export(include_writable_layer=True, progress=lambda t: seen.append(t.state))
        assert exported.state == "COMPLETE" and exported.info.total_bytes > 0
        assert seen[-1] == "COMPLETE"
        assert exported.id in [t.id for t in client.transfers.list()]

        archive = tmp_path / "ws.kbx"
        size = exported.download(archive)
        assert size == archive.stat().st_size > 0

        uploaded = client.transfers.upload(archive, labels={"from": "sdk-py"})
        assert uploaded.state == "IMPORTED" and uploaded.info.labels["from"] == "sdk-py"
        assert client.transfers.get(uploaded.id).state == "IMPORTED"

        restored = client.workspaces.restore(uploaded.id, memory="320Mi", labels={"suite": "sdk-py-restored"})
        assert restored.state == "AVAILABLE" and restored.id != ws.id
        assert restored.info.spec.resources.memory_bytes == 320 << 20
        assert restored.info.spec.resources.cpu_millis == ws.info.spec.resources.cpu_millis  # the archive's
        assert dict(restored.info.labels) == {"suite": "sdk-py-restored"}
        assert restored.files.read_text("/data/v") == "volume\n"
        assert restored.files.read_text("/root/l") == "layer\n"

        exported.delete()
        assert exported.state in ("DELETING", "DELETED")
    finally:
        for w in (ws, restored):
            if w is not None:
                w.delete()
