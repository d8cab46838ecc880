"""A run's trace read back, typed: its run_start, iterations with their candidates, background gates
and run_end as frozen dataclasses, with what follows from them worked out once (the accepts a
background gate undid, the gated progress, when the run reached green). `ralph report`, `--plot`,
`ralph ci` and `ralph bench fix` read traces through this module and nothing else.

Old traces lack newer fields, each of which has a default here; a torn last line (a run killed
mid-write) is skipped; a record of the wrong shape is one RalphError naming the trace.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ralph.domain.errors import RalphError
from ralph.trace import read_trace


@dataclass(frozen=True)
class TracedCandidate:
    """One candidate an iteration verified (or drafted and refused before verification)."""

    drafter: str = "?"
    description: str = ""
    fingerprint: str | None = None
    diff: str = ""
    verdict: str | None = None  # accepted or rejected (None: the record does not say)
    reason: str | None = None
    failed_stage: str | None = None
    verified: bool = False  # it reached a validator stage (a parse failure needs no run)
    cost_usd: float | None = None
    operator: str | None = None  # the offline drafter's template (its `meta.operator`)


@dataclass(frozen=True)
class TracedIteration:
    """An iteration; `undone` when a background gate undid its accept (it failed, was built on a
    state that failed, or the run stopped before it passed)."""

    i: int
    drafter: str
    remaining_before: int
    remaining_after: int
    accepted: bool  # an accept: gated in line, or provisional (then `state` is set)
    draft_ms: float
    verify_ms: float
    overhead_ms: float
    elapsed_s: float | None  # since the loop started
    cost_usd: float
    candidates: tuple[TracedCandidate, ...]
    route_reason: str | None = None
    state: int | None = None  # the provisional state its accept made (a background gate)
    on_state: int | None = None  # the state its candidates were judged on
    undone: bool = False

    @property
    def removed(self) -> int:
        """The error it removed and kept: 0 when its accept was undone."""
        return 0 if self.undone else max(0, self.remaining_before - self.remaining_after)

    @property
    def improved(self) -> bool:
        return self.removed > 0

    @property
    def kept(self) -> tuple[TracedCandidate, ...]:
        """Its accepted candidate, unless a background gate undid it."""
        return () if self.undone else tuple(c for c in self.candidates if c.verdict == "accepted")

    @property
    def reached_zero_in_line(self) -> bool:
        """Its accept, gated in line, left no error (not one gated in the background, nor one that
        found the error already gone)."""
        return self.remaining_after == 0 and self.remaining_before != 0 and self.state is None

    @property
    def candidates_cost_usd(self) -> float:
        return sum(c.cost_usd or 0.0 for c in self.candidates)


@dataclass(frozen=True)
class TracedGate:
    """A background gate's verdict on a provisional state."""

    state: int
    iteration: int
    verdict: str  # passed, rejected, discarded, cancelled
    fingerprint: str | None = None
    reason: str | None = None
    duration_ms: float = 0.0
    remaining: int | None = None  # of the last gated state afterwards
    elapsed_s: float | None = None
    discarded: tuple[int, ...] = ()  # states built on this one, undone with it
    kept: bool = False  # rejected, yet kept as the loop's state (--on-gate-failure todo)
    kept_states: tuple[int, ...] = ()  # kept states whose edits this passed state's commit holds

    @property
    def passed(self) -> bool:
        return self.verdict == "passed"


@dataclass(frozen=True)
class TracedStart:
    """A run_start: one per segment (a resumed run has several)."""

    run_id: str | None = None
    task: str = ""
    repo: str | None = None
    project: str | None = None
    python: str | None = None  # the interpreter the tests ran with
    drafters: tuple[str, ...] = ()
    baseline_remaining: int | None = None
    baseline_failed: tuple[str, ...] = ()  # failing targets, failing checks and regressions


@dataclass(frozen=True)
class TracedEnd:
    """A run_end: one per segment that ended."""

    outcome: str = "unfinished"
    iterations: int | None = None
    remaining: int | None = None
    remaining_at_start: int | None = None
    wall_s: float = 0.0
    baseline_s: float = 0.0
    gate_wait_s: float = 0.0
    cost_usd: float = 0.0


@dataclass(frozen=True)
class Run:
    """One run's trace, every segment of it, with the facts derived from it."""

    source: str  # the trace's path, "" when read from records
    starts: tuple[TracedStart, ...]
    iterations: tuple[TracedIteration, ...]
    gates: tuple[TracedGate, ...]
    ends: tuple[TracedEnd, ...]
    end: TracedEnd | None  # the last segment's run_end; None when it was killed
    undone: frozenset[int]  # iterations (states) whose accept a background gate undid
    green_s: float | None  # when it first stood on a gated state with no error left
    green_iteration: int | None  # the iteration whose accept got it there
    steps: tuple[int, ...]  # the gated remaining error after each iteration (index 0: the start)
    times: tuple[tuple[float, int], ...]  # the same over time: (seconds since the loop started, error)

    @property
    def start(self) -> TracedStart | None:
        """The first segment's run_start (the run's id, task and baseline)."""
        return self.starts[0] if self.starts else None


