"""Digest pinning: resolve image references to ``sha256`` digests with the registry v2 API.

Every cell of a run must run the same bytes, so each image of a RunSpec is resolved once
(``HEAD /v2/<name>/manifests/<ref>``, reading ``Docker-Content-Digest``; a ``GET`` when the
registry names no digest or no manifest type, its bytes then checked against the digest)
and cells name their images ``registry/name@sha256:...``; a pinned reference is used as it
is. What a node cannot run is refused here (:mod:`.answers`). Authentication follows the
distribution spec's challenge flow: ``Bearer`` fetches a token from the challenge's
``realm`` (with Basic credentials from a matching pull secret), ``Basic`` sends the
credentials to the registry; credentials come from ``kubernetes.io/dockerconfigjson``
Secrets, read by the caller.

>>> keys = pullsecrets.credentials({"regcred": secret.data})
>>> async with Resolver(credentials=keys) as resolver:
...     digests = await resolver.resolve_all(["ghcr.io/acme/agent:1.2", "nginx"])
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import hashlib
import re
from collections.abc import Collection, Iterable, Mapping
from types import TracebackType

import httpx

from agent_health.cluster import errors
from agent_health.cluster.api import meta
from agent_health.cluster.registry import answers, pullsecrets

DOCKER_HUB = pullsecrets.DOCKER_HUB
DOCKER_HUB_API = pullsecrets.DOCKER_HUB_API
ACCEPT = answers.ACCEPT
DIGEST = re.compile(meta.DIGEST_PATTERN)
_IMAGE = re.compile(meta.IMAGE_PATTERN)


@dataclasses.dataclass(frozen=True)
class Reference:
    """An image reference split the way a registry client needs it."""

    registry: str
    """The registry as named in references: ``docker.io``, ``ghcr.io``, ``127.0.0.1:5000``."""
    repository: str
    """The repository path, ``library/``-prefixed for official Docker Hub images."""
    tag: str | None = None
    digest: str | None = None

    @property
    def name(self) -> str:
        """The fully qualified name, without tag or digest."""
        return f"{self.registry}/{self.repository}"

    @property
    def api_host(self) -> str:
        """The host serving the v2 API (Docker Hub's differs from its name)."""
        return DOCKER_HUB_API if self.registry == DOCKER_HUB else self.registry

    @property
    def reference(self) -> str:
        """What ``/manifests/<ref>`` asks for: the digest, else the tag, else ``latest``."""
        return self.digest or self.tag or "latest"

    def pinned(self, digest: str) -> str:
        """This image by digest: ``registry/repository@sha256:...`` (the tag is dropped)."""
        return f"{self.name}@{digest}"


def parse(image: str) -> Reference:
    """Split ``image``; Docker Hub short names become ``docker.io/library/<name>``."""
    if not _IMAGE.match(image):
        raise errors.PermanentRegistryError(
            f"image {image!r} is not a valid reference ([registry/]name[:tag][@sha256:digest])"
        )
    rest, _, digest = image.partition("@")
    tag: str | None = None
    if rest.rfind(":") > rest.rfind("/"):
        rest, _, tag = rest.rpartition(":")
    first, _, remainder = rest.partition("/")
    if remainder and ("." in first or ":" in first or first == "localhost"):
        registry, repository = first, remainder
    else:
        registry, repository = DOCKER_HUB, rest
    if registry in pullsecrets.DOCKER_HUB_ALIASES:
        registry = DOCKER_HUB
        if "/" not in repository:
            repository = f"library/{repository}"
    return Reference(registry, repository, tag, digest or None)


def pin(image: str, digest: str) -> str:
    """``image`` by ``digest``, fully qualified.

    >>> pin("nginx:1.27", "sha256:ab...")
    'docker.io/library/nginx@sha256:ab...'
    """
    if not DIGEST.match(digest):
        raise ValueError(f"image {image}: {digest!r} is not a sha256 digest")
    return parse(image).pinned(digest)


@dataclasses.dataclass
class _Attempt:
    """One image being resolved; ``authorization`` is reused from HEAD to the GET fallback."""

    image: str
    ref: Reference
    authorization: str | None = None


class Resolver:
    """Resolves images with one HTTP client; use as an async context manager.

    ``insecure`` lists registries (``host[:port]``) spoken to over plain ``http://``, e.g.
    a loopback or in-cluster registry; every other registry, and its token realm, is HTTPS.
    """

    def __init__(
        self,
        *,
        credentials: Mapping[str, pullsecrets.Credential] | None = None,
        insecure: Collection[str] = (),
        timeout: float = 10.0,
        concurrency: int = 8,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self._credentials = dict(credentials or {})
        self._insecure = frozenset(insecure)
        self._concurrency = concurrency
        self._client = httpx.AsyncClient(timeout=timeout, follow_redirects=True)

    async def __aenter__(self) -> Resolver:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self._client.aclose()

    async def resolve(self, image: str) -> str:
        """The ``sha256:...`` digest of ``image``'s manifest (or index), as served."""
        ref = parse(image)
        if ref.digest is not None:
            return ref.digest
        attempt = _Attempt(image, ref)
        scheme = "http" if ref.registry in self._insecure else "https"
        url = f"{scheme}://{ref.api_host}/v2/{ref.repository}/manifests/{ref.reference}"
        head = await self._send(attempt, "HEAD", url)
        declared = answers.media_type(head.headers.get("content-type"))
        digest: str = head.headers.get("docker-content-digest", "")
        if DIGEST.match(digest) and declared is not None:
            answers.check_media_type(image, ref.registry, declared)
            return digest
        # Some registries omit the digest header, or name no manifest type: the manifest says
        # what it is, and its digest is defined as the sha256 of its bytes.
        body = await self._send(attempt, "GET", url)
        declared = answers.media_type(body.headers.get("content-type"))
        declared = declared or answers.declared(body.content)
        if declared is not None:
            answers.check_media_type(image, ref.registry, declared)
        computed = f"sha256:{hashlib.sha256(body.content).hexdigest()}"
        if DIGEST.match(digest) and digest != computed:
            raise errors.PermanentRegistryError(
                f"image {image}: registry {ref.registry} names the manifest {digest} but serves "
                f"bytes whose digest is {computed}; the registry (or a proxy before it) is "
                f"altering manifests: fix it or pin the image by a digest you verified"
            )
        return computed

    async def resolve_all(self, images: Iterable[str]) -> dict[str, str]:
        """Each image → its digest; each distinct image is asked for once, concurrently (bounded).

        Failures are collected: any permanent one raises :class:`PermanentRegistryError`
        naming every such image, else any temporary one raises :class:`TemporaryRegistryError`.
        """
        wanted = list(dict.fromkeys(images))
        semaphore = asyncio.Semaphore(self._concurrency)
        groups: dict[tuple[str, str, str] | str, list[str]] = {}
        for image in wanted:
            try:
                ref = parse(image)
                key: tuple[str, str, str] | str = (ref.registry, ref.repository, ref.reference)
            except errors.PermanentRegistryError:
                key = image  # reported by resolve() below, with the others
            groups.setdefault(key, []).append(image)

        async def one(image: str) -> str:
            async with semaphore:
                return await self.resolve(image)

        outcomes = await asyncio.gather(
            *(one(names[0]) for names in groups.values()), return_exceptions=True
        )
        failures: list[errors.RegistryError] = []
        found: dict[str, str] = {}
        for names, outcome in zip(groups.values(), outcomes, strict=True):
            if isinstance(outcome, errors.RegistryError):
                failures.append(outcome)
            elif isinstance(outcome, BaseException):
                raise outcome
            else:
                found.update(dict.fromkeys(names, outcome))
        permanent = [f for f in failures if isinstance(f, errors.PermanentRegistryError)]
        if len(failures) == 1:
            raise failures[0]
        if permanent:
            raise errors.PermanentRegistryError("; ".join(map(str, permanent)))
        if failures:
            raise errors.TemporaryRegistryError("; ".join(map(str, failures)))
        return {image: found[image] for image in wanted}

    async def _send(self, attempt: _Attempt, method: str, url: str) -> httpx.Response:
        response = await self._request(attempt, method, url)
        if response.status_code == 401 and attempt.authorization is None:
            attempt.authorization = await self._authorize(attempt, response)
            response = await self._request(attempt, method, url)
        code = response.status_code
        if code == 200:
            return response
        ref = attempt.ref
        if code == 404:
            what = f"digest {ref.digest}" if ref.digest else f"tag {ref.reference}"
            raise errors.PermanentRegistryError(
                f"image {attempt.image}: {what} not found in registry {ref.registry} "
                f"(repository {ref.repository}); check the image name and tag"
            )
        if code in (401, 403):
            raise self._refused(attempt, code)
        raise _status_error(attempt, f"{method} {url}", code, response.headers.get("retry-after"))

    async def _request(
        self,
        attempt: _Attempt,
        method: str,
        url: str,
        *,
        params: Mapping[str, str] | None = None,
        auth: tuple[str, str] | None = None,
    ) -> httpx.Response:
        headers = {"Accept": ACCEPT}
        if attempt.authorization is not None and auth is None:
            headers["Authorization"] = attempt.authorization
        try:
            return await self._client.request(
                method, url, headers=headers, params=params, auth=auth
            )
        except httpx.TransportError as err:
            raise errors.TemporaryRegistryError(
                f"image {attempt.image}: cannot reach {httpx.URL(url).host} "
                f"({type(err).__name__}: {err or 'no detail'})"
            ) from err

    async def _authorize(self, attempt: _Attempt, challenge: httpx.Response) -> str:
        """The ``Authorization`` value that answers the registry's challenge."""
        scheme, params = answers.parse_challenge(challenge.headers.get("www-authenticate", ""))
        credential = self._credentials.get(attempt.ref.registry)
        if scheme == "basic":
            if credential is None:
                raise self._refused(attempt, 401)
            pair = f"{credential.username}:{credential.password}".encode()
            return f"Basic {base64.b64encode(pair).decode()}"
        if scheme != "bearer" or not params.get("realm"):
            raise errors.PermanentRegistryError(
                f"image {attempt.image}: registry {attempt.ref.registry} asks for an unsupported "
                f"authentication ({challenge.headers.get('www-authenticate', 'no challenge')!r})"
            )
        realm = httpx.URL(params["realm"])
        if realm.scheme != "https" and not (
            realm.scheme == "http" and attempt.ref.registry in self._insecure
        ):
            raise errors.PermanentRegistryError(
                f"image {attempt.image}: token realm {realm} is not HTTPS; list the registry "
                f"{attempt.ref.registry} as insecure to allow it"
            )
        query = {"scope": params.get("scope") or f"repository:{attempt.ref.repository}:pull"}
        if params.get("service"):
            query["service"] = params["service"]
        basic = (credential.username, credential.password) if credential else None
        response = await self._request(attempt, "GET", str(realm), params=query, auth=basic)
        if response.status_code in (401, 403):
            raise self._refused(attempt, response.status_code)
        if response.status_code != 200:
            raise _status_error(attempt, f"GET {realm}", response.status_code)
        try:
            body = response.json()
            token = body.get("token") or body.get("access_token")
        except (ValueError, AttributeError):
            token = None
        if not isinstance(token, str) or not token:
            raise errors.PermanentRegistryError(
                f"image {attempt.image}: the token endpoint {realm} answered without a token"
            )
        return f"Bearer {token}"

    def _refused(self, attempt: _Attempt, status: int) -> errors.PermanentRegistryError:
        ref = attempt.ref
        credential = self._credentials.get(ref.registry)
        if credential is not None:
            hint = (
                f"with credentials from imagePullSecret {credential.secret!r}; check that "
                f"secret's entry for {ref.registry}"
            )
        else:
            hint = (
                f"without credentials (or the repository does not exist); add an "
                f"imagePullSecret with an entry for {ref.registry}"
            )
        return errors.PermanentRegistryError(
            f"image {attempt.image}: registry {ref.registry} refused pull access to "
            f"{ref.repository} (HTTP {status}) {hint}"
        )


def _status_error(
    attempt: _Attempt, request: str, code: int, retry_after: str | None = None
) -> errors.RegistryError:
    message = f"image {attempt.image}: {request} answered HTTP {code}"
    if code == 429 or code >= 500:
        wait = answers.retry_after(retry_after)
        if code == 429:
            message += " (too many requests)"
        if wait is not None:
            return errors.TemporaryRegistryError(
                f"{message}; will retry in {wait:g} s, as the registry asked", retry_after=wait
            )
        return errors.TemporaryRegistryError(f"{message}; will retry")
    return errors.PermanentRegistryError(message)


async def resolve_all(
    images: Iterable[str],
    *,
    pull_secrets: Mapping[str, Mapping[str, str]] | None = None,
    insecure: Collection[str] = (),
    timeout: float = 10.0,
    concurrency: int = 8,
) -> dict[str, str]:
    """Resolve ``images`` with credentials from ``pull_secrets`` (name → Secret ``data``)."""
    keys = pullsecrets.credentials(pull_secrets or {})
    async with Resolver(
        credentials=keys, insecure=insecure, timeout=timeout, concurrency=concurrency
    ) as resolver:
        return await resolver.resolve_all(images)
