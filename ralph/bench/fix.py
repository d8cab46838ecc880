"""`ralph bench fix TASKS`: the loop over a task suite, one trace per task, and a summary.

TASKS is a directory of projects (each a directory with its tests), a list of projects with what
is asked of each (a TOML or JSON file of `{repo, task}` entries), or a HumanEvalFix-style JSONL file
(one task a line: prompt, buggy_solution, test, entry_point); each task becomes a small git repository.
With `--mutants N`, TASKS is one project and the tasks are N single-token mutants of it that its
own suite catches (a fresh pytest run fails), in a seeded order. Tasks run in a local process pool
(`--workers`) or, with `--ray`, as Ray tasks on a cluster (`ralph/bench/on_ray.py`); both run each
task with `_run_task` and write the same summary.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import shutil
import statistics
import subprocess
import tempfile
import time
import tomllib
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, ValidationError

from ralph.bench.judge import Hidden, judge
from ralph.bench.shipping import Unshippable, pack, unpack
from ralph.domain.candidate import PROTECTED_TESTS, is_protected
from ralph.domain.errors import RalphError
from ralph.report import drafter_stats, run_stats
from ralph.trace_reader import Run, TracedIteration, read_run

if TYPE_CHECKING:
    from ralph.session import FixOutcome

_GIT = ["git", "-c", "core.hooksPath=/dev/null", "-c", "user.name=bench", "-c", "user.email=bench@localhost"]


@dataclass(frozen=True)
class Task:
    name: str
    files: dict[str, str] | None = None  # for JSONL tasks
    source: Path | None = None  # for a directory of projects
    mutant: tuple[str, str, str] | None = None  # (path, description, source) written over `source`'s
    hidden: Hidden | None = None  # how a JSONL task's fix is judged beyond the tests the loop saw
    description: str = ""  # what is asked, in words (a list file's `task`: `ralph fix --task`)
    archive: bytes | None = None  # `source`'s files, packed (`shipped`): the task as it travels


# What a finished task's result is handed to, as each one ends.
Finished = Callable[[dict[str, Any]], None]
# Runs the tasks (results written under the folder), handing each result on as it ends.
Runner = Callable[[list["Task"], Path, dict[str, Any], Finished], None]


def mutant_tasks(project: Path, count: int, python: str | None = None, seed: int = 0) -> list[Task]:
    """`count` tasks, each `project` with one single-token mutant that its suite catches."""
    from ralph.bench.verify import _copy, _failing, _write_later, candidate_mutants
    from ralph.validators.toolchain import find_python

    if not project.is_dir():
        raise RalphError(f"{project}: no such directory")
    interpreter = find_python(project, project, python)
    found: list[Task] = []
    with tempfile.TemporaryDirectory(prefix="ralph-mutants-") as tmp:
        probe = Path(tmp) / "project"
        _copy(project, probe)
        naive = _naive_run_s(probe, interpreter, limit_s=600) or 60.0
        # What the unmutated copy fails already: a mutant is caught by another failure only.
        already = _failing((_suite(probe, interpreter, [], 2 * naive + 5) or (0, ""))[1])
        for path, description, mutated in candidate_mutants(probe, seed, _is_test_file):
            if len(found) >= count:
                break
            file = probe / path
            original = file.read_text(encoding="utf-8")
            _write_later(file, mutated)  # (a same-second, same-size write would reuse stale bytecode)
            try:
                caught = _fails(probe, interpreter, 2 * naive + 5, already)
            finally:
                _write_later(file, original)
            if caught:
                name = f"{project.name}-{len(found) + 1:02d}"
                found.append(Task(name, source=project, mutant=(path, description, mutated)))
    return found


def _is_test_file(path: str) -> bool:
    return is_protected(path, PROTECTED_TESTS)


def _fails(project: Path, python: str, limit_s: float, already: frozenset[str] = frozenset()) -> bool:
    """Whether a fresh `pytest -q` fails a test of `project` besides those in `already` (stopping
    at the first failure when there are none; a suite that hangs does not count: its tests would
    take a per-test limit each, which is no bench of verification)."""
    from ralph.bench.verify import _failing

    output = _suite(project, python, [] if already else ["-x"], limit_s)
    # Tests that failed (exit status 1), not a run that could not collect (2): the loop's baseline
    # would see no failing test where pytest stopped before running any.
    return output is not None and output[0] == 1 and bool(_failing(output[1]) - already)


def _suite(project: Path, python: str, flags: list[str], limit_s: float) -> tuple[int, str] | None:
    """The exit status and output of a fresh `pytest -q -rfE` of `project`; None past `limit_s`."""
    argv = [python, "-m", "pytest", "-q", "-rfE", "-p", "no:cacheprovider", *flags]
    try:
        run = subprocess.run(argv, cwd=project, capture_output=True, text=True, check=False, timeout=limit_s)
    except subprocess.TimeoutExpired:
        return None
    return run.returncode, run.stdout


# Which of a HumanEvalFix task's tests the loop sees: `full` (its `test`) or `example` (its
# `example_test`, the docstring's examples: the full test then judges the fix, hidden).
VISIBLE = ("full", "example")


def humanevalfix_files(row: dict[str, Any], visible: str = "full") -> dict[str, str]:
    """A HumanEvalFix task as a project: the buggy function, and its `check` as a pytest test."""
    entry = row["entry_point"]
    test_lines = row["test" if visible == "full" else "example_test"].rstrip().splitlines()
    if test_lines and test_lines[-1].strip().startswith("check("):
        test_lines = test_lines[:-1]
    test = "\n".join(["from solution import *  # noqa: F403", *test_lines])
    test += f"\n\n\ndef test_{entry}():\n    check({entry})\n"
    return {
        "solution.py": row["prompt"] + row["buggy_solution"],
        "test_solution.py": test,
        "pyproject.toml": "[tool.pytest.ini_options]\naddopts = '-p no:cacheprovider'\n",
    }


# A list of projects with their tasks, as `{repo, task}` entries; any other file is JSONL.
LIST_SUFFIXES = (".toml", ".json")


class _Entry(BaseModel):
    """One entry of a list file."""

    model_config = ConfigDict(extra="forbid")

    repo: str
    task: str = ""
    name: str | None = None


def listed_tasks(file: Path) -> list[Task]:
    """The tasks of a list file: TOML `[[tasks]]` tables or a JSON list, each `{repo, task, name}`:
    `repo` a project's directory (relative to the file), `task` what is asked of it (as `ralph fix
    --task`), `name` its trace's name (the directory's by default). A missing directory is that
    task's failure when it is shipped, not the list's."""
    try:
        text = file.read_text(encoding="utf-8")
        rows = tomllib.loads(text).get("tasks") if file.suffix == ".toml" else json.loads(text)
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise RalphError(f"{file}: unreadable list of tasks ({exc})") from None
    if not isinstance(rows, list) or not rows:
        shape = "[[tasks]] tables" if file.suffix == ".toml" else "a JSON list"
        raise RalphError(f"{file}: no tasks: expected {shape} of {{repo = ..., task = ...}}")
    found = []
    for i, row in enumerate(rows, 1):
        try:
            entry = _Entry.model_validate(row)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"])
            raise RalphError(f"{file}: task {i}: {where + ': ' if where else ''}{first['msg']}") from None
        source = file.parent / Path(entry.repo).expanduser()
        name = entry.name or source.resolve().name
        if not name or "/" in name or name.startswith("."):
            raise RalphError(f"{file}: task {i}: {name!r} cannot name a trace file: give it a `name`")
        found.append(Task(name, source=source, description=entry.task))
    names = [t.name for t in found]
    if twice := sorted({n for n in names if names.count(n) > 1}):
        raise RalphError(f"{file}: two tasks named {twice[0]}: give each its own `name`")
    return found


def load_tasks(tasks: Path, limit: int | None = None, visible: str = "full") -> list[Task]:
    """The tasks of a directory of projects, a list file (`listed_tasks`) or a JSONL file; with
    `visible="example"`, a JSONL task without an `example_test` is left out (the loop would have no
    test to fix with)."""
    if tasks.is_file() and tasks.suffix in LIST_SUFFIXES:
        found = listed_tasks(tasks)
    elif tasks.is_file():
        try:
            rows = [
                json.loads(line) for line in tasks.read_text(encoding="utf-8").splitlines() if line.strip()
            ]
            found = [
                Task(
                    str(r["task_id"]).replace("/", "-"),
                    files=humanevalfix_files(r, visible),
                    hidden=Hidden.of(r),
                )
                for r in rows
                if visible == "full" or str(r.get("example_test") or "").strip()
            ]
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise RalphError(f"{tasks}: not a HumanEvalFix-style JSONL file ({exc})") from None
    elif tasks.is_dir():
        found = [
            Task(p.name, source=p)
            for p in sorted(tasks.iterdir())
            if p.is_dir() and not p.name.startswith(".")
        ]
    else:
        raise RalphError(f"{tasks}: no such file or directory")
    return found[:limit] if limit else found


def shipped(task: Task) -> Task:
    """The task as it travels to where it runs: its project's files packed (`Unshippable` where
    they cannot be); a task of inline files, or one already packed, as it is."""
    if task.source is None:
        return task
    return dataclasses.replace(task, source=None, archive=pack(task.source))


def _prepare(task: Task, root: Path) -> Path:
    """The task's git repository under `root`, from its packed project or its files."""
    repo = root / "repos" / task.name
    if task.archive is not None:
        unpack(task.archive, repo)
    else:
        shutil.rmtree(repo, ignore_errors=True)
        repo.mkdir(parents=True)
    for path, content in (task.files or {}).items():
        (repo / path).write_text(content, encoding="utf-8")
    if task.mutant is not None:
        (repo / task.mutant[0]).write_text(task.mutant[2], encoding="utf-8")
    subprocess.run([*_GIT, "init", "-q", "-b", "main"], cwd=repo, check=True)
    subprocess.run([*_GIT, "add", "-A"], cwd=repo, check=True)
    subprocess.run([*_GIT, "commit", "-q", "-m", "task"], cwd=repo, check=True)
    return repo


def _run_task(task: Task, root: Path, config: dict[str, Any]) -> dict[str, Any]:
    """One task in a worker process (of the local pool, or a Ray worker's, under a scratch `root`);
    bad input in a task is that task's result, not the bench's."""
    from ralph.config import RunConfig, load_config
    from ralph.session import fix
    from ralph.view import QuietView

    trace = root / "traces" / f"{task.name}.jsonl"
    trace.unlink(missing_ok=True)
    try:
        repo = _prepare(shipped(task), root)
        asked = config | ({"task": task.description} if task.description else {})
        # The task's own [tool.ralph] (its models' api_base, max_tokens, timeouts), the bench's flags on top.
        settings = load_config(repo, asked) if task.files is None else RunConfig(**asked)
        # ...except isolation: only the bench's own settings (or RALPH_NO_SANDBOX) may turn it off.
        settings = settings.model_copy(update={"sandbox": load_config(root / "no-such-dir", config).sandbox})
        outcome = fix(repo, settings, view=QuietView(notices=False), trace_path=trace)
        start = read_run(trace).start
        python = start.python if start is not None else None
        naive_s = _naive_run_s(repo, python, limit_s=max(5.0, 2 * outcome.baseline_s))
        done = {
            "task": task.name,
            "outcome": outcome.result.outcome,
            "trace": str(trace),
            "naive_run_s": naive_s,
        }
        if task.hidden is not None and outcome.result.outcome == "goal":
            done |= _judged(task.hidden, repo, outcome, settings.chosen_sandbox)
        return done
    except RalphError as exc:
        return failed(task.name, root, str(exc), unshipped=isinstance(exc, Unshippable))


def failed(name: str, root: Path, why: str, **more: Any) -> dict[str, Any]:
    """The result of a task that did not run to its end: bad input in it, a project that could not
    be shipped (`unshipped`), a worker that failed twice (`retried`)."""
    extra = {key: value for key, value in more.items() if value}
    return {
        "task": name,
        "outcome": "error",
        "error": why,
        "trace": str(root / "traces" / f"{name}.jsonl"),
    } | extra


def _judged(hidden: Hidden, repo: Path, outcome: FixOutcome, sandbox: str) -> dict[str, Any]:
    """A plausible fix (the loop reached its goal) judged by the full test and the canonical
    solution (`judge`); a task whose visible tests passed before any edit has nothing to judge."""
    if outcome.result.accepted == 0 or outcome.branch is None or outcome.python is None:
        return {"nothing_to_fix": True}
    show = [*_GIT, "show", f"{outcome.branch}:solution.py"]
    shown = subprocess.run(show, cwd=repo, capture_output=True, text=True, check=False)
    if shown.returncode != 0:
        why = f"the fix's solution.py cannot be read from {outcome.branch}: {shown.stderr.strip()[:200]}"
        return {"judged": {"hidden": why, "differs": [], "differs_near": [], "correct": False}}
    return {"judged": judge(shown.stdout, hidden, outcome.python, sandbox)}


def _naive_run_s(repo: Path, python: str | None, limit_s: float) -> float | None:
    """What one naive full test run of the task's starting state takes: a fresh `pytest -q` (its
    second run, caches warm, as a user's are). The naive loop pays it once per candidate verified.
    A suite that hangs (a buggy loop: pytest has no per-test limit) counts as `limit_s`."""
    if python is None:
        return None
    argv = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    took = limit_s
    for _ in range(2):
        start = time.perf_counter()
        try:
            subprocess.run(argv, cwd=repo, capture_output=True, check=False, timeout=limit_s)
        except subprocess.TimeoutExpired:
            return limit_s
        took = time.perf_counter() - start
    return took


def naive_time_to_green(run: Run, naive_run_s: float) -> float | None:
    """The naive loop on the same candidate stream: the same drafting, then one full test run per
    candidate that reached verification, up to the accept that reached the goal; None if none did."""
    green = run.green_iteration
    if green is None:
        return None
    reached = [it for it in run.iterations if it.i <= green]
    return sum(it.draft_ms / 1000 for it in reached) + sum(_verified(it) for it in reached) * naive_run_s


def _verified(iteration: TracedIteration) -> int:
    return sum(c.verified for c in iteration.candidates)


def verification_per_candidate_s(run: Run) -> float | None:
    """All verification time (each candidate's synchronous stages and every background gate) over
    the candidates that reached verification."""
    verified = sum(_verified(it) for it in run.iterations)
    if not verified:
        return None
    sync = sum(it.verify_ms for it in run.iterations)
    gates = sum(g.duration_ms for g in run.gates)
    return (sync + gates) / 1000 / verified


def bench_fix(
    tasks: Path,
    out: Path,
    *,
    workers: int = 1,
    limit: int | None = None,
    mutants: int | None = None,
    config: dict[str, Any] | None = None,
    progress: Callable[[str], None] = lambda _: None,
    advance: Callable[[int, int], None] = lambda done, total: None,
    visible: str = "full",
    ray: str | None = None,
) -> dict[str, Any]:
    """Run every task, in a local pool of `workers` processes or on the Ray cluster at `ray`
    ("local": one started here with `workers` CPUs); write one trace per task under `out/traces`;
    return the summary. `progress` gets a line per finished task (and notices), `advance` the
    tasks done and in all."""
    from ralph.config import load_config

    if visible not in VISIBLE:
        raise RalphError(f"--visible {visible!r}: one of {', '.join(VISIBLE)}")
    if visible != "full" and (mutants or not tasks.is_file() or tasks.suffix in LIST_SUFFIXES):
        raise RalphError(f"--visible {visible}: only for a HumanEvalFix-style JSONL file of tasks")
    # Isolation is the bench's to say, here, not a worker machine's environment (RALPH_NO_SANDBOX).
    config = (config or {}) | {"sandbox": load_config(out / "no-such-dir", config or {}).sandbox}
    # (a cluster is reached first: one that cannot be is known before any mutant is searched for)
    with _runner(workers, ray, progress) as run:
        if mutants:
            progress(f"finding {mutants} single-token mutants of {tasks} its suite catches")
            chosen = mutant_tasks(tasks, mutants, config.get("python"))
        else:
            chosen = load_tasks(tasks, limit, visible)
        out.mkdir(parents=True, exist_ok=True)
        results: list[dict[str, Any]] = []

        def finished(result: dict[str, Any]) -> None:
            results.append(result)
            why = f" ({result['error']})" if "error" in result else ""
            progress(f"{len(results)}/{len(chosen)} {result['task']}: {result['outcome']}{why}")
            advance(len(results), len(chosen))

        advance(0, len(chosen))
        run(chosen, out, config, finished)
    return summarize(results, out)


@contextlib.contextmanager
def _runner(workers: int, ray: str | None, progress: Callable[[str], None]) -> Iterator[Runner]:
    """Where the tasks run: a local process pool, or the Ray cluster at `ray` (reached on entry)."""
    if ray is None:
        yield lambda chosen, out, config, finished: _run_locally(chosen, out, config, finished, workers)
        return
    from ralph.bench.on_ray import ray_session

    with ray_session(ray, workers, progress) as run:
        yield run


def _run_locally(
    chosen: list[Task], out: Path, config: dict[str, Any], finished: Finished, workers: int
) -> None:
    with ProcessPoolExecutor(max_workers=max(1, workers)) as pool:
        futures = [pool.submit(_run_task, task, out, config) for task in chosen]
        for future in as_completed(futures):
            finished(future.result())


def _naive_ratios(read: list[tuple[dict[str, Any], Run]]) -> dict[str, float]:
    """Per task that reached the goal: naive time-to-green / ours (also written into its result)."""
    ratios = {}
    for result, run in read:
        if result.get("naive_run_s") is None:
            continue
        ours = run.green_s
        naive = naive_time_to_green(run, result["naive_run_s"])
        if ours and naive is not None:
            ratios[result["task"]] = result["naive_ratio"] = round(naive / ours, 2)
        per_candidate = verification_per_candidate_s(run)
        if per_candidate:
            result["verify_per_candidate_s"] = round(per_candidate, 4)
            result["per_candidate_ratio"] = round(result["naive_run_s"] / per_candidate, 2)
    return ratios


def _spread(name: str, values: list[float]) -> dict[str, float | None]:
    return {
        f"{name}_median": round(statistics.median(values), 2) if values else None,
        f"{name}_min": round(min(values), 2) if values else None,
    }


def template_stats(runs: list[Run]) -> dict[str, dict[str, float]]:
    """Per kind of edit (a candidate's `meta.operator`, the offline drafter's template): candidates
    verified, accepted (an accept its background gate undid does not count), and r, accepted over
    verified: which bug kinds the templates handle."""
    counts: dict[str, list[int]] = {}
    for run in runs:
        for iteration in run.iterations:
            kept = iteration.kept
            for candidate in iteration.candidates:
                if candidate.operator is None or candidate.failed_stage == "policy":
                    continue
                if candidate.verdict is None:
                    raise RalphError(f"{run.source}: a candidate without a verdict: not a ralph trace")
                seen = counts.setdefault(candidate.operator, [0, 0])
                seen[0] += 1
                seen[1] += candidate in kept
    return {
        op: {"verified": n, "accepted": k, "r": round(k / n, 4)}
        for op, (n, k) in sorted(counts.items(), key=lambda item: (-item[1][1], item[0]))
    }


def learn_priors(paths: list[Path]) -> dict[str, Any]:
    """What `template_priors.json` holds: each template's tries and accepts over these traces."""
    stats = template_stats([read_run(p) for p in paths])
    if not stats:
        raise RalphError("no candidate of a template in these traces: nothing to learn priors from")
    return {
        "traces": len(paths),
        "templates": {op: {"verified": s["verified"], "accepted": s["accepted"]} for op, s in stats.items()},
    }


def gate_catches(read: list[tuple[dict[str, Any], Run]]) -> list[dict[str, Any]]:
    """Every state a background gate rejected: a regression (or a run with no verdict) that the
    targeted stages let through, since they judge only what the state failed. The gate is the
    oracle; this is the recall the targeted stages would have without it."""
    return [
        {"task": result["task"], "state": gate.state, "reason": gate.reason, "kept": gate.kept}
        for result, run in read
        for gate in run.gates
        if gate.verdict == "rejected"
    ]


def gate_verdicts(runs: list[Run]) -> dict[str, int]:
    """How the background gates of `runs` ended: passed, rejected and undone, rejected yet kept as a
    todo (`--on-gate-failure todo`), or never judged (discarded, cancelled)."""
    gates = [g for run in runs for g in run.gates]
    return {
        "passed": sum(g.passed for g in gates),
        "undone": sum(g.verdict == "rejected" and not g.kept for g in gates),
        "kept": sum(g.kept for g in gates),
        "not_judged": sum(g.verdict in ("discarded", "cancelled") for g in gates),
    }


def judgement(read: list[tuple[dict[str, Any], Run]]) -> dict[str, Any]:
    """Of the tasks whose fix was judged (`judge`): plausible (the loop reached its goal on the tests
    it saw), correct (the full test passes and no output differs from the canonical solution's) and
    overfit (plausible, not correct: failing the full test, or only differing on an input), overall
    and per template and drafter of the accepted edits. Nothing when no fix was judged."""
    judged = [(result, run) for result, run in read if "judged" in result]
    nothing = sum(bool(r.get("nothing_to_fix")) for r, _ in read)
    if not judged:
        return {"nothing_to_fix": nothing} if nothing else {}
    by: dict[str, dict[str, int]] = {}
    for result, run in judged:
        kept = [c for it in run.iterations for c in it.kept]
        for name in {f"template {c.operator}" for c in kept if c.operator} | {c.drafter for c in kept}:
            seen = by.setdefault(name, {"plausible": 0, "correct": 0, "overfit": 0})
            seen["plausible"] += 1
            seen["correct" if result["judged"]["correct"] else "overfit"] += 1
    correct = sum(r["judged"]["correct"] for r, _ in judged)
    return {
        "plausible": len(judged),
        "correct": correct,
        "overfit": len(judged) - correct,
        # Why they are not correct: the full test fails; it passes, but an output on one of its own
        # inputs differs from the canonical solution's; only on a neighbour of one.
        "overfit_failing_full_test": sum(r["judged"]["hidden"] != "pass" for r, _ in judged),
        "overfit_differing": sum(
            r["judged"]["hidden"] == "pass" and bool(r["judged"]["differs"]) for r, _ in judged
        ),
        "overfit_differing_near": sum(
            r["judged"]["hidden"] == "pass"
            and not r["judged"]["differs"]
            and bool(r["judged"]["differs_near"])
            for r, _ in judged
        ),
        "overfit_rate": round((len(judged) - correct) / len(judged), 4),
        "nothing_to_fix": nothing,
        "judged_by": dict(sorted(by.items())),
        "overfit_tasks": sorted(r["task"] for r, _ in judged if not r["judged"]["correct"]),
    }


def task_runs(results: list[dict[str, Any]]) -> list[tuple[dict[str, Any], Run]]:
    """Each task's result with its run, for the tasks that left a trace."""
    return [(r, read_run(Path(r["trace"]))) for r in results if Path(r["trace"]).exists()]


def summarize(results: list[dict[str, Any]], out: Path) -> dict[str, Any]:
    read = task_runs(results)
    traces = [run for _, run in read]
    runs = [run_stats(t) for t in traces]
    greens = [r.time_to_green_s for r in runs if r.time_to_green_s is not None]
    ratios = _naive_ratios(read)
    wall = sum(r.wall_s for r in runs) or 1e-9
    # (a task whose visible tests passed before any edit reached its goal with nothing fixed)
    fixed = sum(r["outcome"] == "goal" and not r.get("nothing_to_fix") for r in results)
    summary = {
        "tasks": len(results),
        "fixed": fixed,
        "fix_rate": round(fixed / len(results), 4) if results else 0.0,
        "errors": sum(r["outcome"] == "error" for r in results),
        "median_time_to_green_s": round(statistics.median(greens), 3) if greens else None,
        # The naive loop's time-to-green over ours, on the same candidate stream (per task, then median).
        "naive_ratio_median": round(statistics.median(ratios.values()), 2) if ratios else None,
        "naive_ratio_min": round(min(ratios.values()), 2) if ratios else None,
        # One naive full run over all our verification time per candidate verified (background too).
        **_spread(
            "per_candidate_ratio", [r["per_candidate_ratio"] for r in results if "per_candidate_ratio" in r]
        ),
        "drafters": {name: s.to_json() for name, s in drafter_stats(traces).items()},
        "templates": template_stats(traces),
        "cycle_breakdown": {
            "draft": round(sum(r.draft_s for r in runs) / wall, 4),
            "verify": round(sum(r.verify_s + r.baseline_s + r.gate_wait_s for r in runs) / wall, 4),
            "overhead": round(
                max(
                    0.0,
                    1
                    - sum(r.fractions["draft"] * r.wall_s for r in runs) / wall
                    - sum(r.fractions["verify"] * r.wall_s for r in runs) / wall,
                ),
                4,
            ),
            "gate_beside": round(sum(r.gate_s for r in runs) / wall, 4),
        },
        **judgement(read),
        "gate_caught": gate_catches(read),
        # Tasks run a second time after their worker failed, and tasks whose project could not be shipped.
        "retried": sorted(r["task"] for r in results if r.get("retried")),
        "unshipped": sorted(r["task"] for r in results if r.get("unshipped")),
        "gate_verdicts": gate_verdicts(traces),
        "results": sorted(results, key=lambda r: r["task"]),
        "traces": str(out / "traces"),
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary
