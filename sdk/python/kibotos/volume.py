"""Volumes: k.volumes and the Volume handle.

A Volume is storage that outlives the Workspaces it is bound to: create
one, bind it with k.workspaces.create(volume=vol.id), delete the
Workspace, bind it to the next.
"""

from __future__ import annotations

import time
from typing import Dict, List, Optional

from kibotos import _rpc, errors, transfer
from kibotos.ctrl.v1 import types_pb2, volume_pb2
from kibotos.workspace import parse_size

# How often a wait for a Volume's command reads it again: VolumeService has
# no wait call (WaitWorkspace's counterpart), so the SDK reads, as the CLI.
_POLL = 0.2
DEFAULT_WAIT = 300.0


def _state_name(state: int) -> str:
    return types_pb2.VolumeState.Name(state).removeprefix("VOLUME_STATE_")


class VolumeFailed(errors.KibotosError):
    """A Volume's command ctrl admitted failed while it ran: the Volume is
    FAILED. failure is its VolumeFailure; stage, reason and retryable read
    it. code is "command_failed", as CommandFailed's."""

    code = "command_failed"

    def __init__(self, volume_id: str, failure: types_pb2.VolumeFailure):
        self.volume_id = volume_id
        self.failure = failure
        detail = types_pb2.ErrorDetail(
            stage=failure.stage, reason=failure.reason, retryable=failure.retryable, command_id=failure.command_id
        )
        stage = types_pb2.FailureStage.Name(failure.stage).removeprefix("FAILURE_STAGE_")
        reason = types_pb2.FailureReason.Name(failure.reason).removeprefix("FAILURE_REASON_")
        super().__init__(f"{volume_id} failed at {stage} ({reason}): {failure.message}", detail)

    @property
    def retryable(self) -> bool:
        return self.failure.retryable

    def __str__(self) -> str:
        return self.message


