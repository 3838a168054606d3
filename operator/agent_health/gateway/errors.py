"""Errors raised by the gateway.

::

    GatewayError                  the gateway cannot start, serve or record
     ├── GatewayConfigError       a route, token file, listen address or setting is wrong
     └── RecordingError           the ledger behind the gateway failed (wraps LedgerError)

An upstream that fails while serving a caller is not an exception of the gateway: the caller
gets a 502/504 with the reason and the exchange is recorded with ``error`` set.
"""


class GatewayError(Exception):
    """The gateway cannot start, serve or record."""


class GatewayConfigError(GatewayError):
    """A route, token file, listen address or setting is wrong."""


class RecordingError(GatewayError):
    """Writing the ledger failed; the message names the cell and the backend's reason."""
