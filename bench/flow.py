"""Flow: CosyVoice 2's flow matching turning 1, 2, 4, 8 rows of speech tokens into mel at once.

The flow is CosyVoice's second costly stage: an encoder pass, then ten Euler steps of the
estimator on 2 rows each (classifier-free guidance). pipeline.engines.cosyvoice_flow.mel
runs each row's encoder pass alone and the Euler steps for all rows together; this measures
what that buys, beside upstream's own `flow.inference` run once a row, as token2wav runs it.

Upstream's own classes (CausalMaskedDiffWithXvec, UpsampleConformerEncoder,
CausalConditionalCFM, CausalConditionalDecoder) at the sizes of upstream's published
CosyVoice 2 recipe (examples/libritts/cosyvoice2/conf/cosyvoice2.yaml: a 6-block conformer of
width 512, an estimator of 256 channels with 4 + 12 + 4 transformer blocks), random weights
(time depends on shapes, not values; the released weights cannot be downloaded here), fp32 on
the CPU torch picks. Each row: a 3-s prompt (75 tokens, 150 mel frames) and TOKENS speech
tokens (4 s of audio), the rows 0-9 tokens apart in length, as texts of a batch are.

Per batch size B: upstream's flow.inference once a row (best of REPEATS) and mel() for the B
rows (best of REPEATS) -> rows a second each way, and the gain. Needs upstream's CosyVoice
source (VF_COSYVOICE_SOURCE, else ../shared/third_party beside the checkout); without it the
measurement reports that and gives no figures.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.decode import best_of, torch_on_cpu
from bench.harness import BenchContext
from bench.outcome import Outcome, batch_axes, md_table

SIZES = (1, 2, 4, 8)
PROMPT_TOKENS = 75
SPEECH_TOKENS = 6561
CHECKOUT = Path(__file__).resolve().parents[1]


def build_flow(blocks: int, mid_blocks: int) -> Any:
    """CosyVoice 2's flow at the recipe's sizes (fewer estimator blocks in a quick run)."""
    import torch
    from cosyvoice.flow.decoder import CausalConditionalDecoder
    from cosyvoice.flow.flow import CausalMaskedDiffWithXvec
    from cosyvoice.flow.flow_matching import CausalConditionalCFM
    from cosyvoice.transformer.upsample_encoder import UpsampleConformerEncoder
    from omegaconf import DictConfig

    torch.manual_seed(0)
    encoder = UpsampleConformerEncoder(
        output_size=512, attention_heads=8, linear_units=2048, num_blocks=6, dropout_rate=0.1,
        positional_dropout_rate=0.1, attention_dropout_rate=0.1, normalize_before=True,
        input_layer="linear", pos_enc_layer_type="rel_pos_espnet",
        selfattention_layer_type="rel_selfattn", input_size=512, use_cnn_module=False,
        macaron_style=False, use_dynamic_chunk=True)
    estimator = CausalConditionalDecoder(
        in_channels=320, out_channels=80, channels=[256], dropout=0.0, attention_head_dim=64,
        n_blocks=blocks, num_mid_blocks=mid_blocks, num_heads=8, act_fn="gelu",
        static_chunk_size=50, num_decoding_left_chunks=2)
    cfm = CausalConditionalCFM(
        in_channels=240, n_spks=1, spk_emb_dim=80, estimator=estimator,
        cfm_params=DictConfig({"sigma_min": 1e-06, "solver": "euler", "t_scheduler": "cosine",
                               "training_cfg_rate": 0.2, "inference_cfg_rate": 0.7,
                               "reg_loss_type": "l1"}))
    return CausalMaskedDiffWithXvec(
        input_size=512, output_size=80, spk_embed_dim=192, output_type="mel", vocab_size=6561,
        input_frame_rate=25, only_mask_loss=True, token_mel_ratio=2, pre_lookahead_len=3,
        encoder=encoder, decoder=cfm).eval()


def _rows(batch: int, tokens: int) -> tuple[list[list[int]], list[dict[str, Any]]]:
    import torch

    generator = torch.Generator().manual_seed(batch)
    rows = [torch.randint(0, SPEECH_TOKENS, (max(1, tokens - 3 * (i % 4)),), generator=generator)
            .tolist() for i in range(batch)]
    prompt = {"flow_prompt_speech_token": torch.randint(0, SPEECH_TOKENS, (1, PROMPT_TOKENS),
                                                        generator=generator),
              "prompt_speech_feat": torch.randn(1, 2 * PROMPT_TOKENS, 80, generator=generator),
              "flow_embedding": torch.randn(1, 192, generator=generator)}
    return rows, [prompt] * batch


def _upstream(flow: Any, rows: list[list[int]], inputs: list[dict[str, Any]]) -> None:
    import torch

    for row, x in zip(rows, inputs, strict=True):
        flow.inference(token=torch.tensor([row], dtype=torch.int32),
                       token_len=torch.tensor([len(row)], dtype=torch.int32),
                       prompt_token=x["flow_prompt_speech_token"],
                       prompt_token_len=torch.tensor([PROMPT_TOKENS], dtype=torch.int32),
                       prompt_feat=x["prompt_speech_feat"],
                       prompt_feat_len=torch.tensor([2 * PROMPT_TOKENS], dtype=torch.int32),
                       embedding=x["flow_embedding"], streaming=False, finalize=True)


async def run(ctx: BenchContext) -> Outcome:
    import os

    from pipeline.engines import cosyvoice_flow
    from pipeline.engines.cosyvoice_setup import import_cosyvoice

    source = (ctx.base.engine.cosyvoice_source or os.environ.get("VF_COSYVOICE_SOURCE", "")
              or str(CHECKOUT.parent / "shared" / "third_party"))
    try:
        import_cosyvoice(source)
    except Exception as exc:  # the measurement needs upstream's classes, nothing else does
        return Outcome("flow", {}, "", notes=[f"not measured: upstream CosyVoice source not "
                                              f"importable from {source} ({exc})"])
    blocks, mid_blocks, tokens, repeats = ctx.pick((1, 2, 25, 1), (4, 12, 100, 2))
    flow = build_flow(blocks, mid_blocks)
    rows, inputs = _rows(1, 8)
    best_of(lambda: cosyvoice_flow.mel(flow, rows, inputs, "cpu"), 1)  # set-up not measured
    measured: list[dict[str, Any]] = []
    for batch in SIZES:
        rows, inputs = _rows(batch, tokens)
        alone = best_of(lambda: _upstream(flow, rows, inputs), repeats)  # noqa: B023
        together = best_of(lambda: cosyvoice_flow.mel(flow, rows, inputs, "cpu"),  # noqa: B023
                         repeats)
        measured.append({"batch": batch, "upstream_s": round(alone, 3),
                         "batched_s": round(together, 3),
                         "gain": round(alone / together, 2)})
    by = {r["batch"]: r for r in measured}
    table = md_table(["rows", "upstream's flow.inference a row (s)", "mel() for all (s)",
                      "gain"],
                     [[r["batch"], r["upstream_s"], r["batched_s"], f"{r['gain']:.2f}x"]
                      for r in measured])
    figures: dict[str, float | int | None] = {"flow_gain_at_8": by[8]["gain"]}
    figures.update({f"flow_batched_s_at_{r['batch']}": r["batched_s"] for r in measured})
    notes = [f"estimator of {blocks} + {mid_blocks} + {blocks} blocks (the recipe's: 4 + 12 + "
             f"4), rows of {tokens} speech tokens after a {PROMPT_TOKENS}-token prompt, best "
             f"of {repeats}; {torch_on_cpu()}."]
    return Outcome("flow", figures, table, series={"rows": measured}, notes=notes)


def plot(series: dict[str, Any], ax: Any) -> None:
    rows = series["rows"]
    xs = [r["batch"] for r in rows]
    ax.plot(xs, [r["batch"] / r["upstream_s"] for r in rows], "s--",
            label="upstream's flow.inference, a row at a time")
    ax.plot(xs, [r["batch"] / r["batched_s"] for r in rows], "o-", label="mel(), rows together")
    batch_axes(ax, xs, xlabel="rows", ylabel="rows / s",
               title="CosyVoice 2-sized flow matching, random weights, CPU")
