"""Decoding events: what a reader sees for bytes that are not the event."""

from __future__ import annotations

import pytest

from topics.events import decode_job, decode_result, decode_voice

RESULT_HEAD = (b'{"schema":"tts.result.v1","request_id":"r","voice_id":"v","status":"failed",'
               b'"completed_at":"2031-01-01T00:00:00Z",')


@pytest.mark.parametrize("field", [b'"metadata":{"a":', b'"unknown":'])
def test_a_result_nested_a_thousand_deep_is_a_value_error_not_a_recursion_error(
        field: bytes) -> None:
    """The aggregator's agent died on one (RecursionError is no ValueError); every reader
    of results catches ValueError."""
    deep = b"[" * 1000 + b"]" * 1000
    raw = RESULT_HEAD + field + deep + b"}" * (1 + field.count(b"{"))
    with pytest.raises(ValueError, match="nested too deeply"):
        decode_result(raw)


@pytest.mark.parametrize("decode", [decode_voice, decode_job])
def test_other_events_nested_too_deeply_are_value_errors_too(decode: object) -> None:
    raw = b'{"x":' + b"[" * 1000 + b"]" * 1000 + b"}"
    with pytest.raises(ValueError, match="nested too deeply"):
        decode(raw)  # type: ignore[operator]
