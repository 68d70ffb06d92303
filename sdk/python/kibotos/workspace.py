"""Workspaces: k.workspaces and the Workspace handle."""

from __future__ import annotations

import datetime
import re
import time
from typing import Dict, Iterator, List, Mapping, Optional, Sequence, Union

from kibotos import _rpc, egress, errors, process, session, transfer
from kibotos.ctrl.v1 import metrics_pb2, transfer_pb2, types_pb2, workspace_pb2
from kibotos.files import Files

# The longest one WaitWorkspace call waits before it answers with the
# command's progress (ctrl allows at most 60 s).
_WAIT_STEP = 30.0
# How long create, start, stop and delete wait by default: a first start
# delivers the template and boots a VM, which under TCG takes a while.
DEFAULT_WAIT = 600.0
# What create asks for when not told, as `kibotos workspace create` and the
# TypeScript SDK: ctrl has no default memory (zero is invalid_argument).
DEFAULT_MEMORY = "512Mi"
DEFAULT_CPU_MILLIS = 1000

Size = Union[int, str]

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgtp]?)(i?b?)\s*$", re.IGNORECASE)


def parse_size(size: Size) -> int:
    """Bytes from an int, or from a string with a unit: 512Mi, 1G, 4GiB, 1.5g.

    Multiples are binary whatever the spelling, as the CLI reads them.
    """
    if isinstance(size, int):
        return size
    m = _SIZE.match(size)
    if not m or not m.group(2):
        raise ValueError(f"size {size!r}: want a number with a unit (512Mi, 1G, 4GiB) or an int of bytes")
    return int(float(m.group(1)) * 1024 ** ("kmgtp".index(m.group(2).lower()) + 1))


def _state_name(state: int) -> str:
    return types_pb2.WorkspaceState.Name(state).removeprefix("WORKSPACE_STATE_")


def _volume_binding(volume) -> Optional[types_pb2.WorkspaceVolumeBinding]:
    """create's volume argument as the binding it asks for."""
    if volume is None or volume is True:
        return None  # ctrl's default: a new Volume
    if volume is False:
        return types_pb2.WorkspaceVolumeBinding(mode=types_pb2.WORKSPACE_VOLUME_MODE_NONE)
    if isinstance(volume, str):
        return types_pb2.WorkspaceVolumeBinding(mode=types_pb2.WORKSPACE_VOLUME_MODE_BOUND, volume_id=volume)
    unknown = set(volume) - {"size", "mount_path"}
    if unknown:
        raise ValueError(f"volume: unknown keys {sorted(unknown)}; want size and mount_path")
    size = volume.get("size")
    return types_pb2.WorkspaceVolumeBinding(
        mode=types_pb2.WORKSPACE_VOLUME_MODE_NEW,
        mount_path=str(volume.get("mount_path") or ""),
        new_volume=types_pb2.VolumeSpec(capacity_bytes=parse_size(size) if size is not None else 0),
    )


def _network_policy(network: str, allow: Sequence[str], deny: Sequence[str],
                    egresses: Optional[Mapping[str, Sequence[str]]] = None,
                    resolvers: Optional[Mapping[str, str]] = None) -> types_pb2.NetworkPolicy:
    modes = {"deny-all": types_pb2.NETWORK_POLICY_MODE_DENY_ALL, "public-internet": types_pb2.NETWORK_POLICY_MODE_PUBLIC_INTERNET}
    if network not in modes:
        raise ValueError(f"network {network!r}: want deny-all or public-internet")
    policy = types_pb2.NetworkPolicy(mode=modes[network], allow=list(allow), deny=list(deny))
    egress.policy_entries(policy, egresses, resolvers)
    return policy


