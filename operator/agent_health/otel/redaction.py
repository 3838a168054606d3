"""What of a test is content, and what its spans say instead while content is not captured.

Content is what the agent was given or answered — its prompt, context, output, tool
arguments and results — and any text that may quote it:

* a check's evidence beyond what the test itself wrote: ``actual`` (the output matched,
  the calls' arguments, a failed tool's output), an assertion's ``message``, the
  ``reasoning`` a ``to_pass()`` copied, whatever a custom evaluator put there;
* the judge's reasoning: the judge reads the agent's answer and routinely quotes it;
* the text of every error: an agent's HTTP error quotes its body, a protocol error what
  came instead of JSON, an assertion what the body put in its message, a judge's error
  the reply it could not read.

Export leaves content out unless it is asked for (``--otlp-content``, the config's
``capture_content``, a RunSpec's ``captureContent``): a trace backend is read by more
people than the run's report is, for longer. What stays is what agent-health itself
decided and the test's author wrote: names, labels, statuses and causes, scores, the
check's ``expected`` and agent-health's own notes on it (``missing``, ``turn``,
``broken_at``), error types, tokens and times. The report and the ledger keep everything.

An agent named by URL loses the URL's user info, query and fragment on every span, content
or not: they are where credentials hide (``rest+https://user:token@host/run``); an error's
text, exported with content, loses the user info of every URL in it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final
from urllib.parse import urlsplit, urlunsplit

from agent_health.otel import records
from agent_health.sdk.results import Signal

HINT: Final = "--otlp-content exports it"
_USER_INFO: Final = re.compile(r"(?<=://)[^\s/@]+@")
"""The ``user:password@`` of a URL inside a text."""
KEPT_EVIDENCE: Final = ("expected", "missing", "turn", "broken_at")
"""The keys of a check's evidence that are never content: what the test asked for, and
agent-health's own notes (what the agent did not report, which turn, which step broke)."""


def explanation(signal: Signal, content: bool) -> str | None:
    """The ``gen_ai.evaluation.explanation`` of ``signal``: its reasoning, its error, or
    its evidence as JSON — with ``content`` as recorded; without it, only what is never
    content, and a word on what was left out."""
    text = signal.reasoning or signal.error
    if content:
        if text is None and signal.kind != "judge" and signal.evidence:
            return records.as_json(signal.evidence)
        return text
    if text is not None:
        what = "reasoning" if signal.reasoning else "error text"
        return f"the {what} is withheld: it may quote the agent ({HINT})"
    if signal.kind == "judge" or not signal.evidence:
        return None
    return records.as_json(evidence(signal.evidence))


def evidence(recorded: Mapping[str, Any]) -> dict[str, Any]:
    """A check's evidence without its content: the kept keys, and the names of the others
    under ``withheld``."""
    kept = {k: v for k, v in recorded.items() if k in KEPT_EVIDENCE}
    withheld = sorted(k for k in recorded if k not in KEPT_EVIDENCE)
    if withheld:
        kept["withheld"] = withheld
    return kept


def error(text: str, content: bool, instead: str) -> str:
    """An error's text as a span may carry it: with ``content``, as written but for the
    user info of the URLs in it (an agent's error names its URL); else ``instead`` (what
    agent-health itself knows: ``errored (agent)``, ``timeout``)."""
    if content:
        return _USER_INFO.sub("", text)
    return f"{instead}; the error's text is withheld: it may quote the agent ({HINT})"


def agent_name(name: str) -> str:
    """An agent's name as spans carry it: a URL form (``rest+https://...``, ``https://...``)
    without user info, query or fragment; any other name as it is."""
    kind, plus, rest = name.partition("+")
    prefixed = bool(plus) and "://" in rest and "://" not in kind
    parts = urlsplit(rest if prefixed else name)
    if not parts.scheme or not parts.netloc:
        return name
    host = parts.netloc.rpartition("@")[2]
    clean = urlunsplit((parts.scheme, host, parts.path, "", ""))
    return f"{kind}+{clean}" if prefixed else clean
