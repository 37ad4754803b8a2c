"""Synthesis engines behind the `Synthesizer` protocol; `create_engine` picks one by name."""

from __future__ import annotations

from pipeline.engines.base import EngineUnavailable, Synthesizer
from pipeline.engines.options import EngineOptions


def create_engine(name: str, options: EngineOptions | None = None) -> Synthesizer:
    """`options` (default: CPU, fp32, no model directory) carry what an engine needs to load."""
    if name == "espeak":
        from pipeline.engines.espeak import EspeakEngine

        return EspeakEngine()
    if name == "bench":
        from pipeline.engines.bench import BenchEngine

        return BenchEngine.from_env()
    if name == "cosyvoice":
        from pipeline.engines.cosyvoice import CosyVoiceEngine

        return CosyVoiceEngine.from_options(options or EngineOptions())
    raise EngineUnavailable(f"unknown engine {name!r}; "
                            "available in this build: espeak, bench, cosyvoice")


__all__ = ["EngineOptions", "EngineUnavailable", "Synthesizer", "create_engine"]
