"""Running tests: one (test, repeat) with its fixtures, hooks, timeout and teardown
(:mod:`.runner`, :mod:`.fixtures`, what it prints: :mod:`.capture`), many in a session
(:mod:`.session`), and the agent a run starts from its config (:mod:`.agent_process`).
"""
