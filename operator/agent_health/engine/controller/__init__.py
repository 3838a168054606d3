"""The cell's controller container: ``agent-health cell`` runs one test body inside a cell
pod (:mod:`.cell`) from the suite it loads (:mod:`.cellsuite`), or, in a warm pool, the
test its assignment names (:mod:`.warmcell`).
"""
