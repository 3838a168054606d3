"""Traces of a run and the metrics derived from them (docs/writing-tests.md, "Traces").

* :mod:`view` — ``result.traces``: the :class:`~view.TracesView` of one run.
* :mod:`records` — the span/log records and the ``TraceSource`` seam; :mod:`traceparent` —
  what a W3C ``traceparent`` holds (the trace id, the parent span id).
* :mod:`trajectory`, :mod:`exchanges`, :mod:`opensearch` — the sources: the agent's own
  trajectory, the gateway's recorded exchanges, OTel spans in OpenSearch.
* :mod:`metrics` — derived metrics of every test; :mod:`settings` — ``traces={...}`` and
  ``prices={...}``; :mod:`errors` — the exception tree.
"""
