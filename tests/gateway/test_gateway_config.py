"""Routes, settings and tokens: parsed from flags, JSON and files, with one-line errors."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
from agent_health import gateway
from agent_health.gateway import command, config


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_a_route_flag_names_caller_callee_listener_and_upstream() -> None:
    route = config.parse_route(
        "from=target, to=peer:tools, listen=127.0.0.1:15002, upstream=http://127.0.0.1:9000/v1/"
    )
    assert (route.principal, route.to, route.host, route.port) == (
        "target",
        "peer:tools",
        "127.0.0.1",
        15002,
    )
    assert route.upstream == "http://127.0.0.1:9000/v1"
    ipv6 = config.parse_route("principal=controller,listen=[::1]:0,upstream=http://[::1]:80")
    assert (ipv6.host, ipv6.port, ipv6.to) == ("::1", 0, "target")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("principal=controller,listen=127.0.0.1:1", "upstream: Field required"),
        ("principal=boss,listen=:1,upstream=http://x", "principal: 'boss' is not a principal"),
        ("principal=controller,listen=localhost,upstream=http://x", "not HOST:PORT"),
        ("principal=controller,listen=h:1,upstream=ftp://x", "is not an http(s)://"),
        ("principal=controller,port=1", "'port=1' is not one of"),
    ],
)
def test_a_bad_route_names_the_flag_and_the_field(text: str, message: str) -> None:
    with pytest.raises(gateway.GatewayConfigError) as info:
        config.parse_route(text)
    assert str(info.value).startswith(f"--route {text!r}: ")
    assert message in str(info.value)


def test_flags_override_the_json_settings_from_the_environment(tmp_path: Path) -> None:
    base = {
        "routes": [{"principal": "controller", "listen": "127.0.0.1:1", "upstream": "http://a:1"}],
        "cell": "from-env",
        "grace": 3,
    }
    env = {config.CONFIG_ENV: json.dumps(base)}
    token = tmp_path / "t"
    token.write_text("tok\n")
    flags = _args("--cell", "from-flag", "--token", f"controller={token}", "--image", "target=x@1")
    s = command.settings(flags, env)
    assert (s.cell, s.grace, s.routes[0].upstream) == ("from-flag", 3, "http://a:1")
    assert s.token_files == {"controller": str(token)}
    assert s.images == {"target": "x@1"}
    with pytest.raises(gateway.GatewayConfigError, match="no routes"):
        command.settings(_args(), {})
    with pytest.raises(gateway.GatewayConfigError, match="--token 'controller' is not"):
        command.settings(_args("--token", "controller"), env)


def test_the_target_gets_no_token() -> None:
    route = config.parse_route("principal=controller,listen=127.0.0.1:0,upstream=http://x:1")
    with pytest.raises(gateway.GatewayConfigError, match="the target gets no token"):
        config.build({"routes": [route], "token_files": {"target": "/t"}})


def test_tokens_identify_their_principal_by_a_hash_id(tmp_path: Path) -> None:
    (tmp_path / "c").write_text("controller-secret\n")
    (tmp_path / "p").write_text("peer-secret")
    tokens = config.Tokens.load({"controller": str(tmp_path / "c"), "peer:db": str(tmp_path / "p")})
    assert tokens.identify("controller-secret") == (
        "controller",
        gateway.token_id("controller-secret"),
    )
    assert tokens.identify("peer-secret") == ("peer:db", gateway.token_id("peer-secret"))
    assert tokens.identify("controller-secret ") is None
    assert tokens.identify(None) is None
    assert "secret" not in gateway.token_id("controller-secret")
    with pytest.raises(gateway.GatewayConfigError, match="token file of controller at"):
        config.Tokens.load({"controller": str(tmp_path / "missing")})
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(gateway.GatewayConfigError, match="is empty"):
        config.Tokens.load({"controller": str(tmp_path / "empty")})
