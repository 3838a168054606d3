"""How the operator reconciles: the options the scheduler and the RunSpec reconciler act on.

Built once, frozen, from the operator's flags (:meth:`agent_health.cluster.operator.Operator.
build`) and handed to every part that acts on one — :class:`~.runs.Runs` and its
:class:`~.intake.Intake`, :class:`~.specs.SpecReconciler` — so each option is said once,
here, and travels as one value instead of a copy per hop.
"""

from __future__ import annotations

import dataclasses

from agent_health.cluster.cells import ledgerurl, netpol
from agent_health.cluster.reconcile import secretrefs
from agent_health.ledger import store

MAX_RETRY_DELAY = 300.0
"""The longest wait between two attempts at a failed reconcile."""


@dataclasses.dataclass(frozen=True)
class Policy:
    """The operator's reconciling options (see the module docstring)."""

    retry_delay: float = 5.0
    """The first delay before a failed reconcile is tried again (it doubles, up to
    :data:`MAX_RETRY_DELAY`)."""
    stuck_grace: float = 120.0
    """Seconds a cell may stay unschedulable or unable to pull before it is errored."""
    deadline_grace: float = 60.0
    """Seconds past a cell's deadline (``activeDeadlineSeconds``) before the operator ends
    it itself."""
    discovery_wait: float = 120.0
    """Seconds a RunSpec's reconcile waits for its discovery pod before it is tried again."""
    spec_wait: float = 60.0
    """Seconds a run waits for its RunSpec to be resolved before its start is tried again."""
    ledger_allowed: tuple[str, ...] = ledgerurl.DEFAULT_ALLOWED
    """The prefixes a RunSpec's ledger URL may start with (``--ledger-allow``)."""
    ledger_options: store.Options = dataclasses.field(default_factory=store.Options)
    """How the operator opens a run's ledger store (credentials, a ConfigMap's size)."""
    own_secrets: secretrefs.Own = dataclasses.field(default_factory=secretrefs.Own)
    """Secrets no RunSpec may name: the operator's own (:mod:`.secretrefs`)."""
    fence: netpol.Fence | None = None
    """Set (``--network-policy``): each run gets its NetworkPolicy before its first cell,
    and a discovery pod runs behind one that lets nothing in or out."""
    insecure_registries: tuple[str, ...] = ()
    """Registries pinned over plain HTTP (``--insecure-registry``)."""

    def backoff(self, attempt: int) -> float:
        """The wait before attempt ``attempt + 1`` of a failed reconcile."""
        return min(self.retry_delay * 2.0 ** (attempt - 1), MAX_RETRY_DELAY)
