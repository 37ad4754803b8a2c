"""The fleet status's optional counts (topics/fleet.py): small, and read by routers of before."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import msgspec

from topics.errors import ErrorCode
from topics.fleet import FLEET_SCHEMA, ProfileCounts, WorkerStatus, decode_status, encode_status

SCHEMA = json.loads((Path(__file__).resolve().parents[3] / "topics" / "schemas"
                     / "tts.fleet.v1.json").read_text("utf-8"))


def test_counts_round_trip_and_are_left_out_when_absent() -> None:
    status = WorkerStatus(worker="w", at_ms=1, interval_ms=500,
                          profiles=ProfileCounts(hit=5, miss=1),
                          errors={"engine_error": 2})
    raw = encode_status(status)
    assert json.loads(raw)["profiles"] == {"hit": 5, "miss": 1}  # zeros left out
    back = decode_status(raw)
    assert back == status and back.profiles is not None and back.profiles.lookups == 6
    bare = json.loads(encode_status(WorkerStatus(worker="w", at_ms=1, interval_ms=500)))
    assert "profiles" not in bare and "errors" not in bare


def test_a_status_of_before_reads_as_no_counts() -> None:
    raw = b'{"schema": "tts.fleet.v1", "worker": "w", "at_ms": 1, "interval_ms": 500}'
    status = decode_status(raw)
    assert status.profiles is None and status.errors == {}


def test_a_router_of_before_reads_a_status_with_counts() -> None:
    class Before(msgspec.Struct, kw_only=True, tag_field="schema", tag=FLEET_SCHEMA):
        worker: str
        at_ms: int
        interval_ms: int
        hot: list[str] = []

    raw = encode_status(WorkerStatus(worker="w", at_ms=1, interval_ms=500, hot=["v"],
                                     profiles=ProfileCounts(hit=1),
                                     errors={"cancelled": 1}))
    assert msgspec.json.decode(raw, type=Before) == Before(worker="w", at_ms=1,
                                                           interval_ms=500, hot=["v"])


def test_the_schema_takes_every_error_code_and_nothing_else() -> None:
    every = {code.value: 1 for code in ErrorCode}
    ok = msgspec.to_builtins(WorkerStatus(worker="w", at_ms=1, interval_ms=500,
                                          profiles=ProfileCounts(store=2), errors=every))
    jsonschema.validate(ok, SCHEMA)
    for bad in ({"no_such_code": 1}, {"engine_error": 0}, {"engine_error": -1}):
        assert list(jsonschema.Draft202012Validator(SCHEMA).iter_errors({**ok, "errors": bad}))
    assert list(jsonschema.Draft202012Validator(SCHEMA).iter_errors(
        {**ok, "profiles": {"hit": -1}}))