def _expiration(expire_in: float, action: str) -> types_pb2.WorkspaceExpirationPolicy:
    actions = {"stop": types_pb2.WORKSPACE_EXPIRATION_ACTION_STOP, "delete": types_pb2.WORKSPACE_EXPIRATION_ACTION_DELETE}
    if action not in actions or expire_in <= 0:
        raise ValueError(f"expire_in {expire_in!r}, expire_action {action!r}: want seconds from now and stop or delete")
    policy = types_pb2.WorkspaceExpirationPolicy(action=actions[action])
    policy.deadline.FromDatetime(datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=expire_in))
    return policy


class Workspace:
    """A Workspace: its id, the record as last read, and what runs in it.

    info is the API's Workspace message as last read (refresh() reads it
    again); state is its state's name ("AVAILABLE", "STOPPED", ...).
    last_command_id is the command_id of the last lifecycle command sent
    through this handle (None before one): follow() or command() it after
    a call made with wait=False.
    """

    def __init__(self, conn: _rpc.Connection, info: types_pb2.Workspace):
        self._conn = conn
        self.info = info
        self.last_command_id: Optional[str] = None
        self.files = Files(conn, info.workspace_id)
        self.processes = process.Processes(conn, info.workspace_id)

    @property
    def id(self) -> str:
        return self.info.workspace_id

    @property
    def state(self) -> str:
        return _state_name(self.info.state)

    @property
    def layer_capacity(self) -> Optional[int]:
        """The capacity the writable layer has (bytes; None until it
        exists): the BEST_EFFORT retention tier's. The spec keeps what
        create asked for, zero for the default."""
        for tier in self.info.retention_tiers:
            if tier.kind == types_pb2.RETENTION_TIER_KIND_BEST_EFFORT and tier.HasField("capacity_bytes"):
                return tier.capacity_bytes
        return None

    def __repr__(self) -> str:
        return f"Workspace({self.id!r}, state={self.state!r})"

    def refresh(self) -> "Workspace":
        res = self._conn.call(self._conn.workspaces.GetWorkspace, workspace_pb2.GetWorkspaceRequest(workspace_id=self.id))
        self.info = res.workspace
        return self

    def exec(
        self,
        argv: Sequence[str],
        *,
        env: Optional[Dict[str, str]] = None,
        cwd: Optional[str] = None,
        user: Optional[str] = None,
        input: Optional[Union[bytes, str]] = None,
        text: bool = False,
        check: bool = False,
        timeout: Optional[float] = None,
    ) -> process.ExecResult:
        """Runs argv (no shell: pass ["sh", "-c", "..."] for one) to its end.

        Returns stdout, stderr (bytes, or str with text=True) and the exit
        code; check=True raises ProcessError for a non-zero one, or for
        output the guest dropped (stdout_dropped, stderr_dropped: it keeps
        the last MiB of each stream and never waits for a reader). input is
        the process's stdin (closed after it). timeout (seconds) ends the
        process with SIGKILL and raises DeadlineExceeded, as subprocess.run
        does.
        """
        result = process.collect(
            self.exec_stream(argv, env=env, cwd=cwd, user=user, input=input, timeout=timeout), text
        )
        if check and (result.exit_code != 0 or result.stdout_dropped or result.stderr_dropped):
            raise errors.ProcessError(argv, result)
        return result

    def exec_stream(
        self,
        argv: Sequence[str],
        *,
        env: Optional[Dict[str, str]] = None,
        cwd: Optional[str] = None,
        user: Optional[str] = None,
        input: Optional[Union[bytes, str]] = None,
        timeout: Optional[float] = None,
    ) -> Iterator[process.Event]:
        """Runs argv, yielding its events as they come: Started, then Output
        (stream "stdout" or "stderr", data bytes), then Exit (exit_code)."""
        if isinstance(input, str):
            input = input.encode()
        spec = process.spec(argv, env, cwd, user, stdin=input is not None)
        return process.stream(self._conn, self.id, spec, input, timeout)

    def set_expiration(self, expire_in: Optional[float], *, action: str = "stop") -> "Workspace":
        """Has ctrl stop the Workspace (or delete it: action="delete")
        expire_in seconds from now, on ctrl's clock; None clears the policy.

        Each set_* sends the revision of what it replaces as last read
        (info): a change made meanwhile elsewhere is refused as
        FailedPrecondition, and refresh() reads the new one."""
        change = types_pb2.WorkspaceExpirationChange()
        if expire_in is None:
            change.clear = True
        else:
            change.set.CopyFrom(_expiration(expire_in, action))
        revision = self.info.expiration.revision
        return self._update(self._conn.workspaces.UpdateWorkspaceExpiration, lambda cmd: workspace_pb2.UpdateWorkspaceExpirationRequest(
            command=cmd, workspace_id=self.id, expected_expiration_revision=revision, change=change))

    def set_labels(self, labels: Dict[str, str]) -> "Workspace":
        """Replaces every label (list's label_selector matches them)."""
        revision = self.info.labels_revision
        return self._update(self._conn.workspaces.UpdateWorkspaceLabels, lambda cmd: workspace_pb2.UpdateWorkspaceLabelsRequest(
            command=cmd, workspace_id=self.id, expected_labels_revision=revision, labels=labels))

    def set_annotations(self, annotations: Dict[str, str]) -> "Workspace":
        """Replaces every annotation (kept for callers, selected by nothing)."""
        revision = self.info.annotations_revision
        return self._update(self._conn.workspaces.UpdateWorkspaceAnnotations, lambda cmd: workspace_pb2.UpdateWorkspaceAnnotationsRequest(
            command=cmd, workspace_id=self.id, expected_annotations_revision=revision, annotations=annotations))

    def set_disk(self, disk: Size) -> "Workspace":
        """Grows the writable layer to disk ("8Gi", or bytes), above its
        layer_capacity (it only grows); the next start boots with it."""
        revision = self.info.spec.resources_revision
        return self._update(self._conn.workspaces.ResizeWorkspaceWritableLayer, lambda cmd: workspace_pb2.ResizeWorkspaceWritableLayerRequest(
            command=cmd, workspace_id=self.id, expected_resources_revision=revision, capacity_bytes=parse_size(disk)))

    def set_volume(self, volume_id: Optional[str], *, mount_path: Optional[str] = None,
                   delete_with_workspace: Optional[bool] = None) -> "Workspace":
        """Binds the Volume volume_id (mounted at mount_path, None: /data;
        kept when the Workspace is deleted unless delete_with_workspace),
        or releases the binding with None, which keeps the Volume. Only
        while the Workspace holds no execution (stopped, or not started):
        otherwise FailedPrecondition."""
        if volume_id is None:
            if mount_path is not None or delete_with_workspace is not None:
                raise ValueError("set_volume(None) releases the binding: mount_path and delete_with_workspace must be unset")
            binding = types_pb2.WorkspaceVolumeBinding(mode=types_pb2.WORKSPACE_VOLUME_MODE_NONE)
        else:
            binding = types_pb2.WorkspaceVolumeBinding(mode=types_pb2.WORKSPACE_VOLUME_MODE_BOUND, volume_id=volume_id,
                                                       mount_path=mount_path or "")
            if delete_with_workspace is not None:
                binding.delete_with_workspace = delete_with_workspace
        revision = self.info.spec.binding_revision
        return self._update(self._conn.workspaces.UpdateWorkspaceVolumeBinding, lambda cmd: workspace_pb2.UpdateWorkspaceVolumeBindingRequest(
            command=cmd, workspace_id=self.id, expected_binding_revision=revision, volume=binding))

    def metrics(self) -> metrics_pb2.MetricsSample:
        """One sample of the running execution's usage, taken now: CPU,
        memory, each filesystem, the network counters and the process
        count (the API's MetricsSample). Only while AVAILABLE; nothing is
        kept between calls."""
        req = metrics_pb2.GetWorkspaceMetricsRequest(workspace_id=self.id)
        return self._conn.retrying(lambda: self._conn.call(self._conn.metrics.GetWorkspaceMetrics, req)).sample

    def set_memory(self, memory: Size) -> "Workspace":
        """Replaces the guest's memory ("768Mi", or bytes); the next start
        boots with it."""
        revision = self.info.spec.resources_revision
        return self._update(self._conn.workspaces.UpdateWorkspaceMemory, lambda cmd: workspace_pb2.UpdateWorkspaceMemoryRequest(
            command=cmd, workspace_id=self.id, expected_resources_revision=revision, memory_bytes=parse_size(memory)))

    def set_network(
        self,
        network: str = "deny-all",
        *,
        allow: Sequence[str] = (),
        deny: Sequence[str] = (),
        egresses: Optional[Mapping[str, Sequence[str]]] = None,
        resolvers: Optional[Mapping[str, str]] = None,
        wait: bool = True,
        timeout: float = 60.0,
    ) -> "Workspace":
        """Replaces the egress policy, as create's network, allow, deny,
        egresses and resolvers ask for it, with the revision last read (a change made meanwhile is
        refused as FailedPrecondition).

        On a running Workspace it waits (unless wait=False) until the node
        confirms the new revision in force
        (info.network_policy_status.applied_revision): judge enforcement by
        that, never by the call having returned. A node that could not
        apply it raises CommandFailed; past timeout seconds, TimeoutError.
        A Workspace not running takes the policy at its next start."""
        policy = _network_policy(network, allow, deny, egresses, resolvers)
        expected = self.info.spec.network_policy.revision
        command_id = _rpc.new_command_id()
        req = workspace_pb2.UpdateWorkspaceNetworkPolicyRequest(
            command=_rpc.command(command_id), workspace_id=self.id, expected_revision=expected, network_policy=policy)
        self.info = self._conn.retrying(lambda: self._conn.call(self._conn.workspaces.UpdateWorkspaceNetworkPolicy, req)).workspace
        revision = self.info.spec.network_policy.revision
        if wait and revision != expected:
            self._await_applied(command_id, revision, timeout)
        return self

    def _await_applied(self, command_id: str, revision: int, timeout: float) -> None:
        """Follows the policy's update command with WaitWorkspace, then the
        Workspace until its applied revision reaches revision or it no
        longer runs, as `kibotos workspace network set` does."""
        deadline = time.monotonic() + timeout
        while self.state == "AVAILABLE" and self.info.network_policy_status.applied_revision < revision:
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{self.id}: network policy revision {revision} not confirmed applied after {timeout:g}s; it may not be enforced")
            step = max(0.001, min(_WAIT_STEP, deadline - time.monotonic()))
            req = workspace_pb2.WaitWorkspaceRequest(workspace_id=self.id, command_id=command_id)
            req.timeout.FromTimedelta(datetime.timedelta(seconds=step))
            res = self._conn.call(self._conn.workspaces.WaitWorkspace, req, timeout=step + 30)
            self.info = res.workspace
            if res.command.state == workspace_pb2.WORKSPACE_COMMAND_STATE_FAILED:
                raise errors.CommandFailed(self.id, res.command.failure)
            if res.command.state == workspace_pb2.WORKSPACE_COMMAND_STATE_SUCCEEDED:
                time.sleep(0.2)  # the command ended: a wait on it answers at once

    def export(self, *, include_writable_layer: bool = False, include_template_image: bool = False, wait: bool = True,
               timeout: float = 3600, progress: Optional[transfer.Progress] = None) -> transfer.Transfer:
        """Captures the Workspace, which must have no execution (STOPPED),
        into a Transfer: its Volume always, its writable layer (/ and its
        changes) with include_writable_layer, the Template's root image with
        include_template_image (for a deployment that lacks it). Waits until
        the Transfer is COMPLETE (wait=False: returns it EXPORTING);
        progress(transfer) is called as its bytes advance. A failed export
        raises TransferFailed."""
        res = self._conn.mutate(self._conn.workspaces.ExportWorkspace, lambda cmd: workspace_pb2.ExportWorkspaceRequest(
            command=cmd, workspace_id=self.id, include_writable_layer=include_writable_layer,
            include_template_image=include_template_image))
        t = transfer.Transfer(self._conn, res.transfer)
        return t.wait(timeout, progress) if wait else t

    def _update(self, method, build) -> "Workspace":
        self.info = self._conn.mutate(method, build).workspace
        return self

    def issue_session(self, *, scopes: Optional[Sequence[str]] = None, ttl: Optional[float] = None) -> session.Session:
        """Issues a data-plane session for the current execution: a token
        for this Workspace's data plane alone, to hand an agent instead of
        the API key. scopes names what it may use ("process", "file",
        "desktop", "service", "metrics"; None: all); ttl is seconds, 60 to
        86400 (None: 15 minutes). Needs an API key and an AVAILABLE
        Workspace."""
        return session.issue(self._conn, self.id, scopes, ttl)

    def start(self, *, wait: bool = True, timeout: float = DEFAULT_WAIT, command_id: Optional[str] = None) -> "Workspace":
        """Starts a STOPPED Workspace; waits until AVAILABLE unless wait=False."""
        return self._follow(
            self._conn.mutate(
                self._conn.workspaces.StartWorkspace,
                lambda c: workspace_pb2.StartWorkspaceRequest(command=c, workspace_id=self.id),
                command_id,
            ),
            wait,
            timeout,
        )

    def stop(self, *, force: bool = False, wait: bool = True, timeout: float = DEFAULT_WAIT,
             command_id: Optional[str] = None) -> "Workspace":
        """Stops it (force: at once, without waiting for the guest); waits
        until STOPPED unless wait=False."""
        mode = workspace_pb2.STOP_MODE_FORCE if force else workspace_pb2.STOP_MODE_NORMAL
        return self._follow(
            self._conn.mutate(
                self._conn.workspaces.StopWorkspace,
                lambda c: workspace_pb2.StopWorkspaceRequest(command=c, workspace_id=self.id, mode=mode),
                command_id,
            ),
            wait,
            timeout,
        )

    def delete(self, *, wait: bool = True, timeout: float = DEFAULT_WAIT, command_id: Optional[str] = None) -> "Workspace":
        """Deletes it; waits until DELETED unless wait=False."""
        return self._follow(
            self._conn.mutate(
                self._conn.workspaces.DeleteWorkspace,
                lambda c: workspace_pb2.DeleteWorkspaceRequest(command=c, workspace_id=self.id),
                command_id,
            ),
            wait,
            timeout,
        )

    def _follow(self, admitted, wait: bool, timeout: float) -> "Workspace":
        """Keeps an admitted command's answer and, with wait, follows it."""
        self.info = admitted.workspace
        self.last_command_id = admitted.command.command_id
        if wait:
            self.follow(self.last_command_id, timeout=timeout)
        return self

    def follow(self, command_id: str, *, timeout: float = DEFAULT_WAIT) -> workspace_pb2.WorkspaceCommand:
        """Waits until the Workspace's command command_id ends, as
        `kibotos workspace` does: WaitWorkspace on the command, which ctrl
        answers as soon as it is SUCCEEDED (returns the command; info is
        the Workspace as it is then) or FAILED (raises CommandFailed),
        without polling. TimeoutError after timeout seconds: the command
        goes on in ctrl. A command_id that is not this Workspace's is
        NotFound."""
        deadline = time.monotonic() + timeout
        while True:
            step = max(0.001, min(_WAIT_STEP, deadline - time.monotonic()))
            req = workspace_pb2.WaitWorkspaceRequest(workspace_id=self.id, command_id=command_id)
            req.timeout.FromTimedelta(datetime.timedelta(seconds=step))
            res = self._conn.retrying(lambda: self._conn.call(self._conn.workspaces.WaitWorkspace, req, timeout=step + 30))
            cmd = res.command
            if res.HasField("workspace"):
                self.info = res.workspace
            if cmd.state == workspace_pb2.WORKSPACE_COMMAND_STATE_SUCCEEDED:
                return cmd
            if cmd.state == workspace_pb2.WORKSPACE_COMMAND_STATE_FAILED:
                raise errors.CommandFailed(self.id, cmd.failure)
            if time.monotonic() >= deadline:
                kind = workspace_pb2.WorkspaceCommandKind.Name(cmd.kind).removeprefix("WORKSPACE_COMMAND_KIND_")
                raise TimeoutError(
                    f"{self.id}: {kind.lower()} not done after {timeout:g}s ({cmd.progress or cmd.waiting_for or 'admitted'})"
                )

    def command(self, command_id: str) -> workspace_pb2.WorkspaceCommand:
        """Reads the Workspace's command command_id as it is now
        (GetWorkspaceCommand): its kind, state, progress, what it waits for
        and, once FAILED, its failure. Does not wait; follow() does."""
        req = workspace_pb2.GetWorkspaceCommandRequest(workspace_id=self.id, command_id=command_id)
        return self._conn.retrying(lambda: self._conn.call(self._conn.workspaces.GetWorkspaceCommand, req)).command


