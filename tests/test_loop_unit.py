"""The loop on fakes of its Protocols (a workspace of strings, a verifier that scores files by a table,
a gate whose verdicts the test chooses): what it commits, traces, remembers and undoes, with no
git, pytest or sandbox underneath. The same behaviours run for real in tests/test_lanes.py,
tests/test_background_gate.py and tests/test_loop.py."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from ralph.domain.candidate import Candidate, FileChange
from ralph.domain.errors import RalphError
from ralph.domain.protocols import DraftContext, Evidence, IterationSummary, RouteDecision
from ralph.domain.results import StageResult, TestResult
from ralph.domain.score import Observation, Score, regressions, score
from ralph.domain.verdict import GateJob, GateOutcome, VerifyReport
from ralph.endings import uncommitted
from ralph.loop import Budget, Lane, Loop
from ralph.validators.background import gate_verdict

BUGGY = {"f.py": "f = 1\n", "g.py": "g = 1\n"}
FIXED = {"f.py": "f = 2\n", "g.py": "g = 2\n"}


def observe(files: dict[str, str]) -> Observation:
    """One test per file: it passes when the file holds its fix (a comment `# h` and blank lines aside)."""
    return Observation(
        {
            f"t::{p}": TestResult(
                f"t::{p}", "passed" if text.replace("# h\n", "").strip() == FIXED[p].strip() else "failed"
            )
            for p, text in files.items()
        }
    )


def suite(files: dict[str, str]) -> Observation:
    """What the whole suite sees: `observe`'s tests and t::h, which a `# h` anywhere breaks (only
    the gate runs it, unless the accepted state fails it)."""
    broken = any("# h" in text for text in files.values())
    return Observation({**observe(files).tests, "t::h": TestResult("t::h", "failed" if broken else "passed")})


class Files:
    """`Workspace`: the accepted state and the applied edit, as strings."""

    def __init__(self, files: dict[str, str]) -> None:
        self.accepted, self.files = dict(files), dict(files)

    @property
    def project(self) -> Path:
        return Path("/nonexistent")

    @property
    def accepted_project(self) -> Path:
        return Path("/nonexistent")

    def read(self, path: str) -> str | None:
        return self.files.get(path)

    def encode(self, path: str, text: str) -> bytes:
        return text.encode()

    def apply(self, changes: Sequence[FileChange]) -> None:
        self.files.update({c.path: c.after or "" for c in changes})

    def restore(self, changes: Sequence[FileChange] = ()) -> object:
        self.files = dict(self.accepted)
        self.apply(changes)
        return None

    def accept(self, changes: Sequence[FileChange]) -> None:
        self.accepted.update({c.path: c.after or "" for c in changes})
        self.files = dict(self.accepted)

    def rollback(self, changes: Sequence[FileChange]) -> None:
        self.files = dict(self.accepted)

    def take_foreign(self) -> bool:
        return False

    def revert_accepted(self, changes: Sequence[FileChange]) -> None:
        self.accepted.update({c.path: c.before or "" for c in reversed(changes)})
        self.files = dict(self.accepted)


@dataclass
class Judge:
    """`Verification`: observes its workspace's files; accepts what fixes more and breaks nothing."""

    workspace: Files
    background: bool = False
    baseline_obs: Observation = field(default_factory=lambda: observe(BUGGY))
    adopted: list[tuple[FileChange, ...]] = field(default_factory=list)
    reverts: list[tuple[FileChange, ...]] = field(default_factory=list)

    def baseline(self, timeout_s: float = 0.0) -> tuple[Observation, list[StageResult]]:
        return observe(self.workspace.files), []

    def score(self, obs: Observation) -> Score:
        return score(self.baseline_obs, obs)

    def evidence(self, state: Observation) -> Evidence:
        return Evidence(tuple(state.tests[t] for t in state.failing_tests()), (), (), ())

    def verify(
        self,
        candidate: Candidate,
        current: Observation,
        reset: Callable[[Sequence[FileChange]], object] | None = None,
        progress: Callable[[str], None] | None = None,
    ) -> VerifyReport:
        if progress is not None:
            progress("tests")
        obs = observe(self.workspace.files)
        if "t::h" in current.failing_tests():  # the accepted state's failing tests are run
            obs = Observation({**obs.tests, "t::h": suite(self.workspace.files).tests["t::h"]})
        better = self.score(obs).remaining < self.score(current).remaining
        broken = regressions(current, obs)
        report = VerifyReport(not broken and better, "; ".join(broken) or "scored", [], obs, self.score(obs))
        report.gated = not self.background
        return report

    def restored(self, foreign: bool) -> None:
        pass

    def reverted(self, changes: Sequence[FileChange]) -> None:
        self.reverts.append(tuple(changes))

    def adopt(self, changes: Sequence[FileChange]) -> None:
        self.adopted.append(tuple(changes))


