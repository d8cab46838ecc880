"""One `ralph fix` run, wired together: snapshot -> workspace -> baseline -> loop -> branch and trace."""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ralph.branch import RalphBranch
from ralph.config import RunConfig
from ralph.domain.candidate import PROTECTED_TESTS
from ralph.domain.errors import RalphError
from ralph.domain.protocols import Drafter, Router, Sandbox, View
from ralph.domain.results import StageResult
from ralph.domain.score import Observation
from ralph.drafters import create_drafter
from ralph.gitops import (
    Snapshot,
    check_branch_name,
    exclude_ralph_dir,
    materialize,
    open_repo,
    run_git,
    set_branch,
    snapshot,
    working_bytes,
)
from ralph.loop import Budget, Lane, Loop, RunResult
from ralph.router import create_router
from ralph.sandboxes import hold_owner_lock, remove_owned, require_sandbox, select_sandbox, sweep_stale
from ralph.sandboxes.workspace import Workspace
from ralph.trace import TraceWriter, one_line, read_trace
from ralph.trace_reader import parse_run
from ralph.validators.background import BackgroundGate
from ralph.validators.facts import VerifySettings
from ralph.validators.gate_workers import gate_workers
from ralph.validators.mypy import mypy_configured
from ralph.validators.pipeline import Verifier
from ralph.validators.toolchain import Toolchain, find_python


@dataclass
class FixOutcome:
    run_id: str
    result: RunResult
    branch: str | None
    final_commit: str | None
    trace: Path
    applied: list[str]
    apply_refused: bool = False
    notices: list[str] = field(default_factory=list)  # stages that were off for the run, and why
    untracked: tuple[str, ...] = ()  # used by the tests, not committed on the branch
    base_commit: str | None = None  # what the branch starts from (the snapshot)
    head: str | None = None  # the user's HEAD when the run started (== base_commit: a clean tree)
    toplevel: Path | None = None
    project: Path | None = None  # the user's project directory
    python: str | None = None  # the interpreter the tests ran with
    baseline_s: float = 0.0  # what verifying the starting state took (part of the run's wall_s)

    @property
    def exit_code(self) -> int:
        return 1 if self.apply_refused and self.result.exit_code == 0 else self.result.exit_code


def _finish_advance(toplevel: Path, branch: str, current: str | None, tip: str | None, base: str) -> bool:
    """A run killed between writing an accepted iteration to its trace and moving its branch left
    the branch one commit behind: move it now (only when the trace's commit sits right on it)."""
    if tip is None:
        return False
    try:
        parent = run_git(toplevel, "rev-parse", "--verify", "-q", f"{tip}^").strip()
    except RalphError:
        return False
    if parent != (current or base):
        return False
    try:
        set_branch(toplevel, branch, tip, current)
    except RalphError:
        return False
    return True


def _overlay(root: Path, branch: RalphBranch) -> None:
    """Write what the branch changed into a fresh workspace copy, as working-tree bytes."""
    for path in branch.changed_paths():
        target = root / path
        data = working_bytes(branch.snap.toplevel, branch.tip or "", path)
        if data is None:
            target.unlink(missing_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)


def new_run_id() -> str:
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"


@dataclass(frozen=True)
class Resume:
    """Where a killed or interrupted run stopped, read back from its trace."""

    run_id: str
    trace: Path
    config: RunConfig
    snap: Snapshot
    branch: str
    tip: str | None
    iterations: int
    cost_usd: float
    baseline: Observation
    rejected: frozenset[str] = frozenset()  # fingerprints the run already rejected: never again


# A run that ended this way can go on; any other ending is final.
_RESUMABLE = frozenset({"interrupted", "error"})


