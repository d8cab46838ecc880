"""A router: the drafters take turns, an iteration each, until none has anything new to try."""

from collections.abc import Sequence

from ralph.domain.protocols import IterationSummary, RouteDecision


class TakeTurns:
    name = "take-turns"

    def route(self, history: Sequence[IterationSummary], drafters: Sequence[str]) -> RouteDecision | None:
        done = set()  # drafters that proposed nothing since the last progress
        for it in reversed(history):
            if it.accepted:
                break
            if it.exhausted:
                done.add(it.drafter)
        last = drafters.index(history[-1].drafter) + 1 if history else 0
        for name in [*drafters[last:], *drafters[:last]]:  # the next one first
            if name not in done:
                return RouteDecision(name, 2, f"take-turns: {name}'s turn")
        return None
