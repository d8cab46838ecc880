"""Routing policies are pure functions of the history."""

from __future__ import annotations

import pytest

from ralph.domain.errors import RalphError
from ralph.domain.protocols import IterationSummary
from ralph.router import CascadePolicy, StallPolicy, Tier, create_router


def it(drafter: str, *, accepted: bool = False, exhausted: bool = False) -> IterationSummary:
    return IterationSummary(
        0, drafter, 3, 2 if accepted else 3, accepted, 0 if exhausted else 4, exhausted, 1.0, 1.0
    )


STALL = StallPolicy("mutation", "llm:deep", k=3)


def route(policy, history):
    decision = policy.route(history, ["mutation", "llm:deep"])
    return decision.drafter if decision else None


def test_stall_escalates_after_exactly_k_iterations_without_improvement():
    assert route(STALL, [it("mutation")] * 2) == "mutation"
    assert route(STALL, [it("mutation")] * 3) == "llm:deep"
    decision = STALL.route([it("mutation")] * 3, [])
    assert decision and "3 iterations without improvement" in decision.reason


def test_progress_resets_the_stall_count():
    assert (
        route(STALL, [it("mutation"), it("mutation"), it("mutation", accepted=True), it("mutation")])
        == "mutation"
    )


def test_stall_escalates_when_the_fast_drafter_has_nothing_new():
    assert route(STALL, [it("mutation", exhausted=True)]) == "llm:deep"


def test_stall_steps_back_down_after_the_deep_model_makes_progress():
    history = [it("mutation")] * 3 + [it("llm:deep", accepted=True)]
    assert route(STALL, history) == "mutation"
    assert route(STALL, [it("mutation")] * 3 + [it("llm:deep")]) == "llm:deep"


def test_stall_stops_when_both_have_nothing_left():
    assert route(STALL, [it("mutation", exhausted=True), it("llm:deep", exhausted=True)]) is None


def test_without_a_deep_model_stall_is_the_fast_policy():
    policy = StallPolicy("mutation", None)
    assert route(policy, [it("mutation")] * 10) == "mutation"
    assert route(policy, [it("mutation", exhausted=True)]) is None


def test_cascade_spends_each_tier_budget_then_restarts_after_progress():
    policy = CascadePolicy([Tier("ruff", 1, 1), Tier("mutation", 4, 2), Tier("llm:deep", 1, 1)])
    assert route(policy, []) == "ruff"
    assert route(policy, [it("ruff")]) == "mutation"
    assert route(policy, [it("ruff"), it("mutation")]) == "mutation"
    assert route(policy, [it("ruff"), it("mutation"), it("mutation")]) == "llm:deep"
    assert route(policy, [it("ruff"), it("mutation"), it("mutation"), it("llm:deep")]) is None
    assert route(policy, [it("ruff"), it("mutation", accepted=True)]) == "ruff"


def test_policies_by_name_and_dotted_path():
    assert create_router("fast", fast="mutation").route([], []).drafter == "mutation"
    assert create_router("tests.test_router:AlwaysDeep", fast="m").route([], []).drafter == "deep"
    with pytest.raises(RalphError, match="unknown router"):
        create_router("nope", fast="m")
    with pytest.raises(RalphError, match="needs a deep model"):
        create_router("deep", fast="m")
    with pytest.raises(RalphError, match="not a routing policy \\(it lacks route\\)"):
        create_router("tests.test_router:NoRoute", fast="m")


class NoRoute:
    name = "no-route"


class AlwaysDeep:
    name = "always-deep"

    def route(self, history, drafters):
        from ralph.domain.protocols import RouteDecision

        return RouteDecision("deep", 1, "user policy")