def load_resume(path: Path, run: str) -> Resume:
    """The state of a run of the repository at `path`, by its id (its trace in .ralph/runs) or by its
    trace file (one written with --trace); a torn last record is cut off, once the file is known to be
    a resumable trace of this repository (any other file is left as it is)."""
    toplevel, subdir = open_repo(path)
    given = Path(run).is_file()
    trace = Path(run) if given else toplevel / ".ralph" / "runs" / run / "trace.jsonl"
    if not trace.is_file():
        raise RalphError(f"--resume {run}: no such run id (no trace at {trace}) or trace file")
    records = read_trace(trace)  # (whole records only: a torn last one is cut off below, once known a trace)
    start = next((r for r in records if r["type"] == "run_start" and "baseline" in r), None)
    if start is None or "stages" not in (start.get("baseline") or {}):
        raise RalphError(f"--resume {run}: the trace has no finished baseline to resume from")
    if given and start.get("repo") != str(toplevel):  # (a run's own folder is in its repository)
        raise RalphError(f"--resume {run}: that run is of another repository ({start.get('repo')})")
    run_id = str(start["run_id"])
    last_start = max(i for i, r in enumerate(records) if r["type"] == "run_start")
    ended = [r for r in records[last_start:] if r["type"] == "run_end"]
    if ended and ended[-1].get("outcome") not in _RESUMABLE:
        outcome = ended[-1].get("outcome")
        raise RalphError(
            f"--resume {run_id}: that run finished ({outcome}); start a new run (ralph fix) instead"
        )
    data = trace.read_bytes()
    if data and not data.endswith(b"\n"):  # a crash mid-write: drop the torn record
        trace.write_bytes(data[: data.rfind(b"\n") + 1])
    iterations = [r for r in records if r["type"] == "iteration"]
    rejected, tip = _rejected_and_tip(records)
    baseline = Observation()
    for stage in start["baseline"]["stages"]:
        baseline = baseline.overlay(StageResult.from_json(stage))
    commit = start["snapshot_commit"]
    tree = run_git(toplevel, "rev-parse", f"{commit}^{{tree}}").strip()
    return Resume(
        run_id=run_id,
        trace=trace,
        # The latest segment's settings (a resume may have raised a budget); the first's baseline.
        config=RunConfig.model_validate(
            next(r["config"] for r in reversed(records) if r["type"] == "run_start" and "config" in r)
        ),
        snap=Snapshot(
            toplevel,
            start.get("base_commit"),
            commit,
            tree,
            subdir,
            start.get("work_tree", tree),
            tuple(start.get("untracked", ())),
        ),
        branch=start["branch"],
        tip=tip,
        iterations=max((r["i"] for r in iterations), default=0),
        cost_usd=sum(float(r.get("cost_usd") or 0.0) for r in iterations),
        baseline=baseline,
        rejected=rejected,
    )


def _rejected_and_tip(records: list[dict[str, Any]]) -> tuple[frozenset[str], str | None]:
    """What a run rejected (in line or by its background gate), and its branch's tip: the last commit
    an iteration (gated in line) or a background gate wrote. The branch holds gated states only: those
    whose gate had not passed when the run stopped are not on it, and are verified again."""
    gone = parse_run(records).undone  # states a background gate undid: rejections judged on them do not count
    rejected = {
        c["fingerprint"]
        for r in records
        if r["type"] == "iteration" and r.get("on_state", 0) not in gone
        for c in r.get("candidates", [])
        if c.get("verdict") == "rejected" and c.get("fingerprint")
    }
    rejected |= {
        r["fingerprint"]
        for r in records
        # (a kept state's edit is no rejection: what it broke was the loop's to fix)
        if r["type"] == "gate"
        and r.get("verdict") == "rejected"
        and not r.get("kept")
        and r.get("fingerprint")
    }
    tip = next(
        (r["commit"] for r in reversed(records) if r["type"] in ("iteration", "gate") and r.get("commit")),
        None,
    )
    return frozenset(rejected), tip


def _trace_path(toplevel: Path, run_id: str, resume: Resume | None) -> Path:
    """Where a run's trace goes by default: the resumed run's own, or one under .ralph/runs."""
    return resume.trace if resume else toplevel / ".ralph" / "runs" / run_id / "trace.jsonl"