def read_run(path: Path) -> Run:
    """The run whose trace is at `path`."""
    try:
        records = read_trace(path)
    except OSError as exc:
        raise RalphError(f"cannot read the trace {path}: {exc.strerror or exc}") from None
    return parse_run(records, str(path))


def parse_run(records: Iterable[Mapping[str, Any]], source: str = "") -> Run:
    """The run of these trace records, in the order they were written."""
    starts: list[TracedStart] = []
    iterations: list[TracedIteration] = []
    gates: list[TracedGate] = []
    ends: list[TracedEnd] = []
    end: TracedEnd | None = None
    order: list[TracedIteration | TracedGate] = []
    for n, record in enumerate(records, 1):
        try:
            kind = record.get("type")
            if kind == "run_start":
                starts.append(_start(record))
                end = None  # a new segment: a run_end before it is no longer the last one's
            elif kind == "run_end":
                end = _end(record)
                ends.append(end)
            elif kind == "iteration":
                iterations.append(_iteration(record, len(iterations) + 1, _before(iterations, starts)))
                order.append(iterations[-1])
            elif kind == "gate":
                gates.append(_gate(record, iterations))
                order.append(gates[-1])
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            where = f"{source}: record {n}" if source else f"record {n}"
            raise RalphError(f"{where} is not a ralph trace record ({type(exc).__name__}: {exc})") from None
    gone = undone(iterations, gates)
    order = [replace(e, undone=True) if isinstance(e, TracedIteration) and e.i in gone else e for e in order]
    green_s, green_iteration = _green(order)
    steps, times = _gated_progress(order)
    return Run(
        source,
        tuple(starts),
        tuple(e for e in order if isinstance(e, TracedIteration)),
        tuple(gates),
        tuple(ends),
        end,
        gone,
        green_s,
        green_iteration,
        steps,
        times,
    )


def undone(iterations: Iterable[TracedIteration], gates: Iterable[TracedGate]) -> frozenset[int]:
    """The iterations whose accept a background gate undid. An accept gated in the background made a
    provisional state (its number is the iteration's); the state is undone when its gate failed, when
    it was built on a state whose gate failed (that gate's `discarded`), or when its gate never passed
    (the run stopped first). A state kept though its gate failed (`--on-gate-failure todo`) is not
    undone: it is committed with a later state whose gate passed (that gate's `kept_states`), and
    only when none did, the run ended on it uncommitted, does it count as never having passed. A
    state is not a fingerprint: the same edit accepted again later, on the state the loop went back
    to, is an accept of its own."""
    gates = list(gates)
    failed = {g.state for g in gates if not g.passed and not g.kept}
    failed |= {s for g in gates if not g.passed for s in g.discarded}
    passed = {g.state for g in gates if g.passed}
    passed |= {s for g in gates if g.passed for s in g.kept_states}
    provisional = {it.state for it in iterations if it.state is not None}
    return frozenset(failed | (provisional - passed))


def _green(order: Iterable[TracedIteration | TracedGate]) -> tuple[float | None, int | None]:
    """When and by which iteration's accept the run first stood on a gated state with no error left
    (a background gate's pass, or an iteration gated in line)."""
    for event in order:
        if isinstance(event, TracedGate) and event.passed and event.remaining == 0:
            return event.elapsed_s, event.iteration
        if isinstance(event, TracedIteration) and event.reached_zero_in_line:
            return event.elapsed_s, event.i
    return None, None


def _gated_progress(
    order: Iterable[TracedIteration | TracedGate],
) -> tuple[tuple[int, ...], tuple[tuple[float, int], ...]]:
    """The remaining error of the state the run stood on as gated: a provisional accept changes
    nothing until its background gate passes; a gate that fails changes nothing."""
    order = list(order)
    first = next((e for e in order if isinstance(e, TracedIteration)), None)
    current = first.remaining_before if first is not None else 0
    steps, times = [current], [(0.0, current)]
    for event in order:
        if isinstance(event, TracedIteration):
            if event.accepted and event.state is None:  # gated in line
                current = event.remaining_after
            steps.append(current)
            times.append((event.elapsed_s or 0.0, current))
        elif event.passed and event.remaining is not None:
            current = event.remaining
            steps[-1] = current
            times.append((event.elapsed_s or 0.0, current))
    return tuple(steps), tuple(times)


