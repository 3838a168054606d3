"""The `agent-health` command: its flags, exit codes, output and the runs it starts, end to end."""
