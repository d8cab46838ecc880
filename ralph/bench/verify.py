"""`ralph bench verify REPO`: staged verification of single-token mutants against the naive baseline.

For each mutant the full suite catches, it times in the same run: ralph's staged checks (warm runner,
selected tests, dmypy when configured), the naive baseline (fresh `python -m pytest -q`, `ruff check .`
and `mypy` as a user runs them), and pytest-testmon when the project's interpreter has it. Recall is
the share of caught mutants that the staged checks caught without the full suite.
"""

from __future__ import annotations

import os
import random
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ralph.domain.candidate import Candidate, FileChange
from ralph.domain.errors import RalphError
from ralph.domain.results import Scope
from ralph.domain.score import Observation
from ralph.domain.verdict import VerifyReport
from ralph.drafters.mutation_ops import generate_mutants
from ralph.sandboxes import select_sandbox
from ralph.sandboxes.local import kill_group
from ralph.sandboxes.workspace import Workspace
from ralph.validators.facts import VerifySettings
from ralph.validators.mypy import mypy_configured
from ralph.validators.pipeline import Verifier
from ralph.validators.toolchain import Toolchain, find_python, ruff_bin

_SKIP_DIRS = {
    ".git",
    ".venv",
    "venv",
    ".tox",
    "build",
    "dist",
    "__pycache__",
    ".mypy_cache",
    ".ralph",
    "docs",
}


@dataclass
class MutantResult:
    path: str
    description: str
    ralph_ms: float
    naive_ms: float
    testmon_ms: float | None
    detected: bool
    stage: str | None
    # The accept path: the candidate that undoes the mutant, verified from the mutant's state.
    accept_ms: float | None = None
    accepted: bool | None = None
    accept_units: float | None = None  # test executions / tests in the suite
    accept_reason: str = ""
    stage_ms: dict[str, float] = field(default_factory=dict)  # each stage the detection ran, its time
    accept_stage_ms: dict[str, float] = field(default_factory=dict)  # and the accept path's
    profile: dict[str, float] = field(default_factory=dict)  # the rejection path's parts (`rejection_parts`)


@dataclass
class VerifyBench:
    repo: str
    python: str
    tried: int = 0
    results: list[MutantResult] = field(default_factory=list)
    baseline_s: float = 0.0
    types: bool = False
    sandbox: str = "local"
    semantic: bool = True  # the plausibility, API and format stages on
    hung: int = 0  # mutants left out: the full suite hung on them

    def summary(self) -> dict[str, Any]:
        ralph = [r.ralph_ms for r in self.results]
        naive = [r.naive_ms for r in self.results]
        testmon = [r.testmon_ms for r in self.results if r.testmon_ms is not None]
        med = _median(ralph)
        return {
            "repo": self.repo,
            "mutants": len(self.results),
            "mutants_tried": self.tried,
            "types": self.types,
            "sandbox": self.sandbox,
            "median_verify_ms": med,
            "p90_verify_ms": _p90(ralph),
            "naive_median_ms": _median(naive),
            "naive_p90_ms": _p90(naive),
            "testmon_median_ms": _median(testmon) if testmon else None,
            "speedup": round(_median(naive) / med, 2) if med else None,
            "speedup_vs_testmon": round(_median(testmon) / med, 2) if testmon and med else None,
            "recall": round(sum(r.detected for r in self.results) / len(self.results), 4)
            if self.results
            else None,
            "missed": [f"{r.path}: {r.description}" for r in self.results if not r.detected],
            "semantic_stages": self.semantic,
            "stage_median_ms": self._stage_medians("stage_ms"),
            "accept_stage_median_ms": self._stage_medians("accept_stage_ms"),
            "rejection_profile": self.profile(),
            **self._accept_summary(),
            "baseline_s": round(self.baseline_s, 2),
            "mutants_hung": self.hung,
        }

    def _stage_medians(self, which: str) -> dict[str, float]:
        """Each stage's median time over the mutants it ran on (the static ones run side by side:
        their sum is more than what they add to the wall time)."""
        times: dict[str, list[float]] = {}
        for r in self.results:
            for stage, ms in getattr(r, which).items():
                times.setdefault(stage, []).append(ms)
        return {stage: _median(ms) for stage, ms in times.items()}

    def profile(self) -> dict[str, dict[str, float]]:
        """Each part of the rejection path (`PARTS`): its median over the mutants it was part of,
        and its share of all the mutants' rejection time together."""
        total = sum(sum(r.profile.values()) for r in self.results)
        found = [p for p in PARTS if any(p in r.profile for r in self.results)]
        return {
            part: {
                "median_ms": _median([r.profile[part] for r in self.results if part in r.profile]),
                "share": round(sum(r.profile.get(part, 0.0) for r in self.results) / total, 4)
                if total
                else 0.0,
            }
            for part in found
        }

    def _accept_summary(self) -> dict[str, Any]:
        timed = [r for r in self.results if r.accept_ms is not None]
        accept = [r.accept_ms for r in timed if r.accept_ms is not None]
        units = [r.accept_units for r in timed if r.accept_units is not None]
        naive = _median([r.naive_ms for r in timed])
        med = _median(accept)
        return {
            "accept_median_ms": med if accept else None,
            "accept_p90_ms": _p90(accept) if accept else None,
            "accept_speedup": round(naive / med, 2) if accept and med else None,
            "accept_suite_units_median": round(statistics.median(units), 2) if units else None,
            "accept_suite_units_max": round(max(units), 2) if units else None,
            "fixes_rejected": [
                f"{r.path}: {r.description}: {r.accept_reason}" for r in timed if not r.accepted
            ],
        }