class Script:
    """`Drafter`: each call returns the next list of (description, files) edits of the accepted state."""

    def __init__(self, name: str, *calls: list[tuple[str, dict[str, str]]] | Exception) -> None:
        self.name, self.calls, self.asked = name, list(calls), 0
        self.remote, self.priced = False, True
        self.contexts: list[DraftContext] = []

    def draft(self, context: DraftContext, n: int) -> list[Candidate]:
        self.asked += 1
        self.contexts.append(context)
        call = self.calls.pop(0) if self.calls else []
        if isinstance(call, Exception):
            raise call
        return [
            Candidate(self.name, what, tuple(FileChange(p, current[p], text) for p, text in files.items()))
            for what, files in call
            for current in [CURRENT.accepted]
        ]


CURRENT = Files(BUGGY)  # what drafters read: set by each test to the loop's own workspace


class Always:
    """`Router`: the one drafter, n candidates, every time."""

    name = "always"

    def __init__(self, drafter: str, n: int = 2) -> None:
        self.drafter, self.n = drafter, n

    def route(self, history: Sequence[IterationSummary], drafters: Sequence[str]) -> RouteDecision | None:
        if len(history) >= 2 and all(h.exhausted for h in history[-2:]):
            return None
        return RouteDecision(self.drafter, self.n, "test")


class Commits:
    """`Branch`: commit ids in order; `advanced` is what the branch moved to."""

    def __init__(self, trace: Records) -> None:
        self.trace, self.prepared, self.advanced = trace, 0, list[str]()
        self.changes: list[dict[str, str | None]] = []  # what each prepared commit writes

    @property
    def tip(self) -> str | None:
        return self.advanced[-1] if self.advanced else None

    def prepare(
        self, changes: Sequence[FileChange], message: str, encode: Callable[[str, str], bytes]
    ) -> str:
        self.prepared += 1
        self.changes.append({c.path: c.after for c in changes})
        return f"c{self.prepared}"

    def advance(self, commit: str) -> None:
        # The trace holds the commit before the branch moves to it.
        assert any(r.get("commit") == commit for _, r in self.trace.records), commit
        self.advanced.append(commit)


class Records:
    """`Trace` and `View` at once: everything written, in order."""

    def __init__(self) -> None:
        self.records: list[tuple[str, dict[str, Any]]] = []
        self.notices: list[str] = []
        self.on_iteration: Callable[[], None] = lambda: None

    def write(self, type_: str, **fields: Any) -> None:
        self.records.append((type_, fields))

    def iteration(self, record: Any) -> None:
        self.on_iteration()

    def notice(self, text: str) -> None:
        self.notices.append(text)

    def progress(self, text: str) -> None:
        pass

    def of(self, type_: str) -> list[dict[str, Any]]:
        return [r for t, r in self.records if t == type_]


