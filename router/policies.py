"""Routing policies: pure functions of the run's history that pick the next drafter.

Each returns a RouteDecision (drafter, candidates, reason: the reason goes into the trace) or None when
no drafter has anything left to try. A policy can also be a user's class, given as `module:Class`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ralph.domain.errors import RalphError
from ralph.domain.plugins import instantiate, missing_members
from ralph.domain.protocols import IterationSummary, RouteDecision, Router


def _stalls(history: Sequence[IterationSummary], drafter: str) -> int:
    """Consecutive most-recent iterations of `drafter` without improvement (other drafters' too)."""
    count = 0
    for it in reversed(history):
        if it.accepted:
            break
        if it.drafter == drafter:
            count += 1
    return count


def _exhausted_since_progress(history: Sequence[IterationSummary], drafter: str) -> bool:
    """Whether `drafter` proposed nothing at some point since the last accepted edit."""
    for it in reversed(history):
        if it.accepted:
            return False
        if it.drafter == drafter and it.exhausted:
            return True
    return False


@dataclass
class FixedPolicy:
    """Always the same drafter (`fast` or `deep`); stops when it has nothing left for the state."""

    drafter: str
    n: int
    name: str = "fast"

    def route(self, history: Sequence[IterationSummary], drafters: Sequence[str]) -> RouteDecision | None:
        if _exhausted_since_progress(history, self.drafter):
            return None
        return RouteDecision(self.drafter, self.n, f"policy {self.name}: always {self.drafter}")


@dataclass
class StallPolicy:
    """The fast drafter by default; the deep one after `k` iterations without improvement or when the
    fast one has nothing new; back to the fast one as soon as the deep one made progress."""

    fast: str
    deep: str | None
    k: int = 3
    n_fast: int = 4
    n_deep: int = 1
    name: str = "stall"

    def route(self, history: Sequence[IterationSummary], drafters: Sequence[str]) -> RouteDecision | None:
        fast_done = _exhausted_since_progress(history, self.fast)
        if self.deep is None:
            return (
                None
                if fast_done
                else RouteDecision(self.fast, self.n_fast, "stall: fast drafter (no deep model)")
            )
        deep_done = _exhausted_since_progress(history, self.deep)
        last = history[-1] if history else None
        if last is not None and last.drafter == self.deep and not deep_done:
            if last.accepted:
                return RouteDecision(
                    self.fast, self.n_fast, "stall: the deep model made progress, back to fast"
                )
            return RouteDecision(self.deep, self.n_deep, "stall: deep model continues")
        stalls = _stalls(history, self.fast)
        if not deep_done and (fast_done or stalls >= self.k):
            why = (
                "the fast drafter has nothing new"
                if fast_done
                else f"{stalls} iterations without improvement"
            )
            return RouteDecision(self.deep, self.n_deep, f"stall: escalate to {self.deep}: {why}")
        if fast_done:
            return None
        return RouteDecision(
            self.fast, self.n_fast, f"stall: fast drafter ({stalls}/{self.k} without improvement)"
        )


@dataclass(frozen=True)
class Tier:
    drafter: str
    n: int = 1
    budget: int = 3  # iterations without improvement before moving to the next tier


@dataclass
class CascadePolicy:
    """Ordered tiers (deterministic fixers, then the fast drafter, then the deep reasoner): each tier
    runs until it is exhausted or spends its budget without improvement; progress restarts at tier 0."""

    tiers: Sequence[Tier]
    name: str = "cascade"

    def route(self, history: Sequence[IterationSummary], drafters: Sequence[str]) -> RouteDecision | None:
        for index, tier in enumerate(self.tiers):
            if (
                _exhausted_since_progress(history, tier.drafter)
                or _stalls(history, tier.drafter) >= tier.budget
            ):
                continue
            used = _stalls(history, tier.drafter)
            return RouteDecision(
                tier.drafter, tier.n, f"cascade: tier {index + 1} {tier.drafter} ({used}/{tier.budget} used)"
            )
        return None


def _deep(fast: str, deep: str | None, n: int, k: int, tiers: Sequence[Tier]) -> Router:
    if deep is None:
        raise RalphError("--router deep needs a deep model (--deep MODEL)")
    return FixedPolicy(deep, 1, "deep")


def _cascade(fast: str, deep: str | None, n: int, k: int, tiers: Sequence[Tier]) -> Router:
    return CascadePolicy(list(tiers) or [Tier(fast, n, k), *([Tier(deep, 1, k)] if deep else [])])


ROUTERS: dict[str, Callable[[str, str | None, int, int, Sequence[Tier]], Router]] = {
    "fast": lambda fast, deep, n, k, tiers: FixedPolicy(fast, n, "fast"),
    "deep": _deep,
    "stall": lambda fast, deep, n, k, tiers: StallPolicy(fast, deep, k=k, n_fast=n),
    "cascade": _cascade,
}
"""Routing policies by name; anything else is a plugin's `module:Class`."""


def create_router(
    name: str, *, fast: str, deep: str | None = None, n: int = 4, k: int = 3, tiers: Sequence[Tier] = ()
) -> Router:
    """A routing policy by name (`ROUTERS`) or dotted path `module:Class`."""
    if name in ROUTERS:
        return ROUTERS[name](fast, deep, n, k, tiers)
    if ":" in name:
        policy = instantiate(name, "--router")
        if lacking := missing_members(policy, Router):
            raise RalphError(f"--router {name}: not a routing policy (it lacks {', '.join(lacking)})")
        return policy  # type: ignore[return-value]
    raise RalphError(f"unknown router {name!r}; available: {', '.join(ROUTERS)}, or module:Class")
