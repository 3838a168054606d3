#!/usr/bin/env bash
# Make sure Debian's PostgreSQL server binaries (initdb, pg_ctl) are installed: the history's
# tests start a real server of their own (tests/support/postgres_support.py: initdb into a temporary
# directory, pg_ctl on a free loopback port, removed after). Fast when present; otherwise
# installs the `postgresql` package with apt-get, which needs root (CI and these machines run
# as root). The package's own cluster is not wanted: the install forbids service starts
# (policy-rc.d), so nothing listens on 5432 because of it.
# Usage: scripts/get-postgresql.sh   (prints the folder holding initdb and pg_ctl)
set -euo pipefail

found() {
    local bin
    for bin in /usr/lib/postgresql/*/bin; do
        if [[ -x "$bin/initdb" && -x "$bin/pg_ctl" ]]; then
            latest="$bin"
        fi
    done
    [[ -n "${latest:-}" ]]
}

if found; then
    echo "$latest"
    exit 0
fi
if [[ "$(id -u)" != 0 ]]; then
    echo "get-postgresql.sh: PostgreSQL is missing; run as root or: sudo apt-get install -y postgresql" >&2
    exit 1
fi

export DEBIAN_FRONTEND=noninteractive
policy=/usr/sbin/policy-rc.d
created_policy=0
if [[ ! -e "$policy" ]]; then
    printf '#!/bin/sh\nexit 101\n' > "$policy"
    chmod 0755 "$policy"
    created_policy=1
fi
cleanup() { if [[ "$created_policy" == 1 ]]; then rm -f "$policy"; fi; }
trap cleanup EXIT

apt-get update -qq >/dev/null
apt-get install -y -qq --no-install-recommends postgresql >/dev/null

found || {
    echo "get-postgresql.sh: apt-get installed postgresql but no /usr/lib/postgresql/*/bin/initdb" >&2
    exit 1
}
echo "$latest"