def _before(iterations: list[TracedIteration], starts: list[TracedStart]) -> int:
    """What an iteration that does not say faced: where the one before it left the run."""
    if iterations:
        return iterations[-1].remaining_after
    remaining = starts[0].baseline_remaining if starts else None
    return remaining if remaining is not None else 0


def _iteration(r: Mapping[str, Any], ordinal: int, before: int) -> TracedIteration:
    remaining_before = int(r.get("remaining_before", before))
    return TracedIteration(
        i=int(r.get("i", ordinal)),
        drafter=str(r.get("drafter", "?")),
        remaining_before=remaining_before,
        remaining_after=int(r.get("remaining_after", remaining_before)),
        accepted=bool(r.get("accepted")),
        draft_ms=_number(r.get("draft_ms"), 0.0),
        verify_ms=_number(r.get("verify_ms"), 0.0),
        overhead_ms=_number(r.get("overhead_ms"), 0.0),
        elapsed_s=_number(r.get("elapsed_s")),
        cost_usd=float(r.get("cost_usd") or 0.0),
        candidates=tuple(_candidate(c) for c in r.get("candidates") or ()),
        route_reason=(r.get("route") or {}).get("reason"),
        state=_int_or_none(r.get("state")),
        on_state=_int_or_none(r.get("on_state")),
    )


def _candidate(c: Mapping[str, Any]) -> TracedCandidate:
    return TracedCandidate(
        drafter=str(c.get("drafter", "?")),
        description=str(c.get("description", "")),
        fingerprint=c.get("fingerprint"),
        diff=str(c.get("diff", "")),
        verdict=_str_or_none(c.get("verdict")),
        reason=c.get("reason"),
        failed_stage=c.get("failed_stage"),
        verified=bool(c.get("stages")),
        cost_usd=_float_or_none(c.get("cost_usd")),
        operator=_str_or_none((c.get("meta") or {}).get("operator")),
    )


def _gate(r: Mapping[str, Any], iterations: list[TracedIteration]) -> TracedGate:
    state = _int_or_none(r.get("state", r.get("iteration")))
    if state is None:  # an early gate record: its state is that of the accept with its fingerprint
        state = next(
            (
                it.state
                for it in reversed(iterations)
                if it.state is not None and any(c.fingerprint == r["fingerprint"] for c in it.candidates)
            ),
            None,
        )
        if state is None:
            raise KeyError("state")
    return TracedGate(
        state=state,
        iteration=int(r.get("iteration", state)),
        verdict=str(r["verdict"]),
        fingerprint=r.get("fingerprint"),
        reason=r.get("reason"),
        duration_ms=float(r.get("duration_ms") or 0.0),
        remaining=_int_or_none(r.get("remaining")),
        elapsed_s=_float_or_none(r.get("elapsed_s")),
        discarded=tuple(int(s) for s in r.get("discarded") or ()),
        kept=bool(r.get("kept")),
        kept_states=tuple(int(s) for s in r.get("kept_states") or ()),
    )


def _start(r: Mapping[str, Any]) -> TracedStart:
    baseline = r.get("baseline") or {}
    score = baseline.get("score") or {}
    failed = [
        *score.get("failing_targets", []),
        *score.get("failing_checks", []),
        *score.get("regressions", []),
    ]
    project = r.get("project")
    return TracedStart(
        run_id=_str_or_none(r.get("run_id")),
        task=str(r.get("task") or ""),
        repo=_str_or_none(r.get("repo")),
        project=_str_or_none(project) if project not in (None, "", ".") else None,
        python=_str_or_none(r.get("python")),
        drafters=tuple(str(d) for d in r.get("drafters") or ()),
        baseline_remaining=_int_or_none(baseline.get("remaining")),
        baseline_failed=tuple(str(f) for f in failed),
    )


def _end(r: Mapping[str, Any]) -> TracedEnd:
    return TracedEnd(
        outcome=str(r.get("outcome", "unfinished")),
        iterations=_int_or_none(r.get("iterations")),
        remaining=_int_or_none(r.get("remaining")),
        remaining_at_start=_int_or_none(r.get("remaining_at_start")),
        wall_s=float(r.get("wall_s") or 0.0),
        baseline_s=float(r.get("baseline_s") or 0.0),
        gate_wait_s=float(r.get("gate_wait_s") or 0.0),
        cost_usd=float(r.get("cost_usd") or 0.0),
    )


def _number(value: Any, default: float | None = None) -> Any:
    """A number as the trace wrote it (an int stays an int, as the CSV rows show it); `default`
    when the trace does not say."""
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{value!r} is not a number")
    return value


def _int_or_none(value: Any) -> int | None:
    return None if value is None else int(value)


def _float_or_none(value: Any) -> float | None:
    return None if value is None else float(value)


def _str_or_none(value: Any) -> str | None:
    return None if value is None else str(value)
