"""The CosyVoice adapter's behaviour that issue 13 changed, against the recording fake of
test_cosyvoice.py (no upstream source needed): no autocast of ours, pauses for punctuation,
annotation forms per generation, upstream's instruction phrasings, the streaming call, and
where the upstream source comes from.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from pipeline.engines import EngineOptions, create_engine
from pipeline.engines.base import EngineUnavailable, StyleHints, SynthesisItem
from pipeline.engines.cosyvoice import CosyVoiceEngine
from pipeline.engines.cosyvoice_prompts import nothing_to_say, plan_call
from pipeline.engines.cosyvoice_setup import source_paths
from tests.unit.pipeline.test_cosyvoice import (
    RATE,
    fake_cosyvoice,
    loaded,
    make_profile,
    model_dir,
    model_of,
)
from topics.errors import ErrorCode, VoiceFactoryError

__all__ = ["fake_cosyvoice"]  # the autouse fixture that installs the fake package


def test_no_autocast_of_ours_around_upstream(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    # Ours wrapped the whole call, so CosyVoice 2's HiFT (STFT/ISTFT) ran in fp16 where
    # upstream keeps it fp32; and autocast is per thread, so the LLM thread never saw it.
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    autocasts: list[Any] = []

    def autocast(*args: Any, **kwargs: Any) -> Any:
        autocasts.append((args, kwargs))
        raise AssertionError("the adapter must not autocast")

    monkeypatch.setattr(torch, "autocast", autocast)
    engine = CosyVoiceEngine(model_dir=str(model_dir(tmp_path)), device="auto",
                             precision="fp16")
    engine.load()
    assert model_of(engine).calls("init")[0]["fp16"] is True  # upstream's own switch
    profile = make_profile(engine)
    [out] = engine.synthesize(profile, [SynthesisItem("今天天气很好。", "zh", 1.0)])
    assert len(out.audio.samples) and autocasts == []


@pytest.mark.parametrize("text", ["……", "?!", " 。 ", "[breath]"])
def test_a_sentence_of_punctuation_only_is_a_pause(tmp_path: Path, text: str) -> None:
    engine = loaded(tmp_path, 2)
    [out] = engine.synthesize(make_profile(engine), [SynthesisItem(text, "zh", 1.0)])
    assert out.audio.sample_rate == RATE and out.audio.samples.dtype == np.float32
    assert len(out.audio.samples) == int(0.2 * RATE) and not out.audio.samples.any()
    assert model_of(engine).calls("tts") == []  # upstream would have returned no audio


def test_nothing_to_say() -> None:
    assert nothing_to_say("——。") and nothing_to_say("") and nothing_to_say("[laughter]!")
    assert not nothing_to_say("好。") and not nothing_to_say("1") and \
        not nothing_to_say("[HH][AH0][L][OW1]")  # CosyVoice 3 reads the phones


def test_annotations_alone_are_a_pause_on_v2(tmp_path: Path) -> None:
    engine = loaded(tmp_path, 2)  # its tokenizer has no phones: nothing would be left
    [out] = engine.synthesize(make_profile(engine), [SynthesisItem("[HH][AH0][L][OW1].",
                                                                   "en", 1.0)])
    assert not out.audio.samples.any() and model_of(engine).calls("tts") == []


def test_annotation_forms_per_generation() -> None:
    item = SynthesisItem("对报道给[j][ǐ]予好评，I read[R][EH1][D] it.[breath]", "zh", 1.0)
    v3 = plan_call(item, voice_language="zh", has_transcript=True, generation=3)
    assert v3.text == "对报道[j][ǐ]予好评，I [R][EH1][D] it.[breath]"
    # CosyVoice 2's tokenizer has no pinyin or phone tokens: read as written, 给 kept.
    v2 = plan_call(item, voice_language="zh", has_transcript=True, generation=2)
    assert v2.text == "对报道给予好评，I read it.[breath]"


@pytest.mark.parametrize(("style", "v3", "v2"), [
    (StyleHints(dialect="changsha"), "请用湖南话表达。", "用湖南话说这句话"),
    (StyleHints(dialect="hubei"), "请用湖北话表达。", "用湖北话说这句话"),
    (StyleHints(dialect="mandarin", emotion="angry"), "请非常生气地说一句话。",
     "用生气的语气说这句话"),
])
def test_structured_hints_use_upstreams_phrasings(style: StyleHints, v3: str,
                                                  v2: str) -> None:
    item = SynthesisItem("今天天气很好。", "zh", 1.0, style=style)
    call = plan_call(item, voice_language="zh", has_transcript=True, generation=3)
    assert call.instruction == f"You are a helpful assistant. {v3}<|endofprompt|>"
    call = plan_call(item, voice_language="zh", has_transcript=True, generation=2)
    assert call.instruction == f"{v2}<|endofprompt|>"


@pytest.mark.parametrize("hints", [StyleHints(emotion="surprised"),
                                   StyleHints(emotion="fearful"), StyleHints(dialect="mandarin")])
def test_hints_upstream_has_no_instruction_for_are_plain_zero_shot(hints: StyleHints) -> None:
    # 惊讶 and 恐惧 are not in upstream's trained list; Mandarin needs no dialect instruction.
    item = SynthesisItem("今天天气很好。", "zh", 1.0, style=hints)
    assert plan_call(item, voice_language="zh", has_transcript=True, generation=3).mode == \
        "zero_shot"


@pytest.mark.parametrize("dialect", ["chongqing", "xian", "hakka"])
def test_dialects_without_an_upstream_instruction_are_refused(dialect: str) -> None:
    item = SynthesisItem("你好。", "zh", 1.0, style=StyleHints(dialect=dialect))
    with pytest.raises(VoiceFactoryError) as err:
        plan_call(item, voice_language="zh", has_transcript=True, generation=3)
    assert err.value.code is ErrorCode.UNSUPPORTED_LANGUAGE


def test_stream_yields_upstreams_chunks_as_float32(tmp_path: Path) -> None:
    engine = loaded(tmp_path, 3)
    profile = make_profile(engine)
    chunks = list(engine.synthesize_stream(profile, SynthesisItem("你好。", "zh", 1.0)))
    assert [len(c.samples) for c in chunks] == [2400, 1200]
    assert all(c.samples.dtype == np.float32 for c in chunks)
    assert {c.sample_rate for c in chunks} == {engine.sample_rate}
    model = model_of(engine)
    assert model.calls("inference_zero_shot")[0]["stream"] is True
    assert model.calls("tts") == [{"stream": True, "speed": 1.0}]


def test_closing_a_stream_early_releases_the_instruct_entry(tmp_path: Path) -> None:
    engine = loaded(tmp_path, 3)
    profile = make_profile(engine)
    item = SynthesisItem("你好。", "zh", 1.0, instruct="用开心的语气说")
    stream = engine.synthesize_stream(profile, item)
    next(stream)
    table = model_of(engine).frontend.spk2info
    assert any(":instruct:" in k for k in table)
    stream.close()
    assert not any(":instruct:" in k for k in table)


def test_the_source_setting_reaches_the_engine(tmp_path: Path) -> None:
    engine = create_engine("cosyvoice", EngineOptions(cosyvoice_model_dir="m",
                                                      cosyvoice_source=str(tmp_path)))
    assert isinstance(engine, CosyVoiceEngine) and engine._source == str(tmp_path)


def test_source_layouts(tmp_path: Path) -> None:
    clone = tmp_path / "clone"
    (clone / "cosyvoice" / "cli").mkdir(parents=True)
    assert source_paths(str(clone)) == [clone, clone / "third_party" / "Matcha-TTS"]
    side_by_side = tmp_path / "third_party"
    (side_by_side / "CosyVoice" / "cosyvoice" / "cli").mkdir(parents=True)
    assert source_paths(str(side_by_side)) == [side_by_side / "CosyVoice",
                                               side_by_side / "Matcha-TTS"]
    with pytest.raises(EngineUnavailable, match="holds neither a CosyVoice clone"):
        source_paths(str(tmp_path / "empty"))


def test_a_stream_at_another_speed_is_the_whole_clip_in_one_chunk(tmp_path: Path) -> None:
    # Upstream changes speed only for whole clips: one stream=False call, one chunk.
    engine = loaded(tmp_path, 3)
    profile = make_profile(engine)
    one = SynthesisItem("你好。", "zh", 1.25)
    [chunk] = list(engine.synthesize_stream(profile, one))
    assert model_of(engine).calls("tts") == [{"stream": False, "speed": 1.25}]
    [whole] = engine.synthesize(profile, [one])
    assert chunk.sample_rate == RATE and np.array_equal(chunk.samples, whole.audio.samples)
