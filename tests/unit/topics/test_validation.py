"""Every rule of topics.validation.decode_request: the error class, code, message and IDs."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from topics.errors import ErrorCode, InvalidRequest, UndecodableMessage, VoiceFactoryError
from topics.events import JobRef, SynthesisRequest, encode
from topics.validation import check_id, decode_request, parse_deadline


def body(**fields: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"schema": "tts.request.v1", "request_id": "req-1",
                           "voice_id": "narrator-01", "text": "Hello there."}
    out.update(fields)
    return out


def raw(obj: Any) -> bytes:
    return orjson.dumps(obj)


def rejected(obj: Any) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as info:
        decode_request(raw(obj))
    return info.value


# --- bytes that are not a JSON object: UndecodableMessage (DLQ) ---------------------------


@pytest.mark.parametrize("payload", [
    b"", b"not json", b"{", b'{"request_id": "a",}', b"\xff\xfe{}", b'{"a": "\xc3"}', b"NaN",
])
def test_invalid_json_is_undecodable(payload: bytes) -> None:
    with pytest.raises(UndecodableMessage) as info:
        decode_request(payload)
    assert info.value.code is ErrorCode.INVALID_JSON
    assert info.value.retryable is False
    assert str(info.value).startswith("invalid_json: not UTF-8 JSON")


@pytest.mark.parametrize(("payload", "kind"), [
    (b"[]", "list"), (b'"text"', "str"), (b"42", "int"), (b"1.5", "float"), (b"null", "NoneType"),
    (b"true", "bool"), (b'[{"request_id": "a"}]', "list"),
])
def test_non_object_json_is_undecodable(payload: bytes, kind: str) -> None:
    with pytest.raises(UndecodableMessage) as info:
        decode_request(payload)
    assert info.value.code is ErrorCode.INVALID_JSON
    assert info.value.message == f"expected a JSON object, got {kind}"


def test_tombstone_is_undecodable() -> None:
    with pytest.raises(UndecodableMessage) as info:
        decode_request(None)
    assert info.value.message == "message has no value (tombstone)"


def test_undecodable_is_not_an_invalid_request() -> None:
    # The worker routes on the class: DLQ for one, a rejected result for the other.
    with pytest.raises(UndecodableMessage) as info:
        decode_request(b"[]")
    assert not isinstance(info.value, InvalidRequest)


# --- the happy path -------------------------------------------------------------------------


def test_minimal_request_gets_defaults() -> None:
    request = decode_request(raw(body()))
    assert request == SynthesisRequest(request_id="req-1", voice_id="narrator-01",
                                       text="Hello there.")
    assert (request.format, request.speed, request.mode, request.job) == ("wav", 1.0, None, None)


def test_schema_field_may_be_omitted() -> None:
    obj = body()
    del obj["schema"]
    # The tag is written back on encode even when the producer left it out.
    assert encode(decode_request(raw(obj))).startswith(b'{"schema":"tts.request.v1"')


def test_full_request() -> None:
    request = decode_request(raw(body(
        mode="instruct", instruct="用四川话说这句话", language="zh", format="opus",
        sample_rate=48000, speed=0.5, deadline="2031-01-01T00:00:00+08:00",
        job={"id": "ep12", "index": 0, "total": 1}, metadata={"scene": [1, 2]})))
    assert request.job == JobRef(id="ep12", index=0, total=1)
    assert request.metadata == {"scene": [1, 2]}
    assert request.speed == 0.5


def test_text_limit_is_after_whitespace_normalisation() -> None:
    # 2,000 visible characters padded with whitespace runs are still within the limit.
    text = "   ".join(["ab"] * 500) + "\n\n\t" + "y" * 500
    assert len(text) > 2000
    assert len(" ".join(text.split())) == 2000
    assert decode_request(raw(body(text=text))).text == text


# --- rules that reject: InvalidRequest with code and the readable IDs ------------------------


def test_unsupported_schema() -> None:
    error = rejected(body(schema="tts.request.v2"))
    assert error.code is ErrorCode.UNSUPPORTED_SCHEMA
    assert error.message == "schema 'tts.request.v2', expected 'tts.request.v1'"
    assert (error.request_id, error.voice_id) == ("req-1", "narrator-01")


@pytest.mark.parametrize("field", ["request_id", "voice_id", "text"])
def test_missing_required_field(field: str) -> None:
    obj = body()
    del obj[field]
    error = rejected(obj)
    assert error.code is ErrorCode.INVALID_REQUEST
    assert error.message == f"{field} is required"
    assert error.request_id == (None if field == "request_id" else "req-1")
    assert error.voice_id == (None if field == "voice_id" else "narrator-01")


@pytest.mark.parametrize(("fields", "fragment"), [
    ({"voice_id": 7}, "$.voice_id"),
    ({"text": None}, "$.text"),
    ({"format": "aac"}, "$.format"),
    ({"mode": "karaoke"}, "$.mode"),
    ({"speed": "fast"}, "$.speed"),
    ({"sample_rate": 24000.0}, "$.sample_rate"),
    ({"job": {"id": "j", "index": 0}}, "total"),
    ({"job": {"id": "j", "index": True, "total": 2}}, "$.job.index"),
    ({"metadata": ["not", "an", "object"]}, "$.metadata"),
])
def test_wrong_types_are_invalid_requests(fields: dict[str, Any], fragment: str) -> None:
    error = rejected(body(**fields))
    assert error.code is ErrorCode.INVALID_REQUEST
    assert fragment in error.message
    assert error.request_id == "req-1"


@pytest.mark.parametrize(("value", "fragment"), [
    ("../x", "has characters outside [A-Za-z0-9._:-]"),
    ("a/b", "has characters outside [A-Za-z0-9._:-]"),
    ("a\x00b", "has characters outside"),
    ("line\n", "has characters outside"),
    ("tab\there", "has characters outside"),
    ("a\x7fb", "has characters outside"),
    ("with space", "has characters outside"),
    ("a..b", "contains '..'"),
    ("..", "contains '..'"),
    (".", "is '.', which names a directory"),
    ("", "is empty"),
])
@pytest.mark.parametrize("field", ["request_id", "voice_id"])
def test_path_like_and_bad_ids(field: str, value: str, fragment: str) -> None:
    error = rejected(body(**{field: value}))
    assert error.code is ErrorCode.INVALID_REQUEST
    assert error.message.startswith(f"{field} ")
    assert fragment in error.message
    # The bad ID is not captured (it must not reach a key); the other one is.
    other, other_value = (("voice_id", "narrator-01") if field == "request_id"
                          else ("request_id", "req-1"))
    assert getattr(error, field) is None
    assert getattr(error, other) == other_value


@pytest.mark.parametrize(("field", "limit"), [("request_id", 128), ("voice_id", 64)])
def test_id_length_limits(field: str, limit: int) -> None:
    assert getattr(decode_request(raw(body(**{field: "a" * limit}))), field) == "a" * limit
    error = rejected(body(**{field: "a" * (limit + 1)}))
    assert error.code is ErrorCode.INVALID_REQUEST
    assert error.message == f"{field} has {limit + 1} characters, limit {limit}"
    assert getattr(error, field) is None


@pytest.mark.parametrize("text", ["", "   ", "\n\t \u3000"])
def test_blank_text(text: str) -> None:
    error = rejected(body(text=text))
    assert error.code is ErrorCode.INVALID_REQUEST
    assert error.message == "text is empty"
    assert (error.request_id, error.voice_id) == ("req-1", "narrator-01")


def test_text_too_long_message() -> None:
    text = "   ".join(["ab"] * 806)  # 806 * 2 + 805 = 2,417 characters once normalised
    error = rejected(body(text=text))
    assert error.code is ErrorCode.TEXT_TOO_LONG
    assert str(error) == "text_too_long: text has 2,417 characters after normalisation, limit 2,000"
    assert error.retryable is False
    assert (error.request_id, error.voice_id) == ("req-1", "narrator-01")


def test_text_at_limit_plus_one() -> None:
    assert decode_request(raw(body(text="x" * 2000))).text == "x" * 2000
    assert rejected(body(text="x" * 2001)).code is ErrorCode.TEXT_TOO_LONG


@pytest.mark.parametrize("speed", [0.5, 1, 1.999, 2.0])
def test_speed_in_range(speed: float) -> None:
    assert decode_request(raw(body(speed=speed))).speed == speed


@pytest.mark.parametrize("speed", [0.49, 0, -1, 2.01, 100])
def test_speed_out_of_range(speed: float) -> None:
    error = rejected(body(speed=speed))
    assert error.code is ErrorCode.INVALID_REQUEST
    assert error.message == f"speed {float(speed)} is outside 0.5-2.0"
    assert error.voice_id == "narrator-01"


def test_sample_rate_must_be_supported() -> None:
    assert decode_request(raw(body(sample_rate=22050))).sample_rate == 22050
    error = rejected(body(sample_rate=8000))
    assert error.code is ErrorCode.INVALID_REQUEST
    assert error.message.startswith("sample_rate 8000 is not one of")


def test_metadata_limit_is_4_kib_of_json() -> None:
    overhead = len(orjson.dumps({"k": ""}))
    at_limit = {"k": "x" * (4096 - overhead)}
    assert decode_request(raw(body(metadata=at_limit))).metadata == at_limit
    error = rejected(body(metadata={"k": "x" * (4097 - overhead)}))
    assert error.code is ErrorCode.INVALID_REQUEST
    assert error.message == "metadata is 4,097 bytes as JSON, limit 4,096"
    assert (error.request_id, error.voice_id) == ("req-1", "narrator-01")


@pytest.mark.parametrize("deadline", [
    "2031-01-01T00:00:00Z", "2031-01-01T00:00:00.123456+00:00", "2031-01-01T08:00:00+08:00",
])
def test_good_deadlines(deadline: str) -> None:
    assert decode_request(raw(body(deadline=deadline))).deadline == deadline
    assert parse_deadline(deadline) is not None


@pytest.mark.parametrize("deadline", [
    "tomorrow", "2031-01-01T00:00:00", "2031-13-01T00:00:00Z", "", "2031-01-01 25:00Z",
])
def test_bad_deadlines(deadline: str) -> None:
    error = rejected(body(deadline=deadline))
    assert error.code is ErrorCode.INVALID_REQUEST
    assert error.message == (
        f"deadline {deadline!r} is not an RFC 3339 time with a UTC offset")
    assert error.request_id == "req-1"


@pytest.mark.parametrize(("index", "total"), [(0, 1), (4, 5), (41, 42)])
def test_good_job_refs(index: int, total: int) -> None:
    job = decode_request(raw(body(job={"id": "ep-12", "index": index, "total": total}))).job
    assert job == JobRef(id="ep-12", index=index, total=total)


@pytest.mark.parametrize(("index", "total", "message"), [
    (5, 5, "job.index 5 must be in 0..4 (job.total 5)"),
    (-1, 3, "job.index -1 must be in 0..2 (job.total 3)"),
    (0, 0, "job.index 0 must be in 0..-1 (job.total 0)"),
    (0, -2, "job.index 0 must be in 0..-3 (job.total -2)"),
])
def test_bad_job_index_or_total(index: int, total: int, message: str) -> None:
    error = rejected(body(job={"id": "ep-12", "index": index, "total": total}))
    assert error.code is ErrorCode.INVALID_REQUEST
    assert error.message == message
    assert (error.request_id, error.voice_id) == ("req-1", "narrator-01")


def test_a_job_version_is_optional_and_at_least_1() -> None:
    job = decode_request(raw(body(job={"id": "ep-12", "index": 0, "total": 2, "version": 3}))).job
    assert job == JobRef(id="ep-12", index=0, total=2, version=3)
    error = rejected(body(job={"id": "ep-12", "index": 0, "total": 2, "version": 0}))
    assert error.message == "job.version must be >= 1, got 0"


@pytest.mark.parametrize("job_id", ["../ep", "ep/12", "", "x" * 129])
def test_bad_job_id(job_id: str) -> None:
    error = rejected(body(job={"id": job_id, "index": 0, "total": 1}))
    assert error.code is ErrorCode.INVALID_REQUEST
    assert error.message.startswith("job.id")


def test_ids_are_captured_even_when_text_is_missing_and_schema_is_wrong() -> None:
    error = rejected({"schema": "x", "request_id": "r-9", "voice_id": "v-9"})
    assert error.code is ErrorCode.UNSUPPORTED_SCHEMA
    assert (error.request_id, error.voice_id) == ("r-9", "v-9")


def test_non_string_ids_are_not_captured() -> None:
    error = rejected(body(request_id=12, voice_id=["v"]))
    assert (error.request_id, error.voice_id) == (None, None)


def test_rejections_are_voicefactory_errors_and_not_retryable() -> None:
    error = rejected(body(speed=9))
    assert isinstance(error, VoiceFactoryError)
    assert error.retryable is False


def test_check_id_returns_the_value() -> None:
    assert check_id("voice_id", "Zh-CN:narrator_01.v2", 64) == "Zh-CN:narrator_01.v2"


def test_first_broken_rule_wins_in_the_documented_order() -> None:
    # docs/contract.md "Validation rules": IDs, then field rules, then text.
    too_long = "x" * 2001
    assert rejected(body(voice_id="a/b", speed=9, text=too_long)).message.startswith("voice_id")
    assert rejected(body(speed=9, text=too_long)).message.startswith("speed 9.0")
    assert rejected(body(text=too_long)).code is ErrorCode.TEXT_TOO_LONG


def test_metadata_nested_past_what_orjson_writes_is_rejected_not_a_crash() -> None:
    # orjson reads 1,024 levels but writes 254: the size check used to raise TypeError,
    # which escaped decode_request and stopped the worker's fetch loop (the fuzz suite).
    payload = raw(body(metadata={"x": "DEEP"})).replace(b'"DEEP"', b"[" * 300 + b"]" * 300)
    with pytest.raises(InvalidRequest) as info:
        decode_request(payload)
    exc = info.value
    assert exc.code is ErrorCode.INVALID_REQUEST and "nested" in exc.message
    assert exc.request_id == "req-1"


@pytest.mark.parametrize("field", ["schema", "format", "deadline", "mode"])
def test_a_huge_value_quoted_in_a_rejection_is_cut(field: str) -> None:
    # The message reaches the rejected result: 900 KB quoted in it made the result too
    # large for the broker, and the publisher retried it forever.
    exc = rejected(body(**{field: "x" * 900_000}))
    assert len(exc.message) <= 1000 and "characters in all" in exc.message
