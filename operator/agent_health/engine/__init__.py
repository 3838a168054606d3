"""Loading, discovery, running tests, grading signals and reports.

The engine drives the SDK: it loads test files (:mod:`loader`), resolves fixtures
(:mod:`fixtures`), runs one test (:mod:`runner`), schedules many (:mod:`session`), decides
statuses and scores (:mod:`grading`) and builds the run report (:mod:`report`).
"""
