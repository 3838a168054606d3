#!/usr/bin/env bash
# Make sure the container tools `make images` and the container end-to-end test use are
# installed, from Debian's packages: buildah (builds images/Dockerfile), podman (runs the
# images' checks and, in the test node, every container of a pod), skopeo (pushes images to a
# registry, copies them between stores), runc (the OCI runtime podman starts containers with:
# crun, podman's other runtime, cannot set rlimits on these machines), mmdebstrap (makes the
# local Debian base image when Docker Hub cannot be reached; scripts/base-image.sh) and
# docker-registry (the CNCF distribution registry: a real OCI registry on loopback in tests).
# Fast when present; otherwise installs with apt-get (needs root: CI and these machines run
# as root).
# Usage: scripts/get-containers.sh   (prints podman's path)
set -euo pipefail

tools=(podman buildah skopeo runc mmdebstrap docker-registry)
packages=(podman buildah skopeo runc mmdebstrap docker-registry)
missing=()
for i in "${!tools[@]}"; do
    command -v "${tools[$i]}" >/dev/null || missing+=("${packages[$i]}")
done
if [[ ${#missing[@]} -eq 0 ]]; then
    command -v podman
    exit 0
fi
if [[ "$(id -u)" != 0 ]]; then
    echo "get-containers.sh: missing ${missing[*]}; run as root or: sudo apt-get install -y ${missing[*]}" >&2
    exit 1
fi

export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq "${missing[@]}" >/dev/null
for tool in "${tools[@]}"; do
    command -v "$tool" >/dev/null || {
        echo "get-containers.sh: apt-get installed ${missing[*]} but $tool is still missing" >&2
        exit 1
    }
done
command -v podman