class Verdicts:
    """`Gate`: each submitted state's verdict is `decide(job)`, given in order when the loop asks (a
    job built on a state whose gate failed is discarded), after `delay` calls that find nothing."""

    def __init__(self, decide: Callable[[GateJob], bool], delay: int = 0) -> None:
        self.decide, self.delay, self.jobs, self.cancelled = decide, delay, list[GateJob](), False
        self.status, self.tip, self.gated = "", 0, dict(BUGGY)

    def submit(self, job: GateJob) -> None:
        self.jobs.append(job)

    def finished(self, wait: bool = False, timeout: float | None = None) -> list[GateOutcome]:
        if self.delay > 0:
            self.delay -= 1
            return []
        done, self.jobs = self.jobs, []
        return [self._gate(job) for job in done]

    def _gate(self, job: GateJob) -> GateOutcome:
        if job.parent != self.tip:
            return GateOutcome(job.state, "discarded")
        files = {**self.gated, **{c.path: c.after or "" for c in job.changes}}
        if not self.decide(job):
            return GateOutcome(job.state, "rejected", VerifyReport(False, "gate: breaks t::h"), 1.0)
        self.tip, self.gated = job.state, files
        return GateOutcome(job.state, "passed", VerifyReport(True, "gate passed", [], observe(files)), 1.0)

    def cancel(self) -> None:
        self.cancelled = True


class Suite(Verdicts):
    """`Gate` that runs the whole suite (`suite`) on the state it holds and judges as the background
    gate does (`gate_verdict`), keeping a regressed state with `keep`; `decide` False: no verdict."""

    def __init__(self, keep: bool, decide: Callable[[GateJob], bool] = lambda job: True, delay: int = 0):
        super().__init__(decide, delay)
        self.keep, self.base, self.passed, self.on_kept = keep, suite(BUGGY), suite(BUGGY), False

    def _gate(self, job: GateJob) -> GateOutcome:
        if job.parent != self.tip:
            return GateOutcome(job.state, "discarded")
        files = {**self.gated, **{c.path: c.after or "" for c in job.changes}}
        if not self.decide(job):
            return GateOutcome(job.state, "rejected", VerifyReport(False, "gate: no verdict: it hung"), 1.0)
        seen, judge = suite(files), Judge(Files(files)).score
        broken, better = regressions(self.base, seen), judge(seen).remaining < judge(self.base).remaining
        report = VerifyReport(not broken and better, "; ".join(broken) or "passed", [], seen, judge(seen))
        passed = self.passed if self.on_kept else None
        verdict, report = gate_verdict(report, self.base, passed, judge, keep_regressions=self.keep)
        if verdict == "rejected":
            return GateOutcome(job.state, "rejected", report, 1.0)
        self.tip, self.gated, self.base, self.on_kept = job.state, files, seen, verdict == "kept"
        if verdict == "passed":
            self.passed = seen
            return GateOutcome(job.state, "passed", report, 1.0)
        return GateOutcome(job.state, "rejected", report, 1.0, kept=True)


def make_loop(
    drafter: Script, lanes: int = 1, gate: Verdicts | None = None, **budget: Any
) -> tuple[Loop, Records, Commits, list[Files]]:
    global CURRENT
    workspaces = [Files(BUGGY) for _ in range(lanes)]
    CURRENT = workspaces[0]
    records = Records()
    branch = Commits(records)
    judges = [Judge(w, background=gate is not None) for w in workspaces]
    loop = Loop(
        task="fix",
        workspace=workspaces[0],
        verifier=judges[0],
        drafters={drafter.name: drafter},
        router=Always(drafter.name, n=max(2, lanes)),
        branch=branch,
        trace=records,
        view=records,
        budget=Budget(**budget),
        protected=(),
        gate=gate,
        lanes=tuple(Lane(w, j) for w, j in zip(workspaces[1:], judges[1:], strict=True)),
    )
    return loop, records, branch, workspaces


