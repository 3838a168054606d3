"""The same 400-call work through agent-health, Inspect AI and promptfoo, next to no harness.

``make bench-peers`` installs the peers, pinned, outside the project (``install.sh``:
Inspect AI in its own venv, promptfoo in an npm prefix under ``.cache/bench-peers``) and runs
this script. One REST protocol v1 agent on 127.0.0.1 answers "pong" after ``--latency``
seconds; every tool makes ``--calls`` calls to it, ``-j`` at a time, and checks each answer:

* the plain 32-thread ``http.client`` script of ``bench/plain_client.py`` (the baseline);
* ``agent-health run`` with its defaults (the local ledger on), one test per call;
* Inspect AI: a task of N samples whose solver POSTs the sample (``inspect_task.py``);
* promptfoo: its ``http`` provider, N test cases with an ``equals`` assertion, ``-j``.

Each is a whole command in a fresh process; rounds are interleaved and the median wall time
is printed with its ratio to the plain client. The script reports, it never gates.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import engine_overhead  # noqa: E402
import slow_agent  # noqa: E402
import suites  # noqa: E402

Check = Callable[[engine_overhead.Sample], bool]


def passed(n: int) -> Check:
    return lambda s: s.code == 0 and f"{n} passed" in s.output


def promptfoo_config(url: str, n: int, j: int) -> dict[str, object]:
    body = {"prompt": "{{prompt}}", "context": [], "run_id": "promptfoo-{{i}}", "env": {}}
    return {
        "description": "agent-health peers benchmark",
        "prompts": ["ping"],
        "providers": [
            {
                "id": "http",
                "config": {
                    "url": url,
                    "method": "POST",
                    "headers": {"content-type": "application/json"},
                    "body": body,
                    "transformResponse": "json.output",
                },
            }
        ],
        "tests": [
            {"vars": {"i": i}, "assert": [{"type": "equals", "value": "pong"}]} for i in range(n)
        ],
        "evaluateOptions": {"maxConcurrency": j, "cache": False, "showProgressBar": False},
    }


def promptfoo_passed(results: Path, n: int) -> Check:
    def check(sample: engine_overhead.Sample) -> bool:
        try:
            stats = json.loads(results.read_text())["results"]["stats"]
        except (OSError, ValueError, KeyError):
            return False
        return int(stats.get("successes", 0)) == n

    return check


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, default=HERE.parents[1] / ".cache" / "bench-peers")
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument("-j", type=int, default=32)
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    inspect_python = args.cache / "venv" / "bin" / "python"
    promptfoo = args.cache / "npm" / "node_modules" / ".bin" / "promptfoo"
    missing = [str(p) for p in (inspect_python, promptfoo) if not p.exists()]
    if missing:
        print(f"peers not installed ({', '.join(missing)}): run make bench-peers", file=sys.stderr)
        return 2
    n, j = args.calls, args.j
    agent_health = Path(sys.executable).parent / "agent-health"
    with (
        tempfile.TemporaryDirectory(prefix="agent-health-peers-") as tmp,
        slow_agent.serving(args.latency) as url,
    ):
        work = Path(tmp)
        suite = suites.write_ours(work / "suite", n, 100, config=False)
        (work / "promptfooconfig.json").write_text(json.dumps(promptfoo_config(url, n, j)))
        results = work / "promptfoo-results.json"
        env = {"PROMPTFOO_DISABLE_TELEMETRY": "1", "PROMPTFOO_DISABLE_UPDATE": "1"}
        os.environ.update({**env, "PROMPTFOO_CONFIG_DIR": str(work / "promptfoo-home")})
        sides: list[tuple[str, list[str], Path, Check]] = [
            (
                f"plain {j}-thread client (baseline)",
                [sys.executable, str(HERE.parent / "plain_client.py"), url, str(n), str(j)],
                work,
                passed(n),
            ),
            (
                "agent-health (defaults)",
                [str(agent_health), "run", ".", "-j", str(j), "--agent", f"rest+{url}"],
                suite,
                lambda s: s.code == 0 and bool(re.search(rf"\b{n} passed", s.output)),
            ),
            (
                "Inspect AI 0.3.285",
                [str(inspect_python), str(HERE / "inspect_task.py"), url, str(n), str(j)],
                work,
                passed(n),
            ),
            (
                "promptfoo 0.121.20",
                [str(promptfoo), "eval", "-c", "promptfooconfig.json", "-j", str(j), "--no-cache",
                 "--no-table", "-o", str(results)],
                work,
                promptfoo_passed(results, n),
            ),
        ]  # fmt: skip
        walls: dict[str, list[float]] = {label: [] for label, *_ in sides}
        for _ in range(args.rounds):
            for label, argv_, cwd, check in sides:
                results.unlink(missing_ok=True)
                sample = engine_overhead.measure(argv_, cwd)
                if not check(sample):
                    tail = "\n".join(sample.output.strip().splitlines()[-15:])
                    print(f"{label} failed (exit {sample.code}):\n{tail}", file=sys.stderr)
                    return 1
                walls[label].append(sample.wall_s)
    baseline = statistics.median(walls[sides[0][0]])
    print(
        f"peers: {n} calls to a {args.latency * 1000:.0f} ms agent, {j} at a time — Python "
        f"{platform.python_version()}, {os.cpu_count()} CPUs, load average "
        f"{os.getloadavg()[0]:.1f}; median of {args.rounds} rounds, whole commands"
    )
    for label, values in walls.items():
        wall = statistics.median(values)
        rounds = ", ".join(f"{v:.2f}" for v in values)
        print(f"   {label:<36}{wall:8.2f} s   {wall / baseline:6.2f}x plain   ({rounds})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
