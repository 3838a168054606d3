"""Drawing with replacement, fast, for the bootstrap (:func:`stats.bootstrap_ratio`).

A bootstrap of a suite of hundreds of tests makes a million draws; :class:`Draws` makes them
from random bytes, with the per-draw work in C (``bytes.translate``, ``map``), so an interval
costs a tenth of a second rather than a second. Every index is exactly equally likely
(indices past the end are rejected, never folded back), and the draws depend only on the
``random.Random`` given, so a seeded bootstrap is the same on every machine.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from itertools import islice
from typing import TypeGuard


class Draws:
    """Sums of ``len(values)`` values drawn with replacement, the draws made from random bytes.

    A draw is an index into ``values``; drawing byte-wide index digits and mapping them with
    ``bytes.translate`` and ``map`` keeps the per-draw work in C, five to seven times faster
    than ``randrange``, which matters at 1,000 resamples of a suite of hundreds of tests.
    Indices past the end are rejected, so every value is exactly equally likely. Values may
    be complex numbers: the real parts and the imaginary parts then sum separately (two sums
    over the same draws in one pass).
    """

    def __init__(self, values: Sequence[complex]) -> None:
        n = len(values)
        bits = max(1, (n - 1).bit_length())
        self.n = n
        self._values = list(values)
        self._high = max(0, bits - 8)
        if bits > 16:  # past 65,536 tests: 32 random bits per draw, scaled (slower)
            return
        low_mask = (1 << min(bits, 8)) - 1
        high_mask = (1 << self._high) - 1
        if not self._high:  # one byte per draw: reject bytes whose index is past the end
            self._delete = bytes(v for v in range(256) if v & low_mask >= n)
            self._low = bytes(v & low_mask for v in range(256))
            self._keep = n / (low_mask + 1)
        else:  # two bytes: a row (high digit) and a column; a past-the-end cell holds None
            self._low = bytes(range(256))
            self._high_table = bytes(v & high_mask for v in range(256))
            self._rows = [
                [values[r * 256 + c] if r * 256 + c < n else None for c in range(256)]
                for r in range(high_mask + 1)
            ]
            self._keep = n / ((high_mask + 1) * 256)

    def total(self, rng: random.Random) -> complex:
        """The sum of one resample (n draws)."""
        if self._high > 8:
            words = rng.getrandbits(32 * self.n).to_bytes(4 * self.n, "little")
            n = self.n
            return complex(
                sum(
                    self._values[int.from_bytes(words[i : i + 4], "little") * n >> 32]
                    for i in range(0, 4 * n, 4)
                )
            )
        total: complex = 0
        missing = self.n
        while missing:
            ask = int(missing / self._keep * 1.1) + 16
            if not self._high:
                kept = rng.randbytes(ask).translate(self._low, self._delete)[:missing]
                drawn = list(map(self._values.__getitem__, kept))
            else:
                raw = rng.randbytes(2 * ask)
                rows = map(self._rows.__getitem__, raw[:ask].translate(self._high_table))
                cells = map(list.__getitem__, rows, raw[ask:])
                drawn = list(islice(filter(_present, cells), missing))
            total += sum(drawn)
            missing -= len(drawn)
        return total


def _present(value: complex | None) -> TypeGuard[complex]:
    return value is not None
