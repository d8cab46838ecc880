"""Stage 3 and the regression gate: run pytest in the target's interpreter and read per-test outcomes."""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from ralph.errors import RalphError
from ralph.protocols import Scope
from validators.report import StageResult, TestResult
from validators.selection import CoverageMap
from validators.toolchain import Toolchain, project_relative
from validators.warm import WarmRunner

# pytest exit codes: 0 all passed, 1 some failed, 5 none collected; anything else means it could not run.
_RAN = (0, 1)
_NO_TESTS = 5


class PytestValidator:
    name = "tests"

    def __init__(
        self,
        toolchain: Toolchain,
        name: str = "tests",
        warm: WarmRunner | None = None,
        test_timeout_s: float = 60.0,
    ) -> None:
        self.toolchain = toolchain
        self.name = name
        self.warm = warm
        self.test_timeout_s = test_timeout_s  # one test's limit (our plugin fails it, the run goes on)
        self.last_coverage: CoverageMap = {}

    def check(
        self,
        scope: Scope,
        *,
        coverage: bool = False,
        exitfirst: bool = False,
        failed_first: Sequence[str] = (),
        words: Sequence[str] = (),
    ) -> StageResult:
        """Run `scope.tests` (all when None). Requested tests that report nothing count as errors,
        except after a failure with `exitfirst` (stop at the first failing test). The tests in
        `failed_first`, then those named after one of the `words`, run before the others."""
        start = time.perf_counter()
        project = self.toolchain.project.resolve()
        with tempfile.TemporaryDirectory(prefix="ralph-pytest-", dir=self.toolchain.scratch) as tmp:
            report_path = Path(tmp) / "report.jsonl"
            coverage_path = Path(tmp) / "coverage.json"
            env = {
                "RALPH_REPORT": str(report_path),
                "RALPH_COVERAGE_ROOT": str(project) + "/",
                "RALPH_TEST_TIMEOUT": str(min(self.test_timeout_s, scope.timeout_s)),
            }
            if coverage:
                env["RALPH_COVERAGE"] = str(coverage_path)
            if failed_first or words:
                env["RALPH_FIRST"] = json.dumps({"tests": list(failed_first), "words": list(words)})
            args = [
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
            ]
            selected = list(scope.tests or ())
            if self.warm is not None:
                # Fail-fast runs of selected tests come once per candidate: the worker readies the next.
                spare = exitfirst and bool(selected)
                run = self.warm.run(args, selected, env=env, timeout_s=scope.timeout_s, spare=spare)
            else:
                argv = [self.toolchain.python, "-m", "pytest", *args, *selected]
                run = self.toolchain.run(argv, env=self.toolchain.python_env(env), timeout_s=scope.timeout_s)
            tests = _read_report(report_path, project)
            if coverage and coverage_path.exists():
                self.last_coverage = _read_coverage(coverage_path, project)
        elapsed = (time.perf_counter() - start) * 1000
        detail = ""
        if run.timed_out:
            detail = f"timed out after {scope.timeout_s:.0f}s"
        elif run.returncode < 0:
            detail = f"the test process died (signal {-run.returncode}): " + _tail(run.output, 3)
        elif run.returncode == _NO_TESTS and scope.tests is None:
            detail = "no tests collected"
        elif run.returncode not in _RAN and not tests:
            detail = "pytest could not run: " + _tail(run.output)
        elif run.returncode not in (*_RAN, _NO_TESTS):  # partial results cannot be trusted
            detail = f"pytest stopped early (exit {run.returncode}): " + _tail(run.output, 3)
        reported = {t.nodeid for t in tests}
        stopped_early = exitfirst and any(t.failing for t in tests)
        for nodeid in () if stopped_early else scope.tests or ():
            if nodeid not in reported and not any(r.startswith(nodeid + "::") for r in reported):
                reason = detail or "not run: the test was not collected (an import or collection error?)"
                tests.append(TestResult(nodeid, "error", message=reason))
        ok = not detail and not any(t.failing for t in tests)
        summary = detail or f"{sum(not t.failing for t in tests)} ok, {sum(t.failing for t in tests)} failing"
        return StageResult(self.name, ok=ok, duration_ms=elapsed, detail=summary, tests=tests)

    def baseline(self, timeout_s: float, coverage: bool = True) -> StageResult:
        """The whole suite (with per-test coverage unless cached); a suite that cannot run is bad input."""
        result = self.check(Scope(timeout_s=timeout_s), coverage=coverage)
        if result.detail == "no tests collected":
            raise RalphError(f"no tests found in {self.toolchain.project.name} (pytest collected nothing)")
        if result.detail.startswith(("pytest could not run", "pytest stopped early", "timed out")):
            raise RalphError(f"the test suite could not run at baseline: {result.detail.splitlines()[0]}")
        return result


def _tail(output: str, lines: int = 8) -> str:
    return " | ".join(line for line in output.strip().splitlines()[-lines:] if line.strip())


def _read_report(path: Path, project: Path) -> list[TestResult]:
    if not path.exists():
        return []
    results: dict[str, TestResult] = {}
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            r = json.loads(line)
        except ValueError:
            continue  # a test that killed the interpreter mid-write
        frames = tuple((project_relative(f[0], project), int(f[1]), str(f[2])) for f in r.get("frames", []))
        result = TestResult(
            r["nodeid"], r["outcome"], float(r.get("duration", 0.0)), r.get("message", ""), frames
        )
        previous = results.get(result.nodeid)
        # Setup/teardown errors outrank a passing call phase.
        if (
            previous is None
            or result.failing
            or (previous.outcome == "passed" and result.outcome != "passed")
        ):
            results[result.nodeid] = result
    return list(results.values())


def _read_coverage(path: Path, project: Path) -> CoverageMap:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except ValueError:
        return {}
    return {
        test: {project_relative(f, project): lines for f, lines in files.items()}
        for test, files in raw.items()
    }
