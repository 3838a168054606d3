"""Size follows concept (docs/architecture.md, "Import layers").

A module holds one concept, however long that takes: kopf's ``on.py`` is ~970 lines and
httpx's ``_client.py`` ~2,000, each one thing. What is checked is the rare long one: a
module over :data:`LIMIT` lines says in its docstring why it is still one concept, in a
sentence that starts with :data:`MARKER`. No module is split to meet a number.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest
from support.ship_support import ROOT

PACKAGE = ROOT / "operator" / "agent_health"
LIMIT = 600
MARKER = "One concept:"


def _says_why(source: str) -> bool:
    doc = ast.get_docstring(ast.parse(source)) or ""
    reason = doc.partition(MARKER)[2].strip()
    return len(reason) >= 20


def _long_modules() -> dict[str, str]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        if source.count("\n") > LIMIT:
            found[path.relative_to(PACKAGE).as_posix()] = source
    return found


def test_every_long_module_says_in_its_docstring_why_it_is_one_concept() -> None:
    missing = [name for name, source in _long_modules().items() if not _says_why(source)]
    assert not missing, (
        f"these modules are over {LIMIT} lines: say in each docstring why it is one concept "
        f"('{MARKER} <why>'), or move what is a concept of its own out: " + ", ".join(missing)
    )


def test_the_reason_must_say_something() -> None:
    assert _says_why('"""Matchers.\n\nOne concept: every matcher of a RunResult, one class."""')
    assert not _says_why('"""Matchers.\n\nOne concept: big."""')
    assert not _says_why('"""Matchers, a long module."""')


def test_no_module_carries_the_old_line_count_marker() -> None:
    # The old rule (350 lines, a comment at the top) split concepts by count; its markers go.
    marked = [
        path.relative_to(PACKAGE).as_posix()
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.read_text(encoding="utf-8").startswith("# Over 350 lines")
    ]
    assert not marked, f"drop the '# Over 350 lines' comment from: {', '.join(marked)}"


# Rooms with faces (docs/architecture.md, "The parts"): a room is a package whose
# ``__init__`` names what the rest of the house may call; no module outside it imports one of
# its modules. The engine's rooms are its subpackages.
ROOMS = sorted(
    f"agent_health.engine.{path.parent.name}" for path in (PACKAGE / "engine").glob("*/__init__.py")
)


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(tree: ast.Module) -> list[tuple[int, str]]:
    """Every module an import statement names (``from P import x`` names ``P.x`` too, which
    is a module when ``x`` is one)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.append((node.lineno, node.module))
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return found


def _is_module(dotted: str) -> bool:
    path = PACKAGE.parent.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def test_the_engine_has_rooms() -> None:
    assert "agent_health.engine.running" in ROOMS
    assert "agent_health.engine.reports" in ROOMS


def test_no_module_reaches_past_a_rooms_face() -> None:
    reaching = []
    for path in sorted(PACKAGE.rglob("*.py")):
        me = _module_name(path)
        for line, name in _imported(ast.parse(path.read_text(encoding="utf-8"))):
            for room in ROOMS:
                inside = me == room or me.startswith(room + ".")
                if not inside and name.startswith(room + ".") and _is_module(name):
                    reaching.append(f"{path.relative_to(PACKAGE)}:{line} imports {name}")
    assert not reaching, (
        "import the room's face (`from agent_health.engine import ROOM`, then `ROOM.name`; "
        "add the name to the room's __init__ if it is missing), not its modules:\n"
        + "\n".join(reaching)
    )


def _face(path: Path) -> tuple[dict[str, str], dict[str, str], list[str]] | None:
    """A face's names as its ``TYPE_CHECKING`` imports say, as its ``faces.lazy`` map says,
    and its ``__all__``; None for a package that does not load names lazily."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = _module_name(path)
    typed: dict[str, str] = {}
    lazy: dict[str, str] | None = None
    exported: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for statement in node.body:
                if isinstance(statement, ast.ImportFrom) and statement.module:
                    module = statement.module.removeprefix(package + ".")
                    for alias in statement.names:
                        if statement.module.startswith(package + "."):
                            shown = alias.asname or alias.name
                            typed[shown] = (
                                module if shown == alias.name else f"{module}:{alias.name}"
                            )
        if (
            isinstance(node, ast.Call)
            and ast.unparse(node.func) == "faces.lazy"
            and isinstance(node.args[1], ast.Dict)
        ):
            lazy = {
                ast.literal_eval(k): ast.literal_eval(v)
                for k, v in zip(node.args[1].keys, node.args[1].values, strict=True)
            }  # type: ignore[arg-type]
        if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "__all__":
            exported = ast.literal_eval(node.value)
    return None if lazy is None else (typed, lazy, exported)


FACES = {
    _module_name(path): found
    for path in sorted(PACKAGE.rglob("__init__.py"))
    if (found := _face(path)) is not None
}


def test_every_room_of_the_engine_has_a_face() -> None:
    assert set(ROOMS) - {"agent_health.engine.reporters"} <= set(FACES)
    assert "agent_health.engine.reporters" in FACES


@pytest.mark.parametrize("package", sorted(FACES))
def test_a_face_says_the_same_names_to_readers_and_at_run_time(package: str) -> None:
    typed, lazy, exported = FACES[package]
    assert typed == lazy, f"{package}: its TYPE_CHECKING imports and faces.lazy map differ"
    assert set(lazy) <= set(exported), f"{package}: add to __all__: {set(lazy) - set(exported)}"
    face = importlib.import_module(package)
    for name, where in lazy.items():
        module, _, attr = where.partition(":")
        inner = importlib.import_module(f"{package}.{module}")
        assert getattr(face, name) is getattr(inner, attr or name), f"{package}.{name}"


@pytest.mark.parametrize("package", sorted(FACES))
def test_no_name_of_a_face_is_also_one_of_its_modules(package: str) -> None:
    # `from ROOM import x` would mean the module to Python and the name to a type checker.
    folder = PACKAGE.parent.joinpath(*package.split("."))
    modules = {p.stem for p in folder.glob("*.py")} | {
        p.parent.name for p in folder.glob("*/__init__.py")
    }
    _, _, exported = FACES[package]
    assert not (set(exported) & modules), f"{package}: rename {set(exported) & modules}"


def test_no_module_is_in_a_circle() -> None:
    """No module imports itself through others, TYPE_CHECKING imports included: a circle
    means two modules are one concept, or one reaches a level above it."""
    import grimp

    graph = grimp.build_graph("agent_health")
    circles: dict[frozenset[str], str] = {}
    for module in sorted(graph.modules):
        for imported in sorted(graph.find_modules_directly_imported_by(module)):
            chain = graph.find_shortest_chain(importer=imported, imported=module)
            if imported != module and chain:
                circle = (module, *chain)
                circles.setdefault(frozenset(circle), " -> ".join(circle))
    assert not circles, "break these circles:\n" + "\n".join(sorted(circles.values()))