def fix(
    path: Path,
    config: RunConfig,
    *,
    view: View,
    branch: str | None = None,
    apply: bool = False,
    trace_path: Path | None = None,
    staged: bool = False,
    only: list[str] | None = None,
    resume: Resume | None = None,
) -> FixOutcome:
    """Run the loop on the repository at `path`; the user's HEAD, index and working tree stay as they are.
    `staged` starts from the index instead of the working tree; `only` limits edits to these files;
    `resume` continues a killed or interrupted run where its trace says it stopped."""
    began = time.monotonic()
    require_sandbox(config.chosen_sandbox)
    snap, run_id, branch_name = _starting_point(path, config, branch, staged, resume)
    drafters, router = _drafters(config, view)
    exclude_ralph_dir(snap.toplevel)
    trace_path = trace_path or _trace_path(snap.toplevel, run_id, resume)
    sweep_stale()  # what a run killed with SIGKILL left
    start = _start_record(run_id, config, snap, branch_name, drafters, resume)
    ralph_branch = RalphBranch(snap, branch_name, tip=resume.tip if resume else None)
    with contextlib.ExitStack() as stack:  # undone in reverse: verifier, sandboxes, trace, files, lock
        tmp = _private_dir(stack)
        trace = stack.enter_context(contextlib.closing(TraceWriter(trace_path)))
        with _ends_in_trace(trace, start, ralph_branch), _in_users_terms(tmp, snap.toplevel):
            workspace = _workspace(tmp, snap, branch_name, resume)
            toolchain = _toolchain(stack, tmp, workspace, snap, config, view)
            start["python"] = toolchain.python
            verifier = _verifier(toolchain, config, snap, only)
            stack.callback(verifier.close)
            state = _baseline(verifier, trace, start, resume, view)
            baseline_s = time.monotonic() - began
            workspace.capture()  # what every candidate starts from, exactly
            gate = _background_gate(stack, tmp, workspace, toolchain, verifier, config, state)
            lanes = _lanes(stack, tmp, workspace, toolchain, verifier, config)
            loop = Loop(
                task=config.task,
                workspace=workspace,
                verifier=verifier,
                drafters=drafters,
                router=router,
                branch=ralph_branch,
                trace=trace,
                view=view,
                budget=Budget(config.max_iterations, config.max_seconds, config.max_cost),
                protected=verifier.protected,
                gate=gate,
                lanes=lanes,
                fresh_start_after=config.fresh_start_after,
            )
            result = _drive(loop, state, resume)
            result.wall_s = time.monotonic() - began  # the whole run, the baseline included
            applied = _apply(ralph_branch, view) if apply else []
            _write_end(trace, result, ralph_branch, branch_name, applied, baseline_s, config.task)
            done = _outcome(run_id, result, ralph_branch, trace_path, applied, apply, verifier.notices)
            return replace(done, python=toolchain.python, baseline_s=baseline_s)


def _starting_point(
    path: Path, config: RunConfig, branch: str | None, staged: bool, resume: Resume | None
) -> tuple[Snapshot, str, str]:
    """The snapshot the run starts from, its id and its branch: a new one, or the resumed run's
    (whose branch must still be where the run left it)."""
    if resume is None:
        snap = snapshot(path, staged=staged, include_untracked=config.include_untracked)
        run_id = new_run_id()
        branch_name = branch or f"ralph/{run_id}"
        check_branch_name(snap.toplevel, branch_name)
        return snap, run_id, branch_name
    snap, run_id, branch_name = resume.snap, resume.run_id, resume.branch
    current = run_git(snap.toplevel, "for-each-ref", "--format=%(objectname)", f"refs/heads/{branch_name}")
    current_tip = current.strip() or None
    if current_tip != resume.tip and not _finish_advance(
        snap.toplevel, branch_name, current_tip, resume.tip, snap.commit
    ):
        raise RalphError(f"--resume {run_id}: branch {branch_name} moved since the run stopped")
    return snap, run_id, branch_name


def _drafters(config: RunConfig, view: View) -> tuple[dict[str, Drafter], Router]:
    """The fast drafter (and the deep one, when configured) and the routing policy between them."""
    models = {name: m.model_dump() for name, m in config.models.items()}
    fast_spec = config.drafter
    if fast_spec == "auto" and config.deep:
        fast_spec = "mutation"  # the deep model is configured; the offline drafter stays the fast one
    drafter, notice = create_drafter(fast_spec, models=models, sampler=config.sampler)
    if notice:
        view.notice(notice)
    drafters = {drafter.name: drafter}
    deep = None
    if config.deep:
        deep, _ = create_drafter(config.deep, models=models, sampler=config.sampler)
        drafters[deep.name] = deep
    router = create_router(
        config.router, fast=drafter.name, deep=deep.name if deep else None, n=config.candidates, k=config.k
    )
    unpriced = [d.name for d in drafters.values() if not d.priced]
    if config.max_cost is not None and unpriced:
        view.notice(
            f"--max-cost cannot be enforced for {', '.join(unpriced)}: litellm knows no price for it "
            "(a local model?); its tokens are counted, its cost is unknown"
        )
    return drafters, router


