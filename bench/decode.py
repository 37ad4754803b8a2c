"""Decode: CosyVoice's speech-token LLM stepping 1, 2, 4, 8 texts at once (cosyvoice_batch).

The LLM stage is CosyVoice's autoregressive part: one forward a speech token, 25 tokens a
second of audio. pipeline.engines.cosyvoice_batch.decode steps a batch's texts together;
this measures what that buys on the machine it runs on, at CosyVoice 2's real LLM size:
transformers' Qwen2ForCausalLM with Qwen2.5-0.5B's shape (24 layers, width 896, 14 query and
2 key-value heads, MLP 4864; the weights of CosyVoice-BlankEN), a speech-token embedding and
decoder of 6,564 ids, all random (time depends on shapes, not values; no weights can be
downloaded here), fp32 on the CPU torch picks.

Per batch size B: B prefills of PREFILL positions (a 3-s prompt's 75 speech tokens and about
75 text tokens) -> decode() for TOKENS steps, every row sampled from its top 25 (upstream's
top_k) and never stopped early, so every B runs the same number of steps -> tokens a second
= B x TOKENS / wall time. Beside them upstream's own step for one text (the whole
Qwen2ForCausalLM, text-vocabulary logits included, as its Qwen2Encoder ran it before the
adapter's runtime change); gains are over that row. Best of REPEATS runs. Needs torch and
transformers (the `cosyvoice` extra); no Kafka, S3 or upstream source.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from bench.harness import BenchContext
from bench.outcome import Outcome, batch_axes, md_table
from pipeline.engines.cosyvoice_batch import LmInput, decode

SIZES = (1, 2, 4, 8)
PREFILL = 150
SPEECH_IDS = 6561 + 3  # speech tokens plus CosyVoice 2's three stop ids
QWEN_05B = {"hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
            "num_attention_heads": 14, "num_key_value_heads": 2, "vocab_size": 151936,
            "max_position_embeddings": 32768, "tie_word_embeddings": True}
TOP_K = 25


def torch_on_cpu() -> str:
    import torch

    return f"torch {torch.__version__} on {torch.get_num_threads()} CPU threads"


def build_llm(layers: int) -> Any:
    """What decode() reads of upstream's Qwen2LM, at CosyVoice 2's sizes, random weights."""
    import torch
    import transformers

    torch.manual_seed(0)
    config = transformers.Qwen2Config(**{**QWEN_05B, "num_hidden_layers": layers})
    qwen = transformers.Qwen2ForCausalLM(config).eval()
    width = config.hidden_size

    def sampling_ids(scores: Any, decoded: list[int], sampling: int,
                     ignore_eos: bool = True) -> int:
        top = scores[:SPEECH_IDS - 3].topk(sampling)  # never a stop id: fixed-length rows
        return int(top.indices[torch.multinomial(top.values.softmax(dim=0), 1)])

    return SimpleNamespace(
        llm=SimpleNamespace(model=qwen),
        llm_decoder=torch.nn.Linear(width, SPEECH_IDS).eval(),
        speech_embedding=torch.nn.Embedding(SPEECH_IDS, width).eval(),
        sampling_ids=sampling_ids, stop_token_ids=[SPEECH_IDS - 3 + i for i in range(3)],
        width=width)


def best_of(run: Callable[[], object], repeats: int) -> float:
    """The shortest wall time of `repeats` calls of `run`, each under inference_mode."""
    import torch

    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        with torch.inference_mode():
            run()
        best = min(best, time.perf_counter() - started)
    return best


def _timed(llm: Any, batch: int, tokens: int, repeats: int) -> float:
    import torch

    inputs = [LmInput(embedding=torch.randn(1, PREFILL - 3 * row, llm.width) * 0.02,
                      min_len=tokens, max_len=tokens) for row in range(batch)]

    def run() -> None:
        rows = decode(llm, inputs, TOP_K)
        if any(len(r) != tokens for r in rows):
            raise RuntimeError(f"decode: rows of {[len(r) for r in rows]} tokens, not {tokens}")

    return best_of(run, repeats)


class _WholeModel:
    """A step as upstream's Qwen2Encoder took it: the whole Qwen2ForCausalLM, its text-
    vocabulary logits computed and dropped, the last hidden state kept."""

    def __init__(self, qwen: Any) -> None:
        self._qwen = qwen

    def __call__(self, **kwargs: Any) -> Any:
        out = self._qwen(**kwargs, output_hidden_states=True)
        return SimpleNamespace(last_hidden_state=out.hidden_states[-1],
                               past_key_values=out.past_key_values)


def with_vocabulary_head(llm: Any) -> Any:
    return SimpleNamespace(**{**vars(llm), "llm": SimpleNamespace(
        model=SimpleNamespace(model=_WholeModel(llm.llm.model)))})


async def run(ctx: BenchContext) -> Outcome:

    layers, tokens, repeats = ctx.pick((6, 24, 1), (24, 100, 2))
    llm = build_llm(layers)
    _timed(llm, 1, 4, 1)  # first-call set-up (allocator, kernels) is not measured
    rows: list[dict[str, Any]] = []
    for label, model, batch in [("upstream's step, whole Qwen2ForCausalLM",
                                 with_vocabulary_head(llm), 1)] + \
            [("decode(), Qwen2 body", llm, b) for b in SIZES]:
        seconds = _timed(model, batch, tokens, repeats)
        rows.append({"how": label, "batch": batch, "seconds": round(seconds, 3),
                     "ms_per_step": round(1000 * seconds / tokens, 1),
                     "tokens_per_s": round(batch * tokens / seconds, 1)})
    upstream, ours = rows[0], rows[1:]
    for row in rows:
        row["gain"] = round(row["tokens_per_s"] / upstream["tokens_per_s"], 2)
    by = {r["batch"]: r for r in ours}
    table = md_table(["step", "texts stepped together", "ms a step", "speech tokens / s",
                      "gain vs upstream's one text"],
                     [[r["how"], r["batch"], r["ms_per_step"], r["tokens_per_s"],
                       f"{r['gain']:.2f}x"] for r in rows])
    figures: dict[str, float | int | None] = {
        "decode_gain_at_8": round(by[8]["tokens_per_s"] / by[1]["tokens_per_s"], 2),
        "decode_gain_at_8_vs_upstream": by[8]["gain"],
        "decode_upstream_tokens_per_s": upstream["tokens_per_s"]}
    figures.update({f"decode_tokens_per_s_at_{r['batch']}": r["tokens_per_s"] for r in ours})
    figures["decode_layers"] = layers
    notes = [f"Qwen2 of {layers} layers (CosyVoice 2's LLM has 24), {tokens} steps a run "
             f"after a {PREFILL}-position prefill, best of {repeats}; {torch_on_cpu()}. 25 "
             "speech tokens are one second of audio."]
    return Outcome("decode", figures, table, series={"rows": rows}, notes=notes)


def plot(series: dict[str, Any], ax: Any) -> None:
    upstream, rows = series["rows"][0], series["rows"][1:]
    xs = [r["batch"] for r in rows]
    ax.plot(xs, [r["tokens_per_s"] for r in rows], "o-", label="decode(), measured")
    ax.plot(xs, [rows[0]["tokens_per_s"] * x for x in xs], "k--", label="linear in texts")
    ax.plot([1], [upstream["tokens_per_s"]], "rs", label="upstream's one-text step")
    batch_axes(ax, xs, xlabel="texts stepped together", ylabel="speech tokens / s",
               title="CosyVoice 2-sized LLM decode, random weights, CPU")
