"""How much memory the gateway's C allocator keeps when it frees it, rather than give it back.

A recording gateway writes its spool out (:mod:`agent_health.ledger.spool`) each time it
passes ``--spool-max-bytes`` (1 MiB by default), with a few buffers of about that size: the
file read, its lines, the text written. glibc's ``malloc`` serves a block that large with
pages mapped for it alone, and gives back the free memory at the top of its heap past 128 KiB
(both bounds move up a little as it goes), so each spool written out had the kernel map and
zero those pages anew: a page fault per 4 KiB, several microseconds each on a virtual machine —
what most of a proxied MCP call's sys time above a plain one's was, as its sealed lines, which
carry the results, fill the spool twice as fast (``bench/gateway_overhead.py --mcp`` prints
the faults per call). :func:`keep_freed` sets both bounds above those buffers, so the same
memory is used again: at most :func:`bounds`' trim bound of freed memory stays with the
process.

Only glibc has ``mallopt``; elsewhere (musl, macOS) nothing is changed.
"""

from __future__ import annotations

import ctypes

M_TRIM_THRESHOLD = -1
"""glibc's ``mallopt`` parameter: free memory at the heap's top kept up to this many bytes."""
M_MMAP_THRESHOLD = -3
"""glibc's ``mallopt`` parameter: blocks at least this large get pages of their own."""
MIN_MAP_BYTES = 4 * 1024 * 1024
MAX_MAP_BYTES = 32 * 1024 * 1024  # glibc refuses a larger one (HEAP_MAX_SIZE / 2)


def bounds(spool_max_bytes: int) -> tuple[int, int]:
    """The bounds :func:`keep_freed` sets for a spool written out past ``spool_max_bytes``:
    blocks below a few spools' size come from the heap, and twice that stays when freed."""
    mapped = min(MAX_MAP_BYTES, max(MIN_MAP_BYTES, 4 * spool_max_bytes))
    return mapped, 2 * mapped


def keep_freed(spool_max_bytes: int) -> bool:
    """Set the allocator's bounds for a spool of ``spool_max_bytes`` (:func:`bounds`);
    whether it took them (False off glibc)."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    mapped, kept = bounds(spool_max_bytes)
    # mallopt answers 1 when it took the value, 0 when not.
    return bool(mallopt(M_MMAP_THRESHOLD, mapped)) and bool(mallopt(M_TRIM_THRESHOLD, kept))
