"""Synthesis engines behind the `Synthesizer` protocol; `create_engine` picks one by name."""

from __future__ import annotations

from pipeline.engines.base import EngineUnavailable, Synthesizer
from topics.config import Settings


def create_engine(name: str, settings: Settings | None = None) -> Synthesizer:
    """`settings` (default: read from the environment) carries what an engine needs to load."""
    if name == "espeak":
        from pipeline.engines.espeak import EspeakEngine

        return EspeakEngine()
    if name == "bench":
        from pipeline.engines.bench import BenchEngine

        return BenchEngine.from_env()
    if name == "cosyvoice":
        from pipeline.engines.cosyvoice import CosyVoiceEngine

        return CosyVoiceEngine.from_settings(settings or Settings.from_env())
    raise EngineUnavailable(f"unknown engine {name!r}; "
                            "available in this build: espeak, bench, cosyvoice")


__all__ = ["EngineUnavailable", "Synthesizer", "create_engine"]
