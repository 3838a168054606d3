"""A pooled cell's assignment: which (test, repeat) a warm sandbox runs, handed over late.

A cell from a warm pool (RunSpec ``spec.isolation.warmPool``) is a pod that was started
before its cell existed: its target is up and ready, its gateway listens, its controller
waits. When the operator claims the sandbox for a cell it writes the cell's identity on the
pod as the annotation :data:`ANNOTATION` (JSON); the kubelet projects that annotation into a
downward-API file which only the gateway and the controller mount (:data:`FILE`), and both
start the cell from it (:func:`wait`). Until then the file is empty.

What it holds is what a cold cell's gateway and controller get from their command lines and
environment: the run id, the ledger cell and the attempt, the test and repeat, the agent of
a matrix, the EvaluationRun, the timeout and how judging goes, the run's ledger URL and
caps — and the cell's ledger key,
wrapped for this sandbox alone (:func:`agent_health.ledger.keys.wrap_cell_key`): the
annotation is readable by whoever may read the pod, the key only with the sandbox's Secret.
The format is versioned (``v``); a reader refuses a version it does not know.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path
from typing import Any

ANNOTATION = "agenthealth.dev/assignment"
DIRECTORY = "/var/run/agent-health/assignment"
FILE = f"{DIRECTORY}/assignment.json"
VERSION = 1
POLL_SECONDS = 0.05
"""How often a waiting container reads the file: a warm start is at most this late."""


class AssignmentError(ValueError):
    """The assignment file holds something that is not an assignment."""


@dataclasses.dataclass(frozen=True)
class Assignment:
    """One cell, as the operator assigned it to a pooled sandbox."""

    cell: str
    """The cell's name: its run id (``AGENT_HEALTH_RUN_ID``) and the pod's cell in reports."""
    ledger_cell: str
    test_id: str
    repeat: int
    attempt: int
    evaluation_run: str
    timeout: int
    ledger_key: str
    """The cell's ledger key, wrapped for this sandbox (base64 text)."""
    agent: str | None = None
    judge_model: str | None = None
    skip_judge: bool = False
    skip_simulate: bool = False
    ledger: str | None = None
    """The ledger URL the cell records into (a run's own: it names the run); ``None``: the
    gateway's ``--ledger``. A ConfigMap ledger's gateway logs its records instead."""
    max_cell_exchanges: int | None = None
    """The run's caps on what the cell records (``--max-cell-exchanges``/``--max-cell-bytes``:
    a ConfigMap ledger's share depends on the run's size); ``None``: the gateway's flags."""
    max_cell_bytes: int | None = None

    def annotation(self) -> str:
        """The annotation's value (compact JSON, keys in a stable order)."""
        body: dict[str, Any] = {
            "v": VERSION,
            "cell": self.cell,
            "ledgerCell": self.ledger_cell,
            "testId": self.test_id,
            "repeat": self.repeat,
            "attempt": self.attempt,
            "evaluationRun": self.evaluation_run,
            "timeout": self.timeout,
            "ledgerKey": self.ledger_key,
            "agent": self.agent,
            "judgeModel": self.judge_model,
            "skipJudge": self.skip_judge,
            "skipSimulate": self.skip_simulate,
            "ledger": self.ledger,
            "maxCellExchanges": self.max_cell_exchanges,
            "maxCellBytes": self.max_cell_bytes,
        }
        return json.dumps(body, separators=(",", ":"))

    @classmethod
    def parse(cls, text: str, *, source: str = ANNOTATION) -> Assignment:
        """The assignment in ``text``; :class:`AssignmentError` naming ``source`` and the field
        when it is not one."""
        try:
            body = json.loads(text)
        except ValueError as err:
            raise AssignmentError(f"{source}: not JSON ({err})") from err
        if not isinstance(body, dict):
            raise AssignmentError(f"{source}: not a JSON object")
        if body.get("v") != VERSION:
            raise AssignmentError(
                f"{source}: assignment version {body.get('v')!r}, this build reads {VERSION}; "
                "run the operator and the cell images of one release"
            )

        def field(name: str, kind: type, *, optional: bool = False) -> Any:
            value = body.get(name)
            if value is None and optional:
                return None
            # bool is an int in Python; an int field must not take true/false.
            if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
                raise AssignmentError(f"{source}: field {name!r} must be a {kind.__name__}")
            return value

        return cls(
            cell=field("cell", str),
            ledger_cell=field("ledgerCell", str),
            test_id=field("testId", str),
            repeat=field("repeat", int),
            attempt=field("attempt", int),
            evaluation_run=field("evaluationRun", str),
            timeout=field("timeout", int),
            ledger_key=field("ledgerKey", str),
            agent=field("agent", str, optional=True),
            judge_model=field("judgeModel", str, optional=True),
            skip_judge=bool(field("skipJudge", bool, optional=True)),
            skip_simulate=bool(field("skipSimulate", bool, optional=True)),
            ledger=field("ledger", str, optional=True),
            max_cell_exchanges=field("maxCellExchanges", int, optional=True),
            max_cell_bytes=field("maxCellBytes", int, optional=True),
        )


def read(path: Path) -> Assignment | None:
    """The assignment in ``path``; ``None`` while there is none yet (no file, or empty)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    if not text.strip():
        return None
    return Assignment.parse(text, source=str(path))


async def wait(path: Path, *, interval: float = POLL_SECONDS) -> Assignment:
    """The assignment in ``path``, once there is one (read off the event loop); a malformed
    one raises :class:`AssignmentError` at once rather than waiting forever."""
    while True:
        found = await asyncio.to_thread(read, path)
        if found is not None:
            return found
        await asyncio.sleep(interval)
