"""A test's outcome: its status and score from its signals (:mod:`.grading`), and the tool
calls it claims held to what its gateway saw (:mod:`.claims`).

The one decision both graders make: the engine after a local body, the operator when it
grades a cell from its ledger — so a test passes or fails for the same reasons in both.
"""
