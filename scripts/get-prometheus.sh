#!/usr/bin/env bash
# Make sure Debian's Prometheus server and promtool are installed (the dashboard and alert
# rule tests run them). Fast when present; otherwise installs the `prometheus` package with
# apt-get, which needs root (CI and these machines run as root). The package's own service
# is not wanted: the tests start their own server on a free loopback port, so the install
# forbids service starts (policy-rc.d) and stops a server the package may have started.
# Usage: scripts/get-prometheus.sh   (prints the prometheus path)
set -euo pipefail

if command -v prometheus >/dev/null && command -v promtool >/dev/null; then
    command -v prometheus
    exit 0
fi
if [[ "$(id -u)" != 0 ]]; then
    echo "get-prometheus.sh: prometheus is missing; run as root or: sudo apt-get install -y prometheus" >&2
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
apt-get install -y -qq --no-install-recommends prometheus >/dev/null

command -v prometheus >/dev/null && command -v promtool >/dev/null || {
    echo "get-prometheus.sh: apt-get installed prometheus but prometheus/promtool are not on PATH" >&2
    exit 1
}
command -v prometheus
