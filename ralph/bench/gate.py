"""`ralph bench gate REPO`: the gate's wall time in one process and across pytest-xdist workers.

The gate as the loop runs it (`pytest_run.gate_tests`: a fork of its own warm worker, in bubblewrap,
the copy shown at the repository's path) on a copy of REPO, once per worker count in turn, round after
round (the machine's other load falls on every count alike), the workspace put back after each run as
the loop does; a first round warms the workers and the bytecode up and is not counted. Each count's
median wall time, and its ratio to the first count's (0: one process, no xdist).
"""

from __future__ import annotations

import statistics
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ralph.bench.verify import _copy
from ralph.config import usable_cores
from ralph.domain.errors import RalphError
from ralph.domain.results import Scope
from ralph.sandboxes import select_sandbox
from ralph.sandboxes.workspace import Workspace
from ralph.validators.gate_workers import gate_workers
from ralph.validators.pytest_run import PytestValidator, gate_tests
from ralph.validators.toolchain import Toolchain, find_python


@dataclass
class GateBench:
    repo: str
    python: str
    sandbox: str
    cores: int
    tests: int = 0
    times: dict[int, list[float]] = field(default_factory=dict)  # worker count -> each run's wall ms

    def summary(self) -> dict[str, Any]:
        """Each worker count's median, fastest and slowest run, and its speedup over the first count."""
        medians = {w: statistics.median(ms) for w, ms in self.times.items() if ms}
        base = next(iter(medians.values()), 0.0)
        return {
            "repo": self.repo,
            "python": self.python,
            "sandbox": self.sandbox,
            "cores": self.cores,
            "tests": self.tests,
            "workers": {
                w: {
                    "median_ms": round(medians[w], 1),
                    "min_ms": round(min(self.times[w]), 1),
                    "max_ms": round(max(self.times[w]), 1),
                    "runs": len(self.times[w]),
                    "speedup": round(base / medians[w], 2) if medians[w] else None,
                }
                for w in medians
            },
        }


def _timed_gate(validator: PytestValidator, workspace: Workspace, timeout_s: float) -> tuple[float, int]:
    """One whole-suite run: its wall ms and how many tests reported; the workspace put back after."""
    try:
        result = validator.check(Scope(timeout_s=timeout_s))
    finally:
        workspace.restore()
    if result.error is not None:
        raise RalphError(f"the gate gave no verdict on {validator.workers} workers: {result.error}")
    return result.duration_ms, len(result.tests)


def bench_gate(
    repo: Path,
    *,
    workers: Sequence[int] = (0, 1, 2),
    repeat: int = 5,
    python: str | None = None,
    sandbox: bool = True,
    timeout_s: float = 600.0,
    progress: Callable[[str], None] = lambda _: None,
) -> GateBench:
    """Time the gate on `repo` (copied; never modified) with each of `workers` (0: one process),
    `repeat` rounds after a warm-up round."""
    if not repo.is_dir():
        raise RalphError(f"{repo}: no such directory")
    with tempfile.TemporaryDirectory(prefix="ralph-bench-gate-") as tmp:
        project, scratch = Path(tmp) / "project", Path(tmp) / "scratch"
        _copy(repo, project)
        scratch.mkdir()
        interpreter = find_python(repo, repo, python)
        isolation = select_sandbox("bwrap" if sandbox else "local", project, [scratch])
        toolchain = Toolchain(
            interpreter, isolation, project, scratch=scratch, root=project, user_root=repo.resolve()
        )
        bench = GateBench(str(repo), interpreter, isolation.name, usable_cores())
        gates = {w: gate_tests(toolchain, warm=True, test_timeout_s=60, workers=w) for w in workers}
        try:
            gate_workers(toolchain, max(workers), asked=True)  # (xdist there, and the project's to use)
            workspace = Workspace(project)
            workspace.capture()  # (after the gate made its mount points, as the loop does)
            for w, gate in gates.items():
                _, bench.tests = _timed_gate(gate, workspace, timeout_s)
                progress(f"warm-up: {w} workers, {bench.tests} tests")
            for i in range(1, repeat + 1):
                for w, gate in gates.items():
                    ms, count = _timed_gate(gate, workspace, timeout_s)
                    if count != bench.tests:
                        raise RalphError(f"{count} tests reported on {w} workers, {bench.tests} on the first")
                    bench.times.setdefault(w, []).append(ms)
                    progress(f"round {i}/{repeat}: {w} workers, {ms:.0f} ms")
        finally:
            for gate in gates.values():
                if gate.warm is not None:
                    gate.warm.close()
            isolation.close()
    return bench
