"""The public surface: ``__all__`` lists exactly what the package exports."""

from __future__ import annotations

import types

import agent_health
import agent_health.sdk


def _public(module: types.ModuleType) -> set[str]:
    return {
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and not isinstance(value, types.ModuleType)
        and name not in {"annotations"}
    }


def test_all_is_complete() -> None:
    # The faces load names when first read (faces.lazy): read every name of __all__ first, so
    # what the module then holds is all it exports — and nothing more.
    for module in (agent_health, agent_health.sdk):
        for name in module.__all__:
            assert getattr(module, name) is not None, f"{module.__name__}.{name}"
        assert set(module.__all__) == _public(module) - {"TYPE_CHECKING"}, module.__name__


def test_the_readme_imports_work() -> None:
    from agent_health import define_config, expect, judge, test

    assert callable(test)
    assert callable(expect)
    assert callable(judge)
    assert callable(define_config)


def test_a_plain_run_does_not_load_optional_stacks() -> None:
    import subprocess
    import sys

    code = (
        "import sys, agent_health.cli; "
        "print(sorted(m for m in ('ag_ui', 'agent_health.judging', 'agent_health.cluster', "
        "'opensearchpy') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
