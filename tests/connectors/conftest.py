"""How `agent.run()` reaches an agent: REST v1, AG-UI, OpenAI-compatible chat, a subprocess,
their wire and errors, the look before a run.
"""