def _private_dir(stack: contextlib.ExitStack[bool | None]) -> Path:
    """This run's private temporary directory, removed at the end, with its owner lock held."""
    tmp = Path(tempfile.mkdtemp(prefix=f"ralph-{os.getpid()}-"))
    owner = hold_owner_lock(tmp)  # released (by the kernel, if need be) when this run ends
    stack.callback(remove_owned, tmp, owner)
    return tmp


def _workspace(tmp: Path, snap: Snapshot, branch_name: str, resume: Resume | None) -> Workspace:
    """The workspace: tracked and untracked files as the tests see them, and what a resumed run
    accepted before it stopped."""
    materialize(snap, tmp / "ws")
    workspace = Workspace(tmp / "ws", snap.subdir)
    if resume is not None and resume.tip:
        _overlay(tmp / "ws", RalphBranch(snap, branch_name, tip=resume.tip))
    return workspace


def _sandboxes(
    stack: contextlib.ExitStack[bool | None],
    root: Path,
    scratch: Path,
    config: RunConfig,
    checker: bool = True,
) -> tuple[Sandbox, Sandbox | None]:
    """The sandbox a copy's tests run in (with `scratch`, made here, writable), and the type checker's
    (it reads the candidate's files and executes none: it writes nothing); both closed at the end."""
    scratch.mkdir()
    boxes = [select_sandbox(config.chosen_sandbox, root, [scratch])]
    if checker:
        boxes.append(select_sandbox(config.chosen_sandbox, root, [], workspace_writable=False))
    for box in boxes:
        stack.callback(box.close)
    return boxes[0], boxes[1] if checker else None


def _toolchain(
    stack: contextlib.ExitStack[bool | None],
    tmp: Path,
    workspace: Workspace,
    snap: Snapshot,
    config: RunConfig,
    view: View,
) -> Toolchain:
    """The sandboxes candidates run in (closed at the end) and the project's interpreter."""
    scratch = tmp / "scratch"
    sandbox, checker = _sandboxes(stack, workspace.root, scratch, config)
    if config.chosen_sandbox == "local":
        view.notice("no sandbox (local): candidate code runs without isolation (rlimits and timeouts only)")
    toolchain = Toolchain(
        python=find_python(
            snap.toplevel / snap.subdir, snap.toplevel, config.python
        ),  # the user's, not the copy's
        sandbox=sandbox,
        project=workspace.project,
        scratch=scratch,
        checker=checker,
        root=workspace.root,
        user_root=snap.toplevel,  # where the gate shows the workspace (`Toolchain.as_the_user`)
    )
    if not toolchain.has_module("pytest"):
        raise RalphError(f"pytest is not importable by {toolchain.python}; install it there or pass --python")
    return toolchain


def _background_gate(
    stack: contextlib.ExitStack[bool | None],
    tmp: Path,
    workspace: Workspace,
    toolchain: Toolchain,
    verifier: Verifier,
    config: RunConfig,
    state: Observation,
) -> BackgroundGate | None:
    """The gate beside the loop (when on): its own clone of the accepted state and its own sandbox,
    which shows the clone at the user's repository path (its tests and checks run as the user's)."""
    if not verifier.settings.background:
        return None
    clone = workspace.clone(tmp / "gate")
    scratch = tmp / "gate-scratch"
    sandbox, _ = _sandboxes(stack, clone.root, scratch, config, checker=False)
    own = replace(toolchain, sandbox=sandbox, project=clone.project, scratch=scratch, root=clone.root)
    own = own.as_the_user()
    if own.make_mount_points():  # (the copied state has those the loop's gate made, before its capture)
        clone.capture()
    keep = config.on_gate_failure == "todo"
    gate = BackgroundGate(verifier, clone, own, start=state, keep_regressions=keep)
    stack.callback(gate.close)  # before its sandbox and files go
    return gate


