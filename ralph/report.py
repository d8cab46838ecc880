"""Trace statistics (pure): per-run outcomes and cycle-time breakdowns, and improvement per step per
drafter, the number that tells whether many cheap iterations beat a few smart ones on your repo.

With E the remaining error before an iteration and D the error it removed (0 when rejected, or
undone by a background gate), a
drafter's improvement rate is r = sum(D) / sum(E). The seed model predicts the share of the error
fixed after n iterations as 1 - (1 - r)^n, and within a time budget T as 1 - (1 - r)^(T / cycle).
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ralph.domain.errors import RalphError
from ralph.trace_reader import Run, TracedStart, read_run


@dataclass
class RunStats:
    """One run, from its trace."""

    run_id: str
    trace: str
    drafters: list[str]
    outcome: str
    iterations: int
    accepted: int
    remaining_at_start: int | None
    remaining: int | None
    wall_s: float
    time_to_green_s: float | None
    escalations: int
    cost_usd: float
    draft_s: float
    verify_s: float
    overhead_s: float
    baseline_s: float = 0.0  # verifying the starting state (part of wall_s since run_end records it)
    gate_s: float = 0.0  # background gates: beside the loop, so not part of the other shares
    gate_wait_s: float = 0.0  # the loop waiting for a background gate (the goal waits for its gate)
    repo: str = ""  # the repository as a reader knows it: its folder's name (and the project's in it)
    task: str = ""  # the run's --task, as given ("" when none was)

    @property
    def fractions(self) -> dict[str, float]:
        """Drafting, verification on the loop's path (the baseline, each candidate's synchronous
        stages, waiting for a gate) and everything else, as shares of the run's wall time; and the
        background gates' time, which ran beside them."""
        verify_s = self.verify_s + self.baseline_s + self.gate_wait_s
        total = max(self.wall_s, self.draft_s + verify_s + self.overhead_s, 1e-9)
        drafting, verifying = self.draft_s / total, verify_s / total
        return {
            "draft": drafting,
            "verify": verifying,
            "overhead": max(0.0, 1 - drafting - verifying),
            "gate": self.gate_s / total,
        }


@dataclass
class DrafterStats:
    """Improvement per step of one drafter (or model) across runs."""

    drafter: str
    iterations: int = 0
    accepted: int = 0
    error_seen: int = 0  # sum of E
    error_removed: int = 0  # sum of D
    cycles_s: list[float] = field(default_factory=list)
    cost_usd: float = 0.0

    @property
    def r(self) -> float:
        return self.error_removed / self.error_seen if self.error_seen else 0.0

    @property
    def median_cycle_s(self) -> float:
        return statistics.median(self.cycles_s) if self.cycles_s else 0.0

    def predicted_fixed(self, n: float) -> float:
        """The seed model's share of the error fixed after n iterations."""
        return 1 - (1 - self.r) ** max(n, 0.0)

    def projected_fixed(self, budget_s: float) -> float:
        """Share fixed within a wall-time budget, at this drafter's median cycle time."""
        cycle = self.median_cycle_s
        return self.predicted_fixed(budget_s / cycle) if cycle > 0 else 0.0

    def to_json(self, budgets: Sequence[float] = (60.0, 300.0)) -> dict[str, Any]:
        return {
            "r": round(self.r, 4),
            "iterations": self.iterations,
            "accepted": self.accepted,
            "error_seen": self.error_seen,
            "error_removed": self.error_removed,
            "median_cycle_s": round(self.median_cycle_s, 3),
            "cost_usd": round(self.cost_usd, 6),
            "predicted_fixed": {str(n): round(self.predicted_fixed(n), 4) for n in (1, 5, 10, 20)},
            "projected_fixed_within_s": {str(int(b)): round(self.projected_fixed(b), 4) for b in budgets},
        }


def trace_files(paths: Iterable[Path]) -> list[Path]:
    """Trace files from files, run directories, directories of runs (e.g. .ralph/runs), or
    directories of trace files (a `ralph bench fix` run's `traces/`)."""
    found: list[Path] = []
    for path in paths:
        if path.is_file():
            found.append(path)
        elif (path / "trace.jsonl").is_file():
            found.append(path / "trace.jsonl")
        elif path.is_dir():
            found += sorted(path.glob("*/trace.jsonl")) or sorted(path.glob("*.jsonl"))
        else:
            raise RalphError(f"{path}: no such trace file or run directory")
    if not found:
        raise RalphError("no traces found in " + ", ".join(str(p) for p in paths))
    return found


