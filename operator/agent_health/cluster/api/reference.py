"""The CRD field reference in ``docs/operator.md``, generated from the same schemas as the CRDs.

Each kind gets one Markdown table of its ``spec`` and ``status`` fields (path, type, default,
limits, description), read from :func:`.crds.open_api_schema` — the schema the API server
enforces — so the page cannot drift from the models. ``make generate`` rewrites the part of the
page between :data:`BEGIN` and :data:`END`; a test fails while the page is stale::

    python -m agent_health.cluster.api.reference docs/operator.md           # rewrite
    python -m agent_health.cluster.api.reference --check docs/operator.md   # exit 1 if stale
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from agent_health.cluster.api import crds

BEGIN = "<!-- BEGIN GENERATED: CRD fields (make generate) -->"
END = "<!-- END GENERATED: CRD fields -->"


def _type(node: dict[str, Any]) -> str:
    kind = str(node.get("type", "object"))
    if kind == "array":
        return f"list of {_type(node.get('items', {}))}"
    if kind == "object" and isinstance(node.get("additionalProperties"), dict):
        return f"map of {_type(node['additionalProperties'])}"
    if "format" in node:
        return f"{kind} ({node['format']})"
    return kind


def _limits(node: dict[str, Any]) -> str:
    parts = []
    if "enum" in node:
        parts.append("one of " + ", ".join(f"`{v}`" for v in node["enum"]))
    low, high = node.get("minimum"), node.get("maximum")
    if low is not None:
        parts.append(f"{'>' if node.get('exclusiveMinimum') is True else '≥'} {low}")
    if high is not None:
        parts.append(f"{'<' if node.get('exclusiveMaximum') is True else '≤'} {high}")
    for key, word in (("maxItems", "items"), ("maxLength", "characters")):
        if key in node:
            parts.append(f"≤ {node[key]} {word}")
    if "x-kubernetes-list-map-keys" in node:
        keys = ", ".join(node["x-kubernetes-list-map-keys"])
        parts.append(f"unique by {keys}")
    return "; ".join(parts)


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _describe(node: dict[str, Any]) -> str:
    """The node's description, then its CEL rules' messages."""
    rules = [f"Rule: {r['message']}." for r in node.get("x-kubernetes-validations", [])]
    return _cell(" ".join([node.get("description", ""), *rules]).strip())


def _rows(
    node: dict[str, Any], path: str, required: Sequence[str] = ()
) -> Iterator[tuple[str, ...]]:
    properties: dict[str, Any] = node.get("properties", {})
    for name, sub in properties.items():
        here = f"{path}.{name}" if path else name
        default = f"`{json.dumps(sub['default'])}`" if "default" in sub else ""
        if name in required:
            default = "required"
        yield (f"`{here}`", _type(sub), default, _limits(sub), _describe(sub))
        if sub.get("type") == "object" and "properties" in sub:
            yield from _rows(sub, here, sub.get("required", ()))
        items = sub.get("items", {})
        if sub.get("type") == "array" and "properties" in items:
            yield from _rows(items, f"{here}[]", items.get("required", ()))


def table(kind: crds.Kind) -> str:
    """The Markdown reference of one kind: a heading, its description and one table."""
    schema = crds.open_api_schema(kind)
    lines = [
        f"### {kind.kind}",
        "",
        f"{schema['description']} `kubectl get {kind.plural}` "
        f"(short names: {', '.join(kind.short_names)}).",
        "",
        "| field | type | default | limits | description |",
        "|---|---|---|---|---|",
    ]
    for part in ("spec", "status"):
        node = schema["properties"][part]
        required = "required" if part == "spec" else ""
        lines.append(f"| `{part}` | object | {required} |  | {_describe(node)} |")
        rows = _rows(node, part, node.get("required", ()))
        lines.extend("| " + " | ".join(row) + " |" for row in rows)
    return "\n".join(lines)


def reference() -> str:
    """Every kind's table, in the order of :data:`.crds.KINDS`."""
    return "\n\n".join(table(kind) for kind in crds.KINDS)


def rewrite(page: str) -> str:
    """``page`` with the generated part replaced by :func:`reference`."""
    start, end = page.find(BEGIN), page.find(END)
    if start < 0 or end < start:
        raise ValueError(f"the page has no generated part: add the lines {BEGIN} and {END}")
    return page[: start + len(BEGIN)] + "\n\n" + reference() + "\n\n" + page[end:]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("page", type=Path, help="the Markdown page, e.g. docs/operator.md")
    parser.add_argument("--check", action="store_true", help="exit 1 when the page is stale")
    args = parser.parse_args(argv)
    page = args.page.read_text(encoding="utf-8")
    fresh = rewrite(page)
    if args.check:
        if fresh != page:
            print(f"{args.page} is stale: run `make generate`", file=sys.stderr)
            return 1
        return 0
    args.page.write_text(fresh, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
