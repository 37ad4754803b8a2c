"""The published JSON Schemas: in step with the structs, honoured by the docs' examples."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import msgspec
import orjson
import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from topics.control import decode_control
from topics.errors import RETRYABLE_CODES, ErrorCode
from topics.events import (
    DeadLetter,
    JobCompleted,
    SynthesisRequest,
    decode_audit,
    decode_result,
    decode_voice,
    encode,
)
from topics.fleet import decode_status, parse_routing_key, routing_key
from topics.jsonschema import (
    _CONSTRAINTS,
    EVENTS,
    SCHEMA_DIR,
    event_schema,
    render_schemas,
    write_schemas,
)
from topics.validation import check_id, decode_request

ROOT = Path(__file__).resolve().parents[3]
CONTRACT = ROOT / "docs" / "contract.md"
ASYNCAPI = ROOT / "docs" / "asyncapi.yaml"
EXAMPLE_RE = re.compile(r"<!-- example: (?P<name>[\w.]+) -->\s*```json\n(?P<body>.*?)```", re.S)


def load_schema(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((SCHEMA_DIR / f"{name}.json").read_text("utf-8"))
    return loaded


def validator(name: str) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(
        load_schema(name), format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)


def examples() -> list[tuple[str, str]]:
    # The README's examples are held to the same schemas as the contract page's.
    found = [(m["name"], m["body"]) for doc in (CONTRACT, ROOT / "README.md")
             for m in EXAMPLE_RE.finditer(doc.read_text("utf-8"))]
    assert found, f"no example blocks in {CONTRACT}"
    return found


# --- drift --------------------------------------------------------------------------------


@pytest.mark.parametrize(("filename", "fresh"), [
    pytest.param(filename, fresh, id=filename) for filename, fresh in render_schemas().items()])
def test_checked_in_schema_matches_the_structs(filename: str, fresh: str) -> None:
    path = SCHEMA_DIR / filename
    assert path.exists(), f"{path} is missing; run `python -m topics.jsonschema`"
    assert path.read_text("utf-8") == fresh, (
        f"{path} is out of date with topics/events.py; run `python -m topics.jsonschema`")


def test_no_stray_schema_files() -> None:
    assert sorted(p.name for p in SCHEMA_DIR.glob("*.json")) == sorted(render_schemas())


def test_write_schemas_writes_one_file_per_event(tmp_path: Path) -> None:
    written = write_schemas(tmp_path / "out")
    assert sorted(p.name for p in written) == sorted(f"{name}.json" for name in EVENTS)
    for path in written:
        assert json.loads(path.read_text("utf-8"))["title"] == path.name.removesuffix(".json")


def test_every_schema_is_valid_draft_2020_12() -> None:
    for name in EVENTS:
        schema = load_schema(name)
        assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
        jsonschema.Draft202012Validator.check_schema(schema)
        assert schema["properties"]["schema"]["const"] == name


def test_every_constraint_reaches_a_schema() -> None:
    # A renamed field must not silently drop its rule from the published schema.
    applied = set()
    for name in EVENTS:
        schema = event_schema(name)
        definitions = {msgspec.json.schema(EVENTS[name])["$ref"].rsplit("/", 1)[-1]: schema,
                       **schema.get("$defs", {})}
        for (title, prop), keywords in _CONSTRAINTS.items():
            definition = definitions.get(title)
            if definition is None or prop not in definition["properties"]:
                continue
            text = json.dumps(definition["properties"][prop])
            if all(json.dumps(v) in text for v in keywords.values()):
                applied.add((title, prop))
    assert set(_CONSTRAINTS) - applied == set()


# --- the schemas say what the validator says ------------------------------------------------


def test_request_schema_carries_the_rules() -> None:
    props = load_schema("tts.request.v1")["properties"]
    assert props["request_id"]["maxLength"] == 128
    assert props["voice_id"]["maxLength"] == 64
    assert (props["speed"]["minimum"], props["speed"]["maximum"]) == (0.5, 2.0)
    assert load_schema("tts.request.v1")["required"] == ["request_id", "voice_id", "text"]


@pytest.mark.parametrize(("fields", "valid"), [
    ({}, True),
    ({"voice_id": "../x"}, False),
    ({"voice_id": "a/b"}, False),
    ({"request_id": "a\nb"}, False),
    ({"request_id": "ok\n"}, False),
    ({"request_id": "."}, False),
    ({"request_id": "x" * 129}, False),
    ({"voice_id": ""}, False),
    ({"speed": 2.5}, False),
    ({"speed": 0.5}, True),
    ({"sample_rate": 8000}, False),
    ({"format": "aac"}, False),
    ({"schema": "tts.request.v2"}, False),
    ({"job": {"id": "ep", "index": -1, "total": 2}}, False),
    ({"job": {"id": "ep", "index": 0, "total": 0}}, False),
    ({"unknown_field": {"any": "thing"}}, True),
])
def test_request_schema_agrees_with_decode_request(fields: dict[str, Any], valid: bool) -> None:
    obj = {"request_id": "r-1", "voice_id": "v-1", "text": "hi", **fields}
    assert validator("tts.request.v1").is_valid(obj) is valid
    if valid:
        decode_request(orjson.dumps(obj))


@given(st.text(alphabet="aZ9._:-/\n\x00 é", max_size=10))
def test_id_pattern_equals_check_id(value: str) -> None:
    id_schema = load_schema("tts.request.v1")["properties"]["voice_id"]
    try:
        check_id("voice_id", value, 64)
        accepted = True
    except ValueError:
        accepted = False
    assert jsonschema.Draft202012Validator(id_schema).is_valid(value) is accepted


def test_error_code_schema_is_the_closed_set() -> None:
    error_info = load_schema("tts.result.v1")["$defs"]["ErrorInfo"]
    assert sorted(error_info["properties"]["code"]["enum"]) == sorted(c.value for c in ErrorCode)


def test_encoded_request_validates() -> None:
    request = SynthesisRequest(request_id="ep1-0", voice_id="narrator-01", text="你好。",
                               speed=1.5, format="mp3", sample_rate=24000,
                               deadline="2031-01-01T00:00:00Z", metadata={"a": [1, None]})
    assert validator("tts.request.v1").is_valid(orjson.loads(encode(request)))


def test_encoded_request_breaking_a_rule_does_not_validate() -> None:
    request = SynthesisRequest(request_id="ep1-0", voice_id="a/b", text="x", speed=3.0)
    messages = [e.message for e in validator("tts.request.v1").iter_errors(
        orjson.loads(encode(request)))]
    assert len(messages) == 2


# --- docs/contract.md examples ---------------------------------------------------------------


def test_contract_has_an_example_for_every_event() -> None:
    assert {name for name, _ in examples()} == set(EVENTS)


@pytest.mark.parametrize(("name", "body"), examples())
def test_contract_example_validates(name: str, body: str) -> None:
    instance = json.loads(body)
    errors = [f"{list(e.absolute_path)}: {e.message}"
              for e in validator(name).iter_errors(instance)]
    assert errors == [], f"docs/contract.md example for {name} breaks its schema"
    raw = body.encode()
    # The example must also be accepted by the code that reads the topic.
    if name == "tts.request.v1":
        decode_request(raw)
    elif name == "tts.result.v1":
        decode_result(raw)
    elif name == "tts.voice.v1":
        decode_voice(raw)
    elif name == "tts.dlq.v1":
        msgspec.json.decode(raw, type=DeadLetter)
    elif name == "tts.control.v1":
        decode_control(raw)
    elif name == "tts.fleet.v1":
        decode_status(raw)
    elif name == "tts.audit.v1":
        decode_audit(raw)
    else:
        msgspec.json.decode(raw, type=JobCompleted)


def test_contract_error_table_lists_every_code() -> None:
    section = CONTRACT.read_text("utf-8").split("## Error codes", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `(\w+)` \| (yes|no) \|", section, re.M)
    assert sorted(code for code, _ in rows) == sorted(c.value for c in ErrorCode)
    assert {code for code, retry in rows if retry == "yes"} == {c.value for c in RETRYABLE_CODES}


# --- docs/asyncapi.yaml ----------------------------------------------------------------------


def test_asyncapi_messages_reference_the_schema_files() -> None:
    doc = yaml.safe_load(ASYNCAPI.read_text("utf-8"))
    assert doc["asyncapi"] == "3.0.0"
    names = set()
    for message in doc["components"]["messages"].values():
        ref = message["payload"]["schema"]["$ref"]
        target = (ASYNCAPI.parent / ref).resolve()
        assert target.exists(), f"{ref} in docs/asyncapi.yaml does not exist"
        assert target.name == f"{message['name']}.json"
        assert message["bindings"]["kafka"]["key"]["type"] == "string"
        names.add(message["name"])
    assert names == set(EVENTS)


def request_key_pattern() -> re.Pattern[str]:
    doc = yaml.safe_load(ASYNCAPI.read_text("utf-8"))
    key = doc["components"]["messages"]["synthesisRequest"]["bindings"]["kafka"]["key"]
    return re.compile(key["pattern"])


@given(st.text(alphabet="aZ9._:-/#\n é", max_size=8), st.sampled_from([0, 1, 42, 9999]))
def test_asyncapi_request_key_pattern_is_the_routing_key_rule(text: str, shard: int) -> None:
    pattern = request_key_pattern()
    if pattern.match(text):  # whatever the pattern admits is a key a router writes
        assert routing_key(*parse_routing_key(text)) == text
    try:
        check_id("voice_id", text, 64)
    except ValueError:
        return
    assert pattern.match(routing_key(text, shard))


def asyncapi_examples() -> list[tuple[str, str]]:
    doc = yaml.safe_load(ASYNCAPI.read_text("utf-8"))
    return [(message["name"], json.dumps(example["payload"], ensure_ascii=False))
            for message in doc["components"]["messages"].values()
            for example in message.get("examples", []) if "payload" in example]


@pytest.mark.parametrize(("name", "body"), asyncapi_examples())
def test_asyncapi_example_validates_and_is_read_by_the_code(name: str, body: str) -> None:
    # The same two tests as the contract page's examples; ajv checks them too (examplecheck).
    test_contract_example_validates(name, body)


def test_asyncapi_has_an_example_for_every_message() -> None:
    assert {name for name, _ in asyncapi_examples()} == set(EVENTS)
