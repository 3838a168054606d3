"""Registry credentials from the content of image pull Secrets.

The caller reads the Secrets (``kubernetes.io/dockerconfigjson`` or the legacy
``kubernetes.io/dockercfg``) and passes their ``data``; this module turns them into one
credential per registry host, remembering which Secret each came from so that a refusal
can name the Secret to check.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
import re
from collections.abc import Mapping
from typing import Any

from agent_health.cluster import errors

DOCKER_HUB = "docker.io"
DOCKER_HUB_API = "registry-1.docker.io"
DOCKER_HUB_ALIASES = frozenset({DOCKER_HUB, "index.docker.io", DOCKER_HUB_API})


@dataclasses.dataclass(frozen=True)
class Credential:
    """Registry credentials and the pull secret they came from (named in error messages)."""

    username: str
    password: str = dataclasses.field(repr=False)
    secret: str = ""


def registry_host(key: str) -> str:
    """A docker config ``auths`` key (``https://index.docker.io/v1/``, ``ghcr.io``) → registry."""
    host = re.sub(r"^[a-z]+://", "", key.strip()).split("/", 1)[0]
    return DOCKER_HUB if host in DOCKER_HUB_ALIASES else host


def credentials(pull_secrets: Mapping[str, Mapping[str, str]]) -> dict[str, Credential]:
    """Registry → credential from pull Secrets: secret name → the Secret's ``data`` (base64).

    Reads ``.dockerconfigjson`` (``{"auths": {...}}``) and the legacy ``.dockercfg``; an entry
    carries ``auth`` (base64 ``user:password``) or ``username``/``password``. When several
    secrets name one registry, the first wins.
    """
    found: dict[str, Credential] = {}
    for secret, data in pull_secrets.items():
        for auths in _auths(secret, data):
            for key, entry in auths.items():
                credential = _credential(secret, key, entry)
                if credential is not None:
                    found.setdefault(registry_host(key), credential)
    return found


def _auths(secret: str, data: Mapping[str, str]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for field, nested in ((".dockerconfigjson", True), (".dockercfg", False)):
        if field not in data:
            continue
        try:
            document = json.loads(base64.b64decode(data[field], validate=True))
        except (binascii.Error, ValueError) as err:
            raise errors.PermanentRegistryError(
                f"imagePullSecret {secret!r}: {field} is not base64-encoded JSON; recreate it "
                "with `kubectl create secret docker-registry`"
            ) from err
        auths = document.get("auths", {}) if nested and isinstance(document, dict) else document
        if isinstance(auths, dict):
            out.append(auths)
    return out


def _credential(secret: str, key: str, entry: Any) -> Credential | None:
    if not isinstance(entry, dict):
        return None
    if entry.get("auth"):
        try:
            username, sep, password = base64.b64decode(entry["auth"]).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError) as err:
            raise errors.PermanentRegistryError(
                f"imagePullSecret {secret!r}: the auth of {key!r} is not base64 'user:password'"
            ) from err
        return Credential(username, password, secret) if sep else None
    if entry.get("username") and entry.get("password") is not None:
        return Credential(str(entry["username"]), str(entry["password"]), secret)
    return None
