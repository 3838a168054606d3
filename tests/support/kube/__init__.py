"""A Kubernetes API server emulator for tests, built on kmock (see :mod:`kube.emulator`)."""

from support.kube.emulator import CRDS, Emulator, serve
from support.kube.store import ApiError, Kind

__all__ = ["CRDS", "ApiError", "Emulator", "Kind", "serve"]
