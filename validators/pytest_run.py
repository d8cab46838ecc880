"""Stage 3 and the regression gate: run pytest in the target's interpreter and read per-test outcomes."""

from __future__ import annotations

import json
import re
import subprocess
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

from ralph.domain.candidate import PROTECTED_TESTS, is_protected
from ralph.domain.errors import RalphError
from ralph.domain.results import ProcessResult, Scope, StageResult, TestResult
from ralph.domain.score import is_under
from ralph.sandboxes.local import ScratchDir
from ralph.validators.selection import CoverageMap
from ralph.validators.toolchain import Toolchain, project_relative
from ralph.validators.warm import WarmRunner

# pytest exit codes: 0 all passed, 1 some failed, 5 none collected; anything else means it could not run.
_RAN = (0, 1)
_NO_TESTS = 5
_USAGE_ERROR = 4  # (pytest refused its arguments: a test id it cannot find, say)
_INTERRUPTED = 2


class PytestValidator:
    name = "tests"

    def __init__(
        self,
        toolchain: Toolchain,
        name: str = "tests",
        warm: WarmRunner | None = None,
        test_timeout_s: float = 60.0,
        workers: int = 0,
    ) -> None:
        self.toolchain = toolchain
        self.name = name
        self.warm = warm
        self.test_timeout_s = test_timeout_s  # one test's limit (our plugin fails it, the run goes on)
        self.workers = workers  # pytest-xdist workers for a run of the whole suite (0: one process)
        self.last_coverage: CoverageMap = {}
        # The project's files whose changes to pytest's machinery are its own (its tests, conftests
        # and plugins: the verifier sets the policy's); None: everything (the baseline's run, or a
        # project that allows the harness rule).
        self.trusted: tuple[str, ...] | None = PROTECTED_TESTS
        # What the baseline's run changed in pytest's machinery, and how: the project's own (the
        # verifier sets it); what the last run changed.
        self.known: frozenset[tuple[str, str]] = frozenset()
        self.last_changes: frozenset[tuple[str, str]] = frozenset()
        # Whether pytest refused the last run's arguments (no verdict on the candidate either way).
        self.last_refused = False
        # Hears "tests k/N" while a run goes on, and a test nearing its time limit (long runs: the
        # baseline, a background gate).
        self.progress: Callable[[str], None] | None = None

    def check(
        self,
        scope: Scope,
        *,
        coverage: bool = False,
        exitfirst: bool = False,
        failed_first: Sequence[str] = (),
        words: Sequence[str] = (),
        near: Sequence[str] = (),
        stop_on_pass: bool = False,
        guard: Collection[str] = (),
        known: Collection[str] = (),
    ) -> StageResult:
        """Run `scope.tests` (all when None). Requested tests that report nothing count as errors,
        except after an early stop: with `exitfirst` at the first failing test, with `stop_on_pass`
        at the first that passes (is any of these failing tests fixed?), with `guard` at the first
        failure of one of those tests (a regression: the verdict is known). The tests in
        `failed_first`, then those in `near`, those named after one of the `words` first, run before
        the others. With `known` (the state's tests), a class all of whose tests are requested is
        asked for as the class (`compact_node_ids`)."""
        start = time.perf_counter()
        project = self.toolchain.project.resolve()
        asked = list(scope.tests or ())
        args = compact_node_ids(asked, known) if known and self.warm is not None else asked
        with ScratchDir(self.toolchain.scratch, "ralph-pytest-") as tmp:
            first = _order(failed_first, words, near, asked if args != asked else ())
            env = self._run_env(Path(tmp.path), project, scope, coverage, first)
            env |= self._stops(Path(tmp.path), stop_on_pass, guard, end_at_failure=exitfirst)
            watch = self._watch(tmp, scope, env)
            sent = time.time()
            try:
                workers = self.workers if scope.tests is None and not exitfirst else 0
                run = self._run(_pytest_args(project, exitfirst, workers), scope, env, exitfirst, args)
            finally:
                if watch is not None:
                    watch.stop()
            tests, end, unreadable, failing_records = _read_report(tmp, project, self._outside)
            if coverage:
                self.last_coverage = _read_coverage(tmp.read("coverage.json"), project, self._outside)
        elapsed = (time.perf_counter() - start) * 1000
        stop = _asked_stop(end, stop_on_pass, guard)
        if stop is not None and run.returncode == _INTERRUPTED:
            # Our early stop, not a crash, only if the report shows its cause: the plugin's flags live
            # in the candidate's process, so a stop without that cause gives no verdict.
            if not _stop_shown(stop, tests, set(guard)):
                forged = f"pytest stopped early ({stop}) with nothing to show for it"
                return StageResult(self.name, ok=False, duration_ms=elapsed, detail=forged, error=forged)
            run = replace(run, returncode=1 if failing_records else 0)
            end = {**(end or {}), "exitstatus": run.returncode, "shouldstop": True}
        error = _no_verdict(
            run, end, unreadable, tests, failing_records, scope, exitfirst, self.trusted, self.known, workers
        )
        self.last_changes = harness_changes(end) or frozenset()  # (the baseline's: `known` from then)
        self.last_refused = error is not None and run.returncode == _USAGE_ERROR
        stopped_early = (exitfirst and any(t.failing for t in tests)) or stop is not None
        result = self._result(tests, scope, run, error, elapsed, stopped_early, stop)
        if workers and error is None:
            result.detail += f" (across {workers} pytest-xdist workers)"
        result.phases = phases(end, sent, elapsed)
        return result

    def _watch(self, tmp: ScratchDir, scope: Scope, env: dict[str, str]) -> Watch | None:
        """With `progress`, a watch of the run's progress file, started (its path set in `env`)."""
        if self.progress is None:
            return None
        env["RALPH_PROGRESS"] = str(Path(tmp.path) / "progress.jsonl")
        watch = Watch(tmp, self.progress, self._test_limit(scope))
        watch.start()
        return watch

    def _stops(
        self, tmp: Path, stop_on_pass: bool, guard: Collection[str], *, end_at_failure: bool = False
    ) -> dict[str, str]:
        """The settings of the early stops asked for: at the first test that passes, at the first
        failure of a `guard` test (their list in a file); with `end_at_failure` (a fail-fast run,
        whose failure is the verdict), the process ends at its closing record once a test failed."""
        env = {"RALPH_STOP_ON_PASS": "1"} if stop_on_pass else {}
        if end_at_failure and not stop_on_pass:
            env["RALPH_END_AT_FAILURE"] = "1"
        if guard:  # (node ids as the tests name them: a parameter may hold the project's path)
            (tmp / "guard.json").write_text(json.dumps(sorted(map(self._inside, guard))))
            env["RALPH_GUARD"] = str(tmp / "guard.json")
        return env

    def _inside(self, text: str) -> str:
        """A path or node id as the tests see it (the sandbox may show the workspace elsewhere)."""
        return self.toolchain.sandbox.inside(text)

    def _outside(self, text: str) -> str:
        """A path or node id the tests wrote, as the host names it (`_inside` undone)."""
        return self.toolchain.sandbox.outside(text)

    def _result(
        self,
        tests: list[TestResult],
        scope: Scope,
        run: ProcessResult,
        error: str | None,
        elapsed: float,
        stopped_early: bool,
        stop: str | None,
    ) -> StageResult:
        """The stage's result: requested tests that reported nothing (unless the run stopped early)
        count as errors."""
        reported = {t.nodeid for t in tests}
        for nodeid in () if stopped_early else scope.tests or ():
            # (a test id, a file, or a directory: `.` or a conftest's, from the import graph)
            if nodeid not in reported and not any(nodeid == "." or is_under(r, nodeid) for r in reported):
                reason = error or "not run: the test was not collected (an import or collection error?)"
                tests.append(TestResult(nodeid, "error", message=reason))
        if error is None and run.returncode == _NO_TESTS and scope.tests is None:
            detail = "no tests collected"
        else:
            detail = (
                error or f"{sum(not t.failing for t in tests)} ok, {sum(t.failing for t in tests)} failing"
            )
        if stop is not None and error is None:
            detail += f" (stopped at the first {stop})"
        ok = error is None and not any(t.failing for t in tests)
        result = StageResult(self.name, ok=ok, duration_ms=elapsed, detail=detail, tests=tests, error=error)
        result.stopped_early = stopped_early and error is None
        return result

    def _test_limit(self, scope: Scope) -> float:
        """One test's time limit in this run: ours, the scope's when lower, never past the run's."""
        return min(self.test_timeout_s, scope.test_timeout_s or scope.timeout_s, scope.timeout_s)

    def _run_env(
        self,
        tmp: Path,
        project: Path,
        scope: Scope,
        coverage: bool,
        first: Mapping[str, Sequence[str]],
    ) -> dict[str, str]:
        """The settings our report plugin reads: where to write the report and coverage, limits, order."""
        env = {
            "RALPH_REPORT": str(tmp / "report.jsonl"),
            "RALPH_COVERAGE_ROOT": str(project) + "/",
            "RALPH_TEST_TIMEOUT": str(self._test_limit(scope)),
        }
        if coverage:
            env["RALPH_COVERAGE"] = str(tmp / "coverage.json")
        if any(first.values()):
            env["RALPH_FIRST"] = json.dumps(first)
        return env

    def _run(
        self, args: list[str], scope: Scope, env: dict[str, str], exitfirst: bool, selected: list[str]
    ) -> ProcessResult:
        """Run pytest on the scope's tests (as `selected` names them), in the warm runner when there
        is one, else a fresh process."""
        if self.warm is not None:
            # Fail-fast runs of selected tests come once per candidate: the worker readies the next.
            spare = exitfirst and bool(selected)
            return self.warm.run(args, selected, env=env, timeout_s=scope.timeout_s, spare=spare)
        argv = [self.toolchain.python, "-m", "pytest", *args, *selected]
        return self.toolchain.run(argv, env=self.toolchain.python_env(env), timeout_s=scope.timeout_s)

    def baseline(self, timeout_s: float, coverage: bool = True, protected: Sequence[str] = ()) -> StageResult:
        """The whole suite (with per-test coverage unless cached); a suite that cannot run is bad input,
        and so is a test file no candidate may edit (`protected`) that pytest could not load because
        it does not parse: no run could fix it."""
        trusted, self.trusted = self.trusted, None  # (the starting state's code is the user's)
        try:
            result = self.check(Scope(timeout_s=timeout_s), coverage=coverage)
        finally:
            self.trusted = trusted
        broken = unparsable_tests(result, protected, self.toolchain.project, python=self.toolchain.python)
        if broken is not None:
            where = self.toolchain.user_project / str(broken.filename)
            raise RalphError(
                f"{where}:{broken.lineno}: {type(broken).__name__}: {broken.msg} (a test file that does not "
                "parse: ralph edits no tests, so no candidate could fix it; fix it, or pass --allow-test-edits)"
            )
        if result.detail == "no tests collected":
            raise RalphError(
                f"no tests found in {self.toolchain.user_project} (pytest collected nothing; ralph judges "
                "a fix by the project's tests: add some, e.g. tests/test_*.py)"
            )
        if result.error is not None:
            raise RalphError(f"the test suite could not run at baseline: {result.error.splitlines()[0]}")
        return result


