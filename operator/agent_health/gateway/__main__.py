"""``python -m agent_health.gateway``: the sidecar without the rest of the CLI."""

from agent_health.gateway import command

raise SystemExit(command.main())
