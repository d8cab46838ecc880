"""`ralph bench drafter --model PATH_OR_ID`: the diffusion sampler's settings compared on one model.

Every setting decodes the same small prompt set, one prompt at a time, at a fixed answer length (no early
stop at end-of-text, so every setting decodes the same number of tokens), after one untimed warm-up
pass. The figures per setting: forward passes (NFE), tokens decoded, tokens per forward pass and tokens
per second, measured in the same run on the same device.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ralph.domain.errors import RalphError

if TYPE_CHECKING:
    import torch

    from ralph.drafters.diffusion import DiffusionLM
    from ralph.drafters.sampler import SamplerSettings

PROMPTS = (
    "Write a Python function `fib(n)` that returns the n-th Fibonacci number iteratively.",
    "This function should return the mean of a list but fails on [2, 4]:\n\n"
    "def mean(xs):\n    return sum(xs) / len(xs) - 1\n\nGive the fixed function.",
    "Write a Python function `is_palindrome(s)` that ignores case and non-letters.",
)
BENCH_SETTINGS = (
    "low-confidence",
    "low-confidence-x4",
    "entropy",
    "margin",
    "threshold-0.9",
    "threshold-0.7",
    "threshold-0.9-cached",
)


def bench_drafter(
    model: str,
    *,
    settings: Sequence[str | SamplerSettings] | None = None,
    prompts: Sequence[str] | None = None,
    device: str | None = None,
    answer_tokens: int = 64,
) -> list[dict[str, object]]:
    """One dict per sampler setting: `setting`, `nfe`, `tokens`, `tokens_per_nfe`, `tokens_per_s`, and
    the setting's parameters, `seconds`, `prefix_cache` (whether a cache was used), `prompts`, `model`,
    `device` and `sample` (the start of the first prompt's answer)."""
    from ralph.drafters.diffusion import INSTALL_HINT, load_diffusion_model

    try:
        import torch

        from ralph.drafters.sampler import SETTINGS, answer_batch
    except ImportError:
        raise RalphError(INSTALL_HINT) from None
    resolved = [_setting(s, SETTINGS) for s in settings or BENCH_SETTINGS]
    prompts = list(prompts or PROMPTS)
    if not prompts or answer_tokens < 1:
        raise RalphError("bench drafter needs at least one prompt and a positive answer length")
    lm = load_diffusion_model(model, device=device)
    batches = [
        answer_batch(lm.chat_prompt(p), answer_tokens, 1, mask_id=lm.mask_id).to(lm.device) for p in prompts
    ]
    lm(batches[0])  # warm-up: the first pass pays for lazy initialization (CUDA kernels, allocator)
    return [
        _bench_setting(s, lm, batches, torch.Generator(device=lm.device).manual_seed(0), answer_tokens, model)
        for s in resolved
    ]


def _bench_setting(
    setting: SamplerSettings,
    lm: DiffusionLM,
    batches: list[torch.Tensor],
    generator: torch.Generator,
    answer_tokens: int,
    model: str,
) -> dict[str, object]:
    """Decode every prompt with `setting` and return its row of figures (see `bench_drafter`)."""
    from ralph.drafters.sampler import decode

    nfe = tokens = 0
    seconds = 0.0
    cached = False
    sample = ""
    for batch in batches:
        result = decode(batch, lm, mask_id=lm.mask_id, settings=setting, shift=lm.shift, generator=generator)
        nfe += result.stats.nfe
        tokens += result.stats.tokens
        seconds += result.stats.seconds
        cached = cached or result.stats.prefix_cache
        if not sample:
            answer = result.ids[0, batch.shape[1] - answer_tokens :].tolist()
            sample = lm.text(answer)[:160]
    return {
        "setting": setting.name,
        "confidence": setting.confidence,
        "tokens_per_step": setting.tokens_per_step,
        "threshold": setting.threshold,
        "temperature": setting.temperature,
        "block_length": setting.block_length,
        "prefix_cache": cached,
        "prompts": len(batches),
        "nfe": nfe,
        "tokens": tokens,
        "seconds": round(seconds, 4),
        "tokens_per_nfe": round(tokens / nfe, 3) if nfe else 0.0,
        "tokens_per_s": round(tokens / seconds, 1) if seconds > 0 else 0.0,
        "model": model,
        "device": str(lm.device),
        "sample": sample,
    }


def _setting(setting: str | SamplerSettings, known: dict[str, SamplerSettings]) -> SamplerSettings:
    if not isinstance(setting, str):
        return setting
    if setting not in known:
        raise RalphError(f"unknown sampler setting {setting!r}; known: {', '.join(known)}")
    return known[setting]