# The rejection path, in the order a candidate meets it: its edit applied, the static stages, the
# targeted tests (the worker's fork or spare with pytest's start, the collection, the tests themselves,
# ralph's side of the run), the type checker, and the workspace put back; `other` is the rest of the
# verification (the policy, reading the sources, merging the results; negative when the static
# stages, which run side by side, overlapped by more than that).
PARTS = ("apply", "syntax", "ruff", "start", "collection", "tests", "host", "mypy", "restore", "other")


def rejection_parts(report: VerifyReport, apply_ms: float, restore_ms: float) -> dict[str, float]:
    """Where one rejection's time went (ms): `apply_ms` + the verification + `restore_ms`, in `PARTS`."""
    parts = {"apply": apply_ms, "restore": restore_ms}
    for stage in report.stages:
        if stage.skipped:
            continue
        if stage.stage == "tests" and stage.phases:
            for name, ms in stage.phases.items():
                parts[name] = parts.get(name, 0.0) + ms
        else:
            parts[stage.stage] = parts.get(stage.stage, 0.0) + stage.duration_ms
    parts["other"] = report.duration_ms - sum(v for k, v in parts.items() if k not in ("apply", "restore"))
    return {k: round(v, 2) for k, v in parts.items()}


def _median(xs: list[float]) -> float:
    return round(statistics.median(xs), 1) if xs else 0.0


def _p90(xs: list[float]) -> float:
    return round(sorted(xs)[min(len(xs) - 1, int(0.9 * len(xs)))], 1) if xs else 0.0


def _copy(repo: Path, dest: Path) -> None:
    shutil.copytree(
        repo,
        dest,
        ignore=lambda d, names: [n for n in names if n in _SKIP_DIRS or n.endswith(".egg-info")],
        symlinks=True,
    )


