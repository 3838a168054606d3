"""Every JUnit file a test writes is read as a CI system would: strictly, against a schema.

:func:`check` parses a file with a strict XML 1.0 parser (a single character XML forbids, an
ANSI escape from an agent's error body, fails it) and validates it against
``tests/data/junit.xsd`` (the Jenkins/Ant ``junit-10.xsd`` shape; its header says what it
adds). ``conftest.py`` runs :func:`check_all` on each test's ``tmp_path`` when the test ends,
so no test can write a JUnit file that a CI system would refuse.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

SCHEMA = Path(__file__).resolve().parents[1] / "data" / "junit.xsd"


@functools.cache
def _schema() -> Any:
    import xmlschema

    return xmlschema.XMLSchema10(SCHEMA)


def check(path: Path) -> None:
    """Raise ``AssertionError`` naming ``path`` when it is not well-formed, does not match the
    schema, or writes Python's ``None`` as a value."""
    import xml.etree.ElementTree as ET

    import xmlschema

    try:
        root = ET.parse(path).getroot()  # expat: XML 1.0, no recovery
    except ET.ParseError as err:
        raise AssertionError(f"{path} is not well-formed XML: {err}") from err
    try:
        _schema().validate(root)
    except xmlschema.XMLSchemaValidationError as err:
        raise AssertionError(f"{path} does not match {SCHEMA.name}: {err.reason}\n{err}") from err
    nones = [
        (node.tag, name)
        for node in root.iter()
        for name, value in node.attrib.items()
        if value == "None"
    ]
    assert not nones, f"{path}: Python's None written as a value: {nones[:5]}"


def is_junit(path: Path) -> bool:
    """Whether ``path`` is a JUnit file agent-health wrote (its root is ``testsuites``)."""
    try:
        with path.open("rb") as f:
            head = f.read(512)
    except OSError:
        return False
    return b"<testsuites" in head


def check_all(folder: Path) -> list[Path]:
    """:func:`check` every JUnit file under ``folder``; the files checked.

    Hidden folders (ledgers under ``.agent-health``, caches) and mount points (a test's
    container storage) are not searched: nothing writes a JUnit file there."""
    found = []
    for top, dirs, files in os.walk(folder):
        dirs[:] = [
            d for d in dirs if not d.startswith(".") and not os.path.ismount(os.path.join(top, d))
        ]
        found += [Path(top, f) for f in files if f.endswith(".xml")]
    checked = [p for p in sorted(found) if p.is_file() and is_junit(p)]
    for path in checked:
        check(path)
    return checked
