"""The ledger: records, the HMAC chain, keys and assignments, its stores, the spool, pod logs,
and reading hostile JSON.
"""
