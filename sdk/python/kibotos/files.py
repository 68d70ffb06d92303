"""Files in a Workspace's guest: ws.files.

File calls are not commands (ctrl records nothing for them), so they carry
no command_id. Paths are absolute guest paths in clean form. Results that
describe a path are the API's FileInfo messages (path, name, type,
size_bytes, mode, owner, modified_at, ...).
"""

from __future__ import annotations

from typing import Iterator, List, Optional, Union

import grpc

from kibotos import _rpc, errors
from kibotos.ctrl.v1 import file_pb2

# WriteFile takes at most 1 MiB of data per message.
_CHUNK = 1 << 20


class Files:
    """The FileService calls of one Workspace."""

    def __init__(self, conn: _rpc.Connection, workspace_id: str):
        self._conn = conn
        self._id = workspace_id

    def read(self, path: str, *, user: Optional[str] = None) -> bytes:
        """A regular file's bytes."""
        req = file_pb2.ReadFileRequest(workspace_id=self._id, path=path, user=user or "")
        data = bytearray()
        try:
            for msg in self._conn.files.ReadFile(req, metadata=self._conn.metadata):
                data += msg.data
        except grpc.RpcError as e:
            raise errors.from_rpc_error(e) from None
        return bytes(data)

    def read_text(self, path: str, *, encoding: str = "utf-8", user: Optional[str] = None) -> str:
        return self.read(path, user=user).decode(encoding)

    def write(
        self,
        path: str,
        data: Union[bytes, str],
        *,
        mode: int = 0,
        create_parents: bool = False,
        user: Optional[str] = None,
    ) -> file_pb2.FileInfo:
        """Replaces (or creates) path with data, atomically: readers never see
        a partial file. mode is for a new file (0: 0o644). A str is UTF-8.
        Returns the file as written."""
        if isinstance(data, str):
            data = data.encode()
        header = file_pb2.WriteFileHeader(
            path=path, mode=mode, create_parents=create_parents, user=user or "", size_bytes=len(data)
        )

        def frames():
            yield file_pb2.WriteFileRequest(workspace_id=self._id, header=header)
            for i in range(0, len(data), _CHUNK):
                yield file_pb2.WriteFileRequest(data=data[i : i + _CHUNK])

        try:
            return self._conn.files.WriteFile(frames(), metadata=self._conn.metadata).info
        except grpc.RpcError as e:
            raise errors.from_rpc_error(e) from None

    def list(self, path: str, *, depth: int = 1, user: Optional[str] = None) -> List[file_pb2.FileInfo]:
        """A directory's entries, sorted by path; depth above one descends."""
        req = file_pb2.ListDirectoryRequest(workspace_id=self._id, path=path, depth=depth, user=user or "")
        return self._conn.every_page(self._conn.files.ListDirectory, req, lambda res: res.entries)

    def stat(self, path: str, *, follow_symlinks: bool = False, user: Optional[str] = None) -> file_pb2.FileInfo:
        req = file_pb2.StatFileRequest(
            workspace_id=self._id, path=path, follow_symlinks=follow_symlinks, user=user or ""
        )
        return self._conn.call(self._conn.files.StatFile, req).info

    def make_dir(
        self, path: str, *, mode: int = 0, create_parents: bool = False, user: Optional[str] = None
    ) -> file_pb2.FileInfo:
        req = file_pb2.MakeDirectoryRequest(
            workspace_id=self._id, path=path, mode=mode, create_parents=create_parents, user=user or ""
        )
        return self._conn.call(self._conn.files.MakeDirectory, req).info

    def move(self, source: str, destination: str, *, overwrite: bool = False, create_parents: bool = False,
             user: Optional[str] = None) -> file_pb2.FileInfo:
        """Renames source to destination (a file or a directory): one
        atomic rename within a filesystem; across them (/tmp to the Volume)
        a copy, then the source deleted, as mv does. An existing
        destination is AlreadyExists unless overwrite."""
        req = file_pb2.MoveFileRequest(workspace_id=self._id, source_path=source, destination_path=destination,
                                       overwrite=overwrite, create_parents=create_parents, user=user or "")
        return self._conn.call(self._conn.files.MoveFile, req).info

    def watch(self, path: str, *, recursive: bool = False, user: Optional[str] = None) -> "Watch":
        """Watches a directory (recursive: and every one below it, new
        ones too): returns once the watch is in place, so every change
        made after it returns is seen. Iterate the Watch for the API's
        FileEvent messages (kind, path, new_path for a rename, type); an
        OVERFLOW event says events were lost (list again). It ends when
        the watched directory goes, or at close(); use it in a with
        block."""
        req = file_pb2.WatchDirectoryRequest(workspace_id=self._id, path=path, recursive=recursive, user=user or "")
        call = self._conn.files.WatchDirectory(req, metadata=self._conn.metadata)
        try:
            first = next(call)
        except grpc.RpcError as e:
            raise errors.from_rpc_error(e) from None
        except StopIteration:
            raise errors.KibotosError(f"watch {path}: the stream ended before the watch started") from None
        if not first.HasField("started"):
            call.cancel()
            raise errors.KibotosError(f"watch {path}: the stream began with {first.WhichOneof('item')}, not started")
        return Watch(call)

    def remove(self, path: str, *, recursive: bool = False, user: Optional[str] = None) -> None:
        req = file_pb2.DeleteFileRequest(workspace_id=self._id, path=path, recursive=recursive, user=user or "")
        self._conn.call(self._conn.files.DeleteFile, req)


class Watch:
    """A directory watch (Files.watch): iterate it for FileEvents, as they
    come; close() ends it, from another thread too."""

    def __init__(self, call):
        self._call = call
        self._closed = False

    def __iter__(self) -> Iterator[file_pb2.FileEvent]:
        try:
            for res in self._call:
                if res.HasField("event"):
                    yield res.event
        except grpc.RpcError as e:
            if self._closed and e.code() == grpc.StatusCode.CANCELLED:
                return
            raise errors.from_rpc_error(e) from None

    def close(self) -> None:
        self._closed = True
        self._call.cancel()

    def __enter__(self) -> "Watch":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
