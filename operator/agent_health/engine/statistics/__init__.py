"""The numbers behind every interval and comparison agent-health prints: the estimators
(:mod:`.stats`, drawing with :mod:`.resample`), the intervals a report carries and pass@k
(:mod:`.uncertainty`), two runs paired by test id (:mod:`.pairing`), and an agent matrix
side by side (:mod:`.matrix`). docs/statistics.md explains them.
"""
