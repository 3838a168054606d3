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
    for module in (agent_health, agent_health.sdk):
        assert set(module.__all__) == _public(module), module.__name__


def test_the_readme_imports_work() -> None:
    from agent_health import define_config, expect, judge, test

    assert callable(test)
    assert callable(expect)
    assert callable(judge)
    assert callable(define_config)
