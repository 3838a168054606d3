"""Where a run's cells record: a ledger URL template, filled in per run and checked early.

A RunSpec's ``spec.ledger.url`` and the operator's ``--ledger-url`` may contain
``{namespace}``, ``{run}`` and ``{runspec}``, filled in for each EvaluationRun (one ledger
per run: ``configmap://{namespace}/ledger-{run}``). :func:`problem` says why a template can
name no ledger (an unknown scheme or placeholder, a ConfigMap URL without its namespace, a
ConfigMap named without ``{run}``: a ConfigMap ledger is one run's, owned by it), so that a
bad URL fails the RunSpec, the run or the operator's start with that reason instead of
failing every cell.

A RunSpec is a tenant's; the operator reads its ledger with the operator's own identity and
hands its URL to the gateways. So :func:`refused` holds a RunSpec's URL to the operator's
configuration (``--ledger-allow``): it must start with one of the allowed prefixes (by
default only ``configmap://{namespace}/``: a ConfigMap in the run's own namespace), and it
may carry nothing that changes where the store is or who speaks to it — no query options
(``?endpoint_url=``, ``?anon=``), no credentials, no ``..`` — nor name another namespace.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from urllib.parse import urlsplit

from agent_health import ledger
from agent_health.ledger import backends, store

PLACEHOLDERS = ("namespace", "run", "runspec")
DEFAULT_ALLOWED = ("configmap://{namespace}/",)
"""The prefixes a RunSpec's ledger URL may start with when the operator names none."""
_FILLED = re.compile(r"\{(namespace|run|runspec)\}")
_LEFT = re.compile(r"\{[^{}]*\}")


def collected(url: str) -> bool:
    """Whether the operator collects ``url``'s ledger from its cells' gateway logs and
    writes it itself (a ConfigMap ledger), rather than each gateway writing it."""
    return url.partition("://")[0].lower() == "configmap"


def fill(template: str, *, namespace: str, run: str, runspec: str) -> str:
    """``template`` with ``{namespace}``, ``{run}`` and ``{runspec}`` filled in."""
    values = {"namespace": namespace, "run": run, "runspec": runspec}
    return _FILLED.sub(lambda m: values[m[1]], template)


def problem(template: str) -> str | None:
    """Why ``template`` names no usable ledger, or ``None`` when it does."""
    left = _LEFT.search(_FILLED.sub("x", template))
    if left is not None:
        known = ", ".join(f"{{{p}}}" for p in PLACEHOLDERS)
        return f"unknown placeholder {left[0]} in {template!r}; use {known}"
    url = fill(template, namespace="namespace", run="run", runspec="runspec")
    try:
        backends.from_url(url, store.Options())
    except ledger.LedgerError as err:
        return str(err)
    if _scheme(template) == "configmap" and "{run}" not in template.partition("://")[2]:
        return (
            f"{template!r}: a ConfigMap ledger holds one run (the run owns it, and only that "
            "run's gateways may write it): put {run} in its name, e.g. "
            "configmap://{namespace}/ledger-{run}"
        )
    return None


def prefix_problem(prefix: str) -> str | None:
    """Why ``prefix`` cannot be an allowed ledger prefix (``--ledger-allow``), or ``None``."""
    scheme = _scheme(prefix)
    if scheme not in backends.BUILTINS:
        known = ", ".join(f"{s}://" for s in backends.schemes())
        return f"{prefix!r} names no ledger store; start it with one of {known}"
    if not prefix.endswith("/") or "?" in prefix or "#" in prefix or "@" in prefix:
        return (
            f"{prefix!r} must end with '/' (so s3://bucket/team allows no s3://bucket/teamB) "
            "and carry no query, fragment or credentials"
        )
    left = _LEFT.search(prefix.replace("{namespace}", "x"))
    if left is not None:
        return f"{prefix!r}: a prefix may contain {{namespace}} only, not {left[0]}"
    return None


def refused(url: str, *, namespace: str, allowed: Sequence[str]) -> str | None:
    """Why a RunSpec may not choose ``url`` (filled in for a run in ``namespace``), or
    ``None``: see the module docstring. ``allowed`` are the operator's prefixes."""
    parts = urlsplit(url)
    if "?" in url or "#" in url:
        return (
            f"{url!r} carries query options; where a ledger store is and who speaks to it "
            "(an endpoint, credentials) is the operator's configuration, not a RunSpec's"
        )
    if "@" in parts.netloc:
        return f"{url!r} carries credentials; the operator's configuration holds those"
    if ".." in parts.path.split("/"):
        return f"{url!r} climbs out of its prefix with '..'"
    if _scheme(url) == "configmap":
        named = url.partition("://")[2].split("/", 1)[0]
        if named != namespace:
            return (
                f"{url!r} names a ConfigMap in namespace {named!r}; a run's ConfigMap ledger "
                f"lives in the run's own namespace ({namespace}): use configmap://{{namespace}}/"
            )
    prefixes = [p.replace("{namespace}", namespace) for p in allowed]
    if not any(url.startswith(p) for p in prefixes):
        return (
            f"{url!r} is not under a ledger prefix the operator allows ({', '.join(prefixes)}); "
            "ask its administrator to add one (--ledger-allow)"
        )
    return None


def namespace_problem(url: str, namespace: str) -> str | None:
    """Why the operator's own ``url`` (filled in) cannot serve a run in ``namespace``: a
    ConfigMap ledger in another namespace (the gateways' Role lives in the run's)."""
    if _scheme(url) != "configmap":
        return None
    named = url.partition("://")[2].split("/", 1)[0]
    if named == namespace:
        return None
    return (
        f"{url!r} names a ConfigMap in namespace {named!r}, not the run's ({namespace}); "
        "use configmap://{namespace}/..."
    )


def _scheme(url: str) -> str:
    scheme, sep, _ = url.partition("://")
    return scheme.lower() if sep else "file"