_NAMED_FILE = re.compile(r'File "([^"]+)", line \d+')
_UNPARSABLE = ("SyntaxError", "IndentationError", "TabError")


def _order(
    failed_first: Sequence[str], words: Sequence[str], near: Sequence[str], asked: Sequence[str]
) -> dict[str, list[str]]:
    """What $RALPH_FIRST tells our plugin of the tests' order; `asked`: the ids asked for, where the
    arguments name some by their class (those rank as asked by id, not the arguments)."""
    first = {"tests": list(failed_first), "words": list(words), "near": list(near)}
    if asked and any(first.values()):
        first["asked"] = list(asked)
    return first


def compact_node_ids(asked: Sequence[str], known: Collection[str]) -> list[str]:
    """`asked` (node ids), each class all of whose `known` tests are asked for (and more than one)
    named by the class instead, where its first test was: pytest reads each argument on its own,
    walking the tree down to it (a class's 72 tests given one by one cost 11 ms more to collect than
    their 22 classes, docs/measurements.md), and collects a class whole either way. The same tests
    run; a test the state does not know yet (a parametrization the edit added) under such a class
    runs too. Anything else (a file, a function of a module, a test of a class not asked for whole)
    is kept as it is."""
    wanted = _by_class(asked)
    files = tuple({c.partition("::")[0] + "::" for c in wanted})  # (the state's other tests: not read)
    under = _by_class(nodeid for nodeid in known if nodeid.startswith(files)) if files else {}
    whole = {c for c, ids in wanted.items() if len(ids) > 1 and ids == under.get(c)}
    compact: list[str] = []
    placed: set[str] = set()
    for nodeid in asked:
        owner = _class_of(nodeid)
        arg = owner if owner in whole else nodeid
        if arg not in placed:
            placed.add(arg)
            compact.append(arg)
    return compact


