"""cosyvoice_batch's and cosyvoice_flow's pure parts: which LLMs and flows they drive, and what
is kept of a row of tokens.

The decode itself runs against upstream's real code in tests/cosyvoice/test_batched_llm.py."""

from __future__ import annotations

from types import SimpleNamespace

from pipeline.engines import cosyvoice_flow
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


class CausalConditionalCFM:
    def __init__(self, estimator: object) -> None:
        self.estimator = estimator


class CausalMaskedDiffWithXvec:  # CosyVoice 2's flow
    def __init__(self, estimator: object) -> None:
        self.decoder = CausalConditionalCFM(estimator)


class CausalMaskedDiffWithDiT(CausalMaskedDiffWithXvec):  # CosyVoice 3's
    pass


class MaskedDiffWithXvec(CausalMaskedDiffWithXvec):  # CosyVoice 1's
    pass


def test_batchable_flows() -> None:
    import torch

    module = torch.nn.Linear(1, 1)
    assert cosyvoice_flow.batchable(CausalMaskedDiffWithXvec(module))
    assert cosyvoice_flow.batchable(CausalMaskedDiffWithDiT(module))
    assert not cosyvoice_flow.batchable(MaskedDiffWithXvec(module))
    # A TensorRT estimator is built for batches of two rows: each row through token2wav.
    assert not cosyvoice_flow.batchable(CausalMaskedDiffWithXvec(object()))


def test_the_flow_is_batched_on_a_gpu_only() -> None:
    import torch

    flow = CausalMaskedDiffWithXvec(torch.nn.Linear(1, 1))
    on = SimpleNamespace(flow=flow, device=torch.device("cuda"))
    assert cosyvoice_flow.worth_batching(on)
    # On a CPU the batch measured slower than its rows one by one (bench flow: 0.88x at 8).
    assert not cosyvoice_flow.worth_batching(SimpleNamespace(flow=flow,
                                                             device=torch.device("cpu")))
    assert not cosyvoice_flow.worth_batching(
        SimpleNamespace(flow=CausalMaskedDiffWithXvec(object()), device=torch.device("cuda")))