def test_the_first_improving_candidate_is_committed_once_the_trace_holds_it() -> None:
    drafter = Script(
        "s",
        [("dud", {"f.py": "f = 3\n"}), ("fix f", {"f.py": FIXED["f.py"]})],
        [("fix g", {"g.py": FIXED["g.py"]})],
    )
    loop, records, branch, (workspace,) = make_loop(drafter)
    result = loop.run(observe(BUGGY))
    assert result.outcome == "goal" and result.accepted == 2 and result.iterations == 2
    assert workspace.accepted == FIXED and workspace.files == FIXED
    assert branch.advanced == ["c1", "c2"]
    first, second = records.of("iteration")
    assert [c["verdict"] for c in first["candidates"]] == ["rejected", "accepted"]
    assert (first["remaining_before"], first["remaining_after"], second["remaining_after"]) == (2, 1, 0)


def test_a_rejected_edit_is_never_verified_again_and_the_next_draft_sees_why() -> None:
    dud = ("dud", {"f.py": "f = 3\n"})
    drafter = Script("s", [dud, dud], [dud, ("fix f", {"f.py": FIXED["f.py"]})])
    seen = drafter.contexts
    loop, records, _, _ = make_loop(drafter, max_iterations=2)
    loop.run(observe(BUGGY))
    first, second = records.of("iteration")
    assert len(first["candidates"]) == 1 and first["proposed"] == 2  # the duplicate: not verified
    assert [c["description"] for c in second["candidates"]] == ["fix f"]
    assert seen[1].attempts and seen[1].attempts[0][1] and seen[1].rejected


def test_every_lane_holds_the_accepted_state_after_each_iteration() -> None:
    drafter = Script(
        "s",
        [("dud", {"g.py": "g = 3\n"}), ("fix f", {"f.py": FIXED["f.py"]})],
        [("fix g", {"g.py": FIXED["g.py"]}), ("dud", {"f.py": "f = 3\n"})],
    )
    loop, records, _, workspaces = make_loop(drafter, lanes=2)
    states: list[list[dict[str, str]]] = []
    records.on_iteration = lambda: states.append([dict(w.accepted) for w in workspaces])
    result = loop.run(observe(BUGGY))
    assert result.outcome == "goal"
    assert all(lanes[0] == lanes[1] for lanes in states), states
    assert states[-1] == [FIXED, FIXED]
    assert records.of("iteration")[0]["candidates"][-1]["description"] == "fix f"


def test_a_failed_gate_undoes_its_state_and_what_was_built_on_it_on_every_lane() -> None:
    breaks = {"f.py": FIXED["f.py"] + "# h\n"}  # its gate fails, and "fix g", built on it, goes with it
    gate = Verdicts(lambda job: job.candidate.description != "fix f, break h", delay=2)
    drafter = Script(
        "s",
        [("fix f, break h", breaks)],
        [("fix g", {"g.py": FIXED["g.py"]})],
        [("fix f", {"f.py": FIXED["f.py"]})],
        [("fix g", {"g.py": FIXED["g.py"]})],
    )
    loop, records, branch, workspaces = make_loop(drafter, lanes=2, gate=gate)
    states: list[list[dict[str, str]]] = []
    records.on_iteration = lambda: states.append([dict(w.accepted) for w in workspaces])
    result = loop.run(observe(BUGGY))
    # Iteration 3 starts again from the baseline on every lane: "fix f" alone, g still buggy.
    assert states[2] == [{"f.py": FIXED["f.py"], "g.py": BUGGY["g.py"]}] * 2, states
    assert "-f = 1" in records.of("iteration")[2]["candidates"][0]["diff"]
    verdicts = records.of("gate")
    assert verdicts[0]["verdict"] == "rejected" and verdicts[0]["discarded"] == [2]
    assert [v["verdict"] for v in verdicts[1:]] == ["passed", "passed"]
    assert result.outcome == "goal" and result.accepted == 2
    assert all(w.accepted == FIXED for w in workspaces)
    assert branch.advanced == ["c1", "c2"]  # only gated states are committed
    assert any("failed its background gate" in n and "1 built on it" in n for n in records.notices)


def test_a_drafter_whose_every_draft_fails_is_not_asked_again() -> None:
    failing = [RalphError("the server is down")] * 5
    drafter = Script("s", *failing)
    loop, records, _, _ = make_loop(drafter, max_iterations=6)
    result = loop.run(observe(BUGGY))
    assert result.outcome == "stalled" and drafter.asked == 3
    assert any("not asked again: the server is down" in n for n in records.notices)


