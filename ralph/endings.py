"""What a run that stopped short of the goal says: what still fails, and why when that is knowable
(pure functions of the run's result)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from ralph.domain.protocols import IterationSummary
from ralph.domain.score import Observation, Score
from ralph.records import RunResult

_MISSING = re.compile(r"ModuleNotFoundError: No module named '([\w.]+)'")
_OFFLINE = ("mutation", "replay")
_BUDGETS = {"max_iterations": "--max-iterations", "max_seconds": "--max-seconds", "max_cost": "--max-cost"}
_A_MODEL = "--drafter PROVIDER/MODEL or --deep PROVIDER/MODEL (see docs/models.md)"


def still_failing(score: Score, shown: int = 5) -> str | None:
    """One line: the targets, regressions, checks, diagnostics and syntax errors that remain."""
    items = [
        *score.failing_targets,
        *(f"{t} (regressed)" for t in score.regressions),
        *(f"check {c}" for c in score.failing_checks),
        *score.new_diagnostics,
        *(f"syntax {p}" for p in score.syntax_errors),
    ]
    if not items:
        return None
    more = f" (+{len(items) - shown} more)" if len(items) > shown else ""
    return "still failing: " + ", ".join(items[:shown]) + more


def failing(score: Score | None) -> dict[str, list[str]]:
    """What still fails, by kind, every item (`--json`'s `still_failing`; `still_failing` says it in a
    line): target tests, regressed tests, checks, new diagnostics, files with a syntax error."""
    score = score or Score()
    return {
        "tests": list(score.failing_targets),
        "regressed": list(score.regressions),
        "checks": list(score.failing_checks),
        "diagnostics": list(score.new_diagnostics),
        "syntax_errors": list(score.syntax_errors),
    }


def uncommitted(states: Sequence[int]) -> str | None:
    """One line: the states the run ended on that are not on the branch (kept though their gate
    found regressions that no later state's passed gate took in)."""
    if not states:
        return None
    which = ", ".join(str(s) for s in states)
    return (
        f"not committed: the edits of iterations {which}, kept though the background gate found "
        "regressions that no later state's passed gate took in (the branch holds the last state "
        "whose gate passed)"
    )


def missing_modules(state: Observation, project: Path) -> list[str]:
    """Modules the failing tests cannot import that are not the project's own: an environment
    problem (a package not installed for that interpreter), not a bug to edit."""
    found: dict[str, None] = {}
    for nodeid in state.failing_tests():
        for name in _MISSING.findall(state.tests[nodeid].message):
            top = name.split(".")[0]
            if not (project / top).exists() and not (project / f"{top}.py").exists():
                found[top] = None
    return list(found)


def why(
    outcome: str,
    state: Observation | None,
    project: Path | None,
    python: str | None,
    history: Sequence[IterationSummary],
) -> list[str]:
    """Why the run stopped short, when it can be told: modules missing from the environment, or an
    offline drafter with nothing left to try (then a model may do better)."""
    lines = []
    if state is not None and project is not None and (missing := missing_modules(state, project)):
        where = f" for {python}" if python else ""
        lines.append(
            f"the tests cannot import {', '.join(missing)}: install it{where}, or pass --python with the "
            "interpreter that has it (this is the environment, not a bug ralph can edit)"
        )
    if outcome == "stalled" and _offline(history):
        kinds = Counter(k for h in history for k in h.kinds)
        what = f"tried {sum(kinds.values())} edits ({_kinds(kinds)}) and " if kinds else ""
        lines.append(f"the offline drafter {what}has nothing new to try: give a model with {_A_MODEL}")
    return lines


def budget_spent(result: RunResult) -> list[str]:
    """A run its budget stopped: what it tried (iterations, candidates by drafter, edits by kind),
    the error it got down to, and what to try next (more of that budget, or a model)."""
    flag = _BUDGETS.get(result.outcome)
    if flag is None:
        return []
    history = result.history
    drafters = Counter[str]()
    for h in history:
        drafters[h.drafter] += h.candidates
    kinds = Counter(k for h in history for k in h.kinds)
    tried = f"{sum(drafters.values())} candidates tried"
    tried += f" ({_kinds(drafters)})" if drafters else ""
    tried += f", edits by kind: {_kinds(kinds)}" if kinds else ""
    more = {
        "max_iterations": f"more iterations ({flag} {2 * max(result.iterations, 1)})",
        "max_seconds": f"more time (a larger {flag})",
        "max_cost": f"a larger {flag}",
    }[result.outcome]
    model = f"a model: {_A_MODEL}" if _offline(history) else f"another model: {_A_MODEL}"
    if history and history[-1].exhausted:  # more of the same would try nothing new
        then = f"next: {history[-1].drafter} had nothing new to try; give {model}"
    else:
        then = f"next: {more}, or {model}"
    n = result.iterations
    return [
        f"stopped by its budget ({flag}) after {n} iteration{'s' * (n != 1)}: {tried}; remaining error "
        f"{result.remaining_at_start} -> {result.remaining}",
        then,
    ]


def _offline(history: Sequence[IterationSummary]) -> bool:
    """Whether every iteration's drafter was an offline one (no model was asked)."""
    drafters = {h.drafter for h in history}
    return bool(drafters) and all(d.startswith(_OFFLINE) for d in drafters)


def _kinds(counts: Counter[str]) -> str:
    return ", ".join(f"{kind} {n}" for kind, n in counts.most_common())
