"""Errors of the cluster package.

::

    ClusterError
     ├── SpecError          a RunSpec or EvaluationRun body fails its model (the user's fault)
     ├── SchemaError        a model cannot become a structural CRD schema (a bug in the models)
     ├── LedgerUnavailable  a cell's ledger cannot be read now (the store failed); grade it later
     ├── PhaseError         an EvaluationRun phase change the lifecycle does not allow (a bug)
     └── DoubtfulEvidence   a cell's ledger proves nothing; grading turns it into an errored grade
"""


class ClusterError(Exception):
    """Base of the cluster package's own errors."""


class SpecError(ClusterError, ValueError):
    """A custom resource does not satisfy its model; the message names the object and field."""


class SchemaError(ClusterError):
    """A pydantic schema node has no structural Kubernetes equivalent."""


class LedgerUnavailable(ClusterError):
    """Reading a cell's ledger failed for a reason that may heal (retry, never grade it)."""


class PhaseError(ClusterError):
    """A run was asked to move between phases in a way its lifecycle forbids."""


class DoubtfulEvidence(ClusterError):
    """A cell's ledger cannot be trusted (tampered, missing, another cell's); never a pass."""