class Workspaces:
    """k.workspaces: create, get and list Workspaces."""

    def __init__(self, conn: _rpc.Connection):
        self._conn = conn

    def create(
        self,
        template: Optional[str] = None,
        *,
        revision: Optional[str] = None,
        memory: Optional[Size] = None,
        cpu_millis: int = DEFAULT_CPU_MILLIS,
        disk: Optional[Size] = None,
        labels: Optional[Dict[str, str]] = None,
        annotations: Optional[Dict[str, str]] = None,
        volume: Union[None, bool, str, Dict[str, Union[Size, str]]] = None,
        network: str = "deny-all",
        allow: Sequence[str] = (),
        deny: Sequence[str] = (),
        egresses: Optional[Mapping[str, Sequence[str]]] = None,
        resolvers: Optional[Mapping[str, str]] = None,
        expire_in: Optional[float] = None,
        expire_action: str = "stop",
        wait: bool = True,
        timeout: float = DEFAULT_WAIT,
        command_id: Optional[str] = None,
    ) -> Workspace:
        """Creates a Workspace and waits until it is AVAILABLE (wait=False:
        returns it CREATING).

        template names a Template (None: the deployment's default), revision
        one of its revisions (None: its default); memory and disk (the
        writable layer) are sizes, "512Mi" or an int of bytes (None: the
        defaults: memory 512Mi, as the CLI's); cpu_millis is thousandths of
        a vCPU (default 1000, one vCPU, as the CLI's; 0 boots one vCPU and
        reserves none at placement).
        volume is None (a new Volume of the defaults at /data, deleted with
        the Workspace), False (none), a dict with "size" and "mount_path"
        for the new Volume, or the id of an existing Volume to bind
        (mounted at /data, kept when the Workspace is deleted). network is
        "deny-all" or "public-internet", which allow and deny (addresses
        or CIDRs) refine; egresses ({EGRESS_ID: [CIDR, ...]}) sends TCP to
        those destinations through an Egress, resolvers ({RESOLVER_ID:
        "direct" or "egress:EGRESS_ID"}) the guest's DNS to a Resolver. expire_in (seconds from now) has the Workspace
        stopped, or deleted with expire_action="delete", at that time.
        A create that fails after admission raises CommandFailed.
        command_id names the command (None: a new one): a create sent again
        under the same id is the same Workspace, never a second.
        """
        spec = types_pb2.WorkspaceCreateSpec(
            template=types_pb2.TemplateSelector(template=template or "", revision=revision or ""),
            resources=types_pb2.ResourceRequest(
                cpu_millis=cpu_millis,
                memory_bytes=parse_size(memory if memory is not None else DEFAULT_MEMORY),
                writable_layer_capacity_bytes=parse_size(disk) if disk is not None else 0,
            ),
            volume=_volume_binding(volume),
            network_policy=_network_policy(network, allow, deny, egresses, resolvers),
            labels=labels or {},
            annotations=annotations or {},
        )
        if expire_in is not None:
            spec.expiration.CopyFrom(_expiration(expire_in, expire_action))
        admitted = self._conn.mutate(
            self._conn.workspaces.CreateWorkspace,
            lambda c: workspace_pb2.CreateWorkspaceRequest(command=c, spec=spec),
            command_id,
        )
        return Workspace(self._conn, admitted.workspace)._follow(admitted, wait, timeout)

    def restore(
        self,
        transfer_id: str,
        *,
        memory: Optional[Size] = None,
        cpu_millis: Optional[int] = None,
        disk: Optional[Size] = None,
        labels: Optional[Dict[str, str]] = None,
        wait: bool = True,
        timeout: float = DEFAULT_WAIT,
        command_id: Optional[str] = None,
    ) -> Workspace:
        """Creates a new Workspace from a COMPLETE or IMPORTED Transfer: the
        spec its archive carries (memory, cpu_millis and disk, each when
        given, in place of the archive's; the archive's others kept), its
        Volume imported and bound, its writable layer when it was exported
        (disk below its size is raised to it); labels label the new
        Workspace. Waits until AVAILABLE (wait=False: returns it as
        admitted); a restore that fails raises CommandFailed."""
        spec = types_pb2.WorkspaceCreateSpec(labels=labels or {})
        if memory is not None or cpu_millis is not None or disk is not None:
            spec.resources.CopyFrom(self._archived_resources(transfer_id))
            if memory is not None:
                spec.resources.memory_bytes = parse_size(memory)
            if cpu_millis is not None:
                spec.resources.cpu_millis = cpu_millis
            if disk is not None:
                spec.resources.writable_layer_capacity_bytes = parse_size(disk)
        admitted = self._conn.mutate(
            self._conn.workspaces.RestoreWorkspace,
            lambda c: workspace_pb2.RestoreWorkspaceRequest(command=c, transfer_id=transfer_id, spec=spec),
            command_id,
        )
        return Workspace(self._conn, admitted.workspace)._follow(admitted, wait, timeout)

    def _archived_resources(self, transfer_id: str) -> types_pb2.ResourceRequest:
        """The resources the Transfer's archive carries, or create's
        defaults for an archive of a Volume alone. ctrl replaces a
        restore's resources whole, so a restore that changes one of them
        sends the others as archived (as `kibotos workspace restore`)."""
        req = transfer_pb2.GetTransferRequest(transfer_id=transfer_id)
        manifest = self._conn.retrying(lambda: self._conn.call(self._conn.transfers.GetTransfer, req)).transfer.manifest
        if manifest.HasField("resources"):
            return manifest.resources
        return types_pb2.ResourceRequest(cpu_millis=DEFAULT_CPU_MILLIS, memory_bytes=parse_size(DEFAULT_MEMORY))

    def get(self, workspace_id: str) -> Workspace:
        res = self._conn.call(
            self._conn.workspaces.GetWorkspace, workspace_pb2.GetWorkspaceRequest(workspace_id=workspace_id)
        )
        return Workspace(self._conn, res.workspace)

    def list(self, label_selector: str = "", *, include_deleted: bool = False) -> List[Workspace]:
        """Every Workspace the selector (k=v, k!=v, k, !k, k in (a,b)) selects."""
        req = workspace_pb2.ListWorkspacesRequest(label_selector=label_selector, include_deleted=include_deleted, page_size=1000)
        return self._conn.every_page(self._conn.workspaces.ListWorkspaces, req,
                                     lambda res: (Workspace(self._conn, w) for w in res.workspaces))
