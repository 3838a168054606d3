"""Digest pinning against a real registry v2 server on loopback: challenges, fallbacks, errors."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import hashlib
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from agent_health.cluster import errors
from agent_health.cluster.registry import answers, pullsecrets, registry
from aiohttp import web

INDEX = json.dumps(
    {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": []}
).encode()
INDEX_DIGEST = f"sha256:{hashlib.sha256(INDEX).hexdigest()}"
OTHER = b'{"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json"}'
PINNED = "sha256:" + "ab" * 32


@dataclasses.dataclass
class FakeRegistry:
    """A registry v2 API: manifests by (repository, tag), optionally behind a challenge."""

    manifests: dict[tuple[str, str], bytes]
    auth: str = "none"  # none | bearer | basic
    users: dict[str, str] = dataclasses.field(default_factory=dict)
    digest_header: bool = True
    status: int | None = None  # answer every manifest request with this status
    retry_after: str | None = None  # with that status, this Retry-After
    content_type: str = "application/vnd.oci.image.index.v1+json"
    forged_digest: str | None = None  # a Docker-Content-Digest that is not the body's
    grant: bool = True  # the token endpoint's tokens are accepted by the registry
    requests: list[tuple[str, str, str | None]] = dataclasses.field(default_factory=list)
    host: str = ""

    def _user_ok(self, header: str | None) -> bool:
        if not self.users:
            return True
        if not header or not header.startswith("Basic "):
            return False
        user, _, password = base64.b64decode(header[6:]).decode().partition(":")
        return self.users.get(user) == password

    def _challenge(self, repository: str) -> web.Response:
        if self.auth == "bearer":
            value = (
                f'Bearer realm="http://{self.host}/token",service="fake-registry",'
                f'scope="repository:{repository}:pull"'
            )
        else:
            value = 'Basic realm="fake-registry"'
        return web.Response(status=401, headers={"WWW-Authenticate": value})

    def _authorised(self, request: web.Request, repository: str) -> bool:
        header = request.headers.get("Authorization")
        if self.auth == "basic":
            return header is not None and self._user_ok(header)
        if self.auth == "bearer":
            return self.grant and header == f"Bearer token-for-{repository}"
        return True

    async def manifest(self, request: web.Request) -> web.Response:
        repository, reference = request.match_info["name"], request.match_info["ref"]
        self.requests.append((request.method, request.path, request.headers.get("Authorization")))
        assert "application/vnd.oci.image.index.v1+json" in request.headers["Accept"]
        if not self._authorised(request, repository):
            return self._challenge(repository)
        if self.status is not None:
            retry = {"Retry-After": self.retry_after} if self.retry_after else {}
            return web.Response(status=self.status, headers=retry)
        body = self.manifests.get((repository, reference))
        if body is None:
            return web.Response(status=404)
        headers = {"Content-Type": self.content_type}
        if self.digest_header:
            real = f"sha256:{hashlib.sha256(body).hexdigest()}"
            headers["Docker-Content-Digest"] = self.forged_digest or real
        return web.Response(body=body, headers=headers)

    async def token(self, request: web.Request) -> web.Response:
        authorization = request.headers.get("Authorization")
        self.requests.append((request.method, request.path_qs, authorization))
        if not self._user_ok(request.headers.get("Authorization")):
            return web.Response(status=401)
        assert request.query["service"] == "fake-registry"
        repository = request.query["scope"].split(":")[1]
        return web.json_response({"token": f"token-for-{repository}"})


@contextlib.asynccontextmanager
async def serving(fake: FakeRegistry) -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_get(r"/v2/{name:.+}/manifests/{ref}", fake.manifest, allow_head=True)
    app.router.add_get("/token", fake.token)
    runner = web.AppRunner(app, shutdown_timeout=1.0)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    fake.host = f"127.0.0.1:{runner.addresses[0][1]}"
    try:
        yield fake.host
    finally:
        await runner.cleanup()


def _dockerconfig(host: str, **entry: str) -> dict[str, str]:
    document = {"auths": {host: entry}}
    return {".dockerconfigjson": base64.b64encode(json.dumps(document).encode()).decode()}


def _basic(user: str, password: str) -> str:
    return base64.b64encode(f"{user}:{password}".encode()).decode()


async def _resolve(host: str, images: list[str], **options: Any) -> dict[str, str]:
    return await registry.resolve_all(images, insecure=[host], **options)


async def test_an_anonymous_registry_answers_the_head_with_the_digest() -> None:
    fake = FakeRegistry({("acme/agent", "1.0"): INDEX})
    async with serving(fake) as host:
        found = await _resolve(host, [f"{host}/acme/agent:1.0"])
    assert found == {f"{host}/acme/agent:1.0": INDEX_DIGEST}
    assert [r[0] for r in fake.requests] == ["HEAD"]


async def test_a_missing_digest_header_falls_back_to_the_sha256_of_the_body() -> None:
    fake = FakeRegistry({("acme/agent", "1.0"): INDEX}, digest_header=False)
    async with serving(fake) as host:
        found = await _resolve(host, [f"{host}/acme/agent:1.0"])
    assert found[f"{host}/acme/agent:1.0"] == INDEX_DIGEST
    assert [r[0] for r in fake.requests] == ["HEAD", "GET"]


async def test_a_bearer_challenge_fetches_a_token_with_the_pull_secret() -> None:
    fake = FakeRegistry({("acme/agent", "1.0"): INDEX}, auth="bearer", users={"bot": "s3cret"})
    async with serving(fake) as host:
        secrets = {"regcred": _dockerconfig(host, auth=_basic("bot", "s3cret"))}
        found = await _resolve(host, [f"{host}/acme/agent:1.0"], pull_secrets=secrets)
    assert found[f"{host}/acme/agent:1.0"] == INDEX_DIGEST
    (head, token, retry) = fake.requests
    assert head == ("HEAD", "/v2/acme/agent/manifests/1.0", None)
    assert token[1].startswith("/token?")
    assert "repository%3Aacme%2Fagent%3Apull" in token[1]
    assert token[2] == f"Basic {_basic('bot', 's3cret')}"
    assert retry == ("HEAD", "/v2/acme/agent/manifests/1.0", "Bearer token-for-acme/agent")


async def test_a_bearer_challenge_works_anonymously_when_the_realm_allows_it() -> None:
    fake = FakeRegistry({("acme/agent", "1.0"): INDEX}, auth="bearer")
    async with serving(fake) as host:
        found = await _resolve(host, [f"{host}/acme/agent:1.0"])
    assert found[f"{host}/acme/agent:1.0"] == INDEX_DIGEST
    assert fake.requests[1][2] is None  # no Basic credentials sent to the realm


async def test_a_basic_challenge_is_answered_with_username_and_password() -> None:
    fake = FakeRegistry({("acme/agent", "1.0"): INDEX}, auth="basic", users={"bot": "pw"})
    async with serving(fake) as host:
        secrets = {"regcred": _dockerconfig(host, username="bot", password="pw")}
        found = await _resolve(host, [f"{host}/acme/agent:1.0"], pull_secrets=secrets)
    assert found[f"{host}/acme/agent:1.0"] == INDEX_DIGEST
    assert fake.requests[-1][2] == f"Basic {_basic('bot', 'pw')}"


async def test_a_basic_challenge_without_credentials_names_the_missing_pull_secret() -> None:
    fake = FakeRegistry({("acme/agent", "1.0"): INDEX}, auth="basic", users={"bot": "pw"})
    async with serving(fake) as host:
        with pytest.raises(errors.PermanentRegistryError, match="add an imagePullSecret"):
            await _resolve(host, [f"{host}/acme/agent:1.0"])


async def test_the_fallback_get_reuses_the_token_of_the_head() -> None:
    fake = FakeRegistry({("acme/agent", "1.0"): INDEX}, auth="bearer", digest_header=False)
    async with serving(fake) as host:
        found = await _resolve(host, [f"{host}/acme/agent:1.0"])
    assert found[f"{host}/acme/agent:1.0"] == INDEX_DIGEST
    assert [(m, a) for m, _, a in fake.requests if m != "GET" or a] == [
        ("HEAD", None),
        ("HEAD", "Bearer token-for-acme/agent"),
        ("GET", "Bearer token-for-acme/agent"),
    ]


async def test_an_unknown_tag_is_permanent_and_names_image_tag_and_registry() -> None:
    fake = FakeRegistry({("acme/agent", "1.0"): INDEX})
    async with serving(fake) as host:
        with pytest.raises(errors.PermanentRegistryError) as caught:
            await _resolve(host, [f"{host}/acme/agent:9.9"])
    assert str(caught.value).startswith(
        f"image {host}/acme/agent:9.9: tag 9.9 not found in registry {host}"
    )


async def test_a_token_the_registry_still_refuses_names_the_pull_secret() -> None:
    fake = FakeRegistry({("acme/agent", "1.0"): INDEX}, auth="bearer", grant=False)
    async with serving(fake) as host:
        secrets = {"regcred": _dockerconfig(f"https://{host}/v1/", auth=_basic("bot", "x"))}
        with pytest.raises(errors.PermanentRegistryError) as caught:
            await _resolve(host, [f"{host}/acme/agent:1.0"], pull_secrets=secrets)
    message = str(caught.value)
    assert "HTTP 401" in message
    assert "imagePullSecret 'regcred'" in message
    assert len(fake.requests) == 3, "one challenge, one token, one refused retry: no loop"


async def test_wrong_credentials_at_the_token_endpoint_are_permanent() -> None:
    fake = FakeRegistry({("acme/agent", "1.0"): INDEX}, auth="bearer", users={"bot": "right"})
    async with serving(fake) as host:
        secrets = {"regcred": _dockerconfig(host, auth=_basic("bot", "wrong"))}
        with pytest.raises(errors.PermanentRegistryError, match="regcred"):
            await _resolve(host, [f"{host}/acme/agent:1.0"], pull_secrets=secrets)


async def test_a_server_error_is_temporary() -> None:
    fake = FakeRegistry({("acme/agent", "1.0"): INDEX}, status=503)
    async with serving(fake) as host:
        with pytest.raises(errors.TemporaryRegistryError, match="HTTP 503"):
            await _resolve(host, [f"{host}/acme/agent:1.0"])


@pytest.mark.parametrize(("retry_after", "delay"), [("7", 7.0), (None, None), ("soon", None)])
async def test_too_many_requests_is_temporary_and_keeps_the_registrys_retry_after(
    retry_after: str | None, delay: float | None
) -> None:
    fake = FakeRegistry({("acme/agent", "1.0"): INDEX}, status=429, retry_after=retry_after)
    async with serving(fake) as host:
        with pytest.raises(errors.TemporaryRegistryError, match="HTTP 429") as caught:
            await _resolve(host, [f"{host}/acme/agent:1.0"])
    assert caught.value.retry_after == delay
    assert "too many requests" in str(caught.value)


@pytest.mark.parametrize("digest_header", [True, False], ids=["head", "get-fallback"])
async def test_a_manifest_of_a_type_no_node_can_run_is_refused_by_name(
    digest_header: bool,
) -> None:
    schema1 = "application/vnd.docker.distribution.manifest.v1+prettyjws"
    fake = FakeRegistry(
        {("acme/agent", "1.0"): b'{"schemaVersion": 1}'},
        content_type=schema1,
        digest_header=digest_header,
    )
    async with serving(fake) as host:
        with pytest.raises(errors.PermanentRegistryError) as caught:
            await _resolve(host, [f"{host}/acme/agent:1.0"])
    message = str(caught.value)
    assert f"{host}/acme/agent:1.0" in message, message
    assert schema1 in message, message
    assert "push it as an image" in message


@pytest.mark.parametrize("digest_header", [True, False])
async def test_a_generic_content_type_lets_the_manifest_name_its_own_type(
    digest_header: bool,
) -> None:
    """A registry that answers ``application/json``: the manifest's own ``mediaType`` decides
    (an OCI index is taken, a schema 1 manifest refused)."""
    fake = FakeRegistry(
        {("acme/agent", "1.0"): INDEX, ("acme/old", "1.0"): b'{"schemaVersion": 1}'},
        content_type="application/json",
        digest_header=digest_header,
    )
    async with serving(fake) as host:
        found = await _resolve(host, [f"{host}/acme/agent:1.0"])
        assert found == {f"{host}/acme/agent:1.0": INDEX_DIGEST}
        assert [r[0] for r in fake.requests] == ["HEAD", "GET"]
        with pytest.raises(errors.PermanentRegistryError, match=r"manifest\.v1"):
            await _resolve(host, [f"{host}/acme/old:1.0"])


async def test_a_digest_header_that_does_not_match_the_bytes_is_refused() -> None:
    fake = FakeRegistry({("acme/agent", "1.0"): INDEX}, content_type="application/json")
    fake.forged_digest = "sha256:" + "cd" * 32
    async with serving(fake) as host:
        with pytest.raises(errors.PermanentRegistryError, match="altering manifests"):
            await _resolve(host, [f"{host}/acme/agent:1.0"])


async def test_an_unreachable_registry_is_temporary() -> None:
    async with serving(FakeRegistry({})) as host:
        pass  # the port is closed again
    with pytest.raises(errors.TemporaryRegistryError, match=r"cannot reach 127\.0\.0\.1"):
        await _resolve(host, [f"{host}/acme/agent:1.0"])


async def test_pinned_references_are_returned_without_asking_the_registry() -> None:
    fake = FakeRegistry({("acme/agent", "1.0"): INDEX})
    async with serving(fake) as host:
        image = f"{host}/acme/agent:1.0@{PINNED}"
        found = await _resolve(host, [image, f"{host}/acme/other@{PINNED}"])
    assert found[image] == PINNED
    assert fake.requests == []


async def test_resolve_all_asks_once_per_distinct_image_and_keeps_the_input_order() -> None:
    fake = FakeRegistry({("acme/agent", "1.0"): INDEX, ("acme/peer", "latest"): OTHER})
    async with serving(fake) as host:
        images = [f"{host}/acme/peer", f"{host}/acme/agent:1.0", f"{host}/acme/peer:latest"]
        found = await _resolve(host, [*images, images[1]], concurrency=1)
    assert list(found) == images
    assert found[images[0]] == found[images[2]] == f"sha256:{hashlib.sha256(OTHER).hexdigest()}"
    assert len(fake.requests) == 2


async def test_resolve_all_reports_every_permanent_failure_at_once() -> None:
    fake = FakeRegistry({("acme/agent", "1.0"): INDEX})
    async with serving(fake) as host:
        with pytest.raises(errors.PermanentRegistryError) as caught:
            await _resolve(host, [f"{host}/acme/a:1", f"{host}/acme/agent:1.0", f"{host}/acme/b:2"])
    assert "acme/a:1" in str(caught.value)
    assert "acme/b:2" in str(caught.value)


async def test_a_registry_not_listed_as_insecure_is_spoken_to_over_https_only() -> None:
    fake = FakeRegistry({("acme/agent", "1.0"): INDEX})
    async with serving(fake) as host:
        # HTTPS to a plain HTTP server: the TLS handshake fails, nothing is sent in clear.
        with pytest.raises(errors.TemporaryRegistryError):
            await registry.resolve_all([f"{host}/acme/agent:1.0"])
    assert fake.requests == []


async def test_a_plain_http_token_realm_of_a_tls_registry_is_refused() -> None:
    resolver = registry.Resolver()
    attempt = registry._Attempt("ghcr.io/a/b:1", registry.parse("ghcr.io/a/b:1"))
    challenge = registry.httpx.Response(
        401, headers={"WWW-Authenticate": 'Bearer realm="http://evil.example/token"'}
    )
    async with resolver:
        with pytest.raises(errors.PermanentRegistryError, match="not HTTPS"):
            await resolver._authorize(attempt, challenge)


@pytest.mark.parametrize(
    ("image", "name", "reference"),
    [
        ("nginx", "docker.io/library/nginx", "latest"),
        ("nginx:1.27", "docker.io/library/nginx", "1.27"),
        ("bitnami/redis:7", "docker.io/bitnami/redis", "7"),
        ("docker.io/nginx", "docker.io/library/nginx", "latest"),
        ("index.docker.io/library/nginx:1", "docker.io/library/nginx", "1"),
        ("ghcr.io/acme/agent:0.1.0", "ghcr.io/acme/agent", "0.1.0"),
        ("localhost/agent:dev", "localhost/agent", "dev"),
        ("127.0.0.1:5000/agent", "127.0.0.1:5000/agent", "latest"),
        ("registry.local:5000/team/agent:v2", "registry.local:5000/team/agent", "v2"),
        (f"nginx:1@{PINNED}", "docker.io/library/nginx", PINNED),
    ],
)
def test_names_are_normalised_like_docker_does(image: str, name: str, reference: str) -> None:
    ref = registry.parse(image)
    assert (ref.name, ref.reference) == (name, reference)


def test_docker_hub_is_asked_at_its_api_host() -> None:
    assert registry.parse("nginx").api_host == "registry-1.docker.io"
    assert registry.parse("ghcr.io/a/b").api_host == "ghcr.io"


def test_pin_names_the_image_fully_by_digest_and_drops_the_tag() -> None:
    assert registry.pin("nginx:1.27", PINNED) == f"docker.io/library/nginx@{PINNED}"
    with pytest.raises(ValueError, match="not a sha256 digest"):
        registry.pin("nginx", "latest")


def test_an_invalid_reference_is_permanent() -> None:
    with pytest.raises(errors.PermanentRegistryError, match="not a valid reference"):
        registry.parse("Nginx:latest")


def test_credentials_read_dockerconfigjson_by_registry_host() -> None:
    secrets = {
        "hub": _dockerconfig("https://index.docker.io/v1/", auth=_basic("me", "p:w")),
        "ghcr": _dockerconfig("ghcr.io", username="bot", password="tok"),
        "later": _dockerconfig("ghcr.io", username="other", password="x"),
    }
    found = pullsecrets.credentials(secrets)
    assert found["docker.io"] == pullsecrets.Credential("me", "p:w", "hub")
    assert found["ghcr.io"] == pullsecrets.Credential("bot", "tok", "ghcr")
    assert "tok" not in repr(found["ghcr.io"])


def test_legacy_dockercfg_is_read_too() -> None:
    legacy = base64.b64encode(json.dumps({"quay.io": {"auth": _basic("q", "w")}}).encode())
    found = pullsecrets.credentials({"old": {".dockercfg": legacy.decode()}})
    assert found["quay.io"].username == "q"


def test_a_malformed_pull_secret_is_permanent_and_named() -> None:
    with pytest.raises(errors.PermanentRegistryError, match="imagePullSecret 'bad'"):
        pullsecrets.credentials({"bad": {".dockerconfigjson": "not base64!"}})


def test_challenges_are_parsed_with_quoted_and_bare_values() -> None:
    scheme, params = answers.parse_challenge(
        'Bearer realm="https://auth.docker.io/token",service=registry.docker.io,'
        'scope="repository:library/nginx:pull,push"'
    )
    assert scheme == "bearer"
    assert params == {
        "realm": "https://auth.docker.io/token",
        "service": "registry.docker.io",
        "scope": "repository:library/nginx:pull,push",
    }


async def test_resolve_all_is_concurrent_but_never_beyond_its_bound() -> None:
    limit, images = 2, 5
    in_flight, peak, arrived = 0, 0, 0
    changed = asyncio.Condition()
    fake = FakeRegistry({(f"acme/a{i}", "1"): INDEX for i in range(images)})

    async def gated(request: web.Request) -> web.Response:
        # Hold each request until `limit` are in flight (or every image has arrived):
        # a resolver asking one at a time would stall here, one asking all at once
        # would push the peak past the limit.
        nonlocal in_flight, peak, arrived
        async with changed:
            in_flight, arrived = in_flight + 1, arrived + 1
            peak = max(peak, in_flight)
            changed.notify_all()
            await asyncio.wait_for(
                changed.wait_for(lambda: in_flight >= limit or arrived == images), timeout=30
            )
        try:
            return await fake.manifest(request)
        finally:
            async with changed:
                in_flight -= 1

    app = web.Application()
    app.router.add_get(r"/v2/{name:.+}/manifests/{ref}", gated, allow_head=True)
    runner = web.AppRunner(app, shutdown_timeout=1.0)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    host = f"127.0.0.1:{runner.addresses[0][1]}"
    try:
        wanted = [f"{host}/acme/a{i}:1" for i in range(images)]
        found = await _resolve(host, wanted, concurrency=limit)
    finally:
        await runner.cleanup()
    assert set(found.values()) == {INDEX_DIGEST}
    assert peak == limit
