"""The peers benchmark's work as an Inspect AI task: one POST per sample to the agent.

Run by ``bench/peers/run.py`` with the Inspect AI of ``bench/peers/install.sh`` (its own
venv): ``python inspect_task.py URL N J`` evaluates N samples, J at a time, and prints
``N passed`` from the eval log's accuracy. Each sample POSTs a REST protocol v1 request
and scores the answer's output against "pong" with ``exact()``; no model is called.
"""

from __future__ import annotations

import sys
import tempfile

import aiohttp
from inspect_ai import Task, eval, task
from inspect_ai.dataset import Sample
from inspect_ai.model import ModelOutput
from inspect_ai.scorer import exact
from inspect_ai.solver import Generate, TaskState, solver


@solver
def call_agent(url: str):  # type: ignore[no-untyped-def]
    session: list[aiohttp.ClientSession] = []

    async def solve(state: TaskState, generate: Generate) -> TaskState:
        if not session:
            session.append(aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)))
        body = {"prompt": state.input_text, "context": [], "run_id": str(state.sample_id)}
        async with session[0].post(url, json={**body, "env": {}}) as response:
            answer = await response.json()
        state.output = ModelOutput.from_content(model="agent", content=answer["output"])
        return state

    return solve


@task
def ping(url: str, n: int) -> Task:
    samples = [Sample(input="ping", target="pong", id=i) for i in range(n)]
    return Task(dataset=samples, solver=call_agent(url), scorer=exact())


def main(argv: list[str]) -> int:
    url, n, j = argv[0], int(argv[1]), int(argv[2])
    with tempfile.TemporaryDirectory() as logs:
        [log] = eval(
            ping(url, n),
            model="mockllm/model",
            max_samples=j,
            max_connections=j,
            display="none",
            log_dir=logs,
        )
    if log.status != "success" or log.results is None:
        print(f"inspect eval ended {log.status}: {log.error}")
        return 1
    metrics = log.results.scores[0].metrics
    accuracy = metrics["accuracy" if "accuracy" in metrics else "mean"].value  # exact(): mean
    print(f"{round(accuracy * n)} passed")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
