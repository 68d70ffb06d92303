#!/usr/bin/env bash
# The .deb's install test (run by scripts/test.sh): builds the package with
# scripts/package.sh, installs it on a machine where systemd is PID 1, starts
# kibotos-ctrl and kibotos-node as the services the package ships, and
# creates a Workspace through them with the installed CLI (a real microVM
# boots; a command runs in it; it is deleted); then installs python3-kibotos
# and runs the Python SDK's quickstart through the same services.
#
# Where systemd runs: CI and the development machines run under an init
# that is not systemd, without a container engine. So the test boots the
# host's own systemd in a systemd-nspawn container (Debian's
# systemd-container): its root is an overlay over the host's / with a tmpfs
# upper layer (the host's installed packages, written to nowhere but that
# tmpfs), a private network namespace (loopback only: the units' default
# ports cannot meet another test's, and nothing leaves the machine), and
# --register=no --keep-unit, since no systemd on the host registers
# machines. Inside, the test does what README's "Installing the .deb" says,
# through nsenter into the container's namespaces. Everything is undone on
# exit, failure or not: the container (its systemd and every process under
# it), the mounts, the tmpfs, the cgroups nspawn made.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/apt.sh

say() { printf 'test-package.sh: %s\n' "$*" >&2; }

# Mounts, cgroups and nspawn need root (CI is root).
[ "$(id -u)" -eq 0 ] || { say "needs root (mounts, cgroups, systemd-nspawn)"; exit 1; }

# systemd and nspawn; the runtime dependencies the package declares (so
# installing it inside needs no download); busybox for the Template.
apt_ensure systemd systemd-container util-linux qemu-system-x86 e2fsprogs xz-utils ca-certificates busybox-static \
	python3 python3-grpcio python3-protobuf

say "building the .debs"
debs=$(scripts/package.sh)
deb=$(sed -n 1p <<<"$debs")
pydeb=$(sed -n 2p <<<"$debs")
[ -f "$deb" ] && [ -f "$pydeb" ] || { say "package.sh printed '$debs', want two .debs"; exit 1; }

# Debian's kernel package for `kibotos platform build`, in the cache the Go
# tests use. The container has no network: the CLI's own download finds it
# there (apt-get download skips a file it already has).
cache=${KIBOTOS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kibotos}
mkdir -p "$cache"
kpkg=$(apt-cache depends linux-image-amd64 | awk '$1 == "Depends:" && $2 ~ /^linux-image-/ { print $2; exit }')
[ -n "$kpkg" ] || { say "no kernel package behind linux-image-amd64 (apt-get update?)"; exit 1; }
say "fetching $kpkg into $cache (once)"
(cd "$cache" && apt-get download -q -o APT::Sandbox::User=root "$kpkg" >&2)

# Its own name, so that two runs on one machine do not meet.
machine=kibotos-pkgtest-$$
work=$(mktemp -d /tmp/kibotos-pkgtest.XXXXXX)
cgroups=()
nspawn_pid=""
leader=""

# inside CMD...: runs CMD in the container (every namespace of its PID 1),
# with a clean environment as a root login there would have.
inside() {
	nsenter -t "$leader" -a env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
		HOME=/root LANG=C.UTF-8 TERM=dumb "$@"
}

