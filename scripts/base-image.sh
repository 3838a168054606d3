#!/usr/bin/env bash
# Make the local base image the Dockerfile's PYTHON_IMAGE can name when Docker Hub cannot be
# reached (the Dockerfile's default is python:3.11-slim-bookworm from Docker Hub, pinned by
# digest; users keep it). It is what that image gives the build: Debian bookworm with
# CPython 3.11 as `python` (python-is-python3), venv and pip, the CA certificates and the C++
# runtime that compiled wheels (google-re2) link against, as Debian's slim image has it — made
# from Debian's own packages with mmdebstrap, without docs, man pages or locales, and
# imported into the local image store (buildah and podman share it).
#
# Idempotent: with the image already in the store it only prints its name. The root
# filesystem tarball is kept in .cache/images/ (ignored by git), so a later import is quick.
# Needs root, mmdebstrap and podman (scripts/get-containers.sh installs them).
# Usage: scripts/base-image.sh [IMAGE]   (default localhost/agent-health/python-base:bookworm;
# prints the image name)
set -euo pipefail

image="${1:-localhost/agent-health/python-base:bookworm}"
root="$(cd "$(dirname "$0")/.." && pwd)"
cache="$root/.cache/images"
tarball="$cache/python-base-bookworm.tar"

if podman image exists "$image"; then
    echo "$image"
    exit 0
fi
mkdir -p "$cache"
if [[ ! -s "$tarball" ]]; then
    echo "base-image.sh: making $image with mmdebstrap (about two minutes)" >&2
    # --variant=essential: Essential: yes packages plus the ones named, no apt (an image
    # installs nothing at run time). The dpkg filters keep documentation out of the layer.
    mmdebstrap --quiet --variant=essential \
        --include=python3,python3-venv,python3-pip,python-is-python3,ca-certificates,libstdc++6 \
        --dpkgopt='path-exclude=/usr/share/doc/*' \
        --dpkgopt='path-include=/usr/share/doc/*/copyright' \
        --dpkgopt='path-exclude=/usr/share/man/*' \
        --dpkgopt='path-exclude=/usr/share/info/*' \
        --dpkgopt='path-exclude=/usr/share/locale/*' \
        --customize-hook='rm -rf "$1"/var/cache/apt/* "$1"/var/lib/apt/lists/*' \
        bookworm "$cache/python-base-bookworm.part.tar"
    mv "$cache/python-base-bookworm.part.tar" "$tarball"
fi
# The official python image runs with these; the Dockerfile's stages rely on none of them
# but LANG (Python's default encoding for text files).
podman import --quiet \
    --change 'ENV LANG=C.UTF-8' \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["python3"]' \
    "$tarball" "$image" >/dev/null
echo "$image"
