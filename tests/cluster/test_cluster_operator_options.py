"""``agent-health operator`` flags and environment variables become :class:`options.Options`."""

from __future__ import annotations

import argparse
import re

import pytest
from agent_health.cluster import options
from agent_health.cluster.cells import netpol

IMAGES = ["--controller-image=c@sha256:" + "a" * 64, "--gateway-image=g@sha256:" + "b" * 64]


def parse(argv: list[str], monkeypatch: pytest.MonkeyPatch, **env: str) -> options.Options:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    parser = argparse.ArgumentParser()
    options.add_arguments(parser)
    return options.from_args(parser.parse_args([*IMAGES, *argv]))


def test_the_gateway_account_credentials_and_fence_are_off_by_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    chosen = parse([], monkeypatch)
    assert chosen.gateway_service_account is None
    assert chosen.ledger_credentials_secret is None
    assert chosen.network_policy is False
    assert chosen.egress == ()
    assert (chosen.dns_namespace, dict(chosen.dns_pod_labels)) == (
        "kube-system",
        {"k8s-app": "kube-dns"},
    )


def test_flags_set_the_gateway_account_credentials_and_fence(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    chosen = parse(
        [
            "--gateway-service-account=cell-gateway",
            "--ledger-credentials-secret=s3-creds",
            "--network-policy",
            "--egress=10.0.0.1/32:6443",
            "--egress=0.0.0.0/0~10.0.0.0/8:443",
            "--dns-namespace=dns",
            "--dns-pod-labels=app=coredns",
        ],
        monkeypatch,
    )
    assert chosen.gateway_service_account == "cell-gateway"
    assert chosen.ledger_credentials_secret == "s3-creds"
    assert chosen.network_policy is True
    assert chosen.egress == (
        netpol.Egress("10.0.0.1/32", (6443,)),
        netpol.Egress("0.0.0.0/0", (443,), excluding=("10.0.0.0/8",)),
    )
    assert (chosen.dns_namespace, dict(chosen.dns_pod_labels)) == ("dns", {"app": "coredns"})


def test_the_environment_sets_them_as_the_chart_does(monkeypatch: pytest.MonkeyPatch) -> None:
    chosen = parse(
        [],
        monkeypatch,
        AGENT_HEALTH_GATEWAY_SERVICE_ACCOUNT="evals-agent-health-cell-gateway",
        AGENT_HEALTH_LEDGER_CREDENTIALS_SECRET="creds",
        AGENT_HEALTH_NETWORK_POLICY="1",
        AGENT_HEALTH_EGRESS="172.18.0.0/16:6443, 203.0.113.0/24",
    )
    assert chosen.gateway_service_account == "evals-agent-health-cell-gateway"
    assert chosen.ledger_credentials_secret == "creds"
    assert chosen.network_policy is True
    assert [e.cidr for e in chosen.egress] == ["172.18.0.0/16", "203.0.113.0/24"]
    assert chosen.egress[1].ports == ()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("10.0.0.0/8", netpol.Egress("10.0.0.0/8")),
        ("10.0.0.0/8:443+6443", netpol.Egress("10.0.0.0/8", (443, 6443))),
        ("fd00::/8:443", netpol.Egress("fd00::/8", (443,))),
        ("::/0~fd00::/8", netpol.Egress("::/0", excluding=("fd00::/8",))),
    ],
)
def test_egress_is_cidr_excepts_and_ports(text: str, expected: netpol.Egress) -> None:
    assert netpol.egress(text) == expected


@pytest.mark.parametrize("text", ["10.0.0.0", "10.0.0.0/8:https", "10.0.0.0/8:70000", "x/8", ""])
def test_a_malformed_egress_is_a_usage_error_naming_it(text: str) -> None:
    with pytest.raises(ValueError, match=r"--egress .*expected CIDR"):
        netpol.egress(text)


