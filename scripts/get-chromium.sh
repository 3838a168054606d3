#!/usr/bin/env bash
# Make sure Debian's headless Chromium is installed: the HTML report's browser tests, its
# benchmark and the README screenshot drive it with Python Playwright (the `dev` extra).
# Playwright's own browser download is never used (`playwright install` fetches from a host
# these machines cannot reach); Playwright launches this binary by path instead.
# Fast when present; otherwise installs `chromium-headless-shell` with apt-get (needs root:
# CI and these machines run as root).
# Usage: scripts/get-chromium.sh   (prints the browser's path)
set -euo pipefail

browser=/usr/bin/chromium-headless-shell
if [[ -x "$browser" ]]; then
    echo "$browser"
    exit 0
fi
if [[ "$(id -u)" != 0 ]]; then
    echo "get-chromium.sh: $browser is missing; run as root or: sudo apt-get install -y chromium-headless-shell" >&2
    exit 1
fi

export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq --no-install-recommends chromium-headless-shell >/dev/null

[[ -x "$browser" ]] || {
    echo "get-chromium.sh: apt-get installed chromium-headless-shell but $browser is missing" >&2
    exit 1
}
echo "$browser"
