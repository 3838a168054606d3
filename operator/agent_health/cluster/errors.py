"""Errors of the cluster package.

::

    ClusterError
     ├── SpecError          a RunSpec or EvaluationRun fails its model (the user's object is wrong)
     │    └── SecretNotOffered  it names a Secret not offered to runs, or one of the operator's
     ├── SchemaError        a model cannot become a structural CRD schema (a bug in the models)
     ├── LedgerUnavailable  a cell's ledger cannot be read now (the store failed); grade it later
     ├── PhaseError         an EvaluationRun phase change the lifecycle does not allow (a bug)
     ├── DoubtfulEvidence   a cell's ledger proves nothing; grading turns it into an errored grade
     │    ├── IncompleteEvidence  the infrastructure left a gap in it (the gateway restarted)
     │    └── UnverifiedLedger    its HMAC chain does not verify (edited, cut short, unsealed)
     └── RegistryError      an image reference could not be pinned to a digest
          ├── PermanentRegistryError  retrying will not help: no such tag, access refused,
          │                           a malformed pull secret
          └── TemporaryRegistryError  the registry is unreachable or failing (5xx, 429, connect)

A reconciler maps ``PermanentRegistryError`` to ``kopf.PermanentError`` (a clear condition on the
object) and ``TemporaryRegistryError`` to ``kopf.TemporaryError`` with a backoff.
"""


class ClusterError(Exception):
    """Base of the cluster package's own errors."""


class SpecError(ClusterError, ValueError):
    """A custom resource does not satisfy its model; the message names the object and field."""


class SecretNotOffered(SpecError):
    """A RunSpec names a Secret the operator will not use for it (not labelled as offered to
    runs, or one of agent-health's own); the message names the field and the label to add."""


class SchemaError(ClusterError):
    """A pydantic schema node has no structural Kubernetes equivalent."""


class RegistryError(ClusterError):
    """An image could not be resolved to a ``sha256`` digest; the message names the image."""


class PermanentRegistryError(RegistryError):
    """The registry answered, and retrying will not change the answer (fix the spec or secret)."""


class TemporaryRegistryError(RegistryError):
    """The registry could not answer now; retry with a backoff (``retry_after`` seconds when
    the registry said how long, as a 429 or 503 may)."""

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class LedgerUnavailable(ClusterError):
    """Reading a cell's ledger failed for a reason that may heal (retry, never grade it)."""


class PhaseError(ClusterError):
    """A run was asked to move between phases in a way its lifecycle forbids."""


class DoubtfulEvidence(ClusterError):
    """A cell's ledger cannot be trusted (tampered, missing, another cell's); never a pass.

    Its grade is ``errored`` with cause ``agent``: evidence that cannot be checked must not
    lift a result out of the pass rate, or breaking the evidence of a failed test would
    raise the agent's grade.
    """


class UnverifiedLedger(DoubtfulEvidence):
    """A cell's ledger whose HMAC chain does not verify: a record edited, removed, moved or
    not sealed, or the chain cut short before its ``cell-end``. Graded as any doubtful
    evidence; the grade says its ledger did not verify (``CellGrade.verified``)."""


class IncompleteEvidence(DoubtfulEvidence):
    """The infrastructure left a gap in a cell's ledger (its gateway restarted mid-cell).

    Its grade is ``errored`` with cause ``infra``: the ledger the gateway kept is sound, but
    what passed while it was down is not on record, so the test cannot be graded on it.
    """