def _by_class(nodeids: Iterable[str]) -> dict[str, set[str]]:
    """The node ids of tests in a class, by `file::Class` (`_class_of`)."""
    found: dict[str, set[str]] = {}
    for nodeid in nodeids:
        if (owner := _class_of(nodeid)) is not None:
            found.setdefault(owner, set()).add(nodeid)
    return found


def _class_of(nodeid: str) -> str | None:
    """`file::Class` of a test in a class (`file::Class::test[params]`, or deeper), else None."""
    parts = nodeid.split("[", 1)[0].split("::")  # (a parametrization may hold "::")
    return "::".join(parts[:2]) if len(parts) >= 3 and parts[0] and parts[1] else None


def unparsable_tests(
    result: StageResult, protected: Sequence[str], project: Path, python: str | None = None
) -> SyntaxError | None:
    """The first file of `protected` that pytest could not load for a syntax error (a test module it
    could not collect, a conftest.py it could not import), as the parser says it (`filename` relative
    to the project); None when there is none. With `python`, the project's interpreter must refuse it
    too (a newer Python parses what ours does not: the syntax error is then in what the test imports)."""
    named = [
        t.nodeid
        for t in result.tests
        if t.outcome == "error" and "::" not in t.nodeid and any(e in t.message for e in _UNPARSABLE)
    ]
    if result.error is not None and any(e in result.error for e in _UNPARSABLE):
        named += [project_relative(p, project.resolve()) for p in _NAMED_FILE.findall(result.error)]
    for path in dict.fromkeys(named):
        if Path(path).is_absolute() or not path.endswith(".py") or not is_protected(path, protected):
            continue
        try:
            compile((project / path).read_bytes(), path, "exec", dont_inherit=True)
        except SyntaxError as exc:  # (IndentationError and TabError are SyntaxErrors)
            if python is None or not _parses_in(python, project / path):
                return exc
        except (OSError, ValueError):  # unreadable, or a null byte: pytest's to report
            continue
    return None