def _lanes(
    stack: contextlib.ExitStack[bool | None],
    tmp: Path,
    workspace: Workspace,
    toolchain: Toolchain,
    verifier: Verifier,
    config: RunConfig,
) -> tuple[Lane, ...]:
    """With `--jobs N`, N - 1 more copies of the accepted state to verify candidates on at once, each
    with its own sandboxes and verifier (its own warm worker and type checker)."""
    lanes = []
    for k in range(1, config.verify_jobs):
        clone = workspace.clone(tmp / f"lane{k}")
        scratch = tmp / f"lane{k}-scratch"
        sandbox, checker = _sandboxes(stack, clone.root, scratch, config)
        own = replace(
            toolchain,
            sandbox=sandbox,
            checker=checker,
            project=clone.project,
            scratch=scratch,
            root=clone.root,
        )
        sibling = verifier.sibling(own)
        stack.callback(sibling.close)
        lanes.append(Lane(clone, sibling))
    return tuple(lanes)


def _verifier(toolchain: Toolchain, config: RunConfig, snap: Snapshot, only: list[str] | None) -> Verifier:
    settings = VerifySettings(
        checks=tuple(config.checks),
        check_paths=config.check_paths,
        targets=frozenset(config.tests) or None,
        types=mypy_configured(toolchain.project) if config.types is None else config.types,
        coverage_cache=snap.toplevel / ".ralph" / "cache",
        protected=() if config.allow_test_edits else PROTECTED_TESTS,
        only=tuple(only) if only is not None else None,
        test_timeout_s=config.test_timeout_s,
        gate_workers=gate_workers(toolchain, config.gate_worker_count, asked=config.gate_workers != "auto"),
        background=config.gates_in_background,
        plausibility=config.semantic_mode,
        semantic_off=frozenset(config.semantic_off),
        api_changes=config.api_changes,
        run_budget_s=config.max_seconds,
        allow=tuple(config.allow) or None,  # (none given: the project's own [tool.ralph] allow)
    )
    return Verifier(toolchain, settings)


def _start_record(
    run_id: str,
    config: RunConfig,
    snap: Snapshot,
    branch_name: str,
    drafters: dict[str, Drafter],
    resume: Resume | None,
) -> dict[str, object]:
    """The run_start record's fields, before the interpreter (`python`, added once found) and the
    baseline are known."""
    return {
        "run_id": run_id,
        "task": config.task,
        "repo": str(snap.toplevel),
        "project": snap.subdir or ".",
        "base_commit": snap.head,
        "snapshot_commit": snap.commit,
        "work_tree": snap.files_tree,
        "untracked": list(snap.untracked),
        "branch": branch_name,
        "config": config.model_dump(),
        "drafters": {d.name: type(d).__name__ for d in drafters.values()},
        "python": None,
        "started": time.time(),
        **({"resumed_after": resume.iterations} if resume else {}),
    }


def _baseline(
    verifier: Verifier, trace: TraceWriter, start: dict[str, object], resume: Resume | None, view: View
) -> Observation:
    """Verify the starting state in full and write the run_start record (`_ends_in_trace` writes it,
    with why, when the baseline fails)."""
    tests = verifier.tools.tests
    tests.progress = lambda text: view.progress(f"verifying the starting state · {text}")
    try:
        state, stages = verifier.baseline()
    finally:
        tests.progress = None
    if resume is not None:  # scores stay relative to the run's original starting state
        verifier.rebase(resume.baseline)
    for line in verifier.notices:
        view.notice(line)
    score = verifier.score(state)
    baseline = {
        "remaining": score.remaining,
        "score": score.to_json(),
        "stages": [s.to_json() for s in stages],
    }
    trace.write(
        "run_start",
        **start,
        baseline=baseline,
        disabled_stages=verifier.facts.disabled,
        notices=verifier.notices,
        semantic=verifier.semantic,
    )
    return state


def _drive(loop: Loop, state: Observation, resume: Resume | None) -> RunResult:
    """Run the loop from the verified `state`, counting what a resumed run already spent and rejected."""
    return loop.run(
        state,
        done=(resume.iterations, resume.cost_usd) if resume else (0, 0.0),
        rejected=resume.rejected if resume else frozenset(),
    )