@pytest.mark.parametrize("budget", [{"max_iterations": 1}, {"max_seconds": 0.0}])
def test_the_budget_stops_the_loop_with_its_name(budget: dict[str, float]) -> None:
    drafter = Script("s", [("dud", {"f.py": "f = 3\n"})], [("dud 2", {"f.py": "f = 4\n"})])
    loop, _, _, _ = make_loop(drafter, **budget)
    result = loop.run(observe(BUGGY))
    assert result.outcome == next(iter(budget)) and result.exit_code == 1


def test_a_lanes_candidate_after_the_accepted_one_is_stopped_and_undone() -> None:
    class Slow(Judge):
        def verify(self, candidate, current, reset=None, progress=None):  # type: ignore[no-untyped-def]
            for _ in range(500 if candidate.description == "slow fix" else 0):
                progress("tests")  # stops here (Cancelled) once the candidate before it is accepted
                time.sleep(0.01)
            return super().verify(candidate, current, reset, progress)

    drafter = Script(
        "s",
        [("fix f", {"f.py": FIXED["f.py"]}), ("slow fix", {"f.py": FIXED["f.py"] + "#\n"})],
        [("fix g", {"g.py": FIXED["g.py"]})],
    )
    loop, records, _, workspaces = make_loop(drafter, lanes=2)
    loop.lanes = (Lane(workspaces[1], Slow(workspaces[1])),)
    result = loop.run(observe(BUGGY))
    assert result.outcome == "goal"
    assert records.of("iteration")[0]["cancelled"] == 1
    assert all(w.accepted == FIXED and w.files == FIXED for w in workspaces), [w.accepted for w in workspaces]


BREAKS_H = {"f.py": FIXED["f.py"] + "# h\n"}  # fixes f, and breaks t::h, which only the gate runs


def test_in_todo_mode_a_state_whose_gate_finds_a_regression_stays_and_the_regression_is_fixed_next() -> None:
    drafter = Script(
        "s",
        [("fix f, break h", BREAKS_H)],
        [("fix g", {"g.py": FIXED["g.py"]})],
        [("dud", {"g.py": "g = 3\n"}), ("unbreak h", {"f.py": FIXED["f.py"]})],
    )
    loop, records, branch, workspaces = make_loop(drafter, lanes=2, gate=Suite(keep=True))
    result = loop.run(observe(BUGGY))
    assert result.outcome == "goal" and result.accepted == 3 and result.uncommitted == ()
    first, second, third = records.of("gate")
    # Kept, twice (the second still carries the regression), then passed: one commit holds all three.
    assert (first["verdict"], first["kept"], first["commit"]) == ("rejected", "todo", None)
    assert "test t::h" in first["reason"] and first["discarded"] == []
    assert (second["verdict"], second["kept"]) == ("rejected", "todo") and "still breaks test t::h" in second[
        "reason"
    ]
    assert third["verdict"] == "passed" and third["kept_states"] == [1, 2] and "kept" not in third
    assert branch.advanced == ["c1"] and branch.changes == [{"f.py": FIXED["f.py"], "g.py": FIXED["g.py"]}]
    # The loop went on from what the gate saw: the regressed test was the error left to remove.
    iterations = records.of("iteration")
    assert [(i["remaining_before"], i["remaining_after"]) for i in iterations] == [(2, 1), (2, 1), (1, 0)]
    assert "t::h" in [t.nodeid for t in drafter.contexts[1].failing_tests]
    assert all(w.accepted == FIXED for w in workspaces)


