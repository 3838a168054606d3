"""Whether a saved report was made by ``run --replay``, and how far its recording is trusted:
what ``compare`` says of either side, and why it gates on a replayed NEW only when told to.

A replay answers ``agent.run()`` from a recording (:mod:`.replay`): its results say how the
current checks grade recorded answers, not how the agent answers now. A report is a replay
when its ``provenance.replay`` names a recording, or any test says ``replayed`` (a report
written before replays named their recording); ``provenance.replay_verified`` says whether
the recording's HMAC chain verified with its key (:mod:`.recordings`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class Replay(BaseModel):
    """A report made by ``run --replay``: ``agent.run()`` was answered from a recording."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    recording: str | None = Field(description="the recording's ledger URL, when it names one")
    verified: bool | None = Field(
        description="its HMAC chain verified with the ledger's key; false: no key checked it; "
        "None: a report from before replays were verified"
    )

    def said(self, file: str) -> str:
        source = f" of {self.recording}" if self.recording else ""
        if self.verified is None:
            trust = "the recording was not checked"
        elif self.verified:
            trust = "the recording verified with its key"
        else:
            trust = "the recording is UNVERIFIED: no key checked it, its records could have been"
            trust += " edited"
        return (
            f"{file} is a replay{source} ({trust}): agent.run() was answered from the "
            "recording, the agent was not called"
        )


def replay_of(report: Mapping[str, Any]) -> Replay | None:
    """How ``report`` was replayed (``None``: it ran against the agent)."""
    made = report.get("provenance") or {}
    if not made.get("replay") and not any(t.get("replayed") for t in report["tests"]):
        return None
    return Replay(recording=made.get("replay"), verified=made.get("replay_verified"))
