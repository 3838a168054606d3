"""``agent-health compare``: what changed between two reports (:mod:`.compare`), how each
conversation moved turn by turn (:mod:`.compare_turns`), whether a side was replayed
(:mod:`.replayed`), and its terminal lines (:mod:`.compare_render`).
"""
