"""Synthesis engines behind the `Synthesizer` protocol; `create_engine` picks one by name."""

from __future__ import annotations

from pipeline.engines.base import EngineUnavailable, Synthesizer


def create_engine(name: str) -> Synthesizer:
    if name == "espeak":
        from pipeline.engines.espeak import EspeakEngine

        return EspeakEngine()
    if name == "bench":
        from pipeline.engines.bench import BenchEngine

        return BenchEngine.from_env()
    raise EngineUnavailable(f"unknown engine {name!r}; available in this build: espeak, bench")


__all__ = ["EngineUnavailable", "Synthesizer", "create_engine"]
