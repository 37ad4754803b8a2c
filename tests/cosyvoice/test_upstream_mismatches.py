"""The mismatches between our adapter and upstream CosyVoice that a run through the real code
found (issue 13), each pinned by a test that failed before its fix; and the streaming call.

Same set-up as test_real_code.py: FunAudioLLM's code, tiny random-weight models, CPU.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
import threading
import time
import tomllib
from collections.abc import Iterator
from importlib.metadata import version
from typing import Any

import numpy as np
import pytest
import torch
from packaging.requirements import Requirement

from pipeline.audio import Audio
from pipeline.engines.base import EngineOutOfMemory, StyleHints, SynthesisItem
from pipeline.engines.cosyvoice import CosyVoiceEngine
from pipeline.engines.cosyvoice_prompts import DIALECTS, EMOTIONS, derived_instruction
from pipeline.engines.cosyvoice_runtime import _load_wav
from tests.cosyvoice.conftest import CHECKOUT, make_profile
from topics.errors import ErrorCode, VoiceFactoryError

pytestmark = [pytest.mark.cosyvoice,
              pytest.mark.filterwarnings("ignore:.*deprecated.*:FutureWarning"),
              # upstream's fade_in_out multiplies a tensor by a numpy window (streaming)
              pytest.mark.filterwarnings("ignore:__array_wrap__:DeprecationWarning")]

RATE = 24000
LONG_ZH = "这是一个比较长的句子，用来测试流式合成的分块输出。"


def item(text: str, language: str | None = "zh", **kw: Any) -> SynthesisItem:
    return SynthesisItem(text=text, language=language, speed=kw.pop("speed", 1.0), **kw)


# -- 1. reference audio without torchcodec/FFmpeg ------------------------------------------


def test_profile_reads_the_reference_without_torchcodec(
        engine: CosyVoiceEngine, reference: Audio, monkeypatch: pytest.MonkeyPatch) -> None:
    # torchaudio 2.11's load() needs torchcodec; upstream's load_wav raised ImportError and
    # every profile() failed as a retryable engine_error.
    monkeypatch.setitem(sys.modules, "torchcodec", None)
    profile = make_profile(engine, reference, voice_id="no-torchcodec")
    assert profile.tensors["prompt_speech_feat"].shape == (1, 200, 80)


def test_wav_loader_resamples_as_upstream_does(tmp_path: Any) -> None:
    import soundfile as sf
    import torchaudio

    stereo = np.random.default_rng(3).uniform(-0.5, 0.5, (44100, 2)).astype(np.float32)
    sf.write(tmp_path / "ref.wav", stereo, 44100, subtype="FLOAT")
    ours = _load_wav(str(tmp_path / "ref.wav"), 16000)
    mono = torch.from_numpy(stereo.T.copy()).mean(dim=0, keepdim=True)
    theirs = torchaudio.transforms.Resample(orig_freq=44100, new_freq=16000)(mono)
    assert ours.shape == theirs.shape == (1, 16000)
    torch.testing.assert_close(ours, theirs)


# -- 2. exceptions in upstream's LLM thread ------------------------------------------------


def _failing_llm(after: int, error: BaseException) -> Any:
    def inference(**kwargs: Any) -> Iterator[int]:
        yield from range(100, 100 + after)
        raise error
    return inference


@pytest.fixture
def excepthook_calls(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    calls: list[Any] = []
    monkeypatch.setattr(threading, "excepthook", calls.append)
    return calls


@pytest.mark.parametrize("after", [0, 40], ids=["at-once", "mid-way"])
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_llm_thread_error_reaches_the_caller(
        engine: CosyVoiceEngine, reference: Audio, monkeypatch: pytest.MonkeyPatch,
        excepthook_calls: list[Any], stream: bool, after: int) -> None:
    profile = make_profile(engine, reference, voice_id="llm-fails")
    monkeypatch.setattr(engine._model.model.llm, "inference",
                        _failing_llm(after, RuntimeError("the LLM broke")))
    with pytest.raises(VoiceFactoryError) as caught:
        if stream:  # upstream's stream loop waited forever for the dead LLM's end flag
            list(engine.synthesize_stream(profile, item(LONG_ZH)))
        else:
            engine.synthesize(profile, [item(LONG_ZH)])
    assert caught.value.code is ErrorCode.ENGINE_ERROR and caught.value.retryable
    assert "RuntimeError: the LLM broke" in caught.value.message
    assert excepthook_calls == []
    shared = engine._model.model
    assert not shared.tts_speech_token_dict and not shared.llm_end_dict


def test_oom_in_the_llm_thread_is_engine_out_of_memory(
        engine: CosyVoiceEngine, reference: Audio, monkeypatch: pytest.MonkeyPatch,
        excepthook_calls: list[Any]) -> None:
    profile = make_profile(engine, reference, voice_id="llm-oom")
    oom = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    monkeypatch.setattr(engine._model.model.llm, "inference", _failing_llm(10, oom))
    with pytest.raises(EngineOutOfMemory, match="CUDA out of memory"):
        engine.synthesize(profile, [item(LONG_ZH)])
    assert excepthook_calls == []


def test_decode_steps_attend_to_the_whole_history(engine: CosyVoiceEngine) -> None:
    """Upstream's decode loop, as its inference_wrapper calls the encoder: a prefill under a
    causal mask, then one input a step under a 1 x 1 mask. Each step's hidden state is the one
    a single forward over the whole sequence gives; under transformers 5 a step saw the first
    prefill position only (hidden states off by about 0.06 in these tiny models)."""
    encoder = engine._model.model.llm.llm
    generator = torch.Generator().manual_seed(11)
    width = engine._model.model.llm.llm_input_size
    prefill = torch.randn(1, 12, width, generator=generator)
    steps = torch.randn(1, 6, width, generator=generator)
    with torch.inference_mode():
        hidden, cache = encoder.forward_one_step(
            prefill, masks=torch.tril(torch.ones(1, 12, 12)).to(torch.bool), cache=None)
        stepped = [hidden[0, -1]]
        for k in range(steps.shape[1]):
            hidden, cache = encoder.forward_one_step(
                steps[:, k:k + 1], masks=torch.ones(1, 1, 1, dtype=torch.bool), cache=cache)
            stepped.append(hidden[0, -1])
        sequence = torch.concat([prefill, steps], dim=1)
        whole = encoder.model(inputs_embeds=sequence,
                              attention_mask=torch.ones(1, sequence.shape[1], dtype=torch.bool),
                              output_hidden_states=True, return_dict=True).hidden_states[-1]
    for k, state in enumerate(stepped):
        torch.testing.assert_close(state, whole[0, 11 + k], atol=1e-5, rtol=1e-4)


# -- 6. dependencies ------------------------------------------------------------------------


def test_installed_versions_satisfy_the_cosyvoice_extra() -> None:
    project = tomllib.loads((CHECKOUT / "pyproject.toml").read_text())["project"]
    extra = [Requirement(r) for r in project["optional-dependencies"]["cosyvoice"]]
    by_name = {r.name.lower(): r for r in extra}
    # past_key_values as upstream's Qwen2Encoder uses it goes away in transformers 5.40;
    # wetext 0.0.4 downloads its FSTs (offline: silently no normaliser), 0.1.8 bundles them.
    assert not by_name["transformers"].specifier.contains("5.40.0")
    assert by_name["wetext"].specifier.contains("0.1.8")
    assert not by_name["wetext"].specifier.contains("0.0.4")
    for requirement in extra:
        assert requirement.specifier.contains(version(requirement.name)), requirement


# -- 8. instruction tables ------------------------------------------------------------------


def test_every_v3_instruction_is_in_upstreams_trained_list(cosyvoice_source: str) -> None:
    trained = set(importlib.import_module("cosyvoice.utils.common").instruct_list)
    made = {derived_instruction(item("好。", style=StyleHints(dialect=d)), "zh", "zh", 3)
            for d in DIALECTS}
    made |= {derived_instruction(item("好。", style=StyleHints(emotion=e)), "zh", "zh", 3)
             for e in EMOTIONS}
    wrapped = {f"You are a helpful assistant. {m}<|endofprompt|>" for m in made}
    assert wrapped <= trained
    upstream_dialects = {t for t in trained if "话表达" in t}
    assert upstream_dialects <= wrapped  # 湖南话 was missing


# -- 9. logs stay JSON: no basicConfig(DEBUG), no progress bars ----------------------------


def test_importing_upstream_leaves_the_root_logger_alone(cosyvoice_source: str) -> None:
    code = ("import logging, sys\n"
            "from pipeline.engines.cosyvoice_setup import import_cosyvoice\n"
            "import_cosyvoice(sys.argv[1])\n"
            "root = logging.getLogger()\n"
            "hf = logging.getLogger('transformers')\n"
            "print(len(root.handlers), root.level, len(hf.handlers), hf.propagate)\n")
    done = subprocess.run([sys.executable, "-c", code, cosyvoice_source], cwd=CHECKOUT,
                          capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.split() == ["0", str(30), "0", "True"], done.stderr[-2000:]


def test_no_progress_bars_on_stderr(engine: CosyVoiceEngine, reference: Audio,
                                    capfd: pytest.CaptureFixture[str]) -> None:
    profile = make_profile(engine, reference, voice_id="quiet")
    capfd.readouterr()
    engine.synthesize(profile, [item("你好。")])
    assert "it/s" not in capfd.readouterr().err


def test_speaker_cache_is_upstreams_plain_dict(engine: CosyVoiceEngine) -> None:
    # Upstream copies a cached speaker before changing it (3b44913): no wrapper needed.
    assert type(engine._model.frontend.spk2info) is dict


# -- streaming ------------------------------------------------------------------------------


def _stream(engine: CosyVoiceEngine, profile: Any, text: str = LONG_ZH) -> list[np.ndarray]:
    return [chunk.samples for chunk in engine.synthesize_stream(profile, item(text))]


def test_stream_yields_float32_chunks_and_resets_the_first_hop(
        engine_v2: CosyVoiceEngine, reference: Audio) -> None:
    profile = make_profile(engine_v2, reference, voice_id="stream")
    first = _stream(engine_v2, profile)
    assert len(first) >= 3
    for chunk in first:
        assert chunk.dtype == np.float32 and chunk.ndim == 1 and np.isfinite(chunk).all()
    # 25 tokens x 2 mel frames x 480 samples, less HiFT's 8-frame overlap cache.
    assert len(first[0]) == 25 * 2 * 480 - 8 * 480
    # Upstream grows token_hop_len on the shared model and resets it only in __init__:
    # a second request started with a 100-token first hop.
    second = _stream(engine_v2, profile)
    assert [len(c) for c in second] == [len(c) for c in first]
    assert engine_v2._model.model.token_hop_len == 25


def test_concurrent_streams_each_start_with_the_first_hop(
        engine_v2: CosyVoiceEngine, reference: Audio) -> None:
    profile = make_profile(engine_v2, reference, voice_id="streams")
    alone = [len(c) for c in _stream(engine_v2, profile)]
    results: list[list[int]] = []

    def run() -> None:
        results.append([len(c) for c in _stream(engine_v2, profile)])

    threads = [threading.Thread(target=run) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=90)
    assert alone[0] == 25 * 2 * 480 - 8 * 480  # the first hop, as upstream's __init__ set it
    assert results == [alone] * 3


def test_stream_of_v3_and_of_a_pause(engine_v3: CosyVoiceEngine, reference: Audio) -> None:
    profile = make_profile(engine_v3, reference, voice_id="stream3")
    chunks = _stream(engine_v3, profile)
    assert chunks and all(c.dtype == np.float32 for c in chunks)
    assert sum(len(c) for c in chunks) > RATE // 10
    [pause] = _stream(engine_v3, profile, "……")
    assert len(pause) == int(0.2 * RATE) and not pause.any()


def test_a_speed_change_streams_as_one_whole_clip(engine_v2: CosyVoiceEngine,
                                                  reference: Audio) -> None:
    # Upstream changes speed only for whole clips: the item comes as one chunk, the clip
    # synthesize makes.
    profile = make_profile(engine_v2, reference, voice_id="stream-speed")
    [chunk] = list(engine_v2.synthesize_stream(profile, item(LONG_ZH, speed=1.5)))
    assert chunk.sample_rate == RATE and chunk.samples.dtype == np.float32
    assert len(chunk.samples) > RATE // 10


def test_an_abandoned_stream_leaves_no_state_behind(engine_v2: CosyVoiceEngine,
                                                    reference: Audio) -> None:
    profile = make_profile(engine_v2, reference, voice_id="abandoned")
    stream = engine_v2.synthesize_stream(profile, item(LONG_ZH * 2))
    next(stream)
    stream.close()  # a client that hung up; upstream's own clean-up never runs
    shared = engine_v2._model.model
    deadline = time.monotonic() + 30
    while (shared.tts_speech_token_dict or shared.llm_end_dict or shared.hift_cache_dict) \
            and time.monotonic() < deadline:
        time.sleep(0.1)  # the LLM thread may still be finishing
    assert not shared.tts_speech_token_dict and not shared.llm_end_dict
    assert not shared.hift_cache_dict
