"""A pod's volumes on the node's disk, as the kubelet writes them.

``emptyDir`` is a fresh directory (mode 0777); ``secret``, ``configMap``, ``downwardAPI``
and ``projected`` (``serviceAccountToken``, ``configMap``, ``secret``, ``downwardAPI``)
are files written with their ``items``/``defaultMode``; ``persistentVolumeClaim`` is a
directory kept per claim for the life of the node. With a pod ``fsGroup`` the kubelet makes
every file group-owned by it and adds group read (``SetVolumeOwnership``), so a 0440 Secret
is readable by the pod's non-root user and nobody else. A missing Secret or ConfigMap that
is not ``optional`` leaves the pod waiting (``FailedMount``), as on a cluster.
:meth:`Writer.refresh` rewrites a volume's downward-API files when the pod's metadata
changed, each one written beside and renamed into place, so a reader sees the old file or
the new one, never a part; an annotation or label that is not there projects as an empty file.

A service-account token is the text ``system:serviceaccount:<namespace>:<name>``: the API
emulator accepts any bearer token, and this one tells, in its request log, who called.
"""

from __future__ import annotations

import base64
import os
import shutil
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

Lookup = Callable[[str, str, str], dict[str, Any] | None]
"""``(plural, namespace, name)`` → the stored object, or ``None``."""

DEFAULT_MODE = 0o644


class MountError(Exception):
    """A volume cannot be set up yet (the kubelet retries; the pod waits)."""


def token(namespace: str, account: str) -> str:
    return f"system:serviceaccount:{namespace}:{account}"


def field_value(pod: Mapping[str, Any], path: str, *, pod_ip: str, node_ip: str) -> str:
    """A downward-API ``fieldRef`` of ``pod``."""
    meta, spec = pod["metadata"], pod["spec"]
    simple = {
        "metadata.name": meta.get("name", ""),
        "metadata.namespace": meta.get("namespace", ""),
        "metadata.uid": meta.get("uid", ""),
        "spec.nodeName": spec.get("nodeName", "node"),
        "spec.serviceAccountName": spec.get("serviceAccountName", "default"),
        "status.podIP": pod_ip,
        "status.podIPs": pod_ip,
        "status.hostIP": node_ip,
        "status.hostIPs": node_ip,
    }
    if path in simple:
        return str(simple[path])
    for prefix, field in (("metadata.labels", "labels"), ("metadata.annotations", "annotations")):
        values = meta.get(field) or {}
        if path == prefix:
            return "\n".join(f'{k}="{v}"' for k, v in sorted(values.items()))
        if path.startswith(f"{prefix}['") and path.endswith("']"):
            return str(values.get(path[len(prefix) + 2 : -2], ""))
    raise MountError(f"unsupported fieldRef {path!r}")


