"""Session fixtures for the real-code CosyVoice tests: upstream's source, tiny model folders,
loaded engines and a reference clip.

VF_COSYVOICE_SOURCE (default `<checkout>/../shared/third_party`, which holds CosyVoice/ and
Matcha-TTS/ at the commits README.md there names) -> `cosyvoice_source` -> the tiny model
folders, built once per session under a tmp dir (tiny_models.py, about 20 s) -> one loaded
CosyVoiceEngine per generation, shared by the tests (the engine is thread-safe; tests that
patch upstream objects restore them with monkeypatch).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from pipeline.audio import Audio
from pipeline.engines.base import Profile, VoiceMeasures
from pipeline.engines.cosyvoice import CosyVoiceEngine
from pipeline.engines.cosyvoice_setup import import_cosyvoice, source_paths
from tests.cosyvoice.tiny_models import build_model_dir

CHECKOUT = Path(__file__).resolve().parents[2]
DEFAULT_SOURCE = CHECKOUT.parent / "shared" / "third_party"
MEASURES = VoiceMeasures(np.zeros(256, np.float32))
SHA = "cd" * 32
TRANSCRIPT = "希望你以后能够做的比我还好呦。"


def source_setting() -> str:
    return os.environ.get("VF_COSYVOICE_SOURCE", "").strip() or str(DEFAULT_SOURCE)


@pytest.fixture(scope="session")
def cosyvoice_source() -> str:
    source = source_setting()
    try:
        source_paths(source)
    except Exception as exc:
        pytest.skip(f"upstream CosyVoice source not found ({exc}); set VF_COSYVOICE_SOURCE to "
                    "a folder with CosyVoice/ and Matcha-TTS/ or to a CosyVoice clone")
    import_cosyvoice(source)
    return source


@pytest.fixture(scope="session")
def model_dirs(cosyvoice_source: str,
               tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    root = tmp_path_factory.mktemp("tiny-cosyvoice")
    return {generation: build_model_dir(root, generation) for generation in (2, 3)}


def _engine(model_dirs: dict[int, Path], source: str, generation: int) -> CosyVoiceEngine:
    engine = CosyVoiceEngine(model_dir=str(model_dirs[generation]), device="cpu",
                             precision="fp32", source=source)
    engine.load()
    return engine


@pytest.fixture(scope="session")
def engine_v2(model_dirs: dict[int, Path], cosyvoice_source: str) -> CosyVoiceEngine:
    return _engine(model_dirs, cosyvoice_source, 2)


@pytest.fixture(scope="session")
def engine_v3(model_dirs: dict[int, Path], cosyvoice_source: str) -> CosyVoiceEngine:
    return _engine(model_dirs, cosyvoice_source, 3)


@pytest.fixture(params=[2, 3], ids=["v2", "v3"])
def engine(request: pytest.FixtureRequest) -> CosyVoiceEngine:
    """Each test that takes `engine` runs on both generations."""
    return request.getfixturevalue(f"engine_v{request.param}")  # type: ignore[no-any-return]


def reference_clip(seconds: float = 4.0, rate: int = 24000) -> Audio:
    """A voiced-sounding reference: a gliding harmonic tone with a little noise."""
    t = np.arange(int(seconds * rate)) / rate
    f0 = 140 + 30 * np.sin(2 * np.pi * 0.7 * t)
    phase = 2 * np.pi * np.cumsum(f0) / rate
    wave = sum(np.sin(k * phase) / k for k in range(1, 6))
    noise = np.random.default_rng(7).standard_normal(len(t)) * 0.01
    return Audio(samples=(0.3 * wave / 2.3 + noise).astype(np.float32), sample_rate=rate)


@pytest.fixture(scope="session")
def reference() -> Audio:
    return reference_clip()


def make_profile(engine: CosyVoiceEngine, reference: Audio, voice_id: str = "v1",
                 transcript: str | None = TRANSCRIPT) -> Profile:
    return engine.profile(voice_id=voice_id, sha256=SHA, reference=reference,
                          prompt_text=transcript, measures=MEASURES)


@pytest.fixture
def profile(engine: CosyVoiceEngine, reference: Audio) -> Iterator[Profile]:
    yield make_profile(engine, reference)
