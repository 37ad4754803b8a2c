"""A batch of items, of one voice or mixed, through the LLM together (cosyvoice_batch),
against the same items one by one through upstream's own path, with the real code and tiny
models on CPU.

The tiny models' sampler draws at random; these tests swap in a greedy one (argmax over the
speech tokens, a stop id once upstream allows it) so both paths must pick the same tokens.
HiFT's noise is seeded, and both paths draw it in the same order (one item after another).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from pipeline.audio import Audio
from pipeline.engines import cosyvoice_flow
from pipeline.engines.base import EngineOutOfMemory, SynthesisItem, VoiceMixer
from pipeline.engines.cosyvoice import CosyVoiceEngine
from tests.cosyvoice.conftest import make_profile, reference_clip
from tests.cosyvoice.tiny_models import SPEECH_TOKENS
from topics.errors import ErrorCode, VoiceFactoryError

pytestmark = [pytest.mark.cosyvoice,
              pytest.mark.filterwarnings("ignore:.*deprecated.*:FutureWarning")]

ITEMS = [SynthesisItem(text="今天天气很好，我们去公园散步吧。", language="zh", speed=1.0),
         SynthesisItem(text="Hello there, how are you today?", language="en", speed=1.0),
         SynthesisItem(text="好。", language="zh", speed=1.25),
         SynthesisItem(text="……", language="zh", speed=1.0),  # a pause: no LLM row
         SynthesisItem(text="?!", language="en", speed=1.0),  # v3 prefixes a system prompt
         SynthesisItem(text="慢慢说。", language="zh", speed=1.0, instruct="用开心的语气说")]


def greedy(scores: Any, decoded: list[int], sampling: int) -> int:
    if scores[SPEECH_TOKENS].item() != float("-inf"):  # upstream lets it stop here
        return SPEECH_TOKENS + 1
    return int(scores[:SPEECH_TOKENS].argmax())


class Recorder:
    """Counts the LLM's forward passes and keeps the tokens that reached the flow, through
    token2wav (one row) or the batched flow (several)."""

    def __init__(self, engine: CosyVoiceEngine, monkeypatch: pytest.MonkeyPatch) -> None:
        self.forwards = 0
        self.tokens: list[list[int]] = []
        shared = engine._model.model
        monkeypatch.setattr(shared.llm, "sampling", greedy)
        body = shared.llm.llm.model.model  # what both paths run a step through
        forward, token2wav = body.forward, shared.token2wav

        def counting(*args: Any, **kwargs: Any) -> Any:
            self.forwards += 1
            return forward(*args, **kwargs)

        def recording(**kwargs: Any) -> Any:
            self.tokens.append(kwargs["token"].flatten().tolist())
            return token2wav(**kwargs)

        mel = cosyvoice_flow.mel

        def recording_mel(flow: Any, rows: list[list[int]], *args: Any) -> Any:
            self.tokens.extend(list(row) for row in rows)
            return mel(flow, rows, *args)

        monkeypatch.setattr(body, "forward", counting)
        monkeypatch.setattr(shared, "token2wav", recording)
        monkeypatch.setattr(cosyvoice_flow, "mel", recording_mel)

    def take(self) -> tuple[int, list[list[int]]]:
        taken = self.forwards, self.tokens
        self.forwards, self.tokens = 0, []
        return taken


def one_by_one(engine: CosyVoiceEngine, profile: Any) -> list[Audio]:
    torch.manual_seed(5)
    return [engine.synthesize(profile, [item])[0].audio for item in ITEMS]


@pytest.mark.parametrize("flow_batched", [True, False], ids=["flow-batched", "token2wav"])
def test_a_batch_gives_each_item_what_it_gets_alone(
        engine: CosyVoiceEngine, reference: Audio, monkeypatch: pytest.MonkeyPatch,
        flow_batched: bool) -> None:
    profile = make_profile(engine, reference, voice_id="batched")
    assert cosyvoice_flow.batchable(engine._model.model.flow)
    assert not cosyvoice_flow.worth_batching(engine._model.model)  # a CPU: rows one by one
    if flow_batched:  # as on a GPU
        monkeypatch.setattr(cosyvoice_flow, "worth_batching",
                            lambda model: cosyvoice_flow.batchable(model.flow))
    recorder = Recorder(engine, monkeypatch)
    alone = one_by_one(engine, profile)
    forwards_alone, tokens_alone = recorder.take()
    torch.manual_seed(5)
    together = [s.audio for s in engine.synthesize(profile, ITEMS)]
    forwards_together, tokens_together = recorder.take()

    assert tokens_together == tokens_alone and len(tokens_alone) == 4  # pauses have none
    for a, b in zip(alone, together, strict=True):
        assert a.sample_rate == b.sample_rate
        np.testing.assert_allclose(b.samples, a.samples, atol=1e-5)
    # One forward a step for the whole batch: the longest row's tokens plus its stop step,
    # against every row's tokens and stop steps one after another.
    lengths = [len(t) for t in tokens_alone]
    assert forwards_alone == sum(n + 1 for n in lengths)
    assert forwards_together == max(lengths) + 1


def test_voices_mixed_in_a_batch_each_sound_as_alone(
        engine: CosyVoiceEngine, reference: Audio, monkeypatch: pytest.MonkeyPatch) -> None:
    first = make_profile(engine, reference, voice_id="mixed-a")
    second = make_profile(engine, reference_clip(5.0), voice_id="mixed-b",
                          transcript="Nice to meet you, my friend.")
    assert not np.array_equal(first.tensors["flow_embedding"],
                              second.tensors["flow_embedding"])
    pairs = [(first, ITEMS[0]), (second, ITEMS[1]), (first, ITEMS[2]), (second, ITEMS[0]),
             (second, ITEMS[5])]
    # The flow batched as on a GPU: rows of two prompts through one decoder input.
    monkeypatch.setattr(cosyvoice_flow, "worth_batching",
                        lambda model: cosyvoice_flow.batchable(model.flow))
    recorder = Recorder(engine, monkeypatch)
    torch.manual_seed(9)
    alone = [engine.synthesize(profile, [item])[0].audio for profile, item in pairs]
    forwards_alone, tokens_alone = recorder.take()
    torch.manual_seed(9)
    mixed = [s.audio for s in engine.synthesize_voices(pairs)]
    forwards_mixed, tokens_mixed = recorder.take()

    assert isinstance(engine, VoiceMixer)
    assert tokens_mixed == tokens_alone
    for a, b in zip(alone, mixed, strict=True):
        np.testing.assert_allclose(b.samples, a.samples, atol=1e-5)
    assert forwards_mixed == max(len(t) for t in tokens_alone) + 1 < forwards_alone
    # The same text in two voices: the voice, not only the text, reached the LLM.
    assert tokens_alone[0] != tokens_alone[3]


def test_flow_rows_together_match_upstreams_one_row_mel(
        engine: CosyVoiceEngine, reference: Audio) -> None:
    """Rows of different lengths and prompts (two voices) through the flow together: each
    row's mel is what upstream's flow.inference gives that row alone."""
    first = make_profile(engine, reference, voice_id="flow-a")
    second = make_profile(engine, reference_clip(5.0), voice_id="flow-b",
                          transcript="Nice to meet you, my friend.")
    shared = engine._model.model
    inputs = [engine._on_device(p.tensors) for p in (first, second, first)]
    generator = torch.Generator().manual_seed(4)
    rows = [torch.randint(0, SPEECH_TOKENS, (n,), generator=generator).tolist()
            for n in (37, 12, 60)]
    with torch.inference_mode():
        together = cosyvoice_flow.mel(shared.flow, rows, inputs, "cpu")
        for row, x, mel in zip(rows, inputs, together, strict=True):
            alone, _ = shared.flow.inference(
                token=torch.tensor([row], dtype=torch.int32),
                token_len=torch.tensor([len(row)], dtype=torch.int32),
                prompt_token=x["flow_prompt_speech_token"],
                prompt_token_len=torch.tensor([x["flow_prompt_speech_token"].shape[1]],
                                              dtype=torch.int32),
                prompt_feat=x["prompt_speech_feat"],
                prompt_feat_len=torch.tensor([x["prompt_speech_feat"].shape[1]],
                                             dtype=torch.int32),
                embedding=x["flow_embedding"], streaming=False, finalize=True)
            assert mel.shape == alone.shape == (1, 80, 2 * len(row))
            torch.testing.assert_close(mel, alone, atol=1e-4, rtol=1e-4)


def test_engine_says_it_batches_once_loaded(engine: CosyVoiceEngine) -> None:
    assert engine.capabilities.batching


def test_oom_in_a_batched_step_is_engine_out_of_memory(
        engine: CosyVoiceEngine, reference: Audio, monkeypatch: pytest.MonkeyPatch) -> None:
    profile = make_profile(engine, reference, voice_id="batched-oom")
    body = engine._model.model.llm.llm.model.model

    def out_of_memory(*args: Any, **kwargs: Any) -> Any:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 4.00 GiB")

    monkeypatch.setattr(body, "forward", out_of_memory)
    with pytest.raises(EngineOutOfMemory, match="CUDA out of memory"):
        engine.synthesize(profile, ITEMS[:2])
    assert not engine._model.model.hift_cache_dict  # nothing left behind


def test_a_failing_batch_names_the_voice_and_leaves_no_state(
        engine: CosyVoiceEngine, reference: Audio, monkeypatch: pytest.MonkeyPatch) -> None:
    profile = make_profile(engine, reference, voice_id="batched-fails")
    shared = engine._model.model

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("HiFT broke")

    monkeypatch.setattr(shared.hift, "inference", broken)
    with pytest.raises(VoiceFactoryError) as caught:
        engine.synthesize(profile, ITEMS[:2])
    assert caught.value.code is ErrorCode.ENGINE_ERROR and caught.value.retryable
    assert "batch of 2 items of voice 'batched-fails'" in caught.value.message
    assert "RuntimeError: HiFT broke" in caught.value.message
    assert not shared.hift_cache_dict
