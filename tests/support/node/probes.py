"""Startup, readiness and liveness probes: ``tcpSocket`` and ``httpGet`` against the pod IP,
``exec`` inside the container (``nsenter`` into its namespaces and root, as its user, with
its environment).

The kubelet probes every ``periodSeconds``; this one probes more often (every
``min(periodSeconds, fast)``) so a container is seen started or ready at once, but counts a
failure at most once per ``periodSeconds``: a probe still gives up only after
``failureThreshold × periodSeconds`` of failures, as on a cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
from collections.abc import Callable, Mapping
from typing import Any

import httpx

Inside = Callable[[], tuple[int, Mapping[str, Any]] | None]
"""The running container's pid and its launch spec (``uid``, ``gid``, ``env``), if any."""


class Probe:
    def __init__(
        self,
        spec: Mapping[str, Any],
        container: Mapping[str, Any],
        pod_ip: str,
        fast: float,
        inside: Inside = lambda: None,
    ) -> None:
        self.spec, self.container, self.pod_ip, self.inside = spec, container, pod_ip, inside
        self.period = float(spec.get("periodSeconds", 10))
        self.timeout = float(spec.get("timeoutSeconds", 1))
        self.threshold = int(spec.get("failureThreshold", 3))
        self.delay = float(spec.get("initialDelaySeconds", 0))
        self.interval = min(self.period, fast)

    def _port(self, value: int | str) -> int:
        if isinstance(value, int) or str(value).isdigit():
            return int(value)
        for declared in self.container.get("ports") or []:
            if declared.get("name") == value:
                return int(declared["containerPort"])
        raise ValueError(f"container {self.container['name']} has no port named {value!r}")

    async def once(self) -> bool:
        try:
            if "tcpSocket" in self.spec:
                check = self.spec["tcpSocket"]
                host = check.get("host") or self.pod_ip
                _, writer = await asyncio.wait_for(
                    asyncio.open_connection(host, self._port(check["port"])), self.timeout
                )
                writer.close()
                with contextlib.suppress(OSError):
                    await writer.wait_closed()
                return True
            if "httpGet" in self.spec:
                check = self.spec["httpGet"]
                host = check.get("host") or self.pod_ip
                scheme = check.get("scheme", "HTTP").lower()
                url = f"{scheme}://{host}:{self._port(check['port'])}{check.get('path', '/')}"
                headers = {h["name"]: h["value"] for h in check.get("httpHeaders") or []}
                async with httpx.AsyncClient(timeout=self.timeout, verify=False) as client:
                    answer = await client.get(url, headers=headers)
                return 200 <= answer.status_code < 400
            if "exec" in self.spec:
                return await self._exec(list(self.spec["exec"]["command"]))
        except (OSError, TimeoutError, httpx.HTTPError):
            return False
        raise ValueError(f"unsupported probe {sorted(self.spec)} on {self.container['name']}")

    async def _exec(self, command: list[str]) -> bool:
        found = self.inside()
        nsenter = shutil.which("nsenter")
        if found is None:
            return False
        if nsenter is None:
            raise ValueError("exec probes need nsenter (util-linux)")
        pid, launched = found
        argv = [nsenter, f"--target={pid}", "--mount", "--uts", "--net", "--root", "--wd"]
        argv += [f"--setgid={launched['gid']}", f"--setuid={launched['uid']}", "--", *command]
        process = await asyncio.create_subprocess_exec(
            *argv,
            env=dict(launched["env"]),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        try:
            code = await asyncio.wait_for(process.wait(), self.timeout)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
            return False
        return code == 0

    async def until_success(self) -> bool:
        """Probe until it succeeds (True) or fails ``failureThreshold`` times (False)."""
        await asyncio.sleep(self.delay)
        loop = asyncio.get_running_loop()
        failures, counted = 0, loop.time() - self.period
        while True:
            if await self.once():
                return True
            if loop.time() - counted >= self.period:
                failures, counted = failures + 1, loop.time()
                if failures >= self.threshold:
                    return False
            await asyncio.sleep(self.interval)

    async def until_failure(self) -> None:
        """Return once the probe has failed ``failureThreshold`` times in a row."""
        await asyncio.sleep(self.delay)
        loop = asyncio.get_running_loop()
        failures, counted = 0, loop.time() - self.period
        while True:
            if await self.once():
                failures = 0
                await asyncio.sleep(self.period)
                continue
            if loop.time() - counted >= self.period:
                failures, counted = failures + 1, loop.time()
                if failures >= self.threshold:
                    return
            await asyncio.sleep(self.interval)
