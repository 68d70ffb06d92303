"""Transfers: archives of Workspaces and Volumes (ws.export, k.transfers).

ws.export captures a Workspace with no execution into a Transfer;
k.workspaces.restore makes a new Workspace from a COMPLETE or IMPORTED one.
A Transfer's archive can be downloaded to a file and uploaded (imported)
into another deployment. Export and import take time proportional to the
bytes: Transfer.wait() reads the Transfer until it has settled, and its
done_bytes and total_bytes say how far it is.
"""

from __future__ import annotations

import hashlib
import os
import time
from typing import BinaryIO, Callable, Dict, Iterator, List, Optional, Union

import grpc

from kibotos import _rpc, errors
from kibotos.ctrl.v1 import transfer_pb2, types_pb2

# ImportTransfer takes at most 4 MiB of data per message.
_CHUNK = 4 << 20
# How often wait() reads a Transfer that is still moving bytes.
_POLL = 0.5
_MOVING = (types_pb2.TRANSFER_STATE_EXPORTING, types_pb2.TRANSFER_STATE_IMPORTING, types_pb2.TRANSFER_STATE_DELETING)

Progress = Callable[["Transfer"], None]


class TransferFailed(errors.KibotosError):
    """A Transfer's export or import failed: it is FAILED. failure is its
    TransferFailure; stage, reason and retryable read it. code is
    "command_failed", as CommandFailed's."""

    code = "command_failed"

    def __init__(self, transfer_id: str, failure: types_pb2.TransferFailure):
        self.transfer_id = transfer_id
        self.failure = failure
        detail = types_pb2.ErrorDetail(stage=failure.stage, reason=failure.reason, retryable=failure.retryable)
        stage = types_pb2.FailureStage.Name(failure.stage).removeprefix("FAILURE_STAGE_")
        reason = types_pb2.FailureReason.Name(failure.reason).removeprefix("FAILURE_REASON_")
        super().__init__(f"{transfer_id} failed at {stage} ({reason}): {failure.message}", detail)


class Transfer:
    """One Transfer: id, state ("EXPORTING", "COMPLETE", "IMPORTED", ...),
    info (the API's Transfer message as last read; refresh() reads it
    again), done_bytes and total_bytes."""

    def __init__(self, conn: _rpc.Connection, info: types_pb2.Transfer):
        self._conn = conn
        self.info = info

    @property
    def id(self) -> str:
        return self.info.transfer_id

    @property
    def state(self) -> str:
        return types_pb2.TransferState.Name(self.info.state).removeprefix("TRANSFER_STATE_")

    def __repr__(self) -> str:
        return f"Transfer({self.id!r}, state={self.state!r}, {self.info.done_bytes}/{self.info.total_bytes} bytes)"

    def refresh(self) -> "Transfer":
        req = transfer_pb2.GetTransferRequest(transfer_id=self.id)
        self.info = self._conn.retrying(lambda: self._conn.call(self._conn.transfers.GetTransfer, req)).transfer
        return self

    def wait(self, timeout: float = 3600, progress: Optional[Progress] = None) -> "Transfer":
        """Reads the Transfer until its export, import or deletion settled,
        calling progress(transfer) after each read. FAILED raises
        TransferFailed; past timeout seconds, TimeoutError."""
        deadline = time.monotonic() + timeout
        while True:
            if progress:
                progress(self)
            if self.info.state == types_pb2.TRANSFER_STATE_FAILED:
                raise TransferFailed(self.id, self.info.failure)
            if self.info.state not in _MOVING:
                return self
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{self.id}: still {self.state} after {timeout:g}s ({self.info.done_bytes} of {self.info.total_bytes} bytes)")
            time.sleep(_POLL)
            self.refresh()

    def download(self, dest: Union[str, os.PathLike, BinaryIO]) -> int:
        """Writes a COMPLETE Transfer's archive to dest (a path, or a file
        open for binary writing) and returns its size. A stream cut by a
        transient fault resumes from the bytes written."""
        if isinstance(dest, (str, os.PathLike)):
            with open(dest, "wb") as f:
                return self.download(f)
        offset, retries = 0, 0
        while True:
            req = transfer_pb2.DownloadTransferRequest(transfer_id=self.id, offset=offset)
            try:
                for msg in self._conn.transfers.DownloadTransfer(req, metadata=self._conn.metadata):
                    dest.write(msg.data)
                    offset += len(msg.data)
                return offset
            except grpc.RpcError as e:
                err = errors.from_rpc_error(e)
                if not isinstance(err, errors.Unavailable) or retries == self._conn.retries:
                    raise err from None
                _rpc.pause(retries)
                retries += 1

    def delete(self) -> "Transfer":
        """Deletes the Transfer and its archive (DELETING, then DELETED)."""
        self.info = self._conn.mutate(
            self._conn.transfers.DeleteTransfer,
            lambda cmd: transfer_pb2.DeleteTransferRequest(command=cmd, transfer_id=self.id),
        ).transfer
        return self


class Transfers:
    """k.transfers: find Transfers, and upload (import) an archive."""

    def __init__(self, conn: _rpc.Connection):
        self._conn = conn

    def get(self, transfer_id: str) -> Transfer:
        req = transfer_pb2.GetTransferRequest(transfer_id=transfer_id)
        return Transfer(self._conn, self._conn.retrying(lambda: self._conn.call(self._conn.transfers.GetTransfer, req)).transfer)

    def list(self, label_selector: str = "") -> List[Transfer]:
        """Every Transfer not DELETED or EXPIRED (every page)."""
        req = transfer_pb2.ListTransfersRequest(label_selector=label_selector, page_size=1000)
        return self._conn.every_page(self._conn.transfers.ListTransfers, req,
                                     lambda res: (Transfer(self._conn, t) for t in res.transfers))

    def upload(self, path: Union[str, os.PathLike], *, labels: Optional[Dict[str, str]] = None, wait: bool = True,
               timeout: float = 3600, progress: Optional[Progress] = None) -> Transfer:
        """Imports the archive at path (one DownloadTransfer wrote): a new
        Transfer, IMPORTING and then IMPORTED once ctrl checked its digest,
        which k.workspaces.restore takes. wait=False returns it as the
        upload left it."""
        size = os.path.getsize(path)
        digest = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(_CHUNK), b""):
                digest.update(block)
        header = transfer_pb2.ImportTransferHeader(
            command=_rpc.command(_rpc.new_command_id()), size_bytes=size, digest="sha256:" + digest.hexdigest(), labels=labels or {})

        def parts() -> Iterator[transfer_pb2.ImportTransferRequest]:
            yield transfer_pb2.ImportTransferRequest(header=header)
            with open(path, "rb") as f:
                for block in iter(lambda: f.read(_CHUNK), b""):
                    yield transfer_pb2.ImportTransferRequest(data=block)

        # The same command_id on each try: ctrl answers a replay with the
        # Transfer the first try made.
        res = self._conn.retrying(lambda: self._conn.call(self._conn.transfers.ImportTransfer, parts(), timeout=timeout))
        t = Transfer(self._conn, res.transfer)
        return t.wait(timeout, progress) if wait else t