class Volume:
    """A Volume: id, state ("AVAILABLE", "ATTACHED", ...), capacity (bytes),
    bound_workspace_id, and info, the API's Volume message as last read."""

    def __init__(self, conn: _rpc.Connection, info: types_pb2.Volume):
        self._conn = conn
        self.info = info

    @property
    def id(self) -> str:
        return self.info.volume_id

    @property
    def state(self) -> str:
        return _state_name(self.info.state)

    @property
    def capacity(self) -> int:
        return self.info.spec.capacity_bytes

    @property
    def bound_workspace_id(self) -> str:
        return self.info.bound_workspace_id

    def __repr__(self) -> str:
        return f"Volume({self.id!r}, state={self.state!r}, capacity={self.capacity})"

    def refresh(self) -> "Volume":
        res = self._conn.call(self._conn.volumes.GetVolume, volume_pb2.GetVolumeRequest(volume_id=self.id))
        self.info = res.volume
        return self

    def set_labels(self, labels: Dict[str, str]) -> "Volume":
        """Replaces every label, with the revision last read (a change made
        meanwhile is refused as FailedPrecondition; refresh() reads it)."""
        revision = self.info.labels_revision
        return self._update(self._conn.volumes.UpdateVolumeLabels, lambda c: volume_pb2.UpdateVolumeLabelsRequest(
            command=c, volume_id=self.id, expected_labels_revision=revision, labels=labels))

    def set_annotations(self, annotations: Dict[str, str]) -> "Volume":
        """Replaces every annotation, as set_labels does labels."""
        revision = self.info.annotations_revision
        return self._update(self._conn.volumes.UpdateVolumeAnnotations, lambda c: volume_pb2.UpdateVolumeAnnotationsRequest(
            command=c, volume_id=self.id, expected_annotations_revision=revision, annotations=annotations))

    def _update(self, method, build) -> "Volume":
        """One change under one command_id (kept across retries); keeps the
        Volume ctrl answers."""
        self.info = self._conn.mutate(method, build).volume
        return self

    def resize(self, size, *, wait: bool = True, timeout: float = DEFAULT_WAIT) -> "Volume":
        """Grows it to size ("2Gi" or bytes); Volumes only grow, and only
        while no execution holds them. Waits until the change committed
        unless wait=False."""
        res = self._conn.mutate(
            self._conn.volumes.ResizeVolume,
            lambda c: volume_pb2.ResizeVolumeRequest(command=c, volume_id=self.id, capacity_bytes=parse_size(size)),
        )
        self.info = res.volume
        return self._wait_out_of(types_pb2.VOLUME_STATE_RESIZING, wait, timeout)

    def export(self, *, wait: bool = True, timeout: float = 3600,
               progress: Optional[transfer.Progress] = None) -> transfer.Transfer:
        """Captures the Volume, which no execution may hold (AVAILABLE),
        into a Transfer; waits until it is COMPLETE (wait=False: returns it
        EXPORTING), calling progress(transfer) as its bytes advance. A
        failed export raises TransferFailed."""
        res = self._conn.mutate(self._conn.volumes.ExportVolume,
                                lambda c: volume_pb2.ExportVolumeRequest(command=c, volume_id=self.id))
        t = transfer.Transfer(self._conn, res.transfer)
        return t.wait(timeout, progress) if wait else t

    def delete(self, *, wait: bool = True, timeout: float = DEFAULT_WAIT) -> "Volume":
        """Deletes it (a Volume an undeleted Workspace binds is
        FailedPrecondition); waits until DELETED unless wait=False."""
        res = self._conn.mutate(
            self._conn.volumes.DeleteVolume, lambda c: volume_pb2.DeleteVolumeRequest(command=c, volume_id=self.id)
        )
        self.info = res.volume
        return self._wait_out_of(types_pb2.VOLUME_STATE_DELETING, wait, timeout)

    def _wait_out_of(self, state: int, wait: bool, timeout: float) -> "Volume":
        """Reads the Volume until it leaves state (its command's), raising
        VolumeFailed when it ended FAILED."""
        if not wait:
            return self
        deadline = time.monotonic() + timeout
        while self.info.state == state:
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{self.id}: still {self.state} after {timeout:g}s")
            time.sleep(_POLL)
            self.refresh()
        if self.info.state == types_pb2.VOLUME_STATE_FAILED:
            raise VolumeFailed(self.id, self.info.failure)
        return self


class Volumes:
    """k.volumes: create, get and list Volumes."""

    def __init__(self, conn: _rpc.Connection):
        self._conn = conn

    def create(
        self,
        size=None,
        *,
        labels: Optional[Dict[str, str]] = None,
        annotations: Optional[Dict[str, str]] = None,
        wait: bool = True,
        timeout: float = DEFAULT_WAIT,
    ) -> Volume:
        """Creates a Volume of size ("1Gi" or bytes; None: the storage
        profile's) and waits until a node made it (AVAILABLE) unless
        wait=False; a creation that failed raises VolumeFailed."""
        spec = types_pb2.VolumeSpec(capacity_bytes=parse_size(size) if size is not None else 0)
        res = self._conn.mutate(
            self._conn.volumes.CreateVolume,
            lambda c: volume_pb2.CreateVolumeRequest(command=c, spec=spec, labels=labels or {}, annotations=annotations or {}),
        )
        return Volume(self._conn, res.volume)._wait_out_of(types_pb2.VOLUME_STATE_CREATING, wait, timeout)

    def get(self, volume_id: str) -> Volume:
        res = self._conn.call(self._conn.volumes.GetVolume, volume_pb2.GetVolumeRequest(volume_id=volume_id))
        return Volume(self._conn, res.volume)

    def list(self, label_selector: str = "", *, include_deleted: bool = False) -> List[Volume]:
        """Every Volume the selector selects, ordered by id."""
        req = volume_pb2.ListVolumesRequest(label_selector=label_selector, include_deleted=include_deleted, page_size=1000)
        return self._conn.every_page(self._conn.volumes.ListVolumes, req,
                                     lambda res: (Volume(self._conn, v) for v in res.volumes))
