"""The ledger: per-cell, append-only, tamper-evident records of what happened (docs/ledger.md).

A cell's ledger is JSON lines, one versioned pydantic record per line
(:mod:`~agent_health.ledger.records`), in this order:

* ``cell-meta`` — test id, repeat, run id, pinned image digests, start time (always first);
* ``exchange`` — one HTTP exchange through the gateway: principal (controller, target,
  peer:NAME, judge) and the token that proves it, method, path, status, times, sizes,
  sha256 of both bodies, token usage parsed from completions (:mod:`~agent_health.ledger.
  usage`), the upstream error if any;
* ``run-result`` — the agent's reply to ``agent.run()``; ``signal`` — one signal of the body;
* ``cell-end`` — the controller's final status and exit info (always last).

Every record carries ``seq`` and ``mac = HMAC-SHA256(key, previous mac || canonical JSON)``
(:mod:`~agent_health.ledger.chain`); only the gateway holds the key, so removing, reordering,
editing or forging a record breaks the chain at that record, and :func:`verify` names it.
Backends are chosen by URL (:func:`from_url`): ``file://DIR``, ``configmap://NS/NAME``,
``s3://BUCKET/PREFIX``, ``gs://BUCKET/PREFIX``.

This package is a leaf: it imports nothing else of agent_health, so the gateway image stays
small.
"""

import importlib as _importlib
import typing as _typing

if _typing.TYPE_CHECKING:
    from agent_health.ledger.audit import LedgerReport, verify_url
    from agent_health.ledger.backends import from_url, schemes
    from agent_health.ledger.chain import (
        Sealer,
        Writer,
        find_key,
        key_beside,
        load_key,
        verify,
    )
    from agent_health.ledger.chaincheck import Problem, VerifyResult
    from agent_health.ledger.errors import (
        BackendConfigError,
        BackendError,
        ChainError,
        LedgerError,
        LedgerKeyError,
        LedgerLogError,
        LedgerTooLarge,
        RecordError,
    )
    from agent_health.ledger.options import Options
    from agent_health.ledger.records import (
        CellEnd,
        CellMeta,
        Exchange,
        Record,
        RunResultRecord,
        SignalRecord,
        dump_line,
        parse_line,
    )
    from agent_health.ledger.store import Backend
    from agent_health.ledger.usage import TokenUsage

# Each public name, and the module it lives in. They load on first use (PEP 562): importing
# one module of the ledger (a local run's recorder needs only the chain's sealer) does not
# load every other, and the verifier's and the backends' models with them.
_WHERE = {
    "LedgerReport": "audit",
    "verify_url": "audit",
    "from_url": "backends",
    "schemes": "backends",
    **dict.fromkeys(("Sealer", "Writer", "find_key", "key_beside", "load_key"), "chain"),
    **dict.fromkeys(("Problem", "VerifyResult"), "chaincheck"),
    "verify": "chain",
    **dict.fromkeys(
        (
            "BackendConfigError",
            "BackendError",
            "ChainError",
            "LedgerError",
            "LedgerKeyError",
            "LedgerLogError",
            "LedgerTooLarge",
            "RecordError",
        ),
        "errors",
    ),
    **dict.fromkeys(
        (
            "CellEnd",
            "CellMeta",
            "Exchange",
            "Record",
            "RunResultRecord",
            "SignalRecord",
            "dump_line",
            "parse_line",
        ),
        "records",
    ),
    "Backend": "store",
    "Options": "options",
    "TokenUsage": "usage",
}


def __getattr__(name: str) -> _typing.Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(_importlib.import_module(f"{__name__}.{where}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*__all__, *(name for name in globals() if name.startswith("_"))})


__all__ = [
    "Backend",
    "BackendConfigError",
    "BackendError",
    "CellEnd",
    "CellMeta",
    "ChainError",
    "Exchange",
    "LedgerError",
    "LedgerKeyError",
    "LedgerLogError",
    "LedgerReport",
    "LedgerTooLarge",
    "Options",
    "Problem",
    "Record",
    "RecordError",
    "RunResultRecord",
    "Sealer",
    "SignalRecord",
    "TokenUsage",
    "VerifyResult",
    "Writer",
    "dump_line",
    "find_key",
    "from_url",
    "key_beside",
    "load_key",
    "parse_line",
    "schemes",
    "verify",
    "verify_url",
]
