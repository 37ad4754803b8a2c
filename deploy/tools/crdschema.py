"""CustomResourceDefinition YAML -> strict JSON Schema files that kubeconform can read.

Data flow: `write_schemas(crd_yaml, root)` parses the CRD, and for each served version takes
`spec.versions[].schema.openAPIV3Schema`, rewrites the OpenAPI v3 dialect into plain JSON
Schema (`convert`), and writes `root/GROUP/KIND_VERSION.json` (kind lower-cased), the path
kubeconform's `{{ .Group }}/{{ .ResourceKind }}_{{ .ResourceAPIVersion }}.json` template
names. The rewrite follows what the API server itself enforces:

    x-kubernetes-int-or-string: true        -> integer or string
    nullable: true                          -> the type also admits null
    x-kubernetes-preserve-unknown-fields    -> object stays open
    properties without additionalProperties -> additionalProperties: false ("strict"),
                                               so a misspelt field is an error, not ignored
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

JSON = dict[str, Any]

_PRESERVE = "x-kubernetes-preserve-unknown-fields"


class CrdError(ValueError):
    pass


def convert(schema: JSON) -> JSON:
    """A copy of one OpenAPI v3 schema node (and all below it) as strict JSON Schema."""
    out: JSON = {}
    for key, value in schema.items():
        if key == "properties":
            out[key] = {name: convert(sub) for name, sub in value.items()}
        elif key in ("items", "additionalProperties", "not") and isinstance(value, dict):
            out[key] = convert(value)
        elif key in ("allOf", "anyOf", "oneOf"):
            out[key] = [convert(sub) for sub in value]
        elif key.startswith("x-kubernetes-") or key == "nullable":
            continue
        else:
            out[key] = value
    if schema.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}, *out.get("anyOf", [])]
    if schema.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    if ("properties" in schema and "additionalProperties" not in schema
            and not schema.get(_PRESERVE)):
        out["additionalProperties"] = False
    return out


def schemas_of(crd: JSON) -> dict[str, JSON]:
    """`GROUP/KIND_VERSION.json` -> JSON Schema for every version the CRD defines."""
    if crd.get("kind") != "CustomResourceDefinition":
        raise CrdError(f"not a CustomResourceDefinition: kind {crd.get('kind')!r}")
    spec = crd.get("spec") or {}
    group, kind = spec.get("group"), (spec.get("names") or {}).get("kind")
    if not group or not kind:
        raise CrdError("CRD without spec.group or spec.names.kind")
    out: dict[str, JSON] = {}
    for version in spec.get("versions") or []:
        v3 = ((version.get("schema") or {}).get("openAPIV3Schema"))
        if not isinstance(v3, dict):
            raise CrdError(f"{kind} {version.get('name')}: no openAPIV3Schema")
        converted = convert(v3)
        converted["$schema"] = "http://json-schema.org/draft-07/schema#"
        # The API server would reject another kind or version under this schema.
        props = converted.setdefault("properties", {})
        props["apiVersion"] = {"type": "string", "enum": [f"{group}/{version['name']}"]}
        props["kind"] = {"type": "string", "enum": [kind]}
        out[f"{group}/{kind.lower()}_{version['name']}.json"] = converted
    if not out:
        raise CrdError(f"{kind}: the CRD lists no versions")
    return out


def write_schemas(crd_yaml: str, root: Path) -> list[str]:
    """Write the schemas of every CRD in `crd_yaml` under `root`; return their paths."""
    written: list[str] = []
    for doc in yaml.safe_load_all(crd_yaml):
        if not doc:
            continue
        for rel, schema in schemas_of(doc).items():
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(schema, indent=1, sort_keys=True) + "\n",
                            encoding="utf-8")
            written.append(rel)
    return written
