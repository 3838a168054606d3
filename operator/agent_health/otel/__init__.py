"""OpenTelemetry export of runs (docs/otel.md): each test as a trace in OTLP, in the GenAI
semantic conventions.

* :mod:`.settings` — where spans go (``--otlp``, ``OTEL_EXPORTER_OTLP_*``, ``otlp={...}``).
* :mod:`.conventions` — the pinned attribute names.
* :mod:`.records`, :mod:`.spans`, :mod:`.trajectory_spans` — what one test becomes: a tree
  of plain span records (ids, times and attribute values made once, in :mod:`.records`).
* :mod:`.export` — what the engine is told about each test and the run; hands them to one
  worker thread, off the event loop, through a bounded queue.
* :mod:`.exporter` — turns records into the OpenTelemetry SDK's spans (the ``otel`` extra) on
  its batch processor. The only module that imports ``opentelemetry``, and only when export
  is on: the default path never loads it.
"""
