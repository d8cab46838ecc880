"""Sampling from masked-diffusion language models (LLaDA, Dream, DiffuCoder, or any masked LM).

A masked-diffusion model predicts every masked position of a sequence in one forward pass. Decoding
starts from a sequence with some positions set to the mask id and repeats: run the model, propose a token
for each masked position, commit the ones the rule is most confident about, and keep the rest masked for
the next pass. The rules here are the published ones:

- low-confidence remasking (LLaDA): commit the `tokens_per_step` positions whose proposed token is most
  probable; with one token per step, N masks take exactly N forward passes;
- entropy and top-2 margin confidence (Dream): rank positions by how peaked the whole distribution is
  (exp(-entropy)) or by the gap between its two most probable tokens;
- confidence-threshold parallel decoding (Fast-dLLM): commit every masked position whose confidence is
  at least `threshold`, and at least the single most confident one, so a confident model decodes many
  tokens per pass and an unsure one degrades to one token per pass;
- Gumbel-max temperature sampling of the proposed tokens (temperature 0 is argmax).

Positions are decoded in blocks of `block_length` masks, left to right (semi-autoregressive, as LLaDA's
chat decoding); `block_length=None` decodes all masks as one block (infilling). Models initialized from
an autoregressive one (Dream, DiffuCoder) keep its output layout, where logits at position i predict token
i + 1: pass `shift=True` and the logits at i - 1 score position i.

Everything operates on token id tensors through a `LogitsFn` (input ids [B, L] -> logits [B, L, V]), so
the sampler runs on fake models in tests. Several rows (candidates) are decoded together, one forward
pass per step for the whole batch, and every call reports its forward passes (NFE) and tokens decoded.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Literal, Protocol, runtime_checkable

import torch

Confidence = Literal["max_prob", "entropy", "margin"]


class LogitsFn(Protocol):
    """A model: logits [B, L, V] for input ids [B, L]. The sampler passes `attention_mask` ([B, L], 1 for
    real tokens) only when rows are padded; otherwise it calls `logits_fn(input_ids)`."""

    def __call__(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, /
    ) -> torch.Tensor: ...


TailFn = Callable[[torch.Tensor], torch.Tensor]
_PrefillFn = Callable[[torch.Tensor, torch.Tensor | None, int], tuple[torch.Tensor, TailFn | None]]


@runtime_checkable
class SupportsPrefixCache(Protocol):
    """A model that can keep the keys and values of a sequence's first positions between passes."""

    def prefill(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None, keep: int
    ) -> tuple[torch.Tensor, TailFn | None]:
        """Run the full sequence once and return its logits [B, L, V] and a function that maps the ids
        from position `keep` on ([B, L - keep]) to their logits, reusing the cached first `keep`
        positions; the function is None when the model returned no cache it can reuse."""
        ...


@dataclass(frozen=True)
class SamplerSettings:
    """How masked positions are chosen for committing at each step.

    `threshold` switches from top-k (`tokens_per_step` positions a step) to Fast-dLLM's parallel decoding
    (every position whose confidence reaches it, at least one). Confidences are probabilities in [0, 1]
    for every rule, so one threshold means roughly the same for each. `prefix_cache` reuses the keys and
    values of the positions before the current block while that block is decoded (Fast-dLLM's prefix
    cache, approximate for bidirectional models); it needs a model implementing `SupportsPrefixCache`
    that returns a reusable cache, and is silently a no-op otherwise (`DecodeStats.prefix_cache` says
    whether it was used).
    """

    name: str = "low-confidence"
    confidence: Confidence = "max_prob"
    tokens_per_step: int = 1
    threshold: float | None = None
    temperature: float = 0.0
    block_length: int | None = 32
    prefix_cache: bool = False

    def __post_init__(self) -> None:
        if self.tokens_per_step < 1:
            raise ValueError("tokens_per_step must be at least 1")
        if self.threshold is not None and not 0.0 <= self.threshold <= 1.0:
            raise ValueError("threshold must be between 0 and 1")
        if self.temperature < 0:
            raise ValueError("temperature must not be negative")
        if self.block_length is not None and self.block_length < 1:
            raise ValueError("block_length must be at least 1 (or None for a single block)")