def _parses_in(python: str, path: Path) -> bool:
    """Whether `python` compiles the file (it runs none of it)."""
    code = "import sys; compile(open(sys.argv[1], 'rb').read(), sys.argv[1], 'exec', dont_inherit=True)"
    try:
        proc = subprocess.run([python, "-I", "-c", code, str(path)], capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return False
    return proc.returncode == 0


def gate_tests(toolchain: Toolchain, warm: bool, test_timeout_s: float, workers: int = 0) -> PytestValidator:
    """The gate's test runner. Never the warm worker a candidate's tests ran beside (that one has
    imported the project's third-party modules, before any conftest could set them up): with `warm`,
    a worker of its own that has imported pytest and its builtin plugins alone, what `python -m
    pytest` imports before it reads the project's settings (installed plugins load in each child, as
    in a fresh run, so `-p no:NAME` and the project's own plugin are as there), so a fork of it runs
    the suite as a fresh process would, less the ~0.2 s of starting Python and importing pytest (no
    child is readied ahead for it); else a fresh process. Either way on a workspace put back to
    exactly the state it judges, shown at the user's repository path with the user's TMPDIR where
    the sandbox can (`Toolchain.as_the_user`): the gate judges the candidate as the user's run would
    see it. With `workers` (`gate_workers.gate_workers`), the suite runs across that many pytest-xdist
    workers, subprocesses of that child in the same sandbox; our plugin accounts for every test they
    collected, and a worker lost gives no verdict."""
    toolchain = toolchain.as_the_user()
    toolchain.make_mount_points()  # (built before the workspace's state is captured: see ralph.session)
    runner = WarmRunner(toolchain, plugins=False) if warm else None
    return PytestValidator(
        toolchain, name="gate", warm=runner, test_timeout_s=test_timeout_s, workers=workers
    )


def _pytest_args(project: Path, exitfirst: bool, workers: int = 0) -> list[str]:
    """pytest's options: our report plugin, no cache, quiet, every collectable module run, and with
    `workers` the pytest-xdist options (`_XDIST`)."""
    return [
        "-p",
        "ralph_pytest_report",
        "-p",
        "no:cacheprovider",
        f"--rootdir={project}",
        "-q",
        # Our plugin writes each failure's message itself: pytest's formatting is slow.
        "--tb=no",
        "--no-header",
        # One module that fails to import must not hide the outcome of every other test.
        "--continue-on-collection-errors",
        *(["-x"] if exitfirst else []),
        *([f"--numprocesses={workers}", *_XDIST] if workers else []),
    ]


# Each test file's tests in one worker, in pytest's order (what the baseline's single process ran of
# them together: a test that depends on an earlier one of its file still finds it run); and a worker
# that crashes ends the run (its verdict is known: no verdict), rather than being replaced: xdist would
# give the crashed file's tests, the culprit first, to one replacement after another (and with
# loadfile can hang).
_XDIST = ("--dist=loadfile", "--max-worker-restart=0")


def _asked_stop(end: dict[str, Any] | None, stop_on_pass: bool, guard: Collection[str]) -> str | None:
    """The early stop the closing record names, when it is one this run asked for."""
    stop = end.get("stopped") if end else None
    asked = {"pass": stop_on_pass, "regression": bool(guard)}
    return stop if isinstance(stop, str) and asked.get(stop) else None


def _stop_shown(stop: str, tests: list[TestResult], guard: set[str]) -> bool:
    """Whether the report shows why the run stopped early: a test that passed (asked: is any fixed?),
    or a guarded test that fails (a regression)."""
    if stop == "pass":
        return any(t.outcome == "passed" for t in tests)
    return any(t.failing and t.nodeid in guard for t in tests)


def _tail(output: str, lines: int = 8) -> str:
    return " | ".join(line for line in output.strip().splitlines()[-lines:] if line.strip())


def harness_changes(end: Mapping[str, Any] | None) -> frozenset[tuple[str, str]] | None:
    """What the report plugin saw changed in pytest's machinery, as `(what, where the code that
    changed it lies)`: the project's file, "" an installed pytest plugin's, "!" pytest's or another
    installed package's, "?" unknown; None where the report does not say."""
    entries = (end or {}).get("tampered")
    if not isinstance(entries, list):
        return None
    found = set()
    for entry in entries:
        what, origin = [*entry, "?", "?"][:2] if isinstance(entry, list) else (str(entry), "?")
        found.add((str(what), str(origin)))
    return frozenset(found)


def _harness_changed(
    changes: Collection[tuple[str, str]] | None,
    trusted: Sequence[str] | None,
    known: Collection[tuple[str, str]] = (),
) -> str | None:
    """What changed in pytest's machinery that neither an installed pytest plugin nor the project's
    tests (`trusted` globs; None: everyone, as at the baseline, whose code is the user's) did, nor
    the baseline's run saw done the same way (`known`: a pytest plugin's own repository, whose code
    under test is a plugin); None when nothing is left. `changes`: `harness_changes` of the report."""
    if changes is None:
        return "the report did not say"
    left = []
    for what, origin in sorted(changes):
        if origin == "" or trusted is None or (what, origin) in known or is_protected(origin, trusted):
            continue
        by = {"?": "", "!": ", by pytest's or an installed package's code"}.get(origin, f", by {origin}")
        left.append(f"{what}{by}")
    return "; ".join(left[:3]) if left else None


def _no_verdict(
    run: ProcessResult,
    end: dict[str, Any] | None,
    unreadable: bool,
    tests: list[TestResult],
    failing_records: int,
    scope: Scope,
    exitfirst: bool,
    trusted: Sequence[str] | None = (),
    known: Collection[tuple[str, str]] = (),
    workers: int = 0,
) -> str | None:
    """Why this run's outcomes cannot be trusted, or None: a run that timed out, died, stopped early,
    left a torn or missing report, or whose report disagrees with pytest's own exit status and count.
    A run across `workers` must account for them in its closing record, checked before anything else
    (one whose every worker went down says it collected nothing)."""
    if end is not None and not unreadable and (gap := _workers_accounted(end, workers)) is not None:
        return gap
    if run.error:
        return run.error
    if run.timed_out:
        return f"timed out after {scope.timeout_s:.0f}s"
    if run.returncode < 0 or run.returncode >= 128:
        signal = -run.returncode if run.returncode < 0 else run.returncode - 128
        return f"the test process died (signal {signal}): " + _tail(run.output, 3)
    if run.returncode == _NO_TESTS and not tests:
        return None if scope.tests is None else "pytest collected none of the requested tests"
    if run.returncode not in _RAN:
        return f"pytest could not run (exit {run.returncode}): " + _tail(run.output)
    if unreadable:
        return "the test report is torn or was replaced (a process killed mid-write, or tampering)"
    if end is None:
        return "pytest ended without its final report (killed, or os._exit in the code under test)"
    if (changed := _harness_changed(harness_changes(end), trusted, known)) is not None:
        return f"pytest's harness was changed while the tests ran ({changed})"
    if end.get("exitstatus") != run.returncode:
        return f"pytest's exit status {run.returncode} disagrees with its report ({end.get('exitstatus')})"
    failing = any(t.failing for t in tests)
    if failing and run.returncode == 0:
        return "pytest exited 0 but its report has failures"
    if end.get("failed_seen") != failing_records:
        return f"the report's failures ({failing_records}) disagree with pytest's ({end.get('failed_seen')})"
    items = {t.nodeid for t in tests if "::" in t.nodeid}
    collected = int(end.get("collected") or 0)
    stopped = bool(end.get("shouldstop") or end.get("shouldfail"))
    if "xdist" in end and (unaccounted := workers_gap(end["xdist"], stopped)) is not None:
        return unaccounted
    if not (exitfirst and failing) and not stopped and len(items) < collected:
        return f"pytest collected {collected} tests but reported {len(items)}"
    return None


def _workers_accounted(end: dict[str, Any], workers: int) -> str | None:
    """Whether the closing record accounts for the run's test workers (ours, or the project's own
    `-n`), none lost before the early stop is known; one that asked for workers must have a record."""
    if "xdist" in end:
        return workers_gap(end["xdist"], stopped=True)
    return "a run across test workers reported none of them" if workers else None


def workers_gap(record: object, stopped: bool) -> str | None:
    """Why a run across pytest-xdist workers leaves tests unaccounted for, from the closing record's
    `xdist` entry: a worker's internal error (xdist's controller goes on and exits 0), a worker that
    went down without its summary (crashed, killed, `os._exit` in a test), or tests the workers
    collected that never reported (unless the run stopped early, as asked); None when every worker
    and every test is accounted for."""
    if not isinstance(record, dict):
        return "the report's record of the test workers is unreadable"
    lists = [record.get(k) for k in ("workers_lost", "crashed", "internal_errors", "first_unreported")]
    unreported = record.get("unreported")
    if not all(isinstance(v, list) for v in lists) or type(unreported) is not int:
        return "the report's record of the test workers is unreadable"
    lost, crashed, internal, first = (cast(list[object], v) for v in lists)
    if internal:
        return f"a test worker had an internal error ({internal[0]})"
    if lost:
        running = f", running {', '.join(map(str, crashed[:3]))}" if crashed else ""
        return f"a test worker went down without its report ({'; '.join(map(str, lost[:3]))}){running}"
    if unreported and not stopped:
        named = ", ".join(map(str, first[:5]))
        return f"{unreported} of the tests the workers collected reported nothing ({named})"
    return None


class Watch(threading.Thread):
    """Reads a running pytest's progress file (our plugin writes what it collected and each test as
    it starts) twice a second and tells `show` how far it is: "tests 120/319", and the test that has
    run for half its time limit or more. What the file says decides nothing: it is only shown."""

    def __init__(self, tmp: ScratchDir, show: Callable[[str], None], limit_s: float) -> None:
        super().__init__(daemon=True, name="ralph-progress")
        self.tmp, self.show, self.limit_s = tmp, show, limit_s
        self._done = threading.Event()
        self._current: str | None = None
        self._since = time.monotonic()

    def stop(self) -> None:
        self._done.set()
        self.join(timeout=5)

    def run(self) -> None:
        while not self._done.wait(0.5):
            data = self.tmp.read("progress.jsonl", limit=1 << 20)
            if data:
                self.show(self.line(data.decode("utf-8", errors="replace")))

    def line(self, text: str) -> str:
        collected, started, current = None, 0, None
        for line in text.splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict) and isinstance(record.get("collected"), int):
                collected = record["collected"]
            elif isinstance(record, dict) and isinstance(record.get("started"), str):
                started, current = started + 1, " ".join(record["started"][:200].split())
        if current != self._current:
            self._current, self._since = current, time.monotonic()
        shown = f"tests {max(0, started - 1)}/{collected}" if collected else "collecting"
        if collected:
            filled = min(20, round(20 * max(0, started - 1) / max(collected, 1)))
            shown += " " + "▰" * filled + "▱" * (20 - filled)
        running = time.monotonic() - self._since
        if current is not None and running >= max(5.0, self.limit_s / 2):
            shown += f" · {current} running for {running:.0f} s (its limit: {self.limit_s:.0f} s)"
        return shown


