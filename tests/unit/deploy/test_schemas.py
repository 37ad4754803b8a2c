"""Schema derivation for kubeconform: CRD YAML -> strict JSON Schema, and the Kubernetes
schemas made standalone. Pure functions, checked with the jsonschema validator."""

from __future__ import annotations

from pathlib import Path

import jsonschema
import pytest

from deploy.tools import crdschema, k8sschema

CRD = """
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  names: {kind: Widget, plural: widgets}
  scope: Namespaced
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          properties:
            apiVersion: {type: string}
            kind: {type: string}
            metadata: {type: object}
            spec:
              type: object
              required: [size]
              properties:
                size: {x-kubernetes-int-or-string: true}
                note: {type: string, nullable: true}
                extra:
                  type: object
                  x-kubernetes-preserve-unknown-fields: true
                  properties:
                    known: {type: string}
                labels:
                  type: object
                  additionalProperties: {type: string}
"""


def _schema(tmp_path: Path) -> dict[str, object]:
    [rel] = crdschema.write_schemas(CRD, tmp_path)
    assert rel == "example.com/widget_v1.json"
    import json
    return dict(json.loads((tmp_path / rel).read_text()))


def _widget(spec: dict[str, object]) -> dict[str, object]:
    return {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"},
            "spec": spec}


def test_a_valid_object_passes(tmp_path: Path) -> None:
    schema = _schema(tmp_path)
    for size in (3, "50%"):
        jsonschema.validate(_widget({"size": size, "note": None, "extra": {"any": 1},
                                     "labels": {"a": "b"}}), schema)


@pytest.mark.parametrize("spec", [
    {"size": 3, "colour": "red"},          # unknown field: strict
    {"size": 3.5},                         # int-or-string, not a float
    {"note": "x"},                         # required size missing
    {"size": 1, "labels": {"a": 1}},       # additionalProperties kept as written
])
def test_invalid_objects_fail(tmp_path: Path, spec: dict[str, object]) -> None:
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(_widget(spec), _schema(tmp_path))


def test_kind_and_version_are_pinned(tmp_path: Path) -> None:
    schema = _schema(tmp_path)
    bad = _widget({"size": 1}) | {"apiVersion": "example.com/v2"}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)


def test_not_a_crd_is_an_error() -> None:
    with pytest.raises(crdschema.CrdError, match="not a CustomResourceDefinition"):
        crdschema.schemas_of({"kind": "ConfigMap"})


def test_standalone_kubernetes_schema_resolves_inside_itself() -> None:
    definitions = {
        "meta.ObjectMeta": {"type": "object", "properties": {
            "name": {"type": "string"},
            "labels": {"$ref": "#/$defs/meta.Labels"}}, "additionalProperties": False},
        "meta.Labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "unused.Thing": {"type": "string"},
    }
    kind = {"$id": "https://kubernetes.io/api/thing/v1", "type": "object",
            "properties": {"kind": {"type": "string", "enum": ["Thing"]},
                           "metadata": {"$ref": "/api/_definitions.json#/$defs/meta.ObjectMeta"}},
            "additionalProperties": False}
    assert k8sschema.is_kind(kind)
    schema = k8sschema.standalone(kind, definitions)
    assert set(schema["$defs"]) == {"meta.ObjectMeta", "meta.Labels"}
    assert "$id" not in schema
    jsonschema.validate({"kind": "Thing", "metadata": {"name": "x", "labels": {"a": "b"}}},
                        schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"kind": "Thing", "metadata": {"labels": {"a": 1}}}, schema)


def test_standalone_names_a_missing_definition() -> None:
    kind = {"properties": {"kind": {"enum": ["X"]}, "spec": {"$ref": "#/$defs/nope"}}}
    with pytest.raises(KeyError, match="nope"):
        k8sschema.standalone(kind, {})
