"""Our CosyVoice adapter through FunAudioLLM's real code, with tiny random-weight models on CPU.

Every upstream stage runs for real (frontend, Qwen tokenizer, ONNX speech tokenizer and CAM++,
the LLM in its thread, flow matching, HiFT), so these tests check the contract between the
adapter and upstream: what is called with what, what comes back, and how failures surface.
The weights are random, so nothing here says anything about how the speech sounds.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest

from pipeline.audio import Audio
from pipeline.engines.base import Profile, StyleHints, SynthesisItem
from pipeline.engines.cosyvoice import PROFILE_TENSORS, CosyVoiceEngine, speaker_id
from pipeline.profiles import from_safetensors, to_safetensors
from tests.cosyvoice.conftest import SHA, TRANSCRIPT, make_profile

# Upstream and its dependencies call deprecated APIs (torch.cuda.amp.autocast, diffusers'
# LoRACompatibleLinear, torch.jit.script); the project's warnings-as-errors would stop them.
pytestmark = [pytest.mark.cosyvoice,
              pytest.mark.filterwarnings("ignore:.*deprecated.*:FutureWarning"),
              # upstream's fade_in_out multiplies a tensor by a numpy window (streaming)
              pytest.mark.filterwarnings("ignore:__array_wrap__:DeprecationWarning")]

RATE = 24000


def item(text: str, language: str | None = None, **kw: Any) -> SynthesisItem:
    return SynthesisItem(text=text, language=language, speed=kw.pop("speed", 1.0), **kw)


def check_audio(audio: Audio) -> None:
    assert audio.sample_rate == RATE
    assert audio.samples.dtype == np.float32
    assert audio.samples.ndim == 1 and len(audio.samples) > RATE // 10
    assert np.isfinite(audio.samples).all()
    assert float(np.abs(audio.samples).max()) > 0


class Spy:
    """Records the texts upstream's frontend tokenises and the frontend_* calls made."""

    def __init__(self, engine: CosyVoiceEngine, monkeypatch: pytest.MonkeyPatch) -> None:
        self.texts: list[str] = []
        self.calls: list[str] = []
        self.tokens: list[list[int]] = []
        frontend = engine._model.frontend
        extract = frontend._extract_text_token

        def extract_text_token(text: Any) -> Any:
            self.texts.append(text)
            tokens, length = extract(text)
            self.tokens.append(tokens.flatten().tolist())
            return tokens, length

        monkeypatch.setattr(frontend, "_extract_text_token", extract_text_token)
        for name in ("frontend_zero_shot", "frontend_cross_lingual", "frontend_instruct2"):
            monkeypatch.setattr(frontend, name, self._recording(name, getattr(frontend, name)))
        self.tokenizer = frontend.tokenizer

    def _recording(self, name: str, fn: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(name)
            return fn(*args, **kwargs)
        return call

    def token_id(self, text: str) -> int:
        ids = self.tokenizer.encode(text)
        assert len(ids) == 1, (text, ids)
        return int(ids[0])


def test_load(engine: CosyVoiceEngine) -> None:
    assert engine.sample_rate == RATE
    assert engine.capabilities.streaming
    assert type(engine._model).__name__ == f"CosyVoice{engine.generation}"


def test_zero_shot(engine: CosyVoiceEngine, profile: Profile,
                   monkeypatch: pytest.MonkeyPatch) -> None:
    spy = Spy(engine, monkeypatch)
    [out] = engine.synthesize(profile, [item("今天天气很好。", "zh")])
    check_audio(out.audio)
    assert out.language == "zh"
    assert spy.calls == ["frontend_zero_shot"]


def test_tiny_models_end_a_clip_where_upstream_allows(engine: CosyVoiceEngine,
                                                       profile: Profile) -> None:
    """The tests' own premise: a clip's length follows its text, never the random weights."""
    lengths = {len(out.audio.samples)
               for out in engine.synthesize(profile, [item("我们走吧。", "zh")] * 3)}
    assert len(lengths) == 1, lengths
    [longer] = engine.synthesize(profile, [item("我们明天早上一起走吧。", "zh")])
    assert len(longer.audio.samples) > lengths.pop()


def test_profile_holds_what_frontend_zero_shot_computes(engine: CosyVoiceEngine,
                                                        profile: Profile) -> None:
    assert set(profile.tensors) == set(PROFILE_TENSORS)
    tokens = profile.tensors["flow_prompt_speech_token"]
    feats = profile.tensors["prompt_speech_feat"]
    # 4 s of reference: 25 speech tokens and 50 mel frames a second (feat = 2 x tokens).
    assert tokens.shape == (1, 100) and tokens.dtype == np.int32 and tokens.max() < 6561
    assert feats.shape == (1, 200, 80) and feats.dtype == np.float32
    assert profile.tensors["flow_embedding"].shape == (1, 192)
    assert profile.text == {"prompt_text": TRANSCRIPT, "language": "zh"}
    assert profile.features["cosyvoice_generation"] == engine.generation


def test_profile_survives_safetensors_and_a_cold_speaker_cache(
        engine: CosyVoiceEngine, reference: Audio) -> None:
    stored = make_profile(engine, reference, voice_id="round-trip")
    loaded = from_safetensors(to_safetensors(stored))
    for key in PROFILE_TENSORS:
        np.testing.assert_array_equal(loaded.tensors[key], stored.tensors[key])
    table = engine._model.frontend.spk2info
    table.pop(speaker_id("round-trip", SHA))  # as on a worker that never profiled the voice
    [out] = engine.synthesize(loaded, [item("你好。", "zh")])
    check_audio(out.audio)
    entry = table[speaker_id("round-trip", SHA)]
    np.testing.assert_array_equal(entry["prompt_speech_feat"].numpy(),
                                  stored.tensors["prompt_speech_feat"])


def test_cross_lingual(engine: CosyVoiceEngine, profile: Profile,
                       monkeypatch: pytest.MonkeyPatch) -> None:
    spy = Spy(engine, monkeypatch)
    [out] = engine.synthesize(profile, [item("Nice to meet you.", "en")])
    check_audio(out.audio)
    # Upstream's frontend_cross_lingual calls frontend_zero_shot itself.
    assert (out.language, spy.calls[0]) == ("en", "frontend_cross_lingual")
    # The cached speaker keeps its LLM prompt: upstream deleted keys from a copy only.
    entry = engine._model.frontend.spk2info[speaker_id("v1", SHA)]
    assert set(entry) == set(PROFILE_TENSORS)


def test_instruct2_prompts_the_llm_with_the_instruction(
        engine: CosyVoiceEngine, profile: Profile, monkeypatch: pytest.MonkeyPatch) -> None:
    spy = Spy(engine, monkeypatch)
    [out] = engine.synthesize(profile, [item("我们走吧。", "zh", instruct="用开心的语气说")])
    check_audio(out.audio)
    assert spy.calls[0] == "frontend_instruct2"
    instruction = [t for t in spy.texts if "用开心的语气说" in t]
    assert instruction and instruction[0].endswith("<|endofprompt|>")
    assert spy.token_id("<|endofprompt|>") in spy.tokens[spy.texts.index(instruction[0])]
    # The per-call speaker entry is gone, the voice's own is untouched.
    table = engine._model.frontend.spk2info
    assert not any(":instruct:" in k for k in table)
    assert set(table[speaker_id("v1", SHA)]) == set(PROFILE_TENSORS)


def test_style_hints_become_upstreams_trained_instructions(
        engine: CosyVoiceEngine, profile: Profile, monkeypatch: pytest.MonkeyPatch) -> None:
    spy = Spy(engine, monkeypatch)
    hints = StyleHints(dialect="sichuan", emotion="happy")
    [out] = engine.synthesize(profile, [item("我们走吧。", "zh", style=hints)])
    check_audio(out.audio)
    expected = ("You are a helpful assistant. 请用四川话表达。请非常开心地说一句话。<|endofprompt|>"
                if engine.generation == 3
                else "用四川话说这句话用开心的语气说这句话<|endofprompt|>")
    assert expected in spy.texts


def test_v3_reads_annotations_as_phone_and_pinyin_tokens(
        engine_v3: CosyVoiceEngine, reference: Audio, monkeypatch: pytest.MonkeyPatch) -> None:
    profile = make_profile(engine_v3, reference)
    spy = Spy(engine_v3, monkeypatch)
    # Upstream's English normaliser (wetext) raised AssertionError on this text, and its
    # Chinese one turned [EH1] into [EH一]: text_frontend is off for our normalised text.
    outs = engine_v3.synthesize(profile, [item("Please read[R][EH1][D] it.", "en"),
                                          item("请给[j][ǐ]我，说[EH1]。", "zh")])
    for out in outs:
        check_audio(out.audio)
    english, chinese = (spy.tokens[spy.texts.index(t)] for t in spy.texts if "[" in t)
    for phone in ("[R]", "[EH1]", "[D]"):
        assert spy.token_id(phone) in english
    for symbol in ("[j]", "[ǐ]", "[EH1]"):
        assert spy.token_id(symbol) in chinese
    assert not any("一]" in t for t in spy.texts)
    # Inpainting form: the markup replaces what it reads.
    assert any("read" not in t and "[R][EH1][D]" in t for t in spy.texts)
    assert any("请[j][ǐ]我" in t for t in spy.texts)


def test_v2_reads_annotated_text_as_written(
        engine_v2: CosyVoiceEngine, reference: Audio, monkeypatch: pytest.MonkeyPatch) -> None:
    profile = make_profile(engine_v2, reference)
    spy = Spy(engine_v2, monkeypatch)
    # CosyVoice 2's tokenizer has no pinyin tokens: the inpainting form lost 给 and read
    # "[j][ǐ]" as six characters.
    [out] = engine_v2.synthesize(profile, [item("请给[j][ǐ]我。[breath]", "zh")])
    check_audio(out.audio)
    assert "请给我。[breath]" in spy.texts
    assert spy.token_id("[breath]") in spy.tokens[spy.texts.index("请给我。[breath]")]


def test_sentences_from_the_front_end_are_one_upstream_call_each(
        engine: CosyVoiceEngine, profile: Profile, monkeypatch: pytest.MonkeyPatch) -> None:
    from pipeline.frontend import prepare

    prepared = prepare("第一句话说完了。第二句也很短！第三句呢？", language="zh", instruct=None)
    assert len(prepared.sentences) == 3
    spy = Spy(engine, monkeypatch)
    outs = engine.synthesize(profile, [item(s, "zh") for s in prepared.sentences])
    assert len(outs) == 3
    for out in outs:
        check_audio(out.audio)
    assert spy.calls == ["frontend_zero_shot"] * 3
    assert [t for t in spy.texts if t in prepared.sentences] == prepared.sentences


def test_punctuation_only_sentence_is_a_pause(engine: CosyVoiceEngine,
                                              profile: Profile) -> None:
    # Upstream drops such a sentence and yields nothing; it was answered as a retryable
    # "CosyVoice returned no audio".
    outs = engine.synthesize(profile, [item("……", "zh"), item("?!", "en")])
    for out in outs:
        assert out.audio.sample_rate == RATE
        assert out.audio.samples.dtype == np.float32
        assert len(out.audio.samples) == int(0.2 * RATE)
        assert not out.audio.samples.any()


@pytest.mark.timeout(420)  # six syntheses behind upstream's lock: ~25 s here, more on a busy CPU
def test_three_threads_on_one_engine(engine: CosyVoiceEngine, reference: Audio) -> None:
    profiles = [make_profile(engine, reference, voice_id=f"t{n}") for n in range(3)]
    texts = ["今天天气很好。", "Nice to meet you.", "我们走吧。"]
    results: dict[int, Any] = {}

    def run(n: int) -> None:
        try:
            extra = {"instruct": "用开心的语气说"} if n == 2 else {}
            results[n] = engine.synthesize(profiles[n], [item(texts[n], None, **extra)] * 2)
        except BaseException as exc:
            results[n] = exc

    threads = [threading.Thread(target=run, args=(n,)) for n in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=360)
    assert not any(t.is_alive() for t in threads), "a synthesis thread is still running"
    for n in range(3):
        assert not isinstance(results[n], BaseException), results[n]
        for out in results[n]:
            check_audio(out.audio)
        # The tiny models' clips are as long as their text allows: a thread handed another
        # thread's clip would show here as two lengths for one text.
        first, second = (len(out.audio.samples) for out in results[n])
        assert first == second, (texts[n], first, second)
    shared = engine._model.model
    assert not shared.tts_speech_token_dict and not shared.llm_end_dict
    assert not any(":instruct:" in k for k in engine._model.frontend.spk2info)
