"""A pooled (warm) cell's gateway, as its own process: it listens and answers its probe before
its cell exists, answers every call 503 and records nothing until the assignment comes, then
records the assigned cell with the ledger key it unwraps — which the run key verifies."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import httpx
import pytest
from agent_health.gateway import command, config, errors, pooled
from agent_health.ledger import records
from support import pooled_support
from support.gateway_support import serving, upstream_app
from support.hostile_support import free_port
from support.pooled_support import CELL, LEDGER_CELL, RUN_KEY, SANDBOX_KEY_ENV, UNASSIGNED

CONTROLLER_TOKEN = "controller-token-from-the-sandbox-secret-5d1e"
PEER_TOKEN = "peer-token-from-the-sandbox-secret-a0c4"
TEST_ID = "test_pool.py::answers warm"


def _args(
    upstream: str, ports: dict[str, int], tmp_path: Path, *, ledger_flag: bool = True
) -> list[str]:
    """The pooled gateway's flags; without ``ledger_flag`` its run's ledger URL comes with its
    assignment, its records spooled until then (as the operator starts it)."""
    ledger = ["--ledger", f"file://{tmp_path / 'ledger'}"] if ledger_flag else []
    (tmp_path / "spool").mkdir(exist_ok=True)
    return [
        *ledger,
        "--spool", str(tmp_path / "spool"),
        "--route",
        f"principal=controller,listen=127.0.0.1:{ports['controller']},upstream={upstream}",
        "--route",
        f"principal=target,to=peer:tools,listen=127.0.0.1:{ports['peer']},upstream={upstream}",
        "--otlp-listen", f"127.0.0.1:{ports['otlp']}",
        "--admin", f"127.0.0.1:{ports['admin']}",
        "--assignment", str(tmp_path / "assignment.json"),
        "--sandbox-key-env", SANDBOX_KEY_ENV,
        "--token", "controller=env:CONTROLLER_TOKEN",
        "--token", "peer:tools=env:PEER_TOKEN",
        "--grace", "5",
    ]  # fmt: skip


async def _pooled_cell(
    tmp_path: Path, *, sandbox_key: str, ledger_flag: bool = True
) -> tuple[list[int], dict[str, int]]:
    """Run a pooled gateway through its life: calls before the assignment, the assignment
    (wrapped for ``sandbox_key``), calls after it, the controller's cell-end; the statuses of
    the calls before it and the gateway's /healthz counts at the end."""
    ports = {name: free_port() for name in ("controller", "peer", "otlp", "admin")}
    admin = f"http://127.0.0.1:{ports['admin']}"
    env = pooled_support.gateway_environment(
        CONTROLLER_TOKEN=CONTROLLER_TOKEN, PEER_TOKEN=PEER_TOKEN
    )
    controller = {config.TOKEN_HEADER: CONTROLLER_TOKEN}
    async with serving(upstream_app()) as upstream:
        args = _args(upstream, ports, tmp_path, ledger_flag=ledger_flag)
        proc = await pooled_support.start_gateway(args, env)
        async with (
            pooled_support.healthy(proc, f"{admin}/healthz"),
            httpx.AsyncClient() as client,
        ):
            before = [
                await client.get(
                    f"http://127.0.0.1:{ports['controller']}/echo", headers=controller
                ),
                await client.get(f"http://127.0.0.1:{ports['peer']}/echo"),
                await client.post(
                    f"http://127.0.0.1:{ports['otlp']}/v1/traces",
                    content=b"{}",
                    headers={"Content-Type": "application/json"},
                ),
                await client.post(f"{admin}/ledger/records", json=[], headers=controller),
            ]
            for answer in before:
                body = answer.json()
                assert UNASSIGNED in body.get("error", body.get("message", "")), body
            assert not (tmp_path / "ledger" / f"{LEDGER_CELL}.jsonl").exists()
            found = pooled_support.assigned(
                TEST_ID,
                sandbox_key=sandbox_key,
                ledger=None if ledger_flag else f"file://{tmp_path / 'ledger'}",
            )
            pooled_support.assign(tmp_path / "assignment.json", found.annotation())
            await pooled_support.until_assigned(client, f"{admin}/healthz")
            ok = await client.get(
                f"http://127.0.0.1:{ports['controller']}/echo", headers=controller
            )
            assert ok.status_code == 200, ok.text
            # The run id the gateway adds is the assigned cell's.
            assert ok.json()["headers"][config.RUN_ID_HEADER.lower()] == CELL
            forged = {config.TOKEN_HEADER: "a-token-nobody-was-given"}
            await client.get(f"http://127.0.0.1:{ports['controller']}/echo", headers=forged)
            await client.get(f"http://127.0.0.1:{ports['peer']}/echo", headers=forged)
            end = [{"kind": "cell-end", "status": "passed"}]
            posted = await client.post(f"{admin}/ledger/records", json=end, headers=controller)
            assert posted.status_code == 200, posted.text
            health = (await client.get(f"{admin}/healthz")).json()
        # Leaving `healthy` sent the gateway its one SIGTERM (as a kubelet does): a second
        # one could arrive after its event loop let go of the signal, and end it by default.
        _, stderr = await proc.communicate()
    assert proc.returncode == 0, stderr.decode()
    logged = stderr.decode()
    assert logged.count("before the sandbox was assigned a cell") == 1  # one line, not four
    assert f"assigned cell {CELL}" in logged
    counts = {"refused_unassigned": health["refused_unassigned"]}
    return [answer.status_code for answer in before], counts


