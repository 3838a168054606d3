"""A case's ``followUpQuestions``: the later turns of its conversation.

Upstream's follow-up is ``{trigger, question, businessValue}``; each question is one more
turn of the case's one ``agent.run()``, asked in order when its trigger holds for the turn
before it:

* ``always`` — asked whatever the agent did;
* ``results_available`` — asked when the agent answered (a non-empty answer) and none of
  its tool calls failed;
* ``error`` — asked when one of the agent's tool calls failed (a ``tool_result`` step with
  status ``error``).

A follow-up whose trigger does not hold is passed over; the conversation ends when none is
left. When every trigger is ``always`` the questions are plain scripted turns
(``turns=[...]``: it ends ``turns-done``); otherwise a user function asks them (it ends
``user-stopped``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from agent_health.engine.loading.casefiles import model
from agent_health.sdk import turns


def scripted(follow_ups: Sequence[model.FollowUp]) -> list[str] | None:
    """The questions as scripted turns, when every one is always asked (else ``None``)."""
    if all(f.trigger == "always" for f in follow_ups):
        return [f.question for f in follow_ups]
    return None


def holds(trigger: str, turn: turns.Turn) -> bool:
    """Whether a follow-up with ``trigger`` is asked after ``turn``."""
    failed = any(s.type == "tool_result" and s.status == "error" for s in turn.trajectory)
    if trigger == "error":
        return failed
    if trigger == "results_available":
        return bool(turn.output.strip()) and not failed
    return True


def asker(follow_ups: Sequence[model.FollowUp]) -> Callable[[turns.Conversation], str | None]:
    """A user that asks each follow-up in order when its trigger holds, and then stops.

    Which follow-up comes next is worked out from the conversation alone (each asked one
    is a turn of it), so the user holds no state of its own and a replay asks the same.
    """

    def ask(conversation: turns.Conversation) -> str | None:
        asked = [t.user for t in conversation.turns[1:]]
        position = 0
        for said in asked:  # the follow-ups asked so far, in order
            while position < len(follow_ups) and follow_ups[position].question != said:
                position += 1
            position += 1
        last = conversation.turns[-1]
        for follow_up in follow_ups[position:]:
            if holds(follow_up.trigger, last):
                return follow_up.question
        return None

    return ask