class Writer:
    """Writes one pod's volumes under ``root`` (one directory per volume)."""

    def __init__(
        self,
        pod: Mapping[str, Any],
        root: Path,
        lookup: Lookup,
        *,
        pod_ip: str,
        node_ip: str,
        claims: Path,
    ) -> None:
        self.pod, self.root, self.lookup = pod, root, lookup
        self.pod_ip, self.node_ip, self.claims = pod_ip, node_ip, claims
        self.namespace = pod["metadata"].get("namespace", "default")
        security = pod["spec"].get("securityContext") or {}
        self.fs_group: int | None = security.get("fsGroup")

    def write(self, volume: Mapping[str, Any]) -> Path:
        """The volume's directory on the node (written now; blocking: call off the loop)."""
        name = volume["name"]
        if "persistentVolumeClaim" in volume:
            claim = volume["persistentVolumeClaim"]["claimName"]
            if self.lookup("persistentvolumeclaims", self.namespace, claim) is None:
                raise MountError(f'persistentvolumeclaim "{claim}" not found')
            target = self.claims / self.namespace / claim
            target.mkdir(parents=True, exist_ok=True)
            self._own_dir(target, 0o777)
            return target
        target = self.root / name
        if target.exists():
            shutil.rmtree(target)
        target.mkdir(parents=True)
        if "emptyDir" in volume:
            self._own_dir(target, 0o777)
            return target
        files: dict[str, tuple[bytes, int]] = {}
        if "secret" in volume:
            source = volume["secret"]
            mode = source.get("defaultMode", DEFAULT_MODE)
            files |= self._keys("secrets", source.get("secretName", ""), source, mode)
        elif "configMap" in volume:
            source = volume["configMap"]
            mode = source.get("defaultMode", DEFAULT_MODE)
            files |= self._keys("configmaps", source.get("name", ""), source, mode)
        elif "downwardAPI" in volume:
            source = volume["downwardAPI"]
            files |= self._downward(
                source.get("items", []), source.get("defaultMode", DEFAULT_MODE)
            )
        elif "projected" in volume:
            projected = volume["projected"]
            mode = projected.get("defaultMode", DEFAULT_MODE)
            for part in projected.get("sources", []):
                files |= self._projection(part, mode)
        else:
            raise MountError(f"volume {name}: unsupported type {sorted(set(volume) - {'name'})}")
        self._own_dir(target, 0o755)
        for path, (data, file_mode) in files.items():
            file = target / path
            file.parent.mkdir(parents=True, exist_ok=True)
            self._own_dir(file.parent, 0o755)
            file.write_bytes(data)
            self._own_file(file, file_mode)
        return target

    def refresh(self, volume: Mapping[str, Any]) -> None:
        """Rewrite the downward-API files of ``volume`` (written before) from :attr:`pod`,
        each swapped in whole; blocking: call off the loop."""
        if "downwardAPI" in volume:
            source = volume["downwardAPI"]
            mode = source.get("defaultMode", DEFAULT_MODE)
            parts = [source.get("items", [])]
        elif "projected" in volume:
            mode = volume["projected"].get("defaultMode", DEFAULT_MODE)
            sources = volume["projected"].get("sources", [])
            parts = [p["downwardAPI"].get("items", []) for p in sources if "downwardAPI" in p]
        else:
            return
        target = self.root / volume["name"]
        for items in parts:
            for path, (data, file_mode) in self._downward(items, mode).items():
                file = target / path
                if file.exists() and file.read_bytes() == data:
                    continue
                staged = file.with_name(f"..{file.name}.{uuid.uuid4().hex[:8]}")
                staged.write_bytes(data)
                self._own_file(staged, file_mode)
                os.replace(staged, file)

    # -- sources -------------------------------------------------------------------------

    def _keys(
        self, plural: str, name: str, source: Mapping[str, Any], mode: int
    ) -> dict[str, tuple[bytes, int]]:
        body = self.lookup(plural, self.namespace, name)
        if body is None:
            if source.get("optional"):
                return {}
            kind = "secret" if plural == "secrets" else "configmap"
            raise MountError(f'{kind} "{name}" not found')
        data = _data(plural, body)
        items = source.get("items")
        if not items:
            return {key: (value, mode) for key, value in data.items()}
        out = {}
        for item in items:
            if item["key"] not in data:
                if source.get("optional"):
                    continue
                raise MountError(f"{plural} {name} has no key {item['key']!r}")
            out[item["path"]] = (data[item["key"]], item.get("mode", mode))
        return out

    def _downward(self, items: list[dict[str, Any]], mode: int) -> dict[str, tuple[bytes, int]]:
        out = {}
        for item in items:
            if "fieldRef" not in item:
                raise MountError(f"downwardAPI item {item.get('path')}: only fieldRef is supported")
            value = field_value(
                self.pod, item["fieldRef"]["fieldPath"], pod_ip=self.pod_ip, node_ip=self.node_ip
            )
            out[item["path"]] = (value.encode(), item.get("mode", mode))
        return out

    def _projection(self, part: Mapping[str, Any], mode: int) -> dict[str, tuple[bytes, int]]:
        if "serviceAccountToken" in part:
            account = self.pod["spec"].get("serviceAccountName") or "default"
            if self.lookup("serviceaccounts", self.namespace, account) is None:
                raise MountError(f'serviceaccount "{account}" not found')
            path = part["serviceAccountToken"]["path"]
            return {path: (token(self.namespace, account).encode(), mode)}
        if "configMap" in part:
            source = part["configMap"]
            return self._keys("configmaps", source["name"], source, mode)
        if "secret" in part:
            source = part["secret"]
            return self._keys("secrets", source["name"], source, mode)
        if "downwardAPI" in part:
            return self._downward(part["downwardAPI"].get("items", []), mode)
        raise MountError(f"unsupported projected source {sorted(part)}")

    # -- ownership -----------------------------------------------------------------------

    def _own_dir(self, path: Path, mode: int) -> None:
        if self.fs_group is not None:
            os.chown(path, 0, self.fs_group)
            mode |= 0o2000 | 0o050  # setgid, group r-x
        os.chmod(path, mode)

    def _own_file(self, path: Path, mode: int) -> None:
        if self.fs_group is not None:
            os.chown(path, 0, self.fs_group)
            mode |= 0o440
        os.chmod(path, mode)


def _data(plural: str, body: Mapping[str, Any]) -> dict[str, bytes]:
    if plural == "secrets":
        out = {k: base64.b64decode(v) for k, v in (body.get("data") or {}).items()}
        out |= {k: str(v).encode() for k, v in (body.get("stringData") or {}).items()}
        return out
    out = {k: str(v).encode() for k, v in (body.get("data") or {}).items()}
    out |= {k: base64.b64decode(v) for k, v in (body.get("binaryData") or {}).items()}
    return out