def test_in_todo_mode_a_regression_never_fixed_is_never_committed() -> None:
    drafter = Script("s", [("fix f, break h", BREAKS_H)], [("fix g", {"g.py": FIXED["g.py"]})])
    loop, records, branch, _ = make_loop(drafter, gate=Suite(keep=True))
    result = loop.run(observe(BUGGY))
    assert result.outcome == "stalled" and result.remaining == 1 and branch.advanced == []
    assert result.accepted == 0  # no accept reached the branch
    assert [g.get("kept") for g in records.of("gate")] == ["todo", "todo"]
    assert (
        result.uncommitted == (1, 2)
        and result.final is not None
        and result.final.failing_targets == ("t::h",)
    )
    assert "iterations 1, 2" in (uncommitted(result.uncommitted) or "")


def test_in_rollback_mode_the_same_regression_is_undone() -> None:
    drafter = Script("s", [("fix f, break h", BREAKS_H)], [("fix f", {"f.py": FIXED["f.py"]})])
    loop, records, branch, _ = make_loop(drafter, gate=Suite(keep=False))
    result = loop.run(observe(BUGGY))
    assert [(g["verdict"], g.get("kept")) for g in records.of("gate")] == [
        ("rejected", None),
        ("passed", None),
    ]
    assert result.uncommitted == () and branch.changes == [{"f.py": FIXED["f.py"]}]


def test_in_todo_mode_states_built_on_a_kept_one_before_its_verdict_are_gated_on_it() -> None:
    drafter = Script(
        "s",
        [("fix f, break h", BREAKS_H)],
        [("fix g", {"g.py": FIXED["g.py"]})],  # accepted on "fix f, break h" before its gate ends
        [("unbreak h", {"f.py": FIXED["f.py"]})],
    )
    loop, records, branch, _ = make_loop(drafter, gate=Suite(keep=True, delay=2))
    result = loop.run(observe(BUGGY))
    assert [(g["state"], g["verdict"], g.get("kept")) for g in records.of("gate")] == [
        (1, "rejected", "todo"),
        (2, "rejected", "todo"),
        (3, "passed", None),
    ]
    assert result.outcome == "goal" and branch.changes == [FIXED]


def test_in_todo_mode_a_state_on_a_kept_one_whose_gate_fails_otherwise_goes_back_to_the_kept_one() -> None:
    gate = Suite(keep=True, decide=lambda job: job.candidate.description != "fix g, hangs")
    drafter = Script(
        "s",
        [("fix f, break h", BREAKS_H)],
        [("fix g, hangs", {"g.py": FIXED["g.py"]})],
        [("fix g", {"g.py": FIXED["g.py"] + "\n"})],
    )
    loop, records, _, workspaces = make_loop(drafter, lanes=2, gate=gate, max_iterations=3)
    states: list[list[dict[str, str]]] = []
    records.on_iteration = lambda: states.append([dict(w.accepted) for w in workspaces])
    result = loop.run(observe(BUGGY))
    kept, hung, third = records.of("gate")
    assert kept["kept"] == "todo" and hung["verdict"] == "rejected" and "kept" not in hung
    # Back on the kept state (f fixed, h broken), not the start, on every lane; its regression still to fix.
    assert states[2] == [{"f.py": BREAKS_H["f.py"], "g.py": FIXED["g.py"] + "\n"}] * 2, states
    assert records.of("iteration")[2]["remaining_before"] == 2
    assert third.get("kept") == "todo" and result.outcome == "max_iterations" and result.uncommitted == (1, 3)


def test_in_todo_mode_what_was_rejected_on_a_state_before_it_was_kept_may_be_verified_again() -> None:
    unbreak = ("unbreak h", {"f.py": FIXED["f.py"]})  # no improvement until the gate shows t::h failing
    drafter = Script(
        "s", [("fix f, break h", BREAKS_H)], [unbreak], [unbreak], [("fix g", {"g.py": FIXED["g.py"]})]
    )
    loop, records, _, _ = make_loop(drafter, gate=Suite(keep=True, delay=1))
    loop.run(observe(BUGGY))
    verdicts = [[c["verdict"] for c in i["candidates"]] for i in records.of("iteration")]
    assert verdicts[:3] == [["accepted"], ["rejected"], ["accepted"]]
