"""Did the agent acknowledge a failed tool call? (the ``ignored_tool_errors`` metric)

An error result counts as acknowledged only when later text of the agent ties an admission
to *that* failure:

* a sentence names the failed tool (``search_logs``, "search logs", "search the logs")
  with an admission close to it ("search_logs failed", "I could not search the logs",
  "the search_logs tool returned an error"), and no reporting word between the two
  ("search_logs shows the payment service cannot reach ...", "according to search_logs,
  payments failed" report what the tool found; they do not admit that the tool failed); or
* the text repeats the tool's own error message (three words of it in a row, or both words
  of a two-word message): "the log backend answered 503 service unavailable".

Words such as "cannot", "failed" or "unable" anywhere in the answer are not enough. In root
cause answers ("the payment service cannot reach its database") they are almost always
there, and they speak of the system under diagnosis, not of the agent's own failed tool.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable, Sequence
from typing import Any

# Admissions that something did not work (close to the tool's name, in the same sentence).
_ADMITS = re.compile(
    r"\b(?:fail(?:ed|s|ure|ing)?|unable|could ?n[o']t|can ?not|can't|unavailable|"
    r"timed? ?out|did ?n[o']t work|not (?:reachable|available|respond\w*|work\w*)|"
    r"errored|error(?:s|ed)?|broken|denied|refused|unsuccessful)\b",
    re.IGNORECASE,
)
# Words that introduce what a tool *reported*: an admission after them is about the system.
_REPORTS = re.compile(
    r"\b(?:show(?:s|ed|n)?|say(?:s)?|said|report(?:s|ed)?|found|find(?:s)?|indicat\w*|"
    r"reveal\w*|confirm\w*|according|suggest\w*|mention\w*)\b|:",
    re.IGNORECASE,
)
# The tool cited as a source ("according to search_logs, ..."): what follows is its finding.
_CITES = re.compile(r"\b(?:according to|per|from|as|via|based on)\s+(?:the\s+)?$", re.IGNORECASE)
_SENTENCES = re.compile(r"(?<=[.!?;])\s+|\n+")
_WORD = re.compile(r"[a-z0-9]+")
WINDOW = 4
"""At most this many words between the tool's name and the admission."""
QUOTE = 3
"""Words of the tool's error message in a row that count as repeating it."""


def error_text(output: Any, content: str | None = None) -> str:
    """The message of an error result: its ``error``/``message``/``detail``, else all of it."""
    if isinstance(output, dict):
        for key in ("error", "message", "detail", "reason"):
            value = output.get(key)
            if isinstance(value, str) and value.strip():
                return value
            if isinstance(value, dict):
                return error_text(value)
    if isinstance(output, str) and output.strip():
        return output
    if output is not None:
        return json.dumps(output, default=str)
    return content or ""


@functools.lru_cache(maxsize=256)  # a memo of a pure function: tool names repeat across runs
def _mention(tool: str) -> re.Pattern[str]:
    """The tool's name as written, or its parts as words ("search logs", "search the logs",
    "log search"), allowing a plural."""
    parts = [p for p in re.split(r"[_\-.\s]+", tool.lower()) if p]
    forms = [re.escape(tool)]
    if len(parts) > 1:
        words = [rf"{re.escape(p.rstrip('s'))}s?" if len(p) > 3 else re.escape(p) for p in parts]
        forms.append(r"\W+(?:\w+\W+)?".join(words))
        forms.append(r"\W+".join(reversed(words)))
    return re.compile(r"\b(?:" + "|".join(forms) + r")\b", re.IGNORECASE)


def _words_between(text: str) -> int:
    return len(_WORD.findall(text.lower()))


def admits(sentence: str, mention: re.Pattern[str]) -> bool:
    """Whether ``sentence`` names the tool with an admission close to it."""
    names = [
        (m.start(), m.end())
        for m in mention.finditer(sentence)
        if not _CITES.search(sentence[max(0, m.start() - 20) : m.start()])
    ]
    if not names:
        return False
    for admission in _ADMITS.finditer(sentence):
        for start, end in names:
            if admission.start() >= end:
                between = sentence[end : admission.start()]
            elif admission.end() <= start:
                between = sentence[admission.end() : start]
            else:
                continue  # the admission is inside the name itself (a tool "check_failed")
            if _words_between(between) <= WINDOW and not _REPORTS.search(between):
                return True
    return False


def ngrams(text: str, n: int = QUOTE) -> set[tuple[str, ...]]:
    """The runs of ``n`` words of ``text`` (lower-cased), for quoting checks."""
    words = _WORD.findall(text.lower())
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


def quotes(error: str) -> set[tuple[str, ...]]:
    """What repeating ``error`` means: its word trigrams (a two-word message: the pair)."""
    words = _WORD.findall(error.lower())
    if len(words) >= QUOTE:
        return ngrams(error)
    if len(words) == 2:
        return {tuple(words)}
    return set()  # one word ("timeout") is too common to prove anything


def count_ignored(
    errors: Sequence[tuple[int, str, str]], answers: Sequence[tuple[int, str]]
) -> int:
    """How many of ``errors`` (position, tool, message) no later answer acknowledges.

    ``answers`` are (position, text) in order. One backward pass: the answers after each
    error are read once, whatever the number of errors.
    """
    if not errors:
        return 0
    mentions = {tool: _mention(tool) for tool in {tool for _, tool, _ in errors}}
    wanted = {e: quotes(e) for e in {message for _, _, message in errors}}
    sizes = {len(q) for grams in wanted.values() for q in grams}
    acknowledged: set[str] = set()
    said: set[tuple[str, ...]] = set()
    ignored = 0
    a = len(answers) - 1
    for position, tool, message in reversed(errors):
        while a >= 0 and answers[a][0] > position:
            text = answers[a][1]
            _read(text, mentions, acknowledged)
            for size in sizes:
                said |= ngrams(text, size)
            a -= 1
        if tool not in acknowledged and not (wanted[message] & said):
            ignored += 1
    return ignored


def _read(text: str, mentions: dict[str, re.Pattern[str]], into: set[str]) -> None:
    for sentence in _sentences(text):
        for tool, mention in mentions.items():
            if tool not in into and admits(sentence, mention):
                into.add(tool)


def _sentences(text: str) -> Iterable[str]:
    return (s for s in _SENTENCES.split(text) if s.strip())
