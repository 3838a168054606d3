"""``agent-health compare``'s terminal lines: what changed between two reports, as
:func:`agent_health.engine.comparing.compare.compare` found it."""

from __future__ import annotations

from agent_health.engine import reports, statistics
from agent_health.engine.comparing import compare


def render(c: compare.Comparison) -> list[str]:
    """The comparison as plain lines for the terminal."""
    lines = [f"compare {c.base_file} → {c.new_file}"]
    sides = (("BASE", c.base_file, c.base_replay), ("NEW", c.new_file, c.new_replay))
    lines.extend(made.said(f"{side} {file}") for side, file, made in sides if made is not None)
    for title, changes in (("newly failing", c.newly_failing), ("newly passing", c.newly_passing)):
        lines.append(f"{title}: {len(changes)}")
        for ch in changes:
            label = reports.repeat_label(ch.repeat, c.repeats)
            repeat = f" {label}" if label else ""
            note = " (test changed)" if ch.changed else ""
            why = f" — {ch.error}" if ch.error and ch.new == "errored" else ""
            new = f"{ch.new} ({ch.cause})" if ch.new == "errored" and ch.cause else ch.new
            lines.append(f"  {ch.base} → {new}  {ch.id}{repeat}{note}{why}")
    if c.score_changes:
        lines.append("score changes:")
        for ch in c.score_changes:
            d = (ch.new_score or 0.0) - (ch.base_score or 0.0)
            label = reports.repeat_label(ch.repeat, c.repeats)
            lines.append(f"  {d:+.3f}  {ch.id}" + (f" {label}" if label else ""))
    if c.conversation_changes:
        lines.append(f"conversation changes: {len(c.conversation_changes)}")
        for tc in c.conversation_changes:
            label = reports.repeat_label(tc.repeat, c.repeats)
            mark = "worse" if tc.worse else "moved"
            lines.append(f"  {mark}  {tc.id}" + (f" {label}" if label else "") + f": {tc.text}")
    listed = (("changed tests", c.changed_tests), ("added", c.added), ("removed", c.removed))
    for title, ids in listed:
        if ids:
            lines.append(f"{title}: {', '.join(ids)}")
    lines.append(
        f"pass rate {compare.pct(c.pass_rate.base)} → {compare.pct(c.pass_rate.new)}"
        + (f" ({c.pass_rate.delta * 100:+.1f} pts)" if c.pass_rate.delta is not None else "")
        + f"; score {_num(c.score, '.3f')}; errored {_num(c.errored, '.0f')}; "
        f"tokens {_num(c.tokens, '.0f')}; cost USD {_num(c.cost_usd, '.6f')}"
    )
    lines.extend(statistics.render_paired(c.paired))
    if c.regressions:
        lines.extend(f"REGRESSION: {r}" for r in c.regressions)
    elif c.gate == "significant":
        lines.append("no significant regression")
    else:
        lines.append("no regression beyond the thresholds")
    return lines


def _num(d: compare.Delta, fmt: str) -> str:
    if d.base is None and d.new is None:
        return "n/a"
    b = "n/a" if d.base is None else format(d.base, fmt)
    n = "n/a" if d.new is None else format(d.new, fmt)
    delta = "" if d.delta is None else f" ({d.delta:+{fmt}})"
    return f"{b} → {n}{delta}"
