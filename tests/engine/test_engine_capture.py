"""What a test body prints, kept per test (``engine.running.capture``)."""

from __future__ import annotations

import sys

from agent_health.engine.running import capture


def test_a_test_that_prints_nothing_makes_no_stream_and_keeps_none() -> None:
    """Every test has a capture and most print nothing: its streams are made by their
    first write (issue #40), and a stream nobody wrote to reads as None, as before."""
    with capture.installed():
        with capture.capturing() as quiet:
            sys.stdout.flush()  # a flush alone writes nothing
        with capture.capturing() as loud:
            print("to stdout")
    assert (quiet.out, quiet.err) == (None, None)
    assert (quiet.stdout, quiet.stderr) == (None, None)
    assert loud.err is None
    assert (loud.stdout, loud.stderr) == ("to stdout\n", None)
