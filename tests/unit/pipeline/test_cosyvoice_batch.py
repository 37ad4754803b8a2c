"""cosyvoice_batch's pure parts: which LLMs it drives and what it keeps of a row of tokens.
The decode itself runs against upstream's real code in tests/cosyvoice/test_batched_llm.py."""

from __future__ import annotations

from types import SimpleNamespace

from pipeline.engines.cosyvoice_batch import MAX_SILENT_RUN, batchable, drop_long_silences


class Qwen2LM:  # the names batchable() reads; upstream's classes need its source
    def __init__(self) -> None:
        self.llm = SimpleNamespace(model=object())


class CosyVoice3LM(Qwen2LM):
    pass


class TransformerLM:
    def __init__(self) -> None:
        self.llm = SimpleNamespace(model=object())


def test_batchable_llms() -> None:
    assert batchable(Qwen2LM()) and batchable(CosyVoice3LM())
    assert not batchable(TransformerLM())  # CosyVoice 1's own encoder
    vllm_backed = Qwen2LM()
    vllm_backed.vllm = object()  # type: ignore[attr-defined]
    assert not batchable(vllm_backed)  # vLLM batches across calls itself
    bare = Qwen2LM()
    bare.llm = SimpleNamespace()  # layers handed to vLLM: no transformers model left
    assert not batchable(bare)


def test_runs_of_silence_are_cut_after_the_limit() -> None:
    silent = [1, 2]
    tokens = [7, 1, 2, 1, 1, 2, 1, 2, 9, 1, 1, 8]
    kept = drop_long_silences(tokens, silent)
    assert MAX_SILENT_RUN == 5
    assert kept == [7, 1, 2, 1, 1, 2, 9, 1, 1, 8]  # the 6th and 7th silent tokens dropped


def test_no_silent_ids_keeps_every_token() -> None:
    assert drop_long_silences([1, 1, 1, 1, 1, 1, 1], []) == [1] * 7
    assert drop_long_silences([], [1]) == []
