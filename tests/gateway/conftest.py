"""The recording gateway: its listeners, principals, recorder, spool, OTLP and MCP reading, and
what it costs.
"""