def test_operator_help_names_each_flags_variable_and_default(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from agent_health.cli import app

    with pytest.raises(SystemExit) as ended:
        app.main(["operator", "--help"])
    assert ended.value.code == 0
    text = capsys.readouterr().out
    assert ":class:" not in text  # not the module's reStructuredText
    assert "====" not in text
    # Each flag's entry: from its line to the next flag's, compared without the wrapping.
    entries = [e.split() for e in re.split(r"\n(?=  -)", text)]
    for flag in options.FLAGS:
        line = "".join(next(e for e in entries if e and e[0] == flag.name))
        assert f"env{flag.env}" in line, line
        default = "default off" if flag.kind == "switch" else f"default {flag.default}"
        wanted = default if flag.default or flag.kind == "switch" else "no default"
        assert wanted.replace(" ", "") in line, line


def test_every_flag_reads_its_environment_variable() -> None:
    environ = {
        f.env: ("1" if f.kind == "switch" else f"from-{f.env.lower()}") for f in options.FLAGS
    }
    parser = argparse.ArgumentParser()
    options.add_arguments(parser, environ)
    parsed = vars(parser.parse_args([]))
    for flag in options.FLAGS:
        value = parsed[flag.name[2:].replace("-", "_")]
        expected = {"switch": True, "list": [f"from-{flag.env.lower()}"]}.get(
            flag.kind, f"from-{flag.env.lower()}"
        )
        assert value == expected, flag.name


def test_sandboxes_and_their_runtime_class_come_from_the_charts_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert parse([], monkeypatch).sandbox_runtime_class is None
    chosen = parse(
        [], monkeypatch, AGENT_HEALTH_SANDBOXES="1", AGENT_HEALTH_SANDBOX_RUNTIME_CLASS="gvisor"
    )
    assert chosen.sandboxes is True
    assert chosen.sandbox_runtime_class == "gvisor"


def test_the_otlp_endpoint_is_an_http_url_or_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGENT_HEALTH_OTLP_ENDPOINT", raising=False)
    assert parse([], monkeypatch).otlp_endpoint is None
    flagged = parse(["--otlp-endpoint", "http://collector:4318"], monkeypatch)
    assert flagged.otlp_endpoint == "http://collector:4318"
    from_env = parse([], monkeypatch, AGENT_HEALTH_OTLP_ENDPOINT="https://collector:4318")
    assert from_env.otlp_endpoint == "https://collector:4318"
    with pytest.raises(ValueError, match=r"--otlp-endpoint .* is not an http"):
        parse(["--otlp-endpoint", "collector:4318"], monkeypatch)


def test_sandbox_queueing_refuses_by_default_and_admits_when_told(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert parse([], monkeypatch).sandbox_queueing == "refuse"
    assert parse(["--sandbox-queueing", "admit"], monkeypatch).sandbox_queueing == "admit"
    from_env = parse([], monkeypatch, AGENT_HEALTH_SANDBOX_QUEUEING="admit")
    assert from_env.sandbox_queueing == "admit"
    with pytest.raises(ValueError, match=r"--sandbox-queueing .* must be refuse or admit"):
        parse(["--sandbox-queueing", "allow"], monkeypatch)


@pytest.mark.parametrize(
    ("value", "cap"), [(None, 100), ("0", 0), ("250", 250), ("none", None), (" None ", None)]
)
def test_the_warm_replicas_cap_is_a_count_or_none(
    value: str | None, cap: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    argv = [] if value is None else ["--max-warm-replicas", value]
    assert parse(argv, monkeypatch).max_warm_replicas == cap


@pytest.mark.parametrize("value", ["-1", "many", "1.5", ""])
def test_a_warm_replicas_cap_that_is_no_count_is_a_usage_error(
    value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ValueError, match=r"--max-warm-replicas .* must be a count"):
        parse(["--max-warm-replicas", value], monkeypatch)


def test_the_history_is_off_unless_a_url_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGENT_HEALTH_HISTORY", raising=False)
    assert parse([], monkeypatch).history is None
    chosen = parse([], monkeypatch, AGENT_HEALTH_HISTORY="postgresql://evals:pw@db:5432/history")
    assert chosen.history is not None
    assert (chosen.history.kind, chosen.history.shown) == (
        "postgresql",
        "postgresql://evals@db:5432/history",
    )
    flag = parse(["--history=sqlite:////var/lib/agent-health/history/history.db"], monkeypatch)
    assert flag.history is not None
    assert flag.history.path is not None
    assert str(flag.history.path) == "/var/lib/agent-health/history/history.db"


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("mysql://evals@db/history", "unknown history URL scheme 'mysql'"),
        ("postgresql://evals@db:5432/", "names no database"),
        ("sqlite://", "names no file"),
    ],
)
def test_a_history_url_that_cannot_be_one_stops_the_operator_naming_the_flag(
    monkeypatch: pytest.MonkeyPatch, url: str, said: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(said)) as caught:
        parse([f"--history={url}"], monkeypatch)
    assert str(caught.value).startswith("--history (or AGENT_HEALTH_HISTORY): ")


def test_the_reconciling_flags_become_one_policy_handed_to_every_part(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The operator's reconciling options are built once into a frozen policy (no copy per
    hop): the scheduler, its intake and reactions, and the RunSpec reconciler act on it."""
    import dataclasses

    from agent_health.cluster import operator
    from agent_health.cluster.reconcile import runs, specs
    from agent_health.ledger import store

    chosen = dataclasses.replace(
        parse([], monkeypatch),
        retry_delay=7.0,
        stuck_grace=9.0,
        deadline_grace=3.0,
        discovery_wait=11.0,
        ledger_allowed=("s3://evals/{namespace}/",),
        insecure_registries=("registry:5000",),
    )
    ledgers = store.Options()
    policy = operator.reconciling(chosen, ledgers, None)
    assert (policy.retry_delay, policy.stuck_grace, policy.deadline_grace) == (7.0, 9.0, 3.0)
    assert (policy.discovery_wait, policy.ledger_allowed) == (11.0, ("s3://evals/{namespace}/",))
    assert (policy.insecure_registries, policy.ledger_options, policy.fence) == (
        ("registry:5000",),
        ledgers,
        None,
    )
    assert policy.own_secrets == operator.own_secrets(chosen)
    with pytest.raises(dataclasses.FrozenInstanceError):
        policy.retry_delay = 1.0  # type: ignore[misc]
    scheduler = runs.Runs(
        api=None,
        settings=None,
        discoveries=None,
        status=None,
        metrics=None,
        recorder=None,
        policy=policy,
    )
    assert scheduler.intake.policy is policy
    assert scheduler.reactions.stuck_grace == 9.0
    assert specs.SpecReconciler(None, None, None, policy=policy).policy is policy
    assert [policy.backoff(n) for n in (1, 2, 3, 10)] == [7.0, 14.0, 28.0, 300.0]
