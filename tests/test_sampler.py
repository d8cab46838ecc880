"""The masked-diffusion sampler, driven by fake models whose logits are fixed in advance."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

import torch

from ralph.drafters.sampler import (
    SETTINGS,
    Confidence,
    SamplerSettings,
    TailFn,
    answer_batch,
    confidence,
    decode,
    infill_batch,
    infill_lengths,
    sample_tokens,
)

MASK = 0
VOCAB = 16


class Oracle:
    """A model sure of one target sequence: logit `strength` for target[i] at position i (at i - 1 when
    shifted), whatever the input; it counts its forward passes and the rows it was given."""

    def __init__(self, target: list[int], *, shift: bool = False, strength: float = 10.0) -> None:
        self.target = torch.tensor(target)
        self.shift = shift
        self.strength = strength
        self.calls = 0
        self.rows_seen: list[int] = []

    def logits(self, width: int) -> torch.Tensor:
        out = torch.zeros(width, VOCAB)
        for i, token in enumerate(self.target.tolist()[:width]):
            at = i - 1 if self.shift else i
            if at >= 0:
                out[at, token] = self.strength
        return out

    def __call__(self, ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        self.calls += 1
        self.rows_seen.append(ids.shape[0])
        return self.logits(ids.shape[1]).expand(ids.shape[0], -1, -1).clone()


class CachingOracle(Oracle):
    """An oracle with a prefix cache: after `prefill`, passes only see the ids after the cached prefix."""

    def __init__(self, target: list[int]) -> None:
        super().__init__(target)
        self.tail_widths: list[int] = []

    def prefill(
        self, ids: torch.Tensor, attention_mask: torch.Tensor | None, keep: int
    ) -> tuple[torch.Tensor, TailFn]:
        full = self(ids)

        def tail(rest: torch.Tensor) -> torch.Tensor:
            self.calls += 1
            self.tail_widths.append(rest.shape[1])
            return full[:, keep:]

        return full, tail


TARGET = [5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 5, 6, 7, 8, 9]


def masked(target: list[int], prompt: int) -> torch.Tensor:
    """The target with everything after the first `prompt` tokens masked, as one row."""
    return torch.tensor([[*target[:prompt], *[MASK] * (len(target) - prompt)]])


def test_low_confidence_with_one_token_per_step_takes_one_forward_pass_per_mask() -> None:
    oracle = Oracle(TARGET)
    result = decode(masked(TARGET, 4), oracle, mask_id=MASK, settings=SETTINGS["low-confidence"])
    assert result.ids[0].tolist() == TARGET
    assert result.stats.nfe == oracle.calls == 12
    assert result.stats.tokens == 12
    assert result.stats.tokens_per_nfe == 1.0


def test_threshold_decoding_needs_far_fewer_forward_passes_on_a_confident_model() -> None:
    settings = SamplerSettings("t", threshold=0.9, block_length=None)
    result = decode(masked(TARGET, 4), Oracle(TARGET), mask_id=MASK, settings=settings)
    assert result.ids[0].tolist() == TARGET
    assert result.stats.nfe == 1
    assert result.stats.tokens_per_nfe == 12.0


def test_threshold_decoding_commits_one_token_a_pass_when_nothing_is_confident() -> None:
    settings = SamplerSettings("t", threshold=0.9, block_length=None)
    unsure = Oracle(TARGET, strength=1.0)  # the target's probability is e / (e + 15), about 0.15
    result = decode(masked(TARGET, 4), unsure, mask_id=MASK, settings=settings)
    assert result.ids[0].tolist() == TARGET
    assert result.stats.nfe == 12


def test_blocks_are_decoded_left_to_right_one_pass_per_block_when_confident() -> None:
    settings = SamplerSettings("t", threshold=0.9, block_length=4)
    result = decode(masked(TARGET, 4), Oracle(TARGET), mask_id=MASK, settings=settings)
    assert result.ids[0].tolist() == TARGET
    assert result.stats.nfe == 3  # 12 masks in blocks of 4


def test_a_later_block_is_not_decoded_before_the_current_one_is_finished() -> None:
    seen: list[list[int]] = []

    def model(ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        seen.append(ids[0].tolist())
        logits = torch.zeros(1, ids.shape[1], VOCAB)
        logits[0, :, 3] = torch.linspace(0.0, 9.0, ids.shape[1])  # the right end is the most certain
        return logits

    settings = SamplerSettings("b", block_length=2)
    decode(torch.tensor([[1, MASK, MASK, MASK, MASK]]), model, mask_id=MASK, settings=settings)
    # Without blocks the most certain (rightmost) mask would go first.
    assert seen[1] == [1, MASK, 3, MASK, MASK]
    assert seen[2] == [1, 3, 3, MASK, MASK]
    assert seen[3] == [1, 3, 3, MASK, 3]


def test_shifted_logits_score_the_next_position() -> None:
    oracle = Oracle(TARGET, shift=True)
    settings = SETTINGS["threshold-0.9"]
    shifted = decode(masked(TARGET, 4), oracle, mask_id=MASK, settings=settings, shift=True)
    assert shifted.ids[0].tolist() == TARGET
    unshifted = decode(masked(TARGET, 4), oracle, mask_id=MASK, settings=settings)
    assert unshifted.ids[0].tolist() != TARGET


def test_batching_candidates_costs_one_forward_pass_per_step_not_one_per_row() -> None:
    oracle = Oracle(TARGET)
    rows = masked(TARGET, 4).repeat(4, 1)
    result = decode(rows, oracle, mask_id=MASK, settings=SETTINGS["low-confidence"])
    assert oracle.calls == result.stats.nfe == 12
    assert set(oracle.rows_seen) == {4}
    assert result.stats.tokens == 48
    assert all(row == TARGET for row in result.ids.tolist())


def test_gumbel_sampling_at_temperature_zero_is_argmax() -> None:
    logits = torch.randn(3, 7, VOCAB, generator=torch.Generator().manual_seed(1))
    assert torch.equal(sample_tokens(logits, 0.0), logits.argmax(-1))
    per_row = torch.zeros(3, 1, 1, dtype=torch.float64)
    assert torch.equal(sample_tokens(logits, per_row, torch.Generator().manual_seed(2)), logits.argmax(-1))


def test_gumbel_sampling_at_temperature_one_follows_the_softmax() -> None:
    logits = torch.log(torch.tensor([0.7, 0.2, 0.1])).expand(20000, 3)
    draws = sample_tokens(logits, 1.0, torch.Generator().manual_seed(0))
    shares = torch.bincount(draws, minlength=3).float() / draws.numel()
    assert torch.allclose(shares, torch.tensor([0.7, 0.2, 0.1]), atol=0.02)


def test_rows_can_be_greedy_or_sampled_in_one_batch() -> None:
    flat = Oracle(TARGET, strength=0.5)
    rows = masked(TARGET, 4).repeat(3, 1)
    result = decode(
        rows,
        flat,
        mask_id=MASK,
        settings=SETTINGS["low-confidence"],
        temperatures=[0.0, 5.0, 5.0],
        generator=torch.Generator().manual_seed(0),
    )
    assert result.ids[0].tolist() == TARGET
    assert result.ids[1].tolist() != TARGET


def test_confidence_rules_disagree_on_which_position_is_most_certain() -> None:
    # Position 0: two likely tokens (0.6 and 0.39). Position 1: one token at 0.5, the rest spread thin.
    two_way = torch.tensor([0.6, 0.39] + [0.01 / 14] * 14)
    spread = torch.tensor([0.5, 0.1] + [0.4 / 14] * 14)
    probs = torch.stack([two_way, spread]).unsqueeze(0)
    tokens = probs.argmax(-1)
    assert confidence(probs, tokens, "max_prob").argmax().item() == 0
    assert confidence(probs, tokens, "entropy").argmax().item() == 0
    assert confidence(probs, tokens, "margin").argmax().item() == 1


@pytest.mark.parametrize("rule", ["entropy", "margin"])
def test_every_confidence_rule_decodes_the_target_on_a_confident_model(rule: Confidence) -> None:
    settings = SamplerSettings(rule, confidence=rule, threshold=0.9)
    result = decode(masked(TARGET, 4), Oracle(TARGET), mask_id=MASK, settings=settings)
    assert result.ids[0].tolist() == TARGET
    assert result.stats.nfe < 12


def test_a_stop_token_ends_the_answer_without_decoding_the_rest() -> None:
    stop = 2
    target = [5, 6, 7, 8, stop, 9, 9, 9, 9, 9, 9, 9]
    settings = SamplerSettings("s", block_length=4)
    result = decode(masked(target, 2), Oracle(target), mask_id=MASK, settings=settings, stop_ids=[stop])
    # The first block (positions 2-5) is decoded whole; the masks after it are filled with the stop.
    assert result.ids[0].tolist() == [5, 6, 7, 8, stop, 9, *[stop] * 6]
    assert result.stats.nfe == result.stats.tokens == 4  # the blocks after the stop cost nothing


def test_prefix_cache_runs_later_passes_on_the_tail_only() -> None:
    oracle = CachingOracle(TARGET)
    settings = SamplerSettings("c", block_length=4, prefix_cache=True)
    result = decode(masked(TARGET, 4), oracle, mask_id=MASK, settings=settings)
    assert result.ids[0].tolist() == TARGET
    assert result.stats.prefix_cache
    assert result.stats.nfe == oracle.calls == 12
    # Each block: one full pass, then passes over the positions from the block's start.
    assert oracle.tail_widths == [12, 12, 12, 8, 8, 8, 4, 4, 4]


def test_prefix_cache_is_a_no_op_for_models_without_one() -> None:
    settings = SamplerSettings("c", block_length=4, prefix_cache=True)
    result = decode(masked(TARGET, 4), Oracle(TARGET), mask_id=MASK, settings=settings)
    assert result.ids[0].tolist() == TARGET
    assert not result.stats.prefix_cache


def test_infill_rows_of_different_lengths_are_padded_on_the_right() -> None:
    ids, attention = infill_batch([1, 2], [3], [1, 3], mask_id=MASK, pad_id=15)
    assert ids.tolist() == [[1, 2, MASK, 3, 15, 15], [1, 2, MASK, MASK, MASK, 3]]
    assert attention.tolist() == [[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]]


def test_infill_decodes_each_length_in_one_batch_and_passes_the_padding_mask() -> None:
    masks_seen: list[torch.Tensor | None] = []
    oracle = Oracle(TARGET)

    def model(ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        masks_seen.append(attention_mask)
        return oracle(ids)

    ids, attention = infill_batch(TARGET[:3], TARGET[6:8], [2, 3, 4], mask_id=MASK, pad_id=15)
    settings = SamplerSettings("i", threshold=0.9, block_length=None)
    result = decode(ids, model, mask_id=MASK, settings=settings, attention_mask=attention)
    assert result.ids[1, :8].tolist() == TARGET[:8]  # the original length reproduces the target
    assert result.stats.nfe == 1 and result.stats.rows == 3
    assert masks_seen[0] is attention


def test_infill_lengths_try_a_few_around_the_original() -> None:
    assert infill_lengths(5) == [3, 4, 5, 6, 7]
    assert infill_lengths(1) == [1, 2, 3]
    assert infill_lengths(200) == [180, 190, 200, 210, 220]


def test_stats_report_rates_for_every_call() -> None:
    result = decode(
        answer_batch([5, 6], 6, 2, mask_id=MASK),
        Oracle([5, 6, *TARGET[:6]]),
        mask_id=MASK,
        settings=SETTINGS["margin"],
    )
    stats = result.stats.as_dict()
    assert stats["setting"] == "margin"
    assert stats["nfe"] == 6 and stats["tokens"] == 12 and stats["tokens_per_nfe"] == 2.0
    assert result.stats.tokens_per_s > 0
    assert result.row_tokens(0) == 6


def test_settings_reject_impossible_values() -> None:
    with pytest.raises(ValueError):
        SamplerSettings("x", threshold=1.5)
    with pytest.raises(ValueError):
        SamplerSettings("x", tokens_per_step=0)
