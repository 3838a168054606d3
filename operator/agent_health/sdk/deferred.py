"""Models whose fields name models of modules loaded only when pydantic first builds them.

A field annotated with a string (``"breakdowns.RepeatStats"``) is left unresolved as its
class is made; pydantic resolves it from the class's module namespace when it first builds
the model's validator, serializer or JSON schema, and each of those builds goes through
``model_rebuild``. :class:`PartsFirst` runs the model's :meth:`~PartsFirst.load_parts` there
first, so a module the fields name is imported only by a process that builds the model —
not by every run that makes the class (issue #40; ``tests/cli/test_cli_imports.py``).

A model or ``TypeAdapter`` of another module that holds such a model must call its
``model_rebuild()`` first (none does).
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pydantic import BaseModel

    _Model = BaseModel
else:
    _Model = object  # a mixin of pydantic models: BaseModel comes after it in their bases


class PartsFirst(_Model):
    """Mixed into a model before ``BaseModel``: its :meth:`load_parts` runs before pydantic
    resolves its fields."""

    @classmethod
    def load_parts(cls) -> None:
        """Put the modules the fields name where pydantic reads them (the model's module
        namespace): each model says which."""
        raise NotImplementedError(f"{cls.__qualname__} says no parts to load")

    @classmethod
    def model_rebuild(
        cls,
        *,
        force: bool = False,
        raise_errors: bool = True,
        _parent_namespace_depth: int = 2,
        _types_namespace: Any = None,
    ) -> bool | None:
        """pydantic's, :meth:`load_parts` first (one frame more between pydantic's caller
        and its namespace)."""
        cls.load_parts()
        return super().model_rebuild(
            force=force,
            raise_errors=raise_errors,
            _parent_namespace_depth=_parent_namespace_depth + 1,
            _types_namespace=_types_namespace,
        )
