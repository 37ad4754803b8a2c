"""parse_speech: every OpenAI field checked before anything is produced, with a reason."""

from __future__ import annotations

from typing import Any

import pytest

from consumers.gateway.speech import BadField, apply_annotations, parse_speech, split_input
from topics.validation import MAX_TEXT_CHARS

GOOD = {"model": "tts-1", "input": "Hello there.", "voice": "narrator-1"}


def order(**changes: Any) -> Any:
    body = {**GOOD, **changes}
    return parse_speech({k: v for k, v in body.items() if v is not ...}, tenant="acme")


def bad(field: str, **changes: Any) -> str:
    with pytest.raises(BadField) as caught:
        order(**changes)
    assert caught.value.field == field
    return str(caught.value)


def test_a_minimal_body_becomes_one_streamed_wav_request() -> None:
    o = order()
    assert (o.model, o.voice_id, o.response_format, o.stream_format) == \
        ("tts-1", "narrator-1", "mp3", None)
    [request] = o.requests
    assert request.stream and request.format == "wav" and request.text == "Hello there."
    assert request.sample_rate == 24_000  # pcm needs no encoder; ffmpeg can start early
    assert request.metadata == {"model": "tts-1", "tenant": "acme", "gateway_part": 0,
                                "gateway_parts": 1}


def test_every_field_is_carried() -> None:
    o = order(voice={"id": "narrator-1"}, instructions="calm", response_format="opus",
              speed=1.5, stream_format="sse", language="en")
    [r] = o.requests
    assert (r.instruct, r.speed, r.language) == ("calm", 1.5, "en")
    assert (o.response_format, o.stream_format) == ("opus", "sse")


@pytest.mark.parametrize(("field", "changes", "reason"), [
    ("body", None, "JSON object"),
    ("model", {"model": ...}, "model is required"),
    ("model", {"model": 3}, "must be a string"),
    ("input", {"input": ...}, "input is required"),
    ("input", {"input": "   "}, "input is empty"),
    ("input", {"input": "a" * 4097}, "limit 4,096"),
    ("input", {"input": "a\x00b"}, "NUL"),
    ("voice", {"voice": ...}, "voice is required"),
    ("voice", {"voice": "../etc/passwd"}, "outside"),
    ("voice", {"voice": "a/b"}, "outside"),
    ("voice", {"voice": ".."}, ".."),
    ("voice", {"voice": "x" * 65}, "limit 64"),
    ("voice", {"voice": {"id": "v", "name": "n"}}, '{"id"'),
    ("voice", {"voice": 7}, "voice ID string"),
    ("response_format", {"response_format": "ogg"}, "mp3, opus, aac, flac, wav, pcm"),
    ("stream_format", {"stream_format": "chunks"}, "audio, sse"),
    ("speed", {"speed": 3.0}, "outside 0.5-2.0"),
    ("speed", {"speed": 0.25}, "outside 0.5-2.0"),
    ("speed", {"speed": True}, "number"),
    ("speed", {"speed": "fast"}, "number"),
    ("speed", {"speed": float("nan")}, "outside"),
    ("instructions", {"instructions": "x" * 4097}, "limit 4,096"),
    ("language", {"language": "not a tag!"}, "BCP-47"),
    ("language", {"language": 5}, "BCP-47"),
    ("annotations", {"annotations": ["read"]}, "object"),
    ("annotations", {"annotations": {"read": "[XX1]"}}, "annotation 'read'"),
    ("annotations", {"annotations": {"read": "plain"}}, "annotation"),
    ("user", {"user": "x"}, "unknown field"),
])
def test_each_bad_field_is_named(field: str, changes: dict[str, Any] | None,
                                 reason: str) -> None:
    if changes is None:
        with pytest.raises(BadField, match=reason):
            parse_speech(["not", "an", "object"], tenant="acme")
        return
    assert reason in bad(field, **changes)


def test_long_input_is_split_at_sentences_within_the_contract() -> None:
    sentence = "This sentence has exactly forty-eight characters. "
    o = order(input=(sentence * 80)[:4096])
    assert len(o.requests) == 2
    assert all(len(r.text) <= MAX_TEXT_CHARS for r in o.requests)
    assert o.requests[0].text.endswith(".")
    assert [r.request_id[-3:] for r in o.requests] == ["-p0", "-p1"]
    assert " ".join(r.text for r in o.requests) == " ".join((sentence * 80)[:4096].split())


def test_split_keeps_decimals_and_cuts_overlong_sentences_at_spaces() -> None:
    assert split_input("Pi is 3.14 today.") == ["Pi is 3.14 today."]
    parts = split_input("word " * 900, limit=2000)
    assert all(len(p) <= 2000 for p in parts) and all(not p.endswith(" ") for p in parts)
    assert " ".join(parts) == " ".join(("word " * 900).split())
    assert split_input("你好。" * 1000, limit=2000)[0].endswith("。")


def test_annotations_are_written_after_whole_words_only() -> None:
    text = apply_annotations("I read the reader. Read read!", {"read": "[R][EH1][D]"})
    assert text == "I read[R][EH1][D] the reader. Read read[R][EH1][D]!"
    assert apply_annotations("你好好", {"好": "[h][ǎo]"}) == "你好[h][ǎo]好[h][ǎo]"
    assert apply_annotations("x", None) == "x"
