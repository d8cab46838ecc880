"""Routing policies. Each is a pure function of the history; the decision's reason goes into the trace."""

from __future__ import annotations

from collections.abc import Sequence

from ralph.errors import RalphError
from ralph.protocols import IterationSummary, RouteDecision, Router


class FixedPolicy:
    """Always the same drafter (`fast`): stops when it has nothing left to propose for the state."""

    name = "fast"

    def __init__(self, drafter: str, n: int) -> None:
        self.drafter = drafter
        self.n = n

    def route(self, history: Sequence[IterationSummary], drafters: Sequence[str]) -> RouteDecision | None:
        if history and history[-1].exhausted and history[-1].drafter == self.drafter:
            return None
        return RouteDecision(self.drafter, self.n, f"policy {self.name}: always {self.drafter}")


def create_router(name: str, drafter: str, n: int) -> Router:
    """A routing policy by name."""
    if name == "fast":
        return FixedPolicy(drafter, n)
    raise RalphError(f"unknown router {name!r}; available: fast")
