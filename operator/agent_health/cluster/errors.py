"""Errors of the cluster package.

::

    ClusterError
     ├── SpecError      a RunSpec or EvaluationRun body fails its model (the user's object is wrong)
     └── SchemaError    a model cannot become a structural CRD schema (a bug in the models)
"""


class ClusterError(Exception):
    """Base of the cluster package's own errors."""


class SpecError(ClusterError, ValueError):
    """A custom resource does not satisfy its model; the message names the object and field."""


class SchemaError(ClusterError):
    """A pydantic schema node has no structural Kubernetes equivalent."""
