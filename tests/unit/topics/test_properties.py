"""Properties of decode_request: no input crashes it, and valid requests round-trip."""

from __future__ import annotations

import json
from datetime import UTC, timedelta, timezone
from typing import Any

import jsonschema
import msgspec
import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from topics.errors import VoiceFactoryError
from topics.events import JobRef, SynthesisRequest, encode
from topics.jsonschema import SCHEMA_DIR
from topics.validation import decode_request

REQUEST_FIELDS = [f for f in SynthesisRequest.__struct_fields__]

json_scalars = (st.none() | st.booleans() | st.integers(min_value=-(2**63), max_value=2**63 - 1)
                | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20))
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=4),
    max_leaves=12,
)


def assert_decodes_or_raises_ours(payload: bytes | None) -> None:
    try:
        request = decode_request(payload)
    except VoiceFactoryError:
        return
    assert isinstance(request, SynthesisRequest)


@given(st.binary(max_size=400))
def test_arbitrary_bytes_never_crash(payload: bytes) -> None:
    assert_decodes_or_raises_ours(payload)


@given(json_values)
def test_arbitrary_json_values_never_crash(value: Any) -> None:
    assert_decodes_or_raises_ours(orjson.dumps(value))


@given(st.dictionaries(st.sampled_from([*REQUEST_FIELDS, "extra"]) | st.text(max_size=8),
                       json_values, max_size=10))
def test_arbitrary_objects_never_crash(obj: dict[str, Any]) -> None:
    assert_decodes_or_raises_ours(orjson.dumps(obj))


ids_like = st.text(alphabet="abc./\x00:-", max_size=8)
_BASE = {"request_id": "r-1", "voice_id": "v-1", "text": "hello"}


@given(st.sampled_from(REQUEST_FIELDS), json_values | st.sampled_from(
    ["../x", "a/b", "", ".", "x" * 3000, "2031-01-01T00:00:00Z", "wav", "instruct"]))
def test_one_field_replaced_by_anything_never_crashes(field: str, value: Any) -> None:
    # Starting from a valid request reaches the later rules (ranges, limits, deadline, job).
    assert_decodes_or_raises_ours(orjson.dumps({**_BASE, field: value}))


_ints = st.integers(min_value=-(2**63), max_value=2**64 - 1)


@given(st.fixed_dictionaries({}, optional={
    "id": json_values | ids_like, "index": json_values | _ints, "total": json_values | _ints,
}))
def test_any_job_object_never_crashes(job: dict[str, Any]) -> None:
    assert_decodes_or_raises_ours(orjson.dumps({**_BASE, "job": job}))


# --- a strategy for requests that respect every rule ---------------------------------------

def ids(max_size: int) -> st.SearchStrategy[str]:
    return st.text(alphabet="abcXYZ019._:-", min_size=1, max_size=max_size).filter(
        lambda s: ".." not in s and s != ".")


texts = st.text(min_size=1, max_size=300).filter(
    lambda t: 0 < len(" ".join(t.split())) <= 2000)
offsets = st.integers(min_value=-14 * 60, max_value=14 * 60).map(
    lambda minutes: timezone(timedelta(minutes=minutes)))
deadlines = st.one_of(
    st.builds(lambda d, tz: d.replace(tzinfo=tz).isoformat(), st.datetimes(), offsets),
    st.datetimes().map(lambda d: d.replace(tzinfo=UTC).isoformat().replace("+00:00", "Z")),
)
jobs = st.integers(min_value=1, max_value=10_000).flatmap(
    lambda total: st.builds(JobRef, id=ids(128), index=st.integers(0, total - 1),
                            total=st.just(total)))
metadata = st.dictionaries(st.text(max_size=10), json_values, max_size=5).filter(
    lambda m: len(orjson.dumps(m)) <= 4096)

valid_requests = st.builds(
    SynthesisRequest,
    request_id=ids(128),
    voice_id=ids(64),
    text=texts,
    mode=st.sampled_from([None, "zero_shot", "cross_lingual", "instruct", "sft"]),
    instruct=st.none() | st.text(max_size=40),
    language=st.none() | st.sampled_from(["zh", "en-US", "yue", "zh-sichuan"]),
    format=st.sampled_from(["wav", "flac", "mp3", "opus"]),
    sample_rate=st.sampled_from([None, 16000, 22050, 24000, 44100, 48000]),
    speed=st.floats(min_value=0.5, max_value=2.0),
    deadline=st.none() | deadlines,
    job=st.none() | jobs,
    metadata=st.none() | metadata,
).filter(lambda r: r.format != "opus" or r.sample_rate in (None, 16000, 24000, 48000))


@settings(max_examples=300)
@given(valid_requests)
def test_valid_requests_round_trip(request: SynthesisRequest) -> None:
    assert decode_request(encode(request)) == request


@given(valid_requests, st.dictionaries(
    st.text(min_size=1, max_size=12).filter(lambda k: k not in REQUEST_FIELDS), json_values,
    min_size=1, max_size=5))
def test_unknown_fields_are_tolerated(request: SynthesisRequest,
                                      extra: dict[str, Any]) -> None:
    obj = {**msgspec.to_builtins(request), **extra}
    assert decode_request(orjson.dumps(obj)) == request


_REQUEST_SCHEMA = json.loads((SCHEMA_DIR / "tts.request.v1.json").read_text(encoding="utf-8"))
_VALIDATOR = jsonschema.Draft202012Validator(_REQUEST_SCHEMA)


@given(valid_requests)
def test_valid_requests_satisfy_the_published_schema(request: SynthesisRequest) -> None:
    # The schema is what producers are told: it must never refuse what the worker accepts.
    errors = [e.message for e in _VALIDATOR.iter_errors(orjson.loads(encode(request)))]
    assert errors == []
