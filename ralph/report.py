"""Trace statistics (pure): per-run outcomes and cycle-time breakdowns, and improvement per step per
drafter, the number that tells whether many cheap iterations beat a few smart ones on your repo.

With E the remaining error before an iteration and D the error it removed (0 when rejected), a
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
from ralph.trace import read_trace


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


def undone(records: Sequence[dict[str, Any]]) -> set[int]:
    """The iterations whose accept a background gate undid (it failed, or the state was built on one
    that failed, or the run stopped before it passed)."""
    iteration_of = {r["state"]: r["i"] for r in records if r.get("type") == "iteration" and "state" in r}
    gates = [r for r in records if r.get("type") == "gate"]
    failed = {g["iteration"] for g in gates if g.get("verdict") != "passed"}
    failed |= {iteration_of[s] for g in gates for s in g.get("discarded", []) if s in iteration_of}
    passed = {g["iteration"] for g in gates if g.get("verdict") == "passed"}
    return failed | {i for s, i in iteration_of.items() if i not in passed}


def gated_progress(records: Sequence[dict[str, Any]]) -> tuple[list[int], list[tuple[float, int]]]:
    """The remaining error of the state the run stood on as gated: after each iteration (index 0 is
    the start), and over time (seconds since the loop started). A provisional accept changes nothing
    until its background gate passes; a gate that fails changes nothing."""
    iterations = [r for r in records if r.get("type") == "iteration"]
    current = int(iterations[0]["remaining_before"]) if iterations else 0
    steps, times = [current], [(0.0, current)]
    for r in records:
        if r.get("type") == "iteration":
            if r.get("accepted") and "state" not in r:  # gated in line
                current = int(r["remaining_after"])
            steps.append(current)
            times.append((float(r.get("elapsed_s", 0.0)), current))
        elif r.get("type") == "gate" and r.get("verdict") == "passed":
            current = int(r["remaining"])
            steps[-1] = current
            times.append((float(r.get("elapsed_s", 0.0)), current))
    return steps, times


def _improved(record: dict[str, Any], undone: set[int]) -> bool:
    return (
        record.get("remaining_after", 0) < record.get("remaining_before", 0) and record.get("i") not in undone
    )


def reached_zero_in_line(iteration: dict[str, Any]) -> bool:
    """An iteration whose accept, gated in line, left no error (not one gated in the background, nor
    one that found the error already gone)."""
    after, before = iteration.get("remaining_after"), iteration.get("remaining_before", 1)
    return after == 0 and before != 0 and "state" not in iteration


def _green(records: Sequence[dict[str, Any]]) -> float | None:
    """When the run first stood on a gated state with no error left (a background gate's pass, or an
    iteration gated in line)."""
    for r in records:
        gated = r.get("type") == "gate" and r.get("verdict") == "passed" and r.get("remaining") == 0
        if gated or (r.get("type") == "iteration" and reached_zero_in_line(r)):
            elapsed = r.get("elapsed_s")
            return float(elapsed) if elapsed is not None else None
    return None


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


def run_stats(records: Sequence[dict[str, Any]], trace: str = "") -> RunStats:
    """Statistics of one run from its records (a killed run has no run_end: outcome 'unfinished').
    A resumed run has several segments (a run_start each): the outcome is the last segment's, the
    counts, times and cost are summed over all of them."""
    starts = [i for i, r in enumerate(records) if r.get("type") == "run_start"] or [0]
    start = records[starts[0]] if records and records[starts[0]].get("type") == "run_start" else {}
    last_segment = records[starts[-1] :]
    ends = [r for r in records if r.get("type") == "run_end"]
    end: dict[str, Any] = next((r for r in reversed(last_segment) if r.get("type") == "run_end"), {})
    iterations = [r for r in records if r.get("type") == "iteration"]
    gone = undone(records)
    last_elapsed = iterations[-1].get("elapsed_s", 0.0) if iterations else 0.0
    drafters = list(dict.fromkeys([*start.get("drafters", {}), *(r.get("drafter", "?") for r in iterations)]))
    first = iterations[0].get("drafter") if iterations else None
    escalations = sum(  # moves away from the first (fast) drafter; stepping back down is not one
        1 for a, b in itertools.pairwise(iterations) if b.get("drafter") not in (a.get("drafter"), first)
    )
    baseline = start.get("baseline") or {}
    return RunStats(
        run_id=str(start.get("run_id", Path(trace).parent.name)),
        trace=trace,
        drafters=drafters,
        outcome=str(end.get("outcome", "unfinished")),
        iterations=len(iterations),
        accepted=sum(1 for r in iterations if _improved(r, gone)),
        remaining_at_start=baseline.get(
            "remaining", iterations[0]["remaining_before"] if iterations else None
        ),
        remaining=end.get("remaining", iterations[-1]["remaining_after"] if iterations else None),
        wall_s=float(sum(float(e.get("wall_s") or 0.0) for e in ends) if end else last_elapsed),
        time_to_green_s=_green(records),
        escalations=escalations,
        cost_usd=float(end.get("cost_usd") or 0.0)
        if end
        else sum(float(r.get("cost_usd") or 0.0) for r in iterations),
        draft_s=sum(r.get("draft_ms", 0.0) for r in iterations) / 1000,
        verify_s=sum(r.get("verify_ms", 0.0) for r in iterations) / 1000,
        overhead_s=sum(r.get("overhead_ms", 0.0) for r in iterations) / 1000,
        baseline_s=sum(float(e.get("baseline_s") or 0.0) for e in ends),
        gate_s=sum(r.get("duration_ms", 0.0) for r in records if r.get("type") == "gate") / 1000,
        gate_wait_s=sum(float(e.get("gate_wait_s") or 0.0) for e in ends),
    )


def drafter_stats(
    runs: Iterable[Sequence[dict[str, Any]]], group_by_run: bool = False
) -> dict[str, DrafterStats]:
    """Improvement per step per drafter over all iterations of `runs`. Iterations where the drafter
    proposed nothing are not steps. With `group_by_run`, a run's drafters are one group (--compare)."""
    stats: dict[str, DrafterStats] = {}
    for records in runs:
        iterations = [r for r in records if r.get("type") == "iteration"]
        gone = undone(records)
        run_key = "+".join(dict.fromkeys(r.get("drafter", "?") for r in iterations)) if group_by_run else None
        for r in iterations:
            if not r.get("candidates"):
                continue
            key = run_key or r.get("drafter", "?")
            s = stats.setdefault(key, DrafterStats(key))
            before, after = int(r.get("remaining_before", 0)), int(r.get("remaining_after", 0))
            if r.get("i") in gone:  # a background gate undid it: it removed nothing
                after = before
            s.iterations += 1
            s.error_seen += before
            s.error_removed += max(0, before - after)
            s.accepted += after < before
            s.cycles_s.append(
                (r.get("draft_ms", 0.0) + r.get("verify_ms", 0.0) + r.get("overhead_ms", 0.0)) / 1000
            )
            s.cost_usd += sum(c.get("cost_usd") or 0.0 for c in r.get("candidates", []))
    return stats


