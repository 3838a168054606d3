"""``python -m agent_health.cli``: the same as the ``agent-health`` command."""

from agent_health.cli.app import main

raise SystemExit(main())
