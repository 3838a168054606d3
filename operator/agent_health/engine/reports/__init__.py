"""The run report and what it holds: every TestResult and the aggregates (:mod:`.report`),
one test's entry (:mod:`.entries`, within the caps of :mod:`.bounds`), where a conversation
went wrong (:mod:`.offtrack`), what ran (:mod:`.provenance`), per-test insights and their
run-level rollup (:mod:`.insights`, :mod:`.rollup`), and a saved report read back checked
(:mod:`.savedreport`).
"""
