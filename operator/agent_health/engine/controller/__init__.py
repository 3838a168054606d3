"""The cell's controller container: ``agent-health cell`` runs one test body inside a cell
pod (:mod:`.cell`) from the suite it loads (:mod:`.cellsuite`), or, in a warm pool, the
test its assignment names (:mod:`.warmcell`).
"""

from typing import TYPE_CHECKING

from agent_health import faces

if TYPE_CHECKING:
    from agent_health.engine.controller.cell import main as run_cell
    from agent_health.engine.controller.warmcell import main as run_warm_cell
else:
    __getattr__, __dir__ = faces.lazy(
        __name__,
        {
            "run_cell": "cell:main",
            "run_warm_cell": "warmcell:main",
        },
    )

__all__ = [
    "run_cell",
    "run_warm_cell",
]
