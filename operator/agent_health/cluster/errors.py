"""Errors of the cluster package.

::

    ClusterError
     ├── SpecError          a RunSpec or EvaluationRun fails its model (the user's object is wrong)
     ├── SchemaError        a model cannot become a structural CRD schema (a bug in the models)
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


class SchemaError(ClusterError):
    """A pydantic schema node has no structural Kubernetes equivalent."""


class RegistryError(ClusterError):
    """An image could not be resolved to a ``sha256`` digest; the message names the image."""


class PermanentRegistryError(RegistryError):
    """The registry answered, and retrying will not change the answer (fix the spec or secret)."""


class TemporaryRegistryError(RegistryError):
    """The registry could not answer now; retry with a backoff."""
