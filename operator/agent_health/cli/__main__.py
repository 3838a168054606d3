"""``python -m agent_health.cli``: the same as the ``agent-health`` command."""

from agent_health.cli import console

raise SystemExit(console())