SETTINGS: dict[str, SamplerSettings] = {
    s.name: s
    for s in (
        SamplerSettings("low-confidence"),
        SamplerSettings("low-confidence-x4", tokens_per_step=4),
        SamplerSettings("entropy", confidence="entropy"),
        SamplerSettings("margin", confidence="margin"),
        SamplerSettings("threshold-0.9", threshold=0.9),
        SamplerSettings("threshold-0.7", threshold=0.7),
        SamplerSettings("threshold-0.9-cached", threshold=0.9, prefix_cache=True),
    )
}


@dataclass(frozen=True)
class DecodeStats:
    """The cost of one decode call, over all rows of the batch."""

    setting: str
    nfe: int  # forward passes of the model (one per step for the whole batch)
    tokens: int  # positions the model decoded (not those filled after a stop token)
    seconds: float
    rows: int
    prefix_cache: bool  # whether a prefix cache was actually used

    @property
    def tokens_per_nfe(self) -> float:
        return self.tokens / self.nfe if self.nfe else 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0

    def as_dict(self) -> dict[str, object]:
        """The stats with the derived rates, rounded for reports."""
        return {
            **asdict(self),
            "seconds": round(self.seconds, 4),
            "tokens_per_nfe": round(self.tokens_per_nfe, 3),
            "tokens_per_s": round(self.tokens_per_s, 1),
        }


@dataclass(frozen=True)
class Decoded:
    """The decoded ids [B, L], which positions the model decoded [B, L], and what it cost."""

    ids: torch.Tensor
    decoded: torch.Tensor
    stats: DecodeStats

    def row_tokens(self, row: int) -> int:
        """How many tokens the model decoded in one row."""
        return int(self.decoded[row].sum())


def sample_tokens(
    logits: torch.Tensor, temperature: float | torch.Tensor, generator: torch.Generator | None = None
) -> torch.Tensor:
    """Tokens drawn from softmax(logits / temperature) by the Gumbel-max trick; temperature 0 is argmax.

    argmax(logits + T * gumbel) equals argmax(logits / T + gumbel) for T > 0, so a per-row temperature
    tensor (broadcastable to logits) needs no division and T = 0 rows reduce to the plain argmax. The
    noise is float64: in float32 the Gumbel tail is too coarse for large vocabularies (LLaDA's note).
    """
    if isinstance(temperature, float | int) and temperature == 0:
        return logits.argmax(dim=-1)
    uniform = torch.rand(logits.shape, generator=generator, device=logits.device, dtype=torch.float64)
    gumbel = -torch.log(-torch.log(uniform))
    return (logits.double() + temperature * gumbel).argmax(dim=-1)


def confidence(probs: torch.Tensor, tokens: torch.Tensor, rule: Confidence) -> torch.Tensor:
    """How sure the model is at each position [B, L], in [0, 1], from probabilities [B, L, V].

    max_prob: the probability of the proposed token; entropy: exp(-entropy), 1 for a one-hot
    distribution (monotone in Dream's negative entropy); margin: top-1 minus top-2 probability.
    """
    if rule == "max_prob":
        return probs.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    if rule == "entropy":
        entropy = -(probs * torch.log(probs.clamp_min(1e-12))).sum(-1)
        return torch.exp(-entropy)
    top = probs.topk(2, dim=-1).values
    return top[..., 0] - top[..., 1]


def infill_lengths(original: int, spread: int = 2) -> list[int]:
    """Span lengths to try around the original's token count: steps of one token (5% for long spans)."""
    step = max(1, round(original * 0.05))
    return sorted({max(1, original + k * step) for k in range(-spread, spread + 1)})


