"""Errors raised by the ledger.

::

    LedgerError                    anything the ledger cannot do
     ├── RecordError               a line is not a valid record (bad JSON, unknown kind or version)
     ├── LedgerKeyError            the HMAC key is missing, unreadable or too short
     ├── ChainError                appending would break the chain (a stored chain does not verify)
     ├── LedgerLogError            a gateway's log holds no whole ledger of its cell (podlog)
     └── BackendError              the storage behind a ledger URL failed
          ├── BackendConfigError   the URL or options are wrong (unknown scheme, missing extra)
          └── LedgerTooLarge       the ledger would overflow its backend (ConfigMap 1 MiB)

Every message is one line that names the cell, line or URL and says what to do. Third-party
errors (OSError, httpx, botocore) are translated at the boundary with ``raise ... from err``.
"""


class LedgerError(Exception):
    """The ledger could not read, write or verify something."""


class RecordError(LedgerError):
    """A ledger line is not a valid record."""

    def __init__(self, message: str, *, line: int | None = None) -> None:
        super().__init__(message)
        self.line = line


class LedgerKeyError(LedgerError):
    """The HMAC key is missing, unreadable or too short."""


class ChainError(LedgerError):
    """A stored chain does not verify, so it cannot be appended to."""


class LedgerLogError(LedgerError):
    """A gateway's log does not hold its cell's whole ledger (missing, cut short, edited)."""


class BackendError(LedgerError):
    """The storage behind a ledger URL failed (I/O, HTTP, permissions)."""


class BackendConfigError(BackendError):
    """The ledger URL or backend options are wrong."""


class LedgerTooLarge(BackendError):
    """The ledger would exceed what its backend can hold; nothing was truncated."""
