"""What was seen of one HTTP exchange: the one shape every recorder hands the ledger.

Two recorders see exchanges. A connector sees the controller's own calls of the agent in
the controller's process (``connectors.wire``, for the local ledger); the gateway sees every
call that crosses it (``gateway.proxy``, ``gateway.guard``). Both see the same things — the
run, the method and path, the status, when it started and ended, the bytes each way and
their SHA-256, what went wrong — and hand them over as one :class:`Observation`; the
``exchange`` record is made from it in one place (:func:`.objects.exchange`), and read back
as :class:`.records.Exchange`.

A named tuple, with times as epoch seconds (``time.time()``): one is made per agent call on
a connector's path, where a frozen dataclass of these fields took 4 us to build, a tenth of
a connector's whole cost per call (``bench/connectors.py``). The record is built from it as
JSON data, not through the pydantic model: on the gateway's path that cut what an exchange
costs from observation to sealed line by a third or more (33-43 us to 20-29 us). No
pydantic here either: a local run loads this module with the connectors, and the record's
models only when a ledger is read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from agent_health.ledger import usage as usage_parser

IN_PROCESS = "in-process"
"""The evidence of an exchange seen in the controller's own process: no token was shown,
because no gateway stood between the controller and the agent."""


class Observation(NamedTuple):
    """What was seen of one exchange (no token, and no body beyond ``body``).

    Who called whom defaults to what a connector sees: the controller called the target, in
    process. The gateway says who it was (``principal``, the token's id in ``evidence``,
    ``upstream``) and reads token usage as the answer streams past (``usage``); a connector
    keeps instead the answer itself when it is small (``body``, ``content_type``), and usage
    is read from it only when the record is made, off the call's path.
    """

    run_id: str | None
    method: str
    path: str
    status: int | None  # None: no answer came (the upstream failed, or the call was cut)
    started_at: float  # epoch seconds
    ended_at: float
    request_bytes: int
    response_bytes: int
    request_sha256: str
    response_sha256: str | None
    error: str | None = None
    principal: str = "controller"
    evidence: str = IN_PROCESS
    upstream: str = "target"
    usage: usage_parser.TokenUsage | None = None
    body: bytes | None = None
    content_type: str | None = None
