# shellcheck shell=bash
# Throwaway PostgreSQL for tests and benchmarks. Sourced; needs scripts/apt.sh.
#
#   postgres_start   installs PostgreSQL from Debian when missing, starts a
#                    server in a new temporary directory listening only on a
#                    unix socket there, and exports KIBOTOS_TEST_POSTGRES_DSN.
#   postgres_stop    stops it and removes the directory.
#
# The server runs as the postgres user when this runs as root (PostgreSQL
# refuses to run as root). fsync is off unless PG_FSYNC=on: test data is
# thrown away; benchmarks turn it on.

postgres_start() {
	apt_ensure postgresql
	local bindir
	bindir=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
	PG_TMP=$(mktemp -d /tmp/kibotos-pg.XXXXXX)
	chmod 755 "$PG_TMP"
	local as=()
	if [ "$(id -u)" -eq 0 ]; then
		chown postgres "$PG_TMP"
		as=(runuser -u postgres --)
	fi
	"${as[@]}" "$bindir/initdb" -D "$PG_TMP/data" -A trust -U postgres -E UTF8 --no-sync >"$PG_TMP/initdb.log" 2>&1 ||
		{ cat "$PG_TMP/initdb.log"; return 1; }
	"${as[@]}" "$bindir/pg_ctl" -D "$PG_TMP/data" -l "$PG_TMP/server.log" -w \
		-o "-k $PG_TMP -c listen_addresses='' -c fsync=${PG_FSYNC:-off} -c max_connections=300" start >/dev/null ||
		{ cat "$PG_TMP/server.log"; return 1; }
	PG_CTL=("${as[@]}" "$bindir/pg_ctl")
	export KIBOTOS_TEST_POSTGRES_DSN="postgres://postgres@/postgres?host=${PG_TMP}&sslmode=disable"
	echo "PostgreSQL $("$bindir/postgres" --version | awk '{print $3}') on ${PG_TMP}"
}

postgres_stop() {
	[ -n "${PG_TMP:-}" ] || return 0
	"${PG_CTL[@]}" -D "$PG_TMP/data" -m immediate stop >/dev/null 2>&1 || true
	rm -rf "$PG_TMP"
	PG_TMP=""
}