def run_stats(run: Run) -> RunStats:
    """Statistics of one run (a killed run has no run_end: outcome 'unfinished'). A resumed run has
    several segments (a run_start each): the outcome is the last segment's, the counts, times and
    cost are summed over all of them."""
    start, end, iterations = run.start or TracedStart(), run.end, run.iterations
    first = iterations[0].drafter if iterations else None
    escalations = sum(  # moves away from the first (fast) drafter; stepping back down is not one
        1 for a, b in itertools.pairwise(iterations) if b.drafter not in (a.drafter, first)
    )
    remaining_at_start = start.baseline_remaining
    if remaining_at_start is None and iterations:
        remaining_at_start = iterations[0].remaining_before
    remaining = end.remaining if end is not None else None
    last_elapsed = (iterations[-1].elapsed_s or 0.0) if iterations else 0.0
    if (end is None or end.remaining is None) and iterations:
        remaining = iterations[-1].remaining_after
    return RunStats(
        run_id=start.run_id if start.run_id is not None else Path(run.source).parent.name,
        trace=run.source,
        drafters=list(dict.fromkeys([*start.drafters, *(it.drafter for it in iterations)])),
        outcome=end.outcome if end is not None else "unfinished",
        iterations=len(iterations),
        accepted=sum(it.improved for it in iterations),
        remaining_at_start=remaining_at_start,
        remaining=remaining,
        wall_s=sum(e.wall_s for e in run.ends) if end is not None else last_elapsed,
        time_to_green_s=run.green_s,
        escalations=escalations,
        cost_usd=end.cost_usd if end is not None else sum(it.cost_usd for it in iterations),
        draft_s=sum(it.draft_ms for it in iterations) / 1000,
        verify_s=sum(it.verify_ms for it in iterations) / 1000,
        overhead_s=sum(it.overhead_ms for it in iterations) / 1000,
        baseline_s=sum(e.baseline_s for e in run.ends),
        gate_s=sum(g.duration_ms for g in run.gates) / 1000,
        gate_wait_s=sum(e.gate_wait_s for e in run.ends),
        repo=repo_label(start),
        task=start.task.strip(),
    )


def repo_label(start: TracedStart) -> str:
    """A run's repository as a reader knows it: its folder's name, then the project's path in it."""
    if start.repo is None:
        return "?"
    label = Path(start.repo).name
    return label if start.project in (None, "", ".") else f"{label}/{start.project}"


def drafter_stats(runs: Iterable[Run], group_by_run: bool = False) -> dict[str, DrafterStats]:
    """Improvement per step per drafter over all iterations of `runs` (an accept a background gate
    undid removed nothing). Iterations where the drafter proposed nothing are not steps. With
    `group_by_run`, a run's drafters are one group (--compare)."""
    stats: dict[str, DrafterStats] = {}
    for run in runs:
        run_key = "+".join(dict.fromkeys(it.drafter for it in run.iterations)) if group_by_run else None
        for it in run.iterations:
            if not it.candidates:
                continue
            key = run_key or it.drafter
            s = stats.setdefault(key, DrafterStats(key))
            s.iterations += 1
            s.error_seen += it.remaining_before
            s.error_removed += it.removed
            s.accepted += it.improved
            s.cycles_s.append((it.draft_ms + it.verify_ms + it.overhead_ms) / 1000)
            s.cost_usd += it.candidates_cost_usd
    return stats


def load(paths: Iterable[Path]) -> list[Run]:
    return [read_run(p) for p in trace_files(paths)]


def report_json(runs: Sequence[Run], compare: bool = False) -> dict[str, Any]:
    """The machine-readable report: a `runs` list and a `drafters` map."""
    listed = []
    for run in runs:
        stats = run_stats(run)
        listed.append({**asdict(stats), "fractions": {k: round(v, 4) for k, v in stats.fractions.items()}})
    drafters = drafter_stats(runs, group_by_run=compare)
    return {"runs": listed, "drafters": {name: s.to_json() for name, s in drafters.items()}}


def iteration_rows(runs: Sequence[Run]) -> list[dict[str, Any]]:
    """One flat row per iteration, for pandas and spreadsheets."""
    rows = []
    for run in runs:
        stats = run_stats(run)
        for it in run.iterations:
            rows.append(
                {
                    "run_id": stats.run_id,
                    "repo": stats.repo,
                    "task": stats.task,
                    "i": it.i,
                    "drafter": it.drafter,
                    "remaining_before": it.remaining_before,
                    "remaining_after": it.remaining_after,
                    "accepted": it.improved,
                    "candidates": len(it.candidates),
                    "draft_ms": it.draft_ms,
                    "verify_ms": it.verify_ms,
                    "overhead_ms": it.overhead_ms,
                    "elapsed_s": it.elapsed_s,
                    "cost_usd": it.candidates_cost_usd,
                    "route_reason": it.route_reason,
                }
            )
    return rows
