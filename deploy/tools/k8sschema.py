"""Kubernetes JSON Schemas (as kubernetes-validate ships them) -> standalone files.

Data flow: the wheel holds, per Kubernetes version, one schema per type plus a shared
`_definitions.json`, joined by `$ref: "/api/_definitions.json#/$defs/NAME"` (and, inside
the definitions file, `#/$defs/NAME`). kubeconform
loads one file per kind and does not fetch other files for `$ref`s, so
`standalone(kinds, definitions)` writes, for every top-level kind (a schema whose `kind`
property is an enum), a copy whose refs point inside itself (`#/$defs/NAME`) with exactly
the definitions it reaches. About 160 kinds and 7 MB per version.
"""

from __future__ import annotations

from typing import Any

JSON = dict[str, Any]

_PREFIXES = ("/api/_definitions.json#/$defs/", "#/$defs/")


def is_kind(schema: JSON) -> bool:
    return "enum" in ((schema.get("properties") or {}).get("kind") or {})


def standalone(schema: JSON, definitions: JSON) -> JSON:
    """`schema` with its refs made local and the reachable `$defs` copied in."""
    reached: dict[str, Any] = {}
    todo = _refs(schema)
    while todo:
        name = todo.pop()
        if name in reached:
            continue
        if name not in definitions:
            raise KeyError(f"$ref to unknown definition {name!r}")
        reached[name] = _localize(definitions[name])
        todo |= _refs(definitions[name]) - reached.keys()
    out: JSON = _localize(schema)
    out["$defs"] = reached
    return out


def _refs(node: object) -> set[str]:
    found: set[str] = set()
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for key, value in item.items():
                # JSONSchemaProps has a *property* called "$ref" (a dict): not a reference.
                if key == "$ref" and isinstance(value, str):
                    found.add(_name(value))
                else:
                    stack.append(value)
        elif isinstance(item, list):
            stack.extend(item)
    return found


def _name(ref: str) -> str:
    for prefix in _PREFIXES:
        if ref.startswith(prefix):
            return ref[len(prefix):]
    raise KeyError(f"unexpected $ref {ref!r}")


def _localize(node: Any) -> Any:
    """Refs made local; `$id` dropped so that `#/$defs/...` resolves against this file."""
    if isinstance(node, dict):
        return {k: ("#/$defs/" + _name(v) if k == "$ref" and isinstance(v, str)
                    else _localize(v))
                for k, v in node.items() if k != "$id"}
    if isinstance(node, list):
        return [_localize(v) for v in node]
    return node
