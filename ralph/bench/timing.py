"""The figures of `ralph bench drafter --drafter SPEC`, as pure functions over plain values.

A draft is observed as it grows: a point per step (a denoising step of a diffusion model, a chunk of a
streamed reply), each the time since the request was sent and the edit parsed from the draft so far
(None when it parses into no edit that applies). A draft that is not streamed has one point, at its end.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

Point = tuple[float, Hashable | None]
"""(seconds since the request, the edit parsed from the draft so far, or None)."""


def first_valid_s(points: Sequence[Point]) -> float | None:
    """The earliest time the draft so far parsed into an edit that applies (any edit: a later step
    may still change it); None when it never did. For a streamed reply, when a client could stop
    reading."""
    return next((seconds for seconds, edit in points if edit is not None), None)


def first_stable_s(points: Sequence[Point]) -> float | None:
    """The earliest time after which the parsed edit no longer changed: the time of the first point
    from which every later point's edit equals the final draft's; None when the final draft parses
    into no edit that applies. Always at or after `first_valid_s`, at or before the draft's end."""
    if not points or points[-1][1] is None:
        return None
    final = points[-1][1]
    start = len(points) - 1
    while start > 0 and points[start - 1][1] == final:
        start -= 1
    return points[start][0]


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0..100) by linear interpolation between the closest ranks (numpy's
    default); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass(frozen=True)
class DraftResult:
    """One draft of the bench: its task, how many requests were in flight with it, and its figures."""

    task: str
    requests: int
    latency_s: float  # the request's whole time: the complete draft
    tokens: int  # tokens the model generated for it
    valid: bool  # the complete draft parses into an edit that applies
    passed: bool  # that edit makes the task's check pass
    first_valid_s: float | None
    first_stable_s: float | None


def _seconds(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def level_summary(results: Sequence[DraftResult], seconds: float) -> dict[str, object]:
    """The figures of one concurrency level: its drafts (all with the same `requests`), asked in
    rounds that took `seconds` in all. Rates are over its drafts; the p50 of the first valid and
    first stable times over the drafts that have one; tokens/s is every draft's tokens over the
    rounds' time (with several requests at once, the server's throughput, not one request's)."""
    drafts = len(results)
    valid = [r.first_valid_s for r in results if r.first_valid_s is not None]
    stable = [r.first_stable_s for r in results if r.first_stable_s is not None]
    latencies = [r.latency_s for r in results]
    tokens = sum(r.tokens for r in results)
    return {
        "requests": results[0].requests if results else 0,
        "drafts": drafts,
        "pass_rate": round(sum(r.passed for r in results) / drafts, 3) if drafts else 0.0,
        "valid_rate": round(sum(r.valid for r in results) / drafts, 3) if drafts else 0.0,
        "first_valid_s_p50": _seconds(percentile(valid, 50)),
        "first_stable_s_p50": _seconds(percentile(stable, 50)),
        "latency_s_p50": _seconds(percentile(latencies, 50)),
        "latency_s_p95": _seconds(percentile(latencies, 95)),
        "tokens": tokens,
        "tokens_per_s": round(tokens / seconds, 1) if seconds > 0 else 0.0,
    }