def _timed(
    argv: list[str], cwd: Path, env: dict[str, str], timeout_s: float = 600
) -> tuple[float, int | None, str]:
    """The command's wall time in ms, its exit code (None when it ran past `timeout_s`: killed, with
    whatever it started) and its output."""
    start = time.perf_counter()
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(
            argv, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            code: int | None = proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            kill_group(proc)
            code = None
        elapsed = (time.perf_counter() - start) * 1000
        out.seek(0)
        text = out.read().decode(errors="replace")
    return elapsed, code, text


def _failing(output: str) -> frozenset[str]:
    """The tests a `pytest -rfE` run names as failed or in error (its short summary)."""
    return frozenset(
        line.split(" ")[1]
        for line in output.splitlines()
        if line.startswith(("FAILED ", "ERROR ")) and " " in line
    )


def candidate_mutants(
    project: Path, seed: int, is_test_file: Callable[[str], bool]
) -> list[tuple[str, str, str]]:
    """(path, description, mutated source) for every source file, in a seeded deterministic order."""
    found = []
    for file in sorted(project.rglob("*.py")):
        rel = file.relative_to(project).as_posix()
        if is_test_file(rel) or any(p in _SKIP_DIRS for p in rel.split("/")):
            continue
        if rel in ("setup.py", "conftest.py") or rel.startswith(("docs/", "doc/", "benchmarks/")):
            continue
        source = file.read_text(encoding="utf-8")
        lines = range(1, source.count("\n") + 2)
        found += [(rel, m.description, m.source) for m in generate_mutants(source, list(lines))]
    random.Random(seed).shuffle(found)
    return found


def _write_later(file: Path, text: str) -> None:
    """Write `text` with a modification time at least a second after the file's last one: bytecode
    is checked against the whole second and the size, which a one-token mutant often keeps."""
    last = file.stat().st_mtime_ns
    file.write_text(text, encoding="utf-8")
    at = max(time.time_ns(), last + 1_000_000_000)
    os.utime(file, ns=(at, at))


class _Hung(Exception):
    """The full suite hung on this mutant (a loop that never ends): no naive time to compare with."""


@dataclass(frozen=True)
class _NaiveSide:
    """The baseline: the commands a user runs (pytest first), in the user's environment, and testmon's."""

    cwd: Path
    env: dict[str, str]
    cmds: list[list[str]]
    testmon: list[str] | None
    timeout_s: float  # ten times the suite's warm run: a mutant that makes the suite hang is left out
    # What fails in the unmutated copy (a test the copy cannot pass): a mutant is caught by a test
    # that fails besides these, never by the exit status alone.
    failing: frozenset[str] = frozenset()

    def run(self) -> tuple[float, bool | None]:
        """Time every command once: the total ms, and whether the full suite failed a test it passes
        unmutated (None: it hung)."""
        naive_ms, caught = 0.0, False
        for argv in self.cmds:
            ms, code, output = _timed(argv, self.cwd, self.env, self.timeout_s)
            if code is None:
                return ms, None
            naive_ms += ms
            if argv is self.cmds[0] and code != 0:
                caught = caught or bool(_failing(output) - self.failing) or code not in (0, 1)
        return naive_ms, caught


def _naive_side(
    project: Path, interpreter: str, toolchain: Toolchain, *, types: bool, progress: Callable[[str], None]
) -> _NaiveSide:
    """The naive baseline's commands, each run once first so that its caches are warm, as a user's are."""
    user_env = dict(os.environ)
    naive_cmds = [
        [interpreter, "-m", "pytest", "-q", "-rfE", "-p", "no:cacheprovider"],
        [ruff_bin(), "check", "."],
    ]
    if types:
        naive_cmds.append([interpreter, "-m", "mypy", "."])
        subprocess.run(naive_cmds[-1], cwd=project, env=user_env, capture_output=True, check=False)
    testmon = None
    if toolchain.has_module("testmon"):
        testmon = [interpreter, "-m", "pytest", "-q", "--testmon"]
        progress("testmon: building its database")
        subprocess.run(testmon, cwd=project, env=user_env, capture_output=True)
    warm = [_timed(argv, project, user_env) for argv in naive_cmds]  # caches warm, as a user's are
    failing = _failing(warm[0][2])
    if failing:
        progress(f"the unmutated copy fails {len(failing)} tests; only other failures catch a mutant")
    return _NaiveSide(project, user_env, naive_cmds, testmon, max(30.0, warm[0][0] / 100), failing)


def _measure_mutant(
    path: str,
    description: str,
    mutated: str,
    workspace: Workspace,
    verifier: Verifier,
    state: Observation,
    naive: _NaiveSide,
) -> MutantResult | None:
    """Time one mutant on both sides, then put the workspace back; None when the full suite misses it.
    The naive side runs on its own copy, so its caches (ruff's, bytecode) never enter the workspace."""
    naive_file = naive.cwd / path
    original = naive_file.read_text(encoding="utf-8")
    _write_later(naive_file, mutated)
    try:
        naive_ms, caught = naive.run()
        testmon_ms = _timed(naive.testmon, naive.cwd, naive.env)[0] if caught and naive.testmon else None
    finally:
        _write_later(naive_file, original)
    if caught is None:
        raise _Hung
    if not caught:
        return None
    change = FileChange(path, workspace.read(path), mutated)
    applying = time.perf_counter()
    workspace.apply([change])
    apply_ms = (time.perf_counter() - applying) * 1000
    try:
        report = verifier.detect(Candidate("bench", description, (change,)), state)
        # What the loop pays per candidate besides the stages: putting the state back.
        restore_start = time.perf_counter()
        workspace.rollback([change])
        verifier.restored(workspace.take_foreign())
        restore_ms = (time.perf_counter() - restore_start) * 1000
        profile = rejection_parts(report, apply_ms, restore_ms)
        report.duration_ms += restore_ms
        return MutantResult(
            path,
            description,
            report.duration_ms,
            naive_ms,
            testmon_ms,
            detected=not report.accepted,
            stage=report.failed_stage,
            stage_ms={s.stage: round(s.duration_ms, 2) for s in report.stages if not s.skipped},
            profile=profile,
        )
    finally:
        workspace.rollback([change])


def _measure_accept(
    result: MutantResult, mutated: str, workspace: Workspace, verifier: Verifier, state: Observation
) -> None:
    """Make the mutant the accepted state (observed by a full fresh run), verify the edit that undoes
    it as the loop does, then put the original back as the accepted state."""
    mutant = FileChange(result.path, workspace.read(result.path), mutated)
    original = FileChange(mutant.path, mutant.after, mutant.before)
    workspace.apply([mutant])
    workspace.capture()
    try:
        suite = verifier.tools.gate.check(Scope(timeout_s=verifier.budgets.gate_timeout_s))
        broken = state.overlay(suite)
        workspace.apply([original])
        report = verifier.verify(
            Candidate("bench", "undo the mutant", (original,)), broken, workspace.restore
        )
        workspace.rollback([original])
        result.accept_ms, result.accepted, result.accept_reason = (
            report.duration_ms,
            report.accepted,
            report.reason,
        )
        result.accept_units = report.tests_run / max(1, len(state.tests))
        result.accept_stage_ms = {s.stage: round(s.duration_ms, 2) for s in report.stages if not s.skipped}
    finally:
        workspace.apply([original])
        workspace.capture()
        verifier.restored(workspace.take_foreign())  # as the loop does once the state is put back


def _verifier(toolchain: Toolchain, types: bool, semantic: bool) -> Verifier:
    """The loop's verifier, with the plausibility, API and format stages on or (to time them) off."""
    settings = VerifySettings(
        types=types,
        plausibility="reject" if semantic else "off",
        api_changes=not semantic,
        formatting=semantic,
    )
    return Verifier(toolchain, settings)


def _rejection_pass(
    bench: VerifyBench,
    mutants: int,
    seed: int,
    workspace: Workspace,
    verifier: Verifier,
    state: Observation,
    naive: _NaiveSide,
    progress: Callable[[str], None],
) -> list[str]:
    """Time the first `mutants` caught mutants back to back (into `bench`); their mutated texts."""
    texts = []
    for path, description, mutated in candidate_mutants(workspace.project, seed, verifier.is_test_file):
        if len(bench.results) >= mutants:
            break
        bench.tried += 1
        try:
            result = _measure_mutant(path, description, mutated, workspace, verifier, state, naive)
        except _Hung:
            bench.hung += 1
            progress(f"{path}: {description}: the full suite hung past {naive.timeout_s:.0f} s; left out")
            continue
        if result is None:
            continue
        bench.results.append(result)
        texts.append(mutated)
        progress(
            f"{len(bench.results)}/{mutants} {path}: {description} · ralph {result.ralph_ms:.0f} ms "
            f"({result.stage or 'MISSED'}) · naive {result.naive_ms:.0f} ms"
        )
    return texts


def bench_verify(
    repo: Path,
    *,
    mutants: int = 30,
    seed: int = 0,
    python: str | None = None,
    sandbox: bool = True,
    semantic: bool = True,
    progress: Callable[[str], None] = lambda _: None,
) -> VerifyBench:
    """Measure staged verification on `mutants` caught mutants of `repo` (copied; never modified)."""
    if not repo.is_dir():
        raise RalphError(f"{repo}: no such directory")
    with tempfile.TemporaryDirectory(prefix="ralph-bench-") as tmp:
        project = Path(tmp) / "project"
        _copy(repo, project)
        workspace = Workspace(project)
        interpreter = find_python(repo, repo, python)
        scratch = Path(tmp) / "scratch"
        scratch.mkdir()
        chosen = "bwrap" if sandbox else "local"
        isolation = select_sandbox(chosen, project, [scratch])
        checker = select_sandbox(chosen, project, [], workspace_writable=False)
        toolchain = Toolchain(
            interpreter,
            isolation,
            workspace.project,
            scratch=scratch,
            checker=checker,
            root=project,
            user_root=repo.resolve(),  # the gate shows the copy there, as the loop's does
        )
        types = mypy_configured(project)
        verifier = _verifier(toolchain, types, semantic)
        bench = VerifyBench(str(repo), interpreter, types=types, sandbox=isolation.name, semantic=semantic)
        try:
            start = time.perf_counter()
            progress("baseline: full suite with per-test coverage")
            state, _ = verifier.baseline()
            bench.baseline_s = time.perf_counter() - start
            naive_copy = Path(tmp) / "naive"
            _copy(project, naive_copy)
            naive = _naive_side(naive_copy, interpreter, toolchain, types=types, progress=progress)
            workspace.capture()  # as the loop does: each candidate starts from exactly this state
            mutated = _rejection_pass(bench, mutants, seed, workspace, verifier, state, naive, progress)
            # The accept path after every rejection, as in the loop, where rejected candidates follow
            # one another from the same state (and the warm runner readies each next one).
            for i, result in enumerate(bench.results, 1):
                _measure_accept(result, mutated[i - 1], workspace, verifier, state)
                progress(f"accept {i}/{len(bench.results)} {result.path}: {result.accept_ms:.0f} ms")
        finally:
            verifier.close()
            isolation.close()
            checker.close()
    return bench
