"""Several rows of speech tokens to mel at once through CosyVoice 2/3's flow matching.

Upstream's `token2wav` takes one row: `flow.inference` (batch of one, asserted) -> mel ->
HiFT. The flow is the second costly stage after the LLM: an encoder, then ten Euler steps of
the estimator, each on 2 rows (classifier-free guidance). Here the B rows of a batch share
those calls, then each row's mel goes through HiFT on its own, as upstream's does:

    row i: [prompt tokens_i ++ tokens_i], embedded -> CosyVoice 2 (CausalMaskedDiffWithXvec):
       the conformer encoder -> encoder_proj; CosyVoice 3 (CausalMaskedDiffWithDiT): the
       pre-lookahead layer -> each token repeated token_mel_ratio times (each row alone: the
       encoder attends both ways, so padding would change a shorter row)
    -> the rows right-padded into one decoder input; conditions: row i's prompt mel in its
       first frames; a frame mask per row
    -> mel(): upstream's Euler schedule (n_timesteps 10, cosine), upstream's fixed noise
       prefix for every row, the estimator on 2B rows (conditioned, then with mu, speaker
       and conditions zeroed), guidance mixed at inference_cfg_rate
    -> row i's frames after its prompt, up to its own length
    -> vocode(): speed change, then HiFT, as token2wav does for a whole (finalized) clip.

The estimator's rows are right-padded and it is causal or masked over time, so a row's frames
do not see another row's padding (a real-code test holds each row to upstream's one-row mel).
`batchable()` says when this can apply: upstream's two causal flow classes with the torch
estimator (a TensorRT one is built for batches of 2); `worth_batching()` when it does: on a
GPU only, since on a CPU the batch measured slower than its rows one by one.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

N_TIMESTEPS = 10  # what upstream's flow inference passes its decoder
_FLOWS = ("CausalMaskedDiffWithXvec", "CausalMaskedDiffWithDiT")


def worth_batching(cosyvoice_model: Any) -> bool:
    """Whether speech() sends a batch's rows through mel() together: a flow it can drive, on a
    GPU. On a CPU the estimator's work grows with the rows and padding only adds to it
    (`voicefactory bench --only flow`: 0.88x at 8 rows), so there each row goes alone."""
    return batchable(cosyvoice_model.flow) and _on_cuda(cosyvoice_model)


def batchable(flow: Any) -> bool:
    import torch

    decoder = getattr(flow, "decoder", None)
    return (type(flow).__name__ in _FLOWS and type(decoder).__name__ == "CausalConditionalCFM"
            and isinstance(getattr(decoder, "estimator", None), torch.nn.Module))


def mel(flow: Any, rows: Sequence[list[int]], model_inputs: Sequence[Mapping[str, Any]],
        device: Any) -> list[Any]:
    """Each row's mel [1, 80, frames], float32, as upstream's flow.inference gives it for
    that row alone (streaming=False, finalize=True)."""
    import torch

    embedding = torch.concat([x["flow_embedding"].to(device) for x in model_inputs], dim=0)
    embedding = flow.spk_embed_affine_layer(torch.nn.functional.normalize(embedding, dim=1))
    # Each row's encoding alone: CosyVoice 2's encoder attends both ways and looks ahead,
    # so padding would reach every frame of a shorter row. It is one pass, against the
    # estimator's ten.
    encoded = [_encode(flow, row, x, device) for row, x in zip(rows, model_inputs, strict=True)]
    frames = [int(h.shape[1]) for h in encoded]
    mu = torch.nn.utils.rnn.pad_sequence([h[0] for h in encoded], batch_first=True)
    conds = torch.zeros(len(rows), mu.shape[1], flow.output_size, device=device, dtype=mu.dtype)
    feats = [x["prompt_speech_feat"].to(device) for x in model_inputs]
    for i, feat in enumerate(feats):
        conds[i, :feat.shape[1]] = feat[0]
    mask = (torch.arange(mu.shape[1], device=device)[None, :]
            < torch.tensor(frames, device=device)[:, None]).to(mu).unsqueeze(1)
    out = _solve(flow.decoder, mu.transpose(1, 2).contiguous(), mask, embedding,
                 conds.transpose(1, 2))
    return [out[i:i + 1, :, feat.shape[1]:n] for i, (feat, n)
            in enumerate(zip(feats, frames, strict=True))]


def _encode(flow: Any, row: list[int], model_input: Mapping[str, Any], device: Any) -> Any:
    """One row's [1, frames, D] decoder input, as upstream's flow.inference computes it."""
    import torch

    prompt = model_input["flow_prompt_speech_token"].to(device)
    token = torch.concat([prompt, torch.tensor([row], dtype=prompt.dtype, device=device)], dim=1)
    embedded = flow.input_embedding(torch.clamp(token, min=0))
    if type(flow).__name__ == "CausalMaskedDiffWithXvec":
        h, _ = flow.encoder(embedded, torch.tensor([token.shape[1]], dtype=torch.int32,
                                                   device=device), streaming=False)
        return flow.encoder_proj(h)
    return flow.pre_lookahead_layer(embedded).repeat_interleave(flow.token_mel_ratio, dim=1)


def _solve(cfm: Any, mu: Any, mask: Any, spks: Any, cond: Any) -> Any:
    """CausalConditionalCFM.forward for B rows: its noise, schedule and guidance."""
    import torch

    steps = torch.linspace(0, 1, N_TIMESTEPS + 1, device=mu.device, dtype=mu.dtype)
    if cfm.t_scheduler == "cosine":
        steps = 1 - torch.cos(steps * 0.5 * torch.pi)
    rows, frames = mu.shape[0], mu.shape[2]
    x = cfm.rand_noise[:, :, :frames].to(mu.device).to(mu.dtype).expand(rows, -1, -1)
    # Upstream's buffers are in the speaker embedding's dtype (fp16 under autocast).
    dtype = spks.dtype
    mask_in = torch.concat([mask, mask]).to(dtype)
    mu_in = torch.concat([mu, torch.zeros_like(mu)]).to(dtype)
    spks_in = torch.concat([spks, torch.zeros_like(spks)]).to(dtype)
    cond_in = torch.concat([cond, torch.zeros_like(cond)]).to(dtype)
    t, dt = steps[0], steps[1] - steps[0]
    for step in range(1, len(steps)):
        x_in = torch.concat([x, x]).to(dtype)
        t_in = t.reshape(1).expand(2 * rows).to(dtype)
        both = cfm.forward_estimator(x_in, mask_in, mu_in, t_in, spks_in, cond_in, False)
        conditioned, unconditioned = both[:rows], both[rows:]
        x = x + dt * ((1.0 + cfm.inference_cfg_rate) * conditioned
                      - cfm.inference_cfg_rate * unconditioned)
        t = t + dt
        if step < len(steps) - 1:
            dt = steps[step + 1] - t
    return x.float()


def vocode(cosyvoice_model: Any, mel_frames: Any, speed: float) -> Any:
    """One row's audio [1, samples] from its mel, as token2wav ends a whole clip."""
    import torch

    hift = cosyvoice_model.hift
    if type(cosyvoice_model).__name__ == "CosyVoice3Model":
        with upstream_autocast(cosyvoice_model):
            speech, _ = hift.inference(speech_feat=_at_speed(mel_frames, speed), finalize=True)
        return speech
    speech, _ = hift.inference(speech_feat=_at_speed(mel_frames, speed),
                               cache_source=torch.zeros(1, 1, 0))
    return speech


def _at_speed(mel_frames: Any, speed: float) -> Any:
    import torch

    if speed == 1.0:
        return mel_frames
    return torch.nn.functional.interpolate(mel_frames, size=int(mel_frames.shape[2] / speed),
                                           mode="linear")


@contextlib.contextmanager
def upstream_autocast(cosyvoice_model: Any) -> Iterator[None]:
    """What upstream runs its LLM and flow (and CosyVoice 3 its HiFT) under: fp16 autocast
    when the model was loaded with fp16=True and runs on a GPU."""
    import torch

    enabled = bool(cosyvoice_model.fp16) and _on_cuda(cosyvoice_model)
    with torch.autocast(device_type="cuda", dtype=torch.float16, enabled=enabled):
        yield


def _on_cuda(cosyvoice_model: Any) -> bool:
    device = cosyvoice_model.device
    return getattr(device, "type", str(device)) == "cuda"