async def test_a_pooled_gateway_answers_503_until_assigned_then_records_its_cell(
    tmp_path: Path,
) -> None:
    statuses, counts = await _pooled_cell(
        tmp_path, sandbox_key=pooled_support.SANDBOX_KEY, ledger_flag=False
    )
    assert statuses == [503, 503, 503, 503]
    assert counts == {"refused_unassigned": 4}
    lines = (tmp_path / "ledger" / f"{LEDGER_CELL}.jsonl").read_text().splitlines()
    found = records.parse_lines(lines)
    meta = found[0]
    assert isinstance(meta, records.CellMeta)
    assert (meta.cell, meta.run_id, meta.test_id, meta.repeat, meta.attempt, meta.agent) == (
        LEDGER_CELL, CELL, TEST_ID, 1, 1, "triage",
    )  # fmt: skip
    exchanges = [r for r in found if isinstance(r, records.Exchange)]
    # Nothing of the calls before the assignment; after it, the controller proven by its env
    # token, and a caller with a wrong token recorded as the target, not as the controller.
    assert [(e.principal, e.upstream, e.evidence) for e in exchanges] == [
        ("controller", "target", config.token_id(CONTROLLER_TOKEN)),
        ("target", "target", config.INVALID_TOKEN),
        ("target", "peer:tools", config.INVALID_TOKEN),
    ]
    assert all(e.status == 200 and e.run_id == CELL for e in exchanges)
    assert found[-1].kind == "cell-end"
    checked = pooled_support.verify(tmp_path / "ledger", RUN_KEY, tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr


async def test_a_gateway_with_another_sandboxs_key_writes_a_ledger_the_run_key_refuses(
    tmp_path: Path,
) -> None:
    """The assignment's key was wrapped for another sandbox: this gateway unwraps garbage, so
    its records are sealed with a key the run's does not derive, and verify says so."""
    other = "sandbox-key-of-another-pooled-pod-77e2b0d9aa13c5f4"
    await _pooled_cell(tmp_path, sandbox_key=other)
    checked = pooled_support.verify(tmp_path / "ledger", RUN_KEY, tmp_path)
    assert checked.returncode != 0, checked.stdout
    assert LEDGER_CELL in checked.stdout + checked.stderr


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ('{"v": 1, "cell": 7}', "field 'cell' must be a str"),
        ('{"v": 99}', "assignment version 99"),
        ("{not json", "not JSON"),
    ],
)
async def test_a_malformed_assignment_stops_the_gateway_with_its_reason(
    tmp_path: Path, text: str, reason: str
) -> None:
    ports = {name: free_port() for name in ("controller", "peer", "otlp", "admin")}
    env = pooled_support.gateway_environment(
        CONTROLLER_TOKEN=CONTROLLER_TOKEN, PEER_TOKEN=PEER_TOKEN
    )
    async with serving(upstream_app()) as upstream:
        proc = await pooled_support.start_gateway(_args(upstream, ports, tmp_path), env)
        async with pooled_support.healthy(proc, f"http://127.0.0.1:{ports['admin']}/healthz"):
            pooled_support.assign(tmp_path / "assignment.json", text)
            _, stderr = await proc.communicate()
    assert proc.returncode == command.EXIT_USAGE
    assert reason in stderr.decode()
    assert str(tmp_path / "assignment.json") in stderr.decode()
    assert not (tmp_path / "ledger" / f"{LEDGER_CELL}.jsonl").exists()


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (["--cell", "c-1"], "--cell"),
        (["--repeat", "0", "--key-file", "/k"], "--repeat, --key-file"),
        (["--run-id", "r", "--test-id", "t", "--attempt", "1", "--agent", "a"], "--run-id"),
    ],
)
def test_the_assignment_excludes_the_flags_it_replaces(
    extra: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    route = "principal=controller,listen=127.0.0.1:0,upstream=http://127.0.0.1:9"
    base = ["--route", route, "--assignment", "/a.json", "--sandbox-key-env", "K"]
    with pytest.raises(SystemExit) as exited:
        command.main([*base, *extra])
    assert exited.value.code == 2
    assert f"--assignment cannot be combined with {named}" in capsys.readouterr().err


def test_the_assignment_needs_the_sandbox_key_and_only_it_takes_one(
    capsys: pytest.CaptureFixture[str],
) -> None:
    route = "principal=controller,listen=127.0.0.1:0,upstream=http://127.0.0.1:9"
    with pytest.raises(SystemExit):
        command.main(["--route", route, "--assignment", "/a.json"])
    assert "--assignment needs --sandbox-key-env" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        command.main(["--route", route, "--sandbox-key-env", "K"])
    assert "--sandbox-key-env goes with --assignment" in capsys.readouterr().err
    # The same holds for settings given as JSON.
    with pytest.raises(errors.GatewayConfigError, match="not cell"):
        config.build({"routes": [config.parse_route(route)], "assignment": "/a", "cell": "c",
                      "sandbox_key_env": "K"})  # fmt: skip


def test_an_env_token_is_read_from_its_variable_and_a_missing_one_is_named() -> None:
    tokens = config.Tokens.load({"controller": "env:TOK"}, {"TOK": " secret-token \n"})
    assert tokens.identify("secret-token") == ("controller", config.token_id("secret-token"))
    for environ in ({}, {"TOK": "  "}):
        with pytest.raises(errors.GatewayConfigError, match=r"\$TOK, which is unset or empty"):
            config.Tokens.load({"controller": "env:TOK"}, environ)


async def test_a_missing_sandbox_key_is_a_startup_error_naming_it(tmp_path: Path) -> None:
    ports = {name: free_port() for name in ("controller", "peer", "otlp", "admin")}
    env = pooled_support.gateway_environment(
        CONTROLLER_TOKEN=CONTROLLER_TOKEN, PEER_TOKEN=PEER_TOKEN
    )
    del env[SANDBOX_KEY_ENV]
    proc = await pooled_support.start_gateway(_args("http://127.0.0.1:9", ports, tmp_path), env)
    _, stderr = await proc.communicate()
    assert proc.returncode == command.EXIT_USAGE
    assert f"${SANDBOX_KEY_ENV} is unset or empty" in stderr.decode()


def test_the_assignment_names_the_runs_ledger_and_caps_over_the_flags() -> None:
    route = config.parse_route("principal=controller,listen=127.0.0.1:0,upstream=http://h:1")
    flags = {"routes": [route], "assignment": "/a.json", "sandbox_key_env": "K"}
    found = pooled_support.assigned(TEST_ID, ledger="configmap://ns/run-1")
    found = dataclasses.replace(found, max_cell_exchanges=50, max_cell_bytes=4096)
    spooled = pooled.cell_settings(config.build(flags | {"max_cell_exchanges": 9}), found)
    assert (spooled.ledger_url, spooled.max_cell_exchanges, spooled.max_cell_bytes) == (
        "configmap://ns/run-1", 50, 4096,
    )  # fmt: skip
    assert (spooled.cell, spooled.run_id, spooled.agent) == (LEDGER_CELL, CELL, "triage")
    assert spooled.assignment is None
    # A ConfigMap ledger's gateway logs its records: the URL is the operator's to collect into.
    logged = pooled.cell_settings(config.build(flags | {"ledger_log": True}), found)
    assert (logged.ledger_log, logged.ledger_url) == (True, None)
