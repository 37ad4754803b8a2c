"""bench.decode at toy sizes: the rows it times, the figures it reports, the head it adds."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
import torch

from bench import decode
from bench.runner import BENCHES

TOY = {**decode.QWEN_05B, "hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 4,
       "num_key_value_heads": 2, "vocab_size": 512, "max_position_embeddings": 1024}


@pytest.fixture
def toy_qwen(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(decode, "QWEN_05B", TOY)


def test_every_row_runs_the_same_steps_and_the_figures_follow(toy_qwen: None) -> None:
    ctx = SimpleNamespace(pick=lambda quick, full: quick)
    outcome = asyncio.run(decode.run(ctx))  # type: ignore[arg-type]
    rows = outcome.series["rows"]
    assert [r["batch"] for r in rows] == [1, *decode.SIZES]
    assert rows[0]["how"].startswith("upstream's step") and rows[0]["gain"] == 1.0
    for row in rows:
        # seconds are rounded to the millisecond: a toy run takes only a few
        assert row["tokens_per_s"] == pytest.approx(row["batch"] * 24 / row["seconds"], rel=0.1)
    figures = outcome.figures
    at = {r["batch"]: r for r in rows[1:]}
    assert figures["decode_gain_at_8"] == round(at[8]["tokens_per_s"] / at[1]["tokens_per_s"], 2)
    assert figures["decode_gain_at_8_vs_upstream"] == at[8]["gain"]
    assert figures["decode_layers"] == 6
    assert "decode" in BENCHES


def test_the_upstream_row_computes_the_vocabulary_head(toy_qwen: None) -> None:
    llm = decode.build_llm(1)
    calls: list[int] = []
    head = llm.llm.model.lm_head
    head.register_forward_hook(lambda module, args, out: calls.append(out.shape[0]))
    embedding = torch.zeros(1, 5, llm.width)
    with torch.inference_mode():
        body = llm.llm.model.model(inputs_embeds=embedding, use_cache=False)
        whole = decode.with_vocabulary_head(llm).llm.model.model(inputs_embeds=embedding,
                                                                  use_cache=False)
    assert calls == [1]  # only the upstream-shaped step ran the text-vocabulary head
    torch.testing.assert_close(whole.last_hidden_state, body.last_hidden_state)
