"""A suite's own folder, ``.agent-health/``: where agent-health keeps what it keeps for a suite
— its local ledgers, the ``--last-failed`` cache, the default history — beside the suite's
config file, wherever a command is run from.

Every layer that keeps a file for a suite finds the folder here (the history's default
location too), so a run without a history never imports the history's location module.
The standard library alone.
"""

from __future__ import annotations

import os
from pathlib import Path

HOME = Path(".agent-health")
"""The folder's name, relative to the folder of the suite's config file: :func:`of`."""


def of(config_file: Path | None, start: Path | None = None) -> Path:
    """The suite's ``.agent-health/`` folder (absolute): beside ``config_file`` (the config
    found upward from the first path given, or ``--config``), else beside ``start`` (that
    first path; its folder when it is a file)."""
    return folder(config_file, start) / HOME


def folder(config_file: Path | None, start: Path | None = None) -> Path:
    """The suite's folder (absolute): ``config_file``'s, else ``start``'s (its folder when it
    is a file), else the working directory."""
    if config_file is not None:
        return Path(os.path.abspath(config_file)).parent
    here = Path(os.path.abspath(start or Path.cwd()))
    return here.parent if here.is_file() else here