def phases(end: dict[str, Any] | None, sent: float, elapsed_ms: float) -> dict[str, float]:
    """Where a run's `elapsed_ms` went, from the clock the closing record gives (session start,
    collection finished, end) and when the request was `sent`: the start (a fork or spare, pytest's
    configuration), the collection, the tests, and the host's side. Empty when the record has no
    such clock or it is not in order (informative only: the candidate's process wrote it)."""
    clock = (end or {}).get("clock")
    if not isinstance(clock, list) or len(clock) != 3 or not all(isinstance(t, int | float) for t in clock):
        return {}
    start, collected, ended = (float(t) for t in clock)
    if not (start <= collected and sent <= collected <= ended) or (ended - sent) * 1000 > elapsed_ms:
        return {}
    begun = max(start, sent)  # (a spare child started its session before the request: off the path)
    spans = {"start": begun - sent, "collection": collected - begun, "tests": ended - collected}
    ms = {name: round(s * 1000, 2) for name, s in spans.items()}
    return {**ms, "host": round(elapsed_ms - sum(ms.values()), 2)}


def _read_report(
    tmp: ScratchDir, project: Path, outside: Callable[[str], str] = str
) -> tuple[list[TestResult], dict[str, Any] | None, bool, int]:
    """The outcomes, the closing record (None when missing), whether the report was unreadable, and
    how many of its records were failures; node ids and files as the host names them (`outside`)."""
    if not tmp.exists("report.jsonl"):
        return [], None, False, 0
    data = tmp.read("report.jsonl")
    if data is None:  # a FIFO, a link or something huge where the report should be
        return [], None, True, 0
    results: dict[str, TestResult] = {}
    end: dict[str, Any] | None = None
    unreadable = False
    failing_records = 0
    for line in data.decode("utf-8", errors="replace").splitlines():
        try:
            r = json.loads(line)
            if r.get("end") is True:
                end = r
                continue
            if end is not None:  # nothing comes after the closing record
                unreadable = True
            frames = tuple(
                (project_relative(outside(str(f[0])), project), int(f[1]), str(f[2]))
                for f in r.get("frames", [])
            )
            result = TestResult(
                outside(str(r["nodeid"])),
                str(r["outcome"]),
                float(r.get("duration", 0.0)),
                str(r.get("message", "")),
                frames,
            )
        except (ValueError, KeyError, TypeError, AttributeError, IndexError):
            unreadable = True  # a test that killed the interpreter mid-write, or a forged line
            continue
        failing_records += result.failing
        previous = results.get(result.nodeid)
        # Setup/teardown errors outrank a passing call phase.
        if (
            previous is None
            or result.failing
            or (previous.outcome == "passed" and result.outcome != "passed")
        ):
            results[result.nodeid] = result
    return list(results.values()), end, unreadable, failing_records


def _read_coverage(data: bytes | None, project: Path, outside: Callable[[str], str] = str) -> CoverageMap:
    try:
        raw = json.loads(data or b"{}")
    except ValueError:
        return {}
    if not isinstance(raw, dict):
        return {}
    return {
        outside(test): {project_relative(outside(f), project): lines for f, lines in files.items()}
        for test, files in raw.items()
    }
