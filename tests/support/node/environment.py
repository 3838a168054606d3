"""A container's command line and environment, composed as the kubelet composes them.

Environment, later entries winning: the image's ``ENV``; ``HOSTNAME``; the
``KUBERNETES_SERVICE_*`` variables (always) and the other Services' variables of the
namespace (unless ``enableServiceLinks: false``); ``envFrom``; ``env`` (``value`` with
``$(VAR)`` references expanded, or ``valueFrom`` a Secret key, a ConfigMap key or a
``fieldRef``). A Secret or key that is missing and not ``optional`` is a
``CreateContainerConfigError``: the kubelet retries until it exists.

Command line: ``command`` replaces the image's entrypoint (and drops its cmd), ``args``
replaces its cmd; ``$(VAR)`` references are expanded from the environment.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping
from typing import Any

from support.node import images, volumes

_REFERENCE = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)|\$\$")


class ConfigError(Exception):
    """``CreateContainerConfigError``: the container cannot be configured yet."""


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` expansion: known names are replaced, ``$$`` is ``$``."""

    def one(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return env.get(name, match.group(0))

    return _REFERENCE.sub(one, text)


def argv(container: Mapping[str, Any], image: images.Image, env: Mapping[str, str]) -> list[str]:
    if "command" in container:
        words = [*container["command"], *container.get("args", [])]
    else:
        words = [*image.entrypoint, *container.get("args", image.cmd)]
    if not words:
        raise ConfigError(f"container {container['name']}: no command and the image has none")
    return [expand(w, env) for w in words]


def service_env(name: str, ip: str, ports: list[dict[str, Any]]) -> dict[str, str]:
    """The Docker-links style variables of one Service (``NAME_SERVICE_HOST``, ...)."""
    prefix = name.upper().replace("-", "_")
    out: dict[str, str] = {}
    for index, port in enumerate(ports):
        number, protocol = port["port"], port.get("protocol", "TCP")
        if index == 0:
            out[f"{prefix}_SERVICE_HOST"] = ip
            out[f"{prefix}_SERVICE_PORT"] = str(number)
            out[f"{prefix}_PORT"] = f"{protocol.lower()}://{ip}:{number}"
        if port.get("name"):
            out[f"{prefix}_SERVICE_PORT_{port['name'].upper().replace('-', '_')}"] = str(number)
        base = f"{prefix}_PORT_{number}_{protocol}"
        out[base] = f"{protocol.lower()}://{ip}:{number}"
        out |= {f"{base}_PROTO": protocol.lower(), f"{base}_PORT": str(number)}
        out[f"{base}_ADDR"] = ip
    return out


def compose(
    pod: Mapping[str, Any],
    container: Mapping[str, Any],
    image: images.Image,
    lookup: volumes.Lookup,
    *,
    services: Mapping[str, str],
    pod_ip: str,
    node_ip: str,
) -> dict[str, str]:
    """The container's environment; ``services`` are the namespace's Service variables."""
    namespace = pod["metadata"].get("namespace", "default")
    env = dict(image.env)
    env.setdefault("HOME", "/")
    env["HOSTNAME"] = pod["metadata"]["name"]
    env |= services
    for source in container.get("envFrom") or []:
        prefix = source.get("prefix", "")
        for plural, field in (("secrets", "secretRef"), ("configmaps", "configMapRef")):
            ref = source.get(field)
            if ref is None:
                continue
            body = lookup(plural, namespace, ref["name"])
            if body is None:
                if ref.get("optional"):
                    continue
                raise ConfigError(f'{plural[:-1]} "{ref["name"]}" not found')
            for key, value in _values(plural, body).items():
                env[prefix + key] = value
    for var in container.get("env") or []:
        name = var["name"]
        if "valueFrom" not in var:
            env[name] = expand(str(var.get("value", "")), env)
            continue
        source = var["valueFrom"]
        if "fieldRef" in source:
            path = source["fieldRef"]["fieldPath"]
            env[name] = volumes.field_value(pod, path, pod_ip=pod_ip, node_ip=node_ip)
            continue
        for plural, field in (("secrets", "secretKeyRef"), ("configmaps", "configMapKeyRef")):
            ref = source.get(field)
            if ref is None:
                continue
            body = lookup(plural, namespace, ref["name"])
            values = _values(plural, body) if body is not None else None
            if values is None or ref["key"] not in values:
                if ref.get("optional"):
                    break
                what = f'{plural[:-1]} "{ref["name"]}"'
                missing = "not found" if values is None else f"has no key {ref['key']!r}"
                raise ConfigError(f"{what} {missing}")
            env[name] = values[ref["key"]]
            break
        else:
            raise ConfigError(f"env {name}: unsupported valueFrom {sorted(source)}")
    return env


def _values(plural: str, body: Mapping[str, Any]) -> dict[str, str]:
    if plural == "secrets":
        return {
            k: base64.b64decode(v).decode(errors="replace")
            for k, v in (body.get("data") or {}).items()
        }
    return {k: str(v) for k, v in (body.get("data") or {}).items()}
