"""Per-RunSpec judges: the judge service answers each live cell with its own RunSpec's judge.

:meth:`RunJudges.resolve` is the judge service's resolver
(:func:`agent_health.judging.service.serving`): a bearer token that is no live cell's
controller token resolves to ``None`` (401) — except while a restarted operator is still
taking over the runs it found, when it may be one of their cells' (502, and the cell
retries); a cell whose RunSpec names no ``spec.judge``
gets the operator's own judge (``AGENT_HEALTH_JUDGE_*``); any other gets a backend built
from its RunSpec's judge — once per distinct (namespace, provider, model, baseUrl, Secret
name, key), lazily, on its first call. The key is read from ``spec.judge.secretRef`` in the
run's namespace — only from a Secret offered to runs and not one of agent-health's own
(:mod:`..reconcile.secretrefs`) — and handed to the provider directly (never through an
environment variable). Every backend shares one persistent judge cache; its keys name the
endpoint and model and the run's namespace, so one namespace's verdicts are never served to
another — the operator's own judge too answers each namespace in its own partition.

A Secret that cannot be read, or lacks the key, is a
:class:`~agent_health.judging.errors.ProviderError` naming it: the service answers 502 and
the cell records an ``errored`` verdict; nothing is remembered, so the next call reads the
Secret again. A backend, once built, keeps its key until the operator stops (:meth:`close`).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import dataclasses

from agent_health import judging, sdk
from agent_health.cluster import errors, kube
from agent_health.cluster.api import runspec
from agent_health.cluster.judge_service import limits as limits_mod
from agent_health.cluster.reconcile import runs, secretrefs
from agent_health.judging import cache, dispatch
from agent_health.judging import errors as judging_errors
from agent_health.sdk import config as config_mod

MAX_STEPS = limits_mod.MAX_STEPS
Key = tuple[str, str, str, str | None, str | None, str | None, int]
"""(namespace, provider, model, base URL, Secret name, Secret key, output tokens per call)."""


@dataclasses.dataclass
class RunJudges:
    """The judge backends of the runs this operator drives; see the module docstring."""

    api: kube.Client
    runs: runs.Runs
    fallback: dispatch.Judging
    """The operator's env-configured judge (a RunSpec without ``spec.judge``)."""
    cache_path: str | None = None
    """Where the shared cache lives when the fallback has none open (``--judge-cache``)."""
    own_secrets: secretrefs.Own = dataclasses.field(default_factory=secretrefs.Own)
    """Secrets no RunSpec may name as its judge's key (:mod:`..reconcile.secretrefs`)."""
    for_all: bool = False
    """Whether the operator's own judge answers cells of RunSpecs that name none
    (``--judge-for-all-runs``); off, they are refused (403) and spend nothing."""
    ceiling: int = limits_mod.DEFAULT_CEILING
    """The most output tokens any call may ask for (``--judge-max-tokens``)."""
    built: dict[Key, dispatch.Judging] = dataclasses.field(default_factory=dict)
    _cache: cache.Cache | None = None
    _building: asyncio.Lock = dataclasses.field(default_factory=asyncio.Lock)
    _stack: contextlib.AsyncExitStack = dataclasses.field(default_factory=contextlib.AsyncExitStack)

    async def resolve(self, token: str | None) -> dispatch.Judging | None:
        """The backend answering ``token``: ``None`` unless it is a live cell's token;
        :class:`~agent_health.judging.errors.NotServed` for a cell the service does not
        judge for (its run skips judging; its RunSpec names no judge and the operator's own
        is not offered to all runs)."""
        found = self.runs.judge_of(token)
        if found is None:
            if token is not None and self.runs.taking_over():
                # A restarted operator: the cell may be one of a run not taken over yet. The
                # service answers 502 and the cell's judge call retries (judging.remote).
                raise judging_errors.ProviderError(
                    "the operator restarted and has not taken over every run yet; this cell "
                    "is not known yet, retry"
                )
            return None
        ref, judge = found.ref, found.judge
        if found.skip_judge:
            raise judging_errors.NotServed(
                f"EvaluationRun {ref.namespace}/{ref.name} sets skipJudge: its cells are not judged"
            )
        if judge is None:
            if not self.for_all:
                raise judging_errors.NotServed(
                    f"RunSpec {ref.namespace}/{found.spec_name} names no spec.judge, and the "
                    "operator's own judge is not offered to all runs (--judge-for-all-runs): "
                    "give the RunSpec a judge"
                )
            return self.fallback.partitioned(ref.namespace)
        secret = judge.secret_ref
        key: Key = (
            ref.namespace,
            judge.provider,
            judge.model,
            judge.base_url,
            secret.name if secret else None,
            secret.key if secret else None,
            self._tokens(judge),
        )
        ready = self.built.get(key)
        if ready is not None:
            return ready
        async with self._building:  # rare: once per distinct judge
            if key not in self.built:
                self.built[key] = await self._build(ref.namespace, judge)
        return self.built[key]

    def limits(self, token: str | None) -> limits_mod.Limits | None:
        """What the cell holding ``token`` may ask for (``None``: not a live cell's token;
        :meth:`resolve` answers it first)."""
        found = self.runs.judge_of(token)
        if found is None:
            return None
        owner = f"RunSpec {found.ref.namespace}/{found.spec_name}"
        if found.judge is not None:
            return limits_mod.Limits.of(owner, found.judge, self.ceiling)
        own = self.fallback.judge
        models = frozenset({own.model}) if own is not None else frozenset()
        tokens = own.max_output_tokens if own is not None else self.ceiling
        return limits_mod.Limits(
            f"{owner} (the operator's own judge)", models, min(tokens, self.ceiling)
        )

    def _tokens(self, judge: runspec.Judge) -> int:
        return min(judge.max_tokens, self.ceiling)

    async def close(self) -> None:
        """Close every backend built, then the cache this object opened (the operator stops)."""
        await self._stack.aclose()
        self.built.clear()

    async def _build(self, namespace: str, judge: runspec.Judge) -> dispatch.Judging:
        api_key, source = await self._key(namespace, judge)
        shared = await self._shared_cache()
        tokens = self._tokens(judge)
        config = config_mod.JudgeConfig(
            provider=judge.provider,
            model=judge.model,
            base_url=judge.base_url,
            max_output_tokens=tokens,
            max_steps=min(config_mod.JudgeConfig.model_fields["max_steps"].default, MAX_STEPS),
            max_tokens=tokens * MAX_STEPS,
        )
        try:
            backend = await self._stack.enter_async_context(
                judging.backend(
                    config,
                    config_mod.define_config(),
                    api_key=api_key,
                    key_source=source,
                    use_cache=shared is not None,
                    cache=shared,
                )
            )
        except sdk.ConfigError as err:
            raise judging_errors.ProviderError(
                f"the RunSpec's spec.judge in namespace {namespace} cannot be used: {err}"
            ) from err
        assert backend is not None  # a judge is configured
        return backend.partitioned(namespace)

    async def _key(self, namespace: str, judge: runspec.Judge) -> tuple[str | None, str | None]:
        ref = judge.secret_ref
        if ref is None:
            return None, None
        where = f"Secret {namespace}/{ref.name}"
        field = secretrefs.Reference("spec.judge.secretRef", ref.name, ref.key)
        try:
            secret = await secretrefs.read(self.api, namespace, field, self.own_secrets)
        except errors.SecretNotOffered as err:
            raise judging_errors.ProviderError(f"the judge's key: {err}") from err
        except kube.ApiError as err:
            raise judging_errors.ProviderError(
                f"cannot read the judge's key from {where} (spec.judge.secretRef): {err}"
            ) from err
        encoded = (secret.get("data") or {}).get(ref.key)
        if not encoded:
            raise judging_errors.ProviderError(
                f"{where} has no key {ref.key!r} (spec.judge.secretRef.key); put the "
                f"{judge.provider} API key there"
            )
        try:
            value = base64.b64decode(encoded, validate=True).decode().strip()
        except (binascii.Error, UnicodeDecodeError) as err:
            raise judging_errors.ProviderError(
                f"{where} key {ref.key!r} is not base64-encoded UTF-8 text: {err}"
            ) from err
        return value, f"the key {ref.key!r} of {where} (spec.judge.secretRef)"

    async def _shared_cache(self) -> cache.Cache | None:
        if self.fallback.cache is not None:
            return self.fallback.cache
        if self._cache is None:
            self._cache = await cache.Cache.open(cache.default_path(self.cache_path))
            self._stack.push_async_callback(self._cache.close)
        return self._cache if self._cache.usable else None