@contextlib.contextmanager
def _ends_in_trace(trace: TraceWriter, start: dict[str, object], branch: RalphBranch) -> Iterator[None]:
    """A run that stops by an exception (bad input found late, a full disk, a stale lock, a bug in a
    plugin or in ralph, Ctrl-C) still ends its trace: run_end says `interrupted`, or `error` and why
    on one line (after a run_start, when the baseline was not reached); the exception goes on."""
    try:
        yield
    except BaseException as exc:
        if trace.last != "run_end":
            interrupted = isinstance(exc, KeyboardInterrupt)
            why = {"outcome": "interrupted"} if interrupted else {"outcome": "error", "error": one_line(exc)}
            with contextlib.suppress(RalphError, OSError):  # the trace itself may be what failed
                if trace.last is None:
                    trace.write("run_start", **start, baseline={"error": why.get("error", "interrupted")})
                trace.write(
                    "run_end", **why, branch=branch.name if branch.tip else None, final_commit=branch.tip
                )
        raise


@contextlib.contextmanager
def _in_users_terms(tmp: Path, toplevel: Path) -> Iterator[None]:
    """Bad input found during the run (a suite that cannot run, a tool's error) speaks of the user's
    repository: the paths of ralph's copies of it (the workspace, a lane's, the gate's) in its
    message are made the repository's own."""
    try:
        yield
    except RalphError as exc:
        exc.args = tuple(users_paths(a, tmp, toplevel) if isinstance(a, str) else a for a in exc.args)
        raise


def users_paths(text: str, tmp: Path, toplevel: Path) -> str:
    """`text` with every path into a copy of the repository under `tmp` made one into `toplevel`."""
    roots = "|".join(re.escape(str(p)) for p in dict.fromkeys([tmp, tmp.resolve()]))
    copies = rf"(?:{roots})/(?:ws|gate|lane\d+)(?:\.accepted)?(?![\w.-])"
    return re.sub(copies, lambda _: str(toplevel), text)


def _apply(ralph_branch: RalphBranch, view: View) -> list[str]:
    """`--apply`: the branch's changes written into the user's working tree, when that is safe."""
    if not ralph_branch.tip:
        return []
    try:
        return ralph_branch.apply_to_working_tree(view.notice)
    except RalphError as exc:
        view.notice(str(exc))
        return []


def _outcome(
    run_id: str,
    result: RunResult,
    ralph_branch: RalphBranch,
    trace_path: Path,
    applied: list[str],
    apply: bool,
    notices: list[str],
) -> FixOutcome:
    snap, tip = ralph_branch.snap, ralph_branch.tip
    return FixOutcome(
        run_id,
        result,
        ralph_branch.name if tip else None,
        tip,
        trace_path,
        applied,
        apply_refused=apply and bool(tip) and not applied,
        notices=notices,
        untracked=tuple(p for p in snap.untracked if p not in ralph_branch.changed_paths()),
        base_commit=snap.commit,
        head=snap.head,
        toplevel=snap.toplevel,
        project=snap.toplevel / snap.subdir,
    )


def _write_end(
    trace: TraceWriter,
    result: RunResult,
    ralph_branch: RalphBranch,
    branch_name: str,
    applied: list[str],
    baseline_s: float,
    task: str,
) -> None:
    """The run's last record; then a finished run's branch becomes one commit with the whole fix (a
    resumable one keeps its steps): first the trace, then the branch."""
    final = ralph_branch.tip if result.outcome in _RESUMABLE else ralph_branch.squash(task)
    trace.write(
        "run_end",
        outcome=result.outcome,
        iterations=result.iterations,
        accepted=result.accepted,
        remaining_at_start=result.remaining_at_start,
        remaining=result.remaining,
        wall_s=round(result.wall_s, 3),
        baseline_s=round(baseline_s, 3),
        gate_wait_s=round(result.gate_wait_s, 3),
        cost_usd=result.cost_usd,
        unpriced_tokens=result.unpriced_tokens,
        branch=branch_name if ralph_branch.tip else None,
        final_commit=final,
        applied=applied,
        uncommitted_states=list(result.uncommitted),
    )
    if final is not None and final != ralph_branch.tip:
        ralph_branch.advance(final)
