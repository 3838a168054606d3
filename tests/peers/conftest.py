"""MCP peers agent-health runs: the stdio bridge, the mock server, the command."""
