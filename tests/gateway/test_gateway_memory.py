"""The gateway keeps the memory a spool written out frees, instead of faulting it in anew."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from agent_health.gateway import memory

# Buffers the size a spool written out builds (1 MiB each, three at once), made and let go
# again and again; the minor page faults (fresh pages the kernel zeroes) of the later rounds.
_ROUNDS = textwrap.dedent(
    """
    import sys
    from agent_health.gateway import memory

    if sys.argv[1] == "keep" and not memory.keep_freed(1024 * 1024):
        print("untuned")
        raise SystemExit
    def faults():
        with open("/proc/self/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[7])
    def round_():
        held = [bytearray(b"x" * (1024 * 1024 + n)) for n in range(3)]
        del held
    round_()
    before = faults()
    for _ in range(20):
        round_()
    print((faults() - before) // 20)
    """
)


def _faults_per_round(mode: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", _ROUNDS, mode], capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc and /proc: Linux")
def test_buffers_of_a_spools_size_are_used_again_not_faulted_in_anew() -> None:
    kept = _faults_per_round("keep")
    if kept == "untuned":
        pytest.skip("not glibc: mallopt is not there, nothing is tuned")
    # 3 MiB made a round: 768 pages when each round faults them in anew, as by default.
    assert int(_faults_per_round("default")) >= 256
    assert int(kept) < 16


def test_the_bounds_sit_above_a_few_spools_and_within_glibcs() -> None:
    assert memory.bounds(1024 * 1024) == (4 * 1024 * 1024, 8 * 1024 * 1024)
    assert memory.bounds(64 * 1024 * 1024) == (32 * 1024 * 1024, 64 * 1024 * 1024)
    assert memory.bounds(2 * 1024 * 1024) == (8 * 1024 * 1024, 16 * 1024 * 1024)