cleanup() {
	local rc=$?
	set +e
	if [ "$rc" -ne 0 ] && [ -n "$leader" ] && kill -0 "$leader" 2>/dev/null; then
		say "FAILED; the services' journal:"
		inside journalctl --no-pager -n 150 -u kibotos-ctrl -u kibotos-node >&2
		inside systemctl --no-pager status kibotos-ctrl kibotos-node >&2
	fi
	if [ -n "$nspawn_pid" ] && kill -0 "$nspawn_pid" 2>/dev/null; then
		say "powering the container off"
		kill -TERM "$nspawn_pid" # nspawn asks the container's systemd to power off
		for _ in $(seq 60); do kill -0 "$nspawn_pid" 2>/dev/null || break; sleep 0.5; done
		kill -KILL "$nspawn_pid" 2>/dev/null
	fi
	[ -n "$nspawn_pid" ] && wait "$nspawn_pid" 2>/dev/null
	if [ "$rc" -ne 0 ] && [ -f "$work/console.log" ]; then
		say "container console (last lines):"
		tail -n 40 "$work/console.log" >&2
	fi
	# The container's PID namespace ended with its PID 1; whatever nspawn
	# itself left in our cgroups is killed before they are removed.
	for cg in "${cgroups[@]}"; do
		find "$cg" -name cgroup.procs -exec cat {} + 2>/dev/null | xargs -r kill -KILL 2>/dev/null
	done
	for _ in $(seq 20); do
		umount "$work/root" 2>/dev/null
		mountpoint -q "$work/root" || break
		sleep 0.5
	done
	umount "$work" 2>/dev/null
	rm -rf "$work"
	for cg in "${cgroups[@]}"; do
		find "$cg" -depth -type d -exec rmdir {} + 2>/dev/null
	done
	rmdir "/run/systemd/nspawn/propagate/$machine" 2>/dev/null
	if mountpoint -q "$work" 2>/dev/null || [ -d "$work" ]; then
		say "could not remove $work"
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM # so that cleanup runs when the test is interrupted

# The container's root: the host's / under an overlay whose upper layer is a
# tmpfs, so the install, the state and the VMs' block files (sparse) never
# touch the host's files.
mount -t tmpfs -o size=8g,mode=0700 kibotos-pkgtest "$work"
mkdir -p "$work/upper" "$work/work" "$work/root"
mount -t overlay kibotos-pkgtest -o "lowerdir=/,upperdir=$work/upper,workdir=$work/work" "$work/root"
stage="$work/root/var/cache/kibotos-pkgtest"
mkdir -p "$stage"
cp "$deb" "$pydeb" sdk/python/examples/quickstart.py "$stage/"
cp "$cache/${kpkg}"_*.deb "$stage/"

# nspawn makes its cgroups (supervisor, payload) under the one it starts
# in: a cgroup of this test's own in each hierarchy the host mounts, so they
# are found and removed at the end.
for h in /sys/fs/cgroup/systemd /sys/fs/cgroup/unified; do
	[ -d "$h" ] && cgroups+=("$h/$machine")
done
[ -f /sys/fs/cgroup/cgroup.controllers ] && cgroups+=("/sys/fs/cgroup/$machine")
for cg in "${cgroups[@]}"; do mkdir "$cg"; done

say "booting systemd in a container ($machine)"
# basic.target: the system without the host's own enabled services (a
# PostgreSQL the test command installed, say); the package's postinst and
# the test start the kibotos units themselves.
nspawn=(systemd-nspawn --quiet --register=no --keep-unit --private-network --console=read-only -D "$work/root" -M "$machine")
# Where the host has KVM, the node gets it as it would on a real host (its
# unit allows /dev/kvm to group kvm); without it QEMU runs TCG. (The
# machines this runs on today have no KVM: that path is untried here.)
[ -c /dev/kvm ] && nspawn+=(--bind=/dev/kvm)
(
	for cg in "${cgroups[@]}"; do echo "$BASHPID" >"$cg/cgroup.procs"; done
	exec "${nspawn[@]}" -b -- systemd.unit=basic.target
) >"$work/console.log" 2>&1 </dev/null &
nspawn_pid=$!

# wait_for WHAT SECONDS CMD...: polls CMD until it succeeds.
wait_for() {
	local what=$1 secs=$2
	shift 2
	local end=$((SECONDS + secs))
	until "$@" >/dev/null 2>&1; do
		if [ "$SECONDS" -ge "$end" ]; then
			say "timed out after ${secs}s waiting for $what"
			return 1
		fi
		kill -0 "$nspawn_pid" 2>/dev/null || { say "the container exited"; return 1; }
		sleep 0.5
	done
}
find_leader() { leader=$(pgrep -P "$nspawn_pid" -x systemd | head -n 1) && [ -n "$leader" ]; }
wait_for "the container's systemd" 60 find_leader
find_leader
booted() { inside systemctl is-system-running | grep -qx -e running -e degraded; }
wait_for "the container to finish booting" 120 booted
say "systemd $(inside systemctl --version | head -n 1 | cut -d' ' -f2) is PID 1 in $machine"

say "installing $(basename "$deb") with apt-get"
inside apt-get install -y -q --no-install-recommends "/var/cache/kibotos-pkgtest/$(basename "$deb")" >&2

# The units as shipped: systemd's own check of their directives, and the
# exposure it rates them at (shown, not judged).
inside systemd-analyze verify kibotos-ctrl.service kibotos-node.service
for unit in kibotos-ctrl kibotos-node; do
	say "$unit: $(inside systemd-analyze security "$unit.service" | tail -n 1)"
done

# postinst made the user and started ctrl; it must serve before the client
# configuration exists.
ctrl_ready() { inside test -s /var/lib/kibotos/ctrl/endpoints.env; }
wait_for "kibotos-ctrl to write its endpoints" 60 ctrl_ready
inside systemctl is-active -q kibotos-ctrl
inside systemctl is-enabled -q kibotos-ctrl
# The package must not have started the node: it has no grant yet.
if inside systemctl is-active -q kibotos-node; then
	say "kibotos-node runs before it was configured"
	exit 1
fi

say "the client configuration from ctrl's state (as README says)"
inside sh -c 'mkdir -p ~/.kibotos && install -m 0600 /var/lib/kibotos/ctrl/endpoints.env ~/.kibotos/config.env'
node_id=$(inside hostname -s)
grant=$(inside kibotos enrollment create --node-id "$node_id" | grep -o 'kbg_[A-Za-z0-9_-]*' | head -n 1)
[ -n "$grant" ] || { say "no grant secret in kibotos enrollment create's output"; exit 1; }
inside sed -i "s|^KIBOTOS_ENROLLMENT_GRANT=.*|KIBOTOS_ENROLLMENT_GRANT=$grant|" /etc/kibotos/node.env
say "starting kibotos-node ($node_id)"
inside systemctl enable --now kibotos-node
node_ready() { inside kibotos node get "$node_id" -o json | grep -q '"NODE_REGISTRATION_STATUS_READY"'; }
wait_for "node $node_id to be READY" 120 node_ready

# The hardening is in force, not only written: the agent runs as kibotos
# with no capability, no_new_privs and a seccomp filter.
node_pid=$(inside systemctl show -p MainPID --value kibotos-node)
status=$(inside cat "/proc/$node_pid/status")
for want in 'CapEff:[[:space:]]+0+$' 'NoNewPrivs:[[:space:]]+1$' 'Seccomp:[[:space:]]+2$'; do
	grep -Eq "^$want" <<<"$status" || { say "kibotos-node's process lacks $want"; exit 1; }
done
[ "$(inside ps -o user= -p "$node_pid")" = kibotos ] || { say "kibotos-node does not run as kibotos"; exit 1; }

say "pool capacity, platform (Debian's kernel, cached) and a busybox template"
inside kibotos pool set-capacity default 20G >&2
inside kibotos platform build --key default --set-default --cache /var/cache/kibotos-pkgtest >&2
# The Template root as README's steps make it.
inside sh -euc '
	cd /var/cache/kibotos-pkgtest
	mkdir -p rootfs/bin rootfs/etc && cp /bin/busybox rootfs/bin/
	for a in $(rootfs/bin/busybox --list); do [ -e rootfs/bin/$a ] || ln -s busybox rootfs/bin/$a; done
	echo "root:x:0:0:root:/root:/bin/sh" > rootfs/etc/passwd
'
inside kibotos template build busybox --from /var/cache/kibotos-pkgtest/rootfs --set-default >&2

say "creating a Workspace through the services"
id=$(inside kibotos workspace create -q)
say "Workspace $id is AVAILABLE"
got=$(inside kibotos workspace exec "$id" -- sh -c 'echo "hello from $(hostname)"')
if [ "$got" != "hello from $id" ]; then
	say "exec answered '$got', want 'hello from $id'"
	exit 1
fi
# The VM is the node unit's: QEMU as user kibotos in its cgroup.
node_qemu() { inside ps -eo user=,unit=,comm= | grep -Eq '^kibotos +kibotos-node\.service +qemu-system'; }
if ! node_qemu; then
	say "no QEMU of user kibotos in kibotos-node.service"
	exit 1
fi
# A restart of the agent (what an upgrade does) leaves the VM running
# (KillMode=process), and the next agent re-attaches to it.
qemu_pid() { inside ps -eo pid=,user=,unit=,comm= | awk '$2 == "kibotos" && $3 == "kibotos-node.service" && $4 ~ /^qemu-system/ { print $1 }'; }
before=$(qemu_pid)
say "restarting kibotos-node (QEMU pid $before)"
inside systemctl restart kibotos-node
reattached() { [ "$(inside kibotos workspace exec "$id" -- echo again)" = again ]; }
wait_for "exec through the restarted agent" 60 reattached
if [ "$(qemu_pid)" != "$before" ]; then
	say "the VM did not outlive the agent's restart (QEMU pid $before, now $(qemu_pid))"
	exit 1
fi
# delete follows the command to its end: the VM is gone with it.
inside kibotos workspace delete "$id" >&2
no_qemu() { ! node_qemu; }
wait_for "the Workspace's VM to end" 30 no_qemu
inside systemctl is-active -q kibotos-ctrl kibotos-node

# The Python SDK's package: README's program, run by Debian's python3
# from / (nothing of the repository on its path) against the services.
say "installing $(basename "$pydeb"); the Python quickstart through the services"
inside apt-get install -y -q --no-install-recommends "/var/cache/kibotos-pkgtest/$(basename "$pydeb")" >&2
where=$(inside sh -c 'cd / && python3 -c "import kibotos; print(kibotos.__file__)"')
[ "$where" = /usr/lib/python3/dist-packages/kibotos/__init__.py ] || { say "kibotos imported from '$where'"; exit 1; }
got=$(inside sh -c 'cd / && python3 /var/cache/kibotos-pkgtest/quickstart.py')
if ! grep -Eqx 'hello from ws-[0-9a-f]+' <<<"$(sed -n 1p <<<"$got")" || [ "$(sed -n 2p <<<"$got")" != "hi from Python" ]; then
	say "the Python quickstart printed '$got'"
	exit 1
fi
wait_for "the quickstart's VM to end" 30 no_qemu
inside apt-get purge -y -q python3-kibotos >&2
if inside test -e /usr/lib/python3/dist-packages/kibotos; then say "the purge left the Python package"; exit 1; fi

say "purging the package"
inside apt-get purge -y -q kibotos >&2
for unit in kibotos-ctrl kibotos-node; do
	if inside systemctl is-active -q "$unit"; then say "$unit still runs after the purge"; exit 1; fi
done
if inside test -e /var/lib/kibotos; then say "the purge left /var/lib/kibotos"; exit 1; fi
say "PASS: the .deb installed, kibotos-ctrl and kibotos-node ran as services, a Workspace was created, ran commands (its VM outliving an agent restart) and was deleted; python3-kibotos ran the Python quickstart through them; the purges stopped them and removed the SDK"
