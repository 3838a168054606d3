#!/usr/bin/env bash
# Install the peer harnesses the peers benchmark runs, pinned, outside the project's venv:
# Inspect AI into <cache>/bench-peers/venv (its own Python venv), promptfoo into
# <cache>/bench-peers/npm (an npm prefix). Idempotent: a second run checks the versions only.
# Usage: bench/peers/install.sh [CACHE_DIR]   (default: <repo>/.cache)
set -euo pipefail

INSPECT_VERSION="0.3.285"
PROMPTFOO_VERSION="0.121.20"

root="$(cd "$(dirname "$0")/../.." && pwd)"
cache="${1:-$root/.cache}/bench-peers"
python="${PYTHON:-python3}"

mkdir -p "$cache"
if ! "$cache/venv/bin/python" -c "import inspect_ai, sys; sys.exit(inspect_ai.__version__ != '$INSPECT_VERSION')" 2>/dev/null; then
    "$python" -m venv "$cache/venv"
    "$cache/venv/bin/pip" install --quiet --upgrade pip
    "$cache/venv/bin/pip" install --quiet "inspect-ai==$INSPECT_VERSION" aiohttp
fi
if [[ "$("$cache/npm/node_modules/.bin/promptfoo" --version 2>/dev/null | tail -n 1)" != "$PROMPTFOO_VERSION" ]]; then
    command -v npm >/dev/null || { echo "install.sh: npm is needed for promptfoo" >&2; exit 1; }
    npm install --silent --no-audit --no-fund --prefix "$cache/npm" "promptfoo@$PROMPTFOO_VERSION" >/dev/null
fi
echo "$cache"
