"""Case files: JSON (and JSONL) test cases in the TypeScript agent-health's format.

The layers, each a module: :mod:`.positions` finds the line of each value in a file's text;
:mod:`.model` is upstream's ``TestCase`` as pydantic models; :mod:`.checks` turns one raw case
into a model or into problems (upstream's validation, every problem at once, with
``lenient`` and unknown-field warnings); :mod:`.forms` reads a file in each form upstream
writes (a list, one case, ``{name, testCases}``, ``{benchmarks}``, a benchmark naming
``testCaseIds``, JSONL). :mod:`agent_health.engine.loading.datasuite` declares the tests.
"""
