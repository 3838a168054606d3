"""OpenTelemetry export of runs (docs/otel.md): each test as a trace in OTLP, in the GenAI
semantic conventions.

* :mod:`.settings` — where spans go (``--otlp``, ``OTEL_EXPORTER_OTLP_*``, ``otlp={...}``).
* :mod:`.conventions` — the pinned attribute names.
* :mod:`.records`, :mod:`.spans`, :mod:`.trajectory_spans` — what one test becomes: a tree
  of plain span records (ids, times and attribute values made once, in :mod:`.records`).
* :mod:`.export` — what the engine is told about each test and the run; hands them to one
  worker thread, off the event loop, through a bounded queue.
* :mod:`.encode` — records as the body of an OTLP/HTTP request: protobuf with
  opentelemetry-proto's messages (the ``otel`` extra), or OTLP/JSON with the standard library.
* :mod:`.exporter` — the pending request, sent in batches with httpx by the export's worker.
  Loaded only when export is on: the default path loads neither, nor any OpenTelemetry
  module; no export loads the OpenTelemetry SDK.
"""
