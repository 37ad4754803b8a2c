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
              pytest.mark.filterwarnings("ignore:.*deprecated.*:FutureWarning")]

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
