"""The shapes of the trace's records (one JSON object per line of trace.jsonl): what the loop writes
per iteration and per candidate, which `ralph report` and the views read back."""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict


class VerdictRecord(TypedDict):
    """A candidate's verdict (VerifyReport.to_json)."""

    verdict: str  # accepted or rejected
    reason: str
    failed_stage: str | None
    verify_ms: float
    score: dict[str, Any] | None
    stages: list[dict[str, Any]]  # StageResult.to_json each
    tests_run: int  # test outcomes its test stages reported
    amended_diff: NotRequired[str]  # the edit as committed, when the verifier amended it
    gate: NotRequired[str]  # "background": accepted on its targeted stages, gated beside the loop


class CandidateRecord(VerdictRecord):
    """One verified candidate: where it came from, its edit, and its verdict."""

    drafter: str
    description: str
    fingerprint: str
    diff: str
    draft_ms: float
    tokens: int | None
    cost_usd: float | None
    meta: NotRequired[dict[str, Any]]  # the drafter's own notes (a model's reply, finish reason, latency)


class RouteRecord(TypedDict):
    drafter: str
    n: int
    reason: str


class IterationRecord(TypedDict):
    """An "iteration" record: the routing decision, the candidates verified, the timing."""

    i: int
    drafter: str
    route: RouteRecord
    remaining_before: int
    remaining_after: int
    accepted: bool
    draft_ms: float
    verify_ms: float
    overhead_ms: float
    elapsed_s: float  # since the loop started
    cost_usd: float
    candidates: list[CandidateRecord]
    proposed: int  # what the drafter returned, duplicates and known failures included
    commit: str | None  # the branch's commit after this iteration
    state: NotRequired[int]  # the state its accept made, when that state's gate runs in the background
    on_state: NotRequired[int]  # the state its candidates were judged on (with a background gate)
    cancelled: NotRequired[int]  # candidates whose verification on a lane stopped for an earlier accept


class GateRecord(TypedDict):
    """A "gate" record: the background gate's verdict on a state an iteration accepted provisionally."""

    state: int
    iteration: int  # the iteration whose accept made the state
    fingerprint: str  # the accepted candidate's
    verdict: str  # passed, rejected, discarded (built on a state whose gate failed), cancelled
    reason: str
    failed_stage: str | None
    duration_ms: float
    remaining: int  # the remaining error of the last gated state afterwards
    elapsed_s: float  # since the loop started
    tests_run: int
    stages: list[dict[str, Any]]
    discarded: list[int]  # states built on this one, undone with it
    commit: str | None  # the branch's commit afterwards (only gated states reach it)
    kept: NotRequired[str]  # "todo": rejected, yet kept as the loop's state (--on-gate-failure todo)
    kept_states: NotRequired[list[int]]  # kept states whose edits this passed state's commit holds