def load(paths: Iterable[Path]) -> list[tuple[Path, list[dict[str, Any]]]]:
    return [(p, read_trace(p)) for p in trace_files(paths)]


def report_json(loaded: Sequence[tuple[Path, list[dict[str, Any]]]], compare: bool = False) -> dict[str, Any]:
    """The machine-readable report: a `runs` list and a `drafters` map."""
    runs = []
    for path, records in loaded:
        stats = run_stats(records, str(path))
        runs.append({**asdict(stats), "fractions": {k: round(v, 4) for k, v in stats.fractions.items()}})
    drafters = drafter_stats((records for _, records in loaded), group_by_run=compare)
    return {"runs": runs, "drafters": {name: s.to_json() for name, s in drafters.items()}}


def iteration_rows(loaded: Sequence[tuple[Path, list[dict[str, Any]]]]) -> list[dict[str, Any]]:
    """One flat row per iteration, for pandas and spreadsheets."""
    rows = []
    for path, records in loaded:
        run_id = run_stats(records, str(path)).run_id
        gone = undone(records)
        for r in records:
            if r.get("type") != "iteration":
                continue
            rows.append(
                {
                    "run_id": run_id,
                    "i": r.get("i"),
                    "drafter": r.get("drafter"),
                    "remaining_before": r.get("remaining_before"),
                    "remaining_after": r.get("remaining_after"),
                    "accepted": _improved(r, gone),
                    "candidates": len(r.get("candidates", [])),
                    "draft_ms": r.get("draft_ms"),
                    "verify_ms": r.get("verify_ms"),
                    "overhead_ms": r.get("overhead_ms"),
                    "elapsed_s": r.get("elapsed_s"),
                    "cost_usd": sum(c.get("cost_usd") or 0.0 for c in r.get("candidates", [])),
                    "route_reason": (r.get("route") or {}).get("reason"),
                }
            )
    return rows
