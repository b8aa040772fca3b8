#!/usr/bin/env bash
# Run a command against a throwaway PostgreSQL 15 cluster (Debian's postgresql-15 binaries),
# with SVC_DATABASE_URL pointing at it. Installs the package if missing (ensure-debs.sh).
# Postgres refuses to run as root, so as root the cluster runs as the unprivileged user "svcpg".
set -euo pipefail

PG_BIN=/usr/lib/postgresql/15/bin
bash "$(dirname "$0")/ensure-debs.sh" pg15

run_as=()
owner=$(id -un)
if [ "$(id -u)" -eq 0 ]; then
    owner=svcpg
    id -u "$owner" >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin "$owner"
    run_as=(runuser -u "$owner" --)
fi

workdir=$(mktemp -d /tmp/svc-pg15.XXXXXX)
chown "$owner" "$workdir"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')

stop() {
    "${run_as[@]}" "$PG_BIN/pg_ctl" -D "$workdir/data" -m immediate stop >/dev/null 2>&1 || true
    rm -rf "$workdir"
}
trap stop EXIT

"${run_as[@]}" "$PG_BIN/initdb" -D "$workdir/data" -U postgres --auth=trust -E UTF8 >/dev/null
"${run_as[@]}" "$PG_BIN/pg_ctl" -D "$workdir/data" -l "$workdir/log" -w \
    -o "-p $port -k $workdir -c listen_addresses=127.0.0.1 -c max_connections=200" start >/dev/null

export SVC_DATABASE_URL="postgresql://postgres@127.0.0.1:$port/postgres"
echo "with-pg15: PostgreSQL $("$PG_BIN/postgres" --version | awk '{print $3}') on port $port" >&2
"$@"
