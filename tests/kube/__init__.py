"""A Kubernetes API server emulator for tests, built on kmock (see :mod:`kube.emulator`)."""

from kube.emulator import CRDS, Emulator, serve
from kube.store import ApiError, Kind

__all__ = ["CRDS", "ApiError", "Emulator", "Kind", "serve"]