def infill_batch(
    prefix: Sequence[int], suffix: Sequence[int], lengths: Sequence[int], *, mask_id: int, pad_id: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows prefix + n masks + suffix for each n in `lengths`, right-padded with `pad_id`, and their
    attention mask (1 for real tokens). Right padding keeps every row's positions the same as unpadded."""
    rows = [[*prefix, *[mask_id] * n, *suffix] for n in lengths]
    width = max(len(row) for row in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = torch.tensor(row, dtype=torch.long)
        attention[i, : len(row)] = 1
    return ids, attention


def answer_batch(prompt: Sequence[int], answer_length: int, rows: int, *, mask_id: int) -> torch.Tensor:
    """`rows` copies of prompt + `answer_length` masks (chat mode)."""
    row = torch.tensor([*prompt, *[mask_id] * answer_length], dtype=torch.long)
    return row.unsqueeze(0).repeat(rows, 1)


def decode(
    input_ids: torch.Tensor,
    logits_fn: LogitsFn,
    *,
    mask_id: int,
    settings: SamplerSettings,
    shift: bool = False,
    attention_mask: torch.Tensor | None = None,
    temperatures: Sequence[float] | None = None,
    stop_ids: Sequence[int] = (),
    generator: torch.Generator | None = None,
    on_step: Callable[[torch.Tensor], None] = lambda ids: None,
) -> Decoded:
    """Decode every position of `input_ids` [B, L] that holds `mask_id`.

    Masks are taken in blocks of `settings.block_length`, in order within each row; a block is finished
    before the next is started. `temperatures` overrides the settings' temperature per row (e.g. one
    greedy row and some sampled ones). When a finished block leaves a row with one of `stop_ids` among its
    decoded tokens, the row's remaining masks are filled with the first stop id without decoding them, as
    the answer has ended (LLaDA and Dream pad answers with end-of-text tokens). With `shift`, the logits
    at position i - 1 score position i (position 0 keeps its own, Dream's convention). `on_step` sees
    the ids after every step, read only (how a draft grows, for `ralph bench drafter`).
    """
    start = time.perf_counter()
    x = input_ids.clone()
    masked = x == mask_id
    decoded = torch.zeros_like(masked)
    blocks = _block_index(masked, settings.block_length)
    temperature = _row_temperatures(x, settings.temperature, temperatures)
    stops = torch.tensor(list(stop_ids), dtype=torch.long, device=x.device)
    prefill = _prefill_of(logits_fn, settings)
    cached = False
    nfe = 0
    for block in range(int(blocks.max()) + 1 if masked.any() else 0):
        in_block = masked & (blocks == block)
        pending = in_block & (x == mask_id)
        if not pending.any():
            continue  # every row stopped before this block
        keep = _cache_keep(pending, shift)
        tail: TailFn | None = None
        while pending.any():
            logits, offset, tail = _forward(logits_fn, prefill, tail, x, attention_mask, keep)
            cached = cached or tail is not None
            nfe += 1
            commit, tokens = _step(logits, offset, pending, mask_id, settings, temperature, shift, generator)
            x = torch.where(commit, tokens, x)
            decoded |= commit
            pending &= ~commit
            on_step(x)
        if stops.numel():
            _fill_after_stop(x, masked, decoded, stops, mask_id)
    stats = DecodeStats(
        setting=settings.name,
        nfe=nfe,
        tokens=int(decoded.sum()),
        seconds=time.perf_counter() - start,
        rows=x.shape[0],
        prefix_cache=cached,
    )
    return Decoded(ids=x, decoded=decoded, stats=stats)


def _prefill_of(logits_fn: LogitsFn, settings: SamplerSettings) -> _PrefillFn | None:
    """The model's prefill, when it can cache a prefix and the settings ask for that."""
    return logits_fn.prefill if isinstance(logits_fn, SupportsPrefixCache) and settings.prefix_cache else None


def _cache_keep(pending: torch.Tensor, shift: bool) -> int:
    """How many leading positions a block's passes may take from the prefix cache."""
    # The cache keeps what precedes the block's first mask (and, with shift, the position whose
    # logits score that mask), recomputed once per block, as Fast-dLLM's prefix cache does.
    first = int(pending.nonzero()[:, 1].min())
    return max(0, first - 1) if shift else first


def _forward(
    logits_fn: LogitsFn,
    prefill: _PrefillFn | None,
    tail: TailFn | None,
    x: torch.Tensor,
    attention_mask: torch.Tensor | None,
    keep: int,
) -> tuple[torch.Tensor, int, TailFn | None]:
    """One forward pass (through the block's cached tail, else a prefill, else the whole model): the
    logits, the position they start at, and the tail function to use for the block's next pass."""
    if tail is not None:
        return tail(x[:, keep:]), keep, tail
    if prefill is not None:
        logits, tail = prefill(x, attention_mask, keep)
        return logits, 0, tail
    logits = logits_fn(x) if attention_mask is None else logits_fn(x, attention_mask)
    return logits, 0, None


def _block_index(masked: torch.Tensor, block_length: int | None) -> torch.Tensor:
    """For each position, the block of its row's masks it belongs to (by the mask's rank in the row)."""
    if block_length is None:
        return torch.zeros_like(masked, dtype=torch.long)
    rank = masked.long().cumsum(dim=1) - 1
    return rank.clamp_min(0) // block_length


def _row_temperatures(x: torch.Tensor, default: float, rows: Sequence[float] | None) -> float | torch.Tensor:
    if rows is None:
        return default
    if len(rows) != x.shape[0]:
        raise ValueError(f"{len(rows)} temperatures for {x.shape[0]} rows")
    if any(t < 0 for t in rows):
        raise ValueError("temperatures must not be negative")
    return torch.tensor(list(rows), dtype=torch.float64, device=x.device).view(-1, 1, 1)


def _step(
    logits: torch.Tensor,
    offset: int,
    pending: torch.Tensor,
    mask_id: int,
    settings: SamplerSettings,
    temperature: float | torch.Tensor,
    shift: bool,
    generator: torch.Generator | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Which pending positions to commit this step [B, L], and the tokens proposed for them [B, L]."""
    columns = pending.any(dim=0).nonzero().squeeze(-1)
    lo, hi = int(columns[0]), int(columns[-1]) + 1
    # Only the window of the block's pending positions is scored: a full [B, L, V] softmax in float32
    # would cost gigabytes for a 150k-token vocabulary and a long prompt.
    window = _window_logits(logits, offset, lo, hi, shift).float()
    # A proposed mask token would leave its position masked forever (and is never a real answer). Out of
    # place: the logits may be a model's inference-mode tensor.
    window = window.index_fill(-1, torch.tensor([mask_id], device=window.device), float("-inf"))
    tokens = sample_tokens(window, temperature, generator)
    scores = confidence(torch.softmax(window, dim=-1), tokens, settings.confidence)
    scores = torch.where(pending[:, lo:hi], scores, torch.full_like(scores, -1.0))
    chosen = _choose(scores, pending[:, lo:hi], settings)
    commit = torch.zeros_like(pending)
    commit[:, lo:hi] = chosen
    proposed = torch.zeros(pending.shape, dtype=torch.long, device=pending.device)
    proposed[:, lo:hi] = tokens
    return commit, proposed


def _window_logits(logits: torch.Tensor, offset: int, lo: int, hi: int, shift: bool) -> torch.Tensor:
    """The logits scoring positions lo..hi-1, when `logits` starts at position `offset`."""
    if not shift:
        return logits[:, lo - offset : hi - offset]
    index = (torch.arange(lo, hi, device=logits.device) - 1 - offset).clamp_min(0)
    return logits[:, index]


def _choose(scores: torch.Tensor, pending: torch.Tensor, settings: SamplerSettings) -> torch.Tensor:
    """The positions to commit: top `tokens_per_step` by score, or all at or above the threshold and at
    least the best one of every row that has a pending position."""
    order = scores.argsort(dim=1, descending=True, stable=True)
    rank = order.argsort(dim=1, stable=True)
    if settings.threshold is None:
        return pending & (rank < settings.tokens_per_step)
    return pending & ((scores >= settings.threshold) | (rank == 0))


def _fill_after_stop(
    x: torch.Tensor, masked: torch.Tensor, decoded: torch.Tensor, stops: torch.Tensor, mask_id: int
) -> None:
    """Fill the remaining masks of rows whose decoded tokens include a stop token (in place)."""
    stopped = (torch.isin(x, stops) & decoded).any(dim=1, keepdim=True)
    fill = masked & (x == mask_id) & stopped
    x[fill] = stops[0]
