"""OpenTelemetry export of runs (docs/otel.md): each test as a trace in OTLP, in the GenAI
semantic conventions.

* :mod:`.settings` — where spans go (``--otlp``, ``OTEL_EXPORTER_OTLP_*``, ``otlp={...}``).
* :mod:`.conventions` — the pinned attribute names.
* :mod:`.spans` — what one test becomes: a tree of plain span records (no OpenTelemetry).
* :mod:`.exporter` — hands them to the OpenTelemetry SDK (the ``otel`` extra), off the event
  loop, through a bounded queue. The only module that imports ``opentelemetry``, and only
  when export is on: the default path never loads it.
"""
