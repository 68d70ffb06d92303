# shellcheck shell=bash
# apt_ensure PKG...: installs the Debian packages that are missing, with sudo
# when not root. Sourced by the scripts that need system packages.
apt_ensure() {
	local missing=()
	for p in "$@"; do
		dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
	done
	[ ${#missing[@]} -eq 0 ] && return 0
	echo "installing Debian packages: ${missing[*]}"
	local sudo=""
	[ "$(id -u)" -eq 0 ] || sudo="sudo"
	$sudo apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
}
