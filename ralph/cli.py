"""The `ralph` command line."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shlex
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING, Annotated, Any, cast

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text
from typer.core import TyperCommand, TyperGroup

from ralph.domain.errors import RalphError
from ralph.trace import one_line

if TYPE_CHECKING:
    from ralph.config import RunConfig
    from ralph.session import FixOutcome, Resume

app = typer.Typer(
    name="ralph",
    help="An agentic coding loop: fast drafters, cheap staged verification.",
    add_completion=False,
    pretty_exceptions_enable=False,
    no_args_is_help=True,
)


def _reader_gone(stream: IO[str]) -> None:
    """`stream`'s reader went away (`ralph fix | head -1`): point it at /dev/null, so that what is
    printed later, or still buffered when Python exits, is dropped instead of failing."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, stream.fileno())
    os.close(devnull)


class _Output(Console):
    """A console whose reader may stop reading: the rest of the output is dropped and the command
    goes on to its end and its own exit code (rich's default exits 1 at once, which stopped a run
    half way and made a fix that had succeeded a silent failure)."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        _reader_gone(self.file)


def _out(text: str, end: str = "\n") -> None:
    """`print` to standard output, which a reader that stopped reading does not turn into a failure."""
    try:
        print(text, end=end, flush=True)
    except BrokenPipeError:
        _reader_gone(sys.stdout)


err = _Output(stderr=True, soft_wrap=True)


def _stdout() -> Console:
    """Standard output: tables fit a terminal's width; to a file or a pipe, nothing is wrapped or
    cut (unless $COLUMNS says how wide)."""
    console = _Output(soft_wrap=True)
    if not console.is_terminal and not os.environ.get("COLUMNS"):
        console.width = 1000
    return console


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            _out(f"ralph {version('ralph-loop')}")
        except PackageNotFoundError:
            _out("ralph (not installed)")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", metavar="", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """ralph: fix failing checks with a fast drafter and cheap verification."""


# `ralph fix --help`, given to typer here rather than as the docstring: the options already fill
# `fix`, which only hands them on.
_FIX_HELP = """Loop until the project's checks pass: route, draft, verify, decide, trace.

Exit codes: 0 goal reached, 1 stopped without it (budget, stalled; progress is still on the
branch), 2 bad input, 130 interrupted (the summary says how to resume).
"""


_NoSandbox = Annotated[
    bool,
    typer.Option(
        "--no-sandbox", metavar="", help="Run candidate code without bubblewrap (rlimits, timeouts only)."
    ),
]
_Isolation = Annotated[
    str | None,
    typer.Option(help="The sandbox: bwrap (default), local (as --no-sandbox) or module:Class."),
]
_Jobs = Annotated[
    int | None, typer.Option(help="Candidates verified at once (default: a core each, one kept free).")
]
_OnGateFailure = Annotated[
    str | None,
    typer.Option(
        metavar="rollback|todo",
        help="A background gate that finds regressions: rollback (undo the state; default) or todo "
        "(keep it, the regressed tests to fix next; commit only states whose gate passed).",
    ),
]
_IncludeUntracked = Annotated[
    bool | None,
    typer.Option(
        "--include-untracked",
        metavar="",
        help="Commit untracked files on the ralph branch too (default: used by the tests, not committed).",
    ),
]
_AllowApiChanges = Annotated[
    bool | None,
    typer.Option(
        "--allow-api-changes", metavar="", help="Accept edits that change the public API (default: rejected)."
    ),
]
_BackgroundGate = Annotated[
    bool | None,
    typer.Option(
        "--background-gate/--no-background-gate",
        metavar="",
        help="Run the full-suite gate beside the loop (default: on with 2+ cores).",
    ),
]


@app.command(help=_FIX_HELP)
def fix(
    path: Annotated[Path, typer.Argument(help="The project to fix (inside a git repository).")] = Path("."),
    task: Annotated[str | None, typer.Option(help="What to achieve, in words.")] = None,
    tests: Annotated[
        list[str] | None, typer.Option("--tests", help="Target test node ids (repeatable).")
    ] = None,
    check: Annotated[
        list[str] | None, typer.Option("--check", help="Extra check command, exit 0 = pass.")
    ] = None,
    drafter: Annotated[
        str | None,
        typer.Option(help="auto, mutation, replay:FILE, diffusion:MODEL, a litellm model, module:Class."),
    ] = None,
    deep: Annotated[str | None, typer.Option(help="The deep reasoner: a litellm model string.")] = None,
    router: Annotated[
        str | None, typer.Option(help="stall (default), fast, deep, cascade or module:Class.")
    ] = None,
    candidates: Annotated[int | None, typer.Option(help="Candidates per iteration (default 4).")] = None,
    max_iterations: Annotated[int | None, typer.Option(help="Iteration budget (default 20).")] = None,
    max_seconds: Annotated[float | None, typer.Option(help="Wall-time budget in seconds.")] = None,
    max_cost: Annotated[float | None, typer.Option(help="Cost budget in USD (paid models).")] = None,
    branch: Annotated[str | None, typer.Option(help="Branch for the fix (default ralph/<run-id>).")] = None,
    apply: Annotated[
        bool, typer.Option("--apply", metavar="", help="Also write the fix into the working tree.")
    ] = False,
    trace: Annotated[
        Path | None, typer.Option(help="Trace file (default .ralph/runs/<id>/trace.jsonl).")
    ] = None,
    python: Annotated[str | None, typer.Option(help="The project's interpreter.")] = None,
    types: Annotated[
        bool | None, typer.Option("--types/--no-types", metavar="", help="Run mypy (default: if configured).")
    ] = None,
    allow_test_edits: Annotated[
        bool | None, typer.Option("--allow-test-edits", metavar="", help="Let drafters edit tests.")
    ] = None,
    include_untracked: _IncludeUntracked = None,
    as_json: Annotated[
        bool, typer.Option("--json", metavar="", help="Print a JSON summary instead of tables.")
    ] = False,
    resume: Annotated[
        str | None,
        typer.Option(help="Continue a killed or interrupted run: its run id, or its --trace file."),
    ] = None,
    no_sandbox: _NoSandbox = False,
    isolation: _Isolation = None,
    background_gate: _BackgroundGate = None,
    on_gate_failure: _OnGateFailure = None,
    jobs: _Jobs = None,
    allow_api_changes: Annotated[
        bool | None,
        typer.Option(
            "--allow-api-changes",
            metavar="",
            help="Accept edits that change the public API (default: rejected).",
        ),
    ] = None,
) -> None:
    """`ralph fix`; its help is `_FIX_HELP` (the options alone fill a screen)."""
    overrides = _fix_overrides(locals())
    _run_fix(path, overrides, branch=branch, apply=apply, trace=trace, as_json=as_json, resume=resume)


def _fix_overrides(options: dict[str, Any]) -> dict[str, Any]:
    """The config overrides that `ralph fix`'s options give (None: not given, the config decides)."""
    return {
        "task": options["task"],
        "tests": options["tests"] or None,
        "checks": options["check"] or None,
        "drafter": options["drafter"],
        "deep": options["deep"],
        "router": options["router"],
        "candidates": options["candidates"],
        "max_iterations": options["max_iterations"],
        "max_seconds": options["max_seconds"],
        "max_cost": options["max_cost"],
        "python": options["python"],
        "types": options["types"],
        "allow_test_edits": options["allow_test_edits"],
        "include_untracked": options["include_untracked"],
        "sandbox": False if options["no_sandbox"] else None,
        "isolation": options["isolation"],
        "background_gate": options["background_gate"],
        "on_gate_failure": options["on_gate_failure"],
        "jobs": options["jobs"],
        "api_changes": options["allow_api_changes"],
    }


def _run_fix(
    path: Path,
    overrides: dict[str, Any],
    *,
    branch: str | None,
    apply: bool,
    trace: Path | None,
    as_json: bool,
    resume: str | None,
) -> None:
    """Run the loop on `path`, print how it ended (tables or JSON) and exit with its exit code."""
    if not path.is_dir():
        raise RalphError(f"{path}: no such directory")
    config, resumed = _fix_config(path, overrides, resume)
    console = _stdout()
    try:
        outcome = _run_session(
            path, config, resumed, console, branch=branch, apply=apply, trace=trace, quiet=as_json
        )
    except KeyboardInterrupt:  # outside the loop (which ends with a summary): typer exits 130 silently
        err.print("ralph: interrupted", highlight=False)
        raise
    summary = _fix_summary(outcome, path)
    if as_json:
        _out(json.dumps(summary))
    else:
        _print_ending(console, summary, outcome, path)
    raise typer.Exit(outcome.exit_code)


def _fix_config(path: Path, overrides: dict[str, Any], resume: str | None) -> tuple[RunConfig, Resume | None]:
    """The run's config and, with `--resume`, the run it continues (with the new budgets applied)."""
    if not resume:
        from ralph.config import load_config

        return load_config(path, overrides), None
    from pydantic import ValidationError

    from ralph.session import load_resume

    resumed = load_resume(path, resume)
    budgets = {
        k: overrides[k] for k in ("max_iterations", "max_seconds", "max_cost") if overrides[k] is not None
    }
    try:  # validated as the first run's were: `--max-iterations 0` is bad input here too
        config = type(resumed.config).model_validate({**resumed.config.model_dump(), **budgets})
    except ValidationError as exc:
        first = exc.errors()[0]
        raise RalphError(f"--{str(first['loc'][0]).replace('_', '-')}: {first['msg']}") from None
    return config, resumed


def _run_session(
    path: Path,
    config: RunConfig,
    resumed: Resume | None,
    console: Console,
    *,
    branch: str | None,
    apply: bool,
    trace: Path | None,
    quiet: bool,
) -> FixOutcome:
    """One `ralph fix` session, shown live on `console` unless `quiet` (for `--json`)."""
    from ralph.session import fix as run_fix
    from ralph.view import QuietView, RichView

    if quiet:
        return run_fix(
            path, config, view=QuietView(), branch=branch, apply=apply, trace_path=trace, resume=resumed
        )
    console.print(f"[bold]ralph fix[/] {path}", highlight=False)
    with RichView(console) as view:
        return run_fix(path, config, view=view, branch=branch, apply=apply, trace_path=trace, resume=resumed)


def _fix_summary(outcome: FixOutcome, path: Path) -> dict[str, Any]:
    """The run's summary: the `--json` object, and the rows of the ending table."""
    from ralph.endings import failing

    result = outcome.result
    summary = {
        "outcome": result.outcome,
        "iterations": result.iterations,
        "accepted": result.accepted,
        "remaining_at_start": result.remaining_at_start,
        "remaining": result.remaining,
        "still_failing": failing(result.final),
        "branch": outcome.branch,
        "final_commit": outcome.final_commit,
        "trace": str(outcome.trace),
        "wall_s": round(result.wall_s, 2),  # the whole run, the baseline included
        "baseline_s": round(outcome.baseline_s, 2),
        # Unknown (None) when every token came from a model of no known price, not 0.0.
        "cost_usd": None if result.unpriced_tokens and not result.cost_usd else result.cost_usd,
        "unpriced_tokens": result.unpriced_tokens,
        "applied": outcome.applied,
        "run_id": outcome.run_id,
        "disabled_stages": outcome.notices,
        "untracked_not_committed": list(outcome.untracked),
        "uncommitted_states": list(result.uncommitted),
    }
    if result.outcome == "interrupted":  # by its id, or by its trace file where --trace put it elsewhere
        run = outcome.run_id if outcome.trace.parent.name == outcome.run_id else str(outcome.trace)
        summary["resume"] = f"ralph fix {shlex.quote(str(path))} --resume {shlex.quote(run)}"
    return summary


def _print_ending(console: Console, summary: dict[str, Any], outcome: FixOutcome, path: Path) -> None:
    """The summary table, the next steps and, for an interrupted run, how to resume it."""
    from ralph.view import summary_table

    console.print(summary_table(summary))
    for line in _next_steps(outcome):
        console.print(Text(line), highlight=False)
    if "resume" in summary:
        console.print(Text(f"interrupted; to continue: {summary['resume']}"), highlight=False)


@app.command()
def ci(
    path: Annotated[Path, typer.Argument(help="The repository whose checks failed.")] = Path("."),
    pr: Annotated[
        bool, typer.Option("--pr", metavar="", help="Open or update a pull request (GITHUB_TOKEN).")
    ] = False,
    remote: Annotated[str, typer.Option(help="The remote to push the fix branch to.")] = "origin",
    drafter: Annotated[
        str | None, typer.Option(help="The fast drafter (default: the config's, else auto).")
    ] = None,
    deep: Annotated[
        str | None, typer.Option(help="The deep reasoner, a litellm model (default: none).")
    ] = None,
    max_iterations: Annotated[int | None, typer.Option(help="Iteration budget (default 20).")] = None,
    max_seconds: Annotated[
        float | None, typer.Option(help="Wall-time budget in seconds (default: none).")
    ] = None,
    max_cost: Annotated[float | None, typer.Option(help="Cost budget in USD (default: none).")] = None,
    no_sandbox: Annotated[
        bool, typer.Option("--no-sandbox", metavar="", help="Run candidate code without bubblewrap.")
    ] = False,
) -> None:
    """The CI bot: fix the failing checks, push a fix branch, write a summary (and a pull request)."""
    import os

    from ralph.ci import run_ci
    from ralph.config import load_config
    from ralph.view import QuietView

    if not path.is_dir():
        raise RalphError(f"{path}: no such directory")
    overrides = {
        "drafter": drafter,
        "deep": deep,
        "max_iterations": max_iterations,
        "max_seconds": max_seconds,
        "max_cost": max_cost,
        "sandbox": False if no_sandbox else None,
    }
    result = run_ci(path, load_config(path, overrides), view=QuietView(), remote=remote, pr=pr)
    _out(result.summary)
    if summary_file := os.environ.get("GITHUB_STEP_SUMMARY"):
        with open(summary_file, "a", encoding="utf-8") as f:
            f.write(result.summary)
    raise typer.Exit(result.exit_code)


@app.command()
def precommit(
    files: Annotated[
        list[str] | None, typer.Argument(help="The staged files (pre-commit passes them).")
    ] = None,
    fix_files: Annotated[
        bool, typer.Option("--fix/--check", metavar="", help="Run a bounded fix loop, or only check.")
    ] = False,
    max_iterations: Annotated[int, typer.Option(help="Iteration budget for --fix.")] = 5,
    max_seconds: Annotated[float, typer.Option(help="Time budget for --fix.")] = 120.0,
) -> None:
    """The command behind the pre-commit hooks `ralph-check` and `ralph-fix`."""
    from ralph import precommit as hooks

    repo = Path(".")
    if fix_files:
        code = hooks.fix(repo, list(files or []), max_iterations=max_iterations, max_seconds=max_seconds)
    else:
        code = hooks.check(repo, list(files or []))
    raise typer.Exit(code)


@app.command()
def doctor(
    path: Annotated[Path, typer.Argument(help="The project whose configuration to read.")] = Path("."),
    as_json: Annotated[bool, typer.Option("--json", metavar="", help="Print one JSON object.")] = False,
) -> None:
    """What is configured and available: GPU, models, keys (present or not), validators."""
    from ralph.config import load_config
    from ralph.doctor import diagnose, problems, rows

    if not path.is_dir():
        raise RalphError(f"{path}: no such directory")
    facts = diagnose(path, load_config(path, {}))
    found = problems(facts)
    if as_json:
        _out(json.dumps({**facts, "problems": [{"problem": p, "fix": f} for p, f in found]}))
        return
    table = Table(title="ralph doctor", show_header=False)
    for key, value in rows(facts):
        table.add_row(key, Text(value))
    console = _stdout()
    console.print(table)
    for problem, fix in found:
        console.print(Text(f"problem: {problem}; fix: {fix}"), highlight=False)
    if not found:
        console.print(Text("no problems found"), highlight=False)


@app.command()
def report(
    traces: Annotated[list[Path], typer.Argument(help="Trace files, run directories, or .ralph/runs.")],
    compare: Annotated[
        bool,
        typer.Option(
            "--compare",
            metavar="",
            help="Compare drafter set-ups: r and time-to-green per set of drafters a run used.",
        ),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", metavar="", help="Print one JSON object.")] = False,
    csv_file: Annotated[Path | None, typer.Option("--csv", help="Write one row per iteration.")] = None,
    plot: Annotated[Path | None, typer.Option("--plot", help="Write a PNG of remaining error.")] = None,
    budget: Annotated[float, typer.Option(help="Time budget (s) for the projected score.")] = 300.0,
) -> None:
    """Outcomes, cycle-time breakdown, and improvement per step per drafter, from traces."""
    import csv

    from ralph.report import iteration_rows, load, report_json
    from ralph.view import report_tables

    loaded = load(traces)
    data = report_json(loaded, compare=compare)
    if csv_file:
        rows = iteration_rows(loaded)
        with csv_file.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["run_id"])
            writer.writeheader()
            writer.writerows(rows)
    if plot:
        from ralph.plot import plot_runs

        plot_runs(loaded, plot)
    if as_json:
        _out(json.dumps(data))
        return
    console = _stdout()
    if plot:
        console.print(Text(f"plot written to {plot}"), highlight=False)
    if compare and len(data["drafters"]) < 2:
        only = next(iter(data["drafters"]), "none")
        console.print(Text(f"nothing to compare: every run used the same drafters ({only})"), highlight=False)
    for table in report_tables(data, budget):
        console.print(table)


@app.command()
def clean(
    path: Annotated[Path, typer.Argument(help="The repository.")] = Path("."),
    older_than: Annotated[
        float | None, typer.Option("--older-than", metavar="DAYS", help="Only branches at least this old.")
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", metavar="", help="With --older-than: unmerged branches too.")
    ] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", metavar="", help="Say what would go.")] = False,
) -> None:
    """Delete the ralph/* branches merged into HEAD (never the checked-out one; an unmerged branch
    only with --older-than DAYS --force)."""
    from ralph.clean import clean as clean_branches

    for line in clean_branches(path, older_than_days=older_than, force=force, dry_run=dry_run):
        _out(line)


bench = typer.Typer(
    help="Benchmarks: figures measured against a baseline in the same run.", no_args_is_help=True
)
app.add_typer(bench, name="bench")


@bench.command("verify")
def bench_verify_command(
    repo: Annotated[
        Path, typer.Argument(help="A project with a pytest suite (it is copied, never changed).")
    ],
    mutants: Annotated[int, typer.Option(help="Caught mutants to measure.")] = 30,
    seed: Annotated[int, typer.Option(help="Seed for the mutant order.")] = 0,
    python: Annotated[str | None, typer.Option(help="The project's interpreter.")] = None,
    no_sandbox: Annotated[
        bool, typer.Option("--no-sandbox", metavar="", help="Verify without bubblewrap.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", metavar="", help="Print one JSON object.")] = False,
    semantic: Annotated[
        bool,
        typer.Option(
            "--semantic/--no-semantic",
            metavar="",
            help="The plausibility, API and format stages (to time them).",
        ),
    ] = True,
    profile: Annotated[
        bool,
        typer.Option(
            "--profile", metavar="", help="Print where the rejection path's time goes, part by part."
        ),
    ] = False,
) -> None:
    """Per-candidate verification time against a naive full run (and pytest-testmon), and recall."""
    from ralph.bench.verify import bench_verify

    console = _Output(stderr=True, soft_wrap=True)
    result = bench_verify(
        repo,
        mutants=mutants,
        seed=seed,
        python=python,
        sandbox=not no_sandbox,
        semantic=semantic,
        progress=lambda t: console.print(t, highlight=False, markup=False),
    )
    summary = result.summary()
    if profile:
        parts = Table(title="the rejection path, part by part (median ms, share of the time)")
        for column in ("part", "median ms", "share"):
            parts.add_column(column, justify="left" if column == "part" else "right")
        for part, figures in summary["rejection_profile"].items():
            parts.add_row(part, f"{figures['median_ms']:.1f}", f"{100 * figures['share']:.1f}%")
        console.print(parts)
    if as_json:
        _out(json.dumps(summary))
        return
    table = Table(title=f"ralph bench verify {repo}", show_header=False)
    for key, value in summary.items():
        table.add_row(key, str(value))
    _stdout().print(table)


@bench.command("gate")
def bench_gate_command(
    repo: Annotated[
        Path, typer.Argument(help="A project with a pytest suite (it is copied, never changed).")
    ],
    workers: Annotated[
        str, typer.Option(help="pytest-xdist worker counts, comma-separated; 0: one process, no xdist.")
    ] = "0,1,2",
    repeat: Annotated[int, typer.Option(min=1, help="Timed rounds (after a warm-up round).")] = 5,
    python: Annotated[str | None, typer.Option(help="The project's interpreter.")] = None,
    no_sandbox: Annotated[
        bool, typer.Option("--no-sandbox", metavar="", help="Run the gate without bubblewrap.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", metavar="", help="Print one JSON object.")] = False,
) -> None:
    """The gate's wall time in one process and across pytest-xdist workers: medians and speedups."""
    from ralph.bench.gate import bench_gate

    counts = _numbers(workers, f"--workers {workers}: worker counts such as 0,1,2")
    console = _Output(stderr=True, soft_wrap=True)
    result = bench_gate(
        repo,
        workers=counts,
        repeat=repeat,
        python=python,
        sandbox=not no_sandbox,
        progress=lambda t: console.print(t, highlight=False, markup=False),
    )
    summary = result.summary()
    if as_json:
        _out(json.dumps(summary))
        return
    title = (
        f"ralph bench gate {repo}: {summary['tests']} tests, {summary['cores']} cores, {summary['sandbox']}"
    )
    table = Table(title=title)
    for column in ("workers", "median ms", "min ms", "max ms", "runs", "speedup"):
        table.add_column(column, justify="right")
    for count, row in summary["workers"].items():
        cells = (row["median_ms"], row["min_ms"], row["max_ms"], row["runs"], row["speedup"])
        table.add_row(str(count) if count else "0 (one process)", *(str(c) for c in cells))
    _stdout().print(table)


@bench.command("drafter")
def bench_drafter_command(
    drafter: Annotated[
        str | None,
        typer.Option(
            help="A drafter to measure on fixed one-bug tasks: diffusion:MODEL, or a litellm model "
            "(openai/NAME with --api-base for a served one)."
        ),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option(help="Instead: compare the sampler's settings on this diffusion model (id or path)."),
    ] = None,
    api_base: Annotated[
        str | None, typer.Option(help="The OpenAI-compatible server of a --drafter litellm model.")
    ] = None,
    settings: Annotated[
        Path | None,
        typer.Option("--config", help='A ralph.toml: [models."NAME"] and [sampler] for --drafter.'),
    ] = None,
    setting: Annotated[
        list[str] | None,
        typer.Option("--setting", help="With --model: only this sampler setting (repeat for more)."),
    ] = None,
    answer_tokens: Annotated[int | None, typer.Option(help="With --model: answer tokens (64).")] = None,
    concurrency: Annotated[str, typer.Option(help="Requests at once, comma-separated.")] = "1,2,4",
    tasks: Annotated[int | None, typer.Option(help="Only the first N tasks (of 5).")] = None,
    device: Annotated[str | None, typer.Option(help="cuda, cpu, ... (default: CUDA when present).")] = None,
    as_json: Annotated[bool, typer.Option("--json", metavar="", help="Print the figures as JSON.")] = False,
    markdown: Annotated[
        bool, typer.Option("--markdown", metavar="", help="Print the figures as a Markdown table.")
    ] = False,
) -> None:
    """A drafter's time to a first valid and a first stable edit, latency p50/p95 at 1, 2 and 4
    requests at once, tokens/s and pass rate on fixed one-bug tasks (--drafter); or NFE per token and
    tokens/s of each sampler setting (--model)."""
    if (drafter is None) == (model is None):
        raise RalphError("bench drafter: give --drafter SPEC (a drafter) or --model MODEL (sampler settings)")
    if model is not None:
        _bench_sampler_settings(model, device, setting, answer_tokens, as_json=as_json)
        return
    if setting or answer_tokens is not None:
        raise RalphError("bench drafter: --setting and --answer-tokens go with --model")
    assert drafter is not None
    from ralph.bench.bug_tasks import TASKS
    from ralph.bench.drafter import bench_drafts
    from ralph.config import check_config, read_toml

    config = check_config(read_toml(settings) if settings is not None else {})
    models = {name: m.model_dump() for name, m in config.models.items()}
    if api_base is not None:
        models[drafter] = {**models.get(drafter, {}), "api_base": api_base}
    sampler = {**config.sampler, **({"device": device} if device else {})}
    levels = _numbers(concurrency, f"--concurrency {concurrency}: give numbers, e.g. 1,2,4")
    console = _Output(stderr=True, soft_wrap=True)
    summary = bench_drafts(
        drafter, models=models, sampler=sampler, tasks=TASKS[:tasks] if tasks is not None else TASKS,
        concurrency=levels, progress=lambda line: console.print(line, markup=False),
    )  # fmt: skip
    _print_drafts(summary, as_json=as_json, markdown=markdown)


def _print_drafts(summary: dict[str, object], *, as_json: bool, markdown: bool) -> None:
    """`ralph bench drafter --drafter`'s figures: JSON, a Markdown table, or a table for a terminal."""
    from ralph.bench.drafter import LEVEL_COLUMNS, level_rows, markdown_table

    levels = cast("list[dict[str, object]]", summary["levels"])
    if as_json:
        _out(json.dumps(summary))
    elif markdown:
        _out(markdown_table(levels))
    else:
        table = Table(title=f"ralph bench drafter {summary['drafter']}: pass rate {summary['pass_rate']}")
        for _, column in LEVEL_COLUMNS:
            table.add_column(column, justify="right")
        for row in level_rows(levels):
            table.add_row(*row)
        _stdout().print(table)


def _bench_sampler_settings(
    model: str, device: str | None, settings: list[str] | None, answer_tokens: int | None, *, as_json: bool
) -> None:
    """NFE per token and tokens/s for each sampler setting on one prompt set."""
    from ralph.bench.drafter import bench_drafter

    tokens = 64 if answer_tokens is None else answer_tokens
    rows = bench_drafter(model, settings=settings, device=device, answer_tokens=tokens)
    if as_json:
        _out(json.dumps(rows))
        return
    table = Table(title=f"ralph bench drafter {model}")
    columns = ("setting", "nfe", "tokens", "tokens_per_nfe", "tokens_per_s")
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*(str(round(v, 2) if isinstance(v, float) else v) for v in (row[c] for c in columns)))
    _stdout().print(table)


_Ray = Annotated[
    str | None,
    typer.Option(
        "--ray",
        metavar="[ADDRESS]",
        help="Run the tasks on the Ray cluster at ADDRESS (its head's HOST:PORT, or auto); alone: on one started here. Needs Ray (the extra `ray`).",
    ),
]
_BENCH_FIX_ROWS = (
    "tasks",
    "fixed",
    "fix_rate",
    "errors",
    "median_time_to_green_s",
    "naive_ratio_median",
    "per_candidate_ratio_median",
    "per_candidate_ratio_min",
    "cycle_breakdown",
    "gate_verdicts",
    "plausible",
    "correct",
    "overfit",
    "retried",
    "unshipped",
    "traces",
)


@bench.command("fix")
def bench_fix_command(
    tasks: Annotated[
        Path,
        typer.Argument(
            help="A directory of projects, a TOML or JSON list of {repo, task}, or a HumanEvalFix-style JSONL file."
        ),
    ],
    out: Annotated[Path, typer.Option(help="Where repos, traces and summary.json go.")] = Path("ralph-bench"),
    workers: Annotated[
        int,
        typer.Option(help="Tasks run in parallel processes (with --ray alone: the local cluster's CPUs)."),
    ] = 1,
    ray: _Ray = None,
    limit: Annotated[int | None, typer.Option(help="Only the first N tasks.")] = None,
    drafter: Annotated[str, typer.Option(help="Drafter for every task.")] = "auto",
    max_iterations: Annotated[int, typer.Option(help="Iteration budget per task.")] = 20,
    candidates: Annotated[int, typer.Option(help="Candidates per iteration.")] = 4,
    as_json: Annotated[bool, typer.Option("--json", metavar="", help="Print the summary as JSON.")] = False,
    mutants: Annotated[
        int | None, typer.Option(help="TASKS is one project: fix N single-token mutants of it.")
    ] = None,
    python: Annotated[str | None, typer.Option(help="The projects' interpreter.")] = None,
    background_gate: _BackgroundGate = None,
    on_gate_failure: _OnGateFailure = None,
    jobs: _Jobs = None,
    settings: Annotated[
        Path | None, typer.Option("--config", help="A ralph.toml for every task (models, checks, ...).")
    ] = None,
    visible: Annotated[
        str,
        typer.Option(
            help="JSONL tasks: the tests the loop sees, full or example (then the full test judges the fix)."
        ),
    ] = "full",
) -> None:
    """The loop over a task suite: one trace per task, fix rate, time to green, r per drafter; for
    JSONL tasks, each fix judged plausible, correct or overfit."""
    from ralph.bench.fix import bench_fix
    from ralph.config import check_config, read_toml

    config = read_toml(settings) if settings is not None else {}
    config |= {"drafter": drafter, "max_iterations": max_iterations, "candidates": candidates}
    given = {"python": python, "background_gate": background_gate, "on_gate_failure": on_gate_failure}
    config |= {k: v for k, v in {**given, "jobs": jobs}.items() if v is not None}
    check_config(config)
    with _progress_bar(_Output(stderr=True, soft_wrap=True)) as (note, advance):
        summary = bench_fix(
            tasks,
            out,
            workers=workers,
            limit=limit,
            mutants=mutants,
            config=config,
            progress=note,
            advance=advance,
            visible=visible,
            ray=ray,
        )
    _print_bench_fix(summary, tasks, as_json=as_json)
    _incomplete(summary, out)


def _incomplete(summary: dict[str, Any], out: Path) -> None:
    """A bench that lacks some tasks' results ends with one line: exit 2 for the unshipped, 1 for the lost."""
    _refuse_unshipped(summary, out)
    _exit_for_lost(summary, out)


def _refuse_unshipped(summary: dict[str, Any], out: Path) -> None:
    """Tasks whose project could not be shipped are bad input: one line and exit 2, said after the
    other tasks' results are written and shown."""
    if summary["unshipped"]:
        first = next(r for r in summary["results"] if r.get("unshipped"))
        more = ", ..." if len(summary["unshipped"]) > 1 else ""
        raise RalphError(
            f"{len(summary['unshipped'])} of {summary['tasks']} tasks could not be shipped ({first['error']}"
            f"{more}); the others' results are in {out / 'summary.json'}"
        )


def _exit_for_lost(summary: dict[str, Any], out: Path) -> None:
    """Tasks whose worker failed twice have no result of their own: the bench is incomplete, exit 1
    with one line, said after the other tasks' results are written and shown."""
    from ralph.bench.on_ray import FAILED_TWICE

    lost = [r for r in summary["results"] if r["outcome"] == "error" and r["error"].startswith(FAILED_TWICE)]
    if lost:
        why = lost[0]["error"].removeprefix(FAILED_TWICE)
        more = ", ..." if len(lost) > 1 else ""
        err.print(
            f"{len(lost)} of {summary['tasks']} tasks failed twice on Ray ({lost[0]['task']}: {why}{more}); "
            f"the others' results are in {out / 'summary.json'}",
            markup=False,
            highlight=False,
        )
        raise typer.Exit(1)


def _print_bench_fix(summary: dict[str, Any], tasks: Path, *, as_json: bool) -> None:
    if as_json:
        _out(json.dumps({k: v for k, v in summary.items() if k != "results"}))
        return
    table = Table(title=f"ralph bench fix {tasks}", show_header=False)
    for key in _BENCH_FIX_ROWS:
        if key in summary and summary[key] != []:  # (retried, unshipped: no row when none)
            table.add_row(key, str(summary[key]))
    for name, d in summary["drafters"].items():
        table.add_row(f"r ({name})", f"{d['r']} over {d['iterations']} iterations")
    _stdout().print(table)


@contextlib.contextmanager
def _progress_bar(
    console: Console,
) -> Iterator[tuple[Callable[[str], None], Callable[[int, int], None]]]:
    """A bench's lines (one per finished task) and, on a terminal, a bar of the tasks done under them."""
    note = functools.partial(console.print, markup=False, highlight=False)
    if not console.is_terminal:
        yield note, lambda done, total: None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("tasks"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as bar:
        tasks = bar.add_task("tasks", total=None)
        yield note, lambda done, total: bar.update(tasks, completed=done, total=total)


@bench.command("priors")
def bench_priors_command(
    traces: Annotated[
        list[Path], typer.Argument(help="Trace files, or directories of them (a bench fix run's traces/).")
    ],
    out: Annotated[
        Path | None,
        typer.Option(help="Write them here (the shipped file is ralph/drafters/template_priors.json)."),
    ] = None,
) -> None:
    """Each template's tries and accepts over the traces: the offline drafter's priors."""
    from ralph.bench.fix import learn_priors
    from ralph.report import trace_files

    data = learn_priors(trace_files(traces))
    text = json.dumps(data, indent=1, sort_keys=True) + "\n"
    if out is None:
        _out(text, end="")
        return
    try:
        out.write_text(text)
    except OSError as exc:
        raise RalphError(f"{out}: cannot write it ({exc.strerror or exc})") from None
    _Output(stderr=True).print(f"{len(data['templates'])} templates from {data['traces']} traces -> {out}")


@app.command()
def version() -> None:
    """Print ralph's version."""
    from importlib.metadata import version as dist_version

    _out(dist_version("ralph-loop"))


class _NoHelpMetavar:
    """--help without a stray `<bool>` metavar (the help option is made by click, not by us)."""

    def get_help_option(self, ctx: Any) -> Any:
        option = super().get_help_option(ctx)  # type: ignore[misc]
        if option is not None:
            option.metavar = ""
        return option


def _numbers(text: str, error: str) -> list[int]:
    """A comma-separated list of whole numbers (`1,2,4`); bad input otherwise, with `error`."""
    try:
        return [int(part) for part in text.split(",")]
    except ValueError:
        raise RalphError(error) from None


# Options whose value may be left off (click has no such option): alone, they take this value.
_OPTIONAL_VALUES = {"--ray": "local"}


class _Command(_NoHelpMetavar, TyperCommand):
    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        return super().parse_args(ctx, _optional_values(args))


def _optional_values(args: list[str]) -> list[str]:
    """`--ray` last, before another option, or before a path that exists (the tasks: no cluster's
    address is a file here) is `--ray local`."""
    given = []
    for i, arg in enumerate(args):
        given.append(arg)
        following = args[i + 1] if i + 1 < len(args) else None
        if arg in _OPTIONAL_VALUES and (
            following is None or following.startswith("-") or os.path.exists(following)
        ):
            given.append(_OPTIONAL_VALUES[arg])
    return given


class _Group(_NoHelpMetavar, TyperGroup):
    pass


for _typer in (app, bench):
    _typer.info.cls = _Group
    for _info in _typer.registered_commands:
        _info.cls = _Command


def main() -> None:
    """Entry point: bad input is one line on stderr and exit 2, an interrupt exit 130, anything else
    (a bug) one line and exit 3; never a traceback (unless RALPH_DEBUG is set)."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    # A background start may have ignored SIGINT; Ctrl-C must interrupt the run (exit 130).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _terminate)
    try:
        code = app(standalone_mode=False)
        sys.exit(code if isinstance(code, int) else 0)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except RalphError as exc:
        err.print(f"ralph: error: {one_line(exc)}", highlight=False, markup=False)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        err.print("ralph: interrupted", highlight=False)
        sys.exit(130)
    except Exception as exc:  # a bug, not bad input: still one line, details on request
        if isinstance(exc, _usage_errors()):
            exc.show()  # type: ignore[attr-defined]
            sys.exit(exc.exit_code)  # type: ignore[attr-defined]
        if os.environ.get("RALPH_DEBUG"):
            raise
        err.print(
            f"ralph: internal error: {one_line(exc)} (RALPH_DEBUG=1 shows details)",
            highlight=False,
            markup=False,
        )
        sys.exit(3)


def _next_steps(outcome: Any) -> list[str]:
    """What happened, in a few lines, and what to run next."""
    from ralph.endings import budget_spent, still_failing, uncommitted, why

    result = outcome.result
    if result.outcome == "goal" and result.remaining_at_start == 0:
        return ["nothing to fix: every target test and check already passes"]
    lines = []
    if result.outcome != "goal":
        lines += [line for line in [still_failing(result.final)] if line] if result.final else []
        lines += [line for line in [uncommitted(result.uncommitted)] if line]
        lines += why(result.outcome, result.state, outcome.project, outcome.python, result.history)
        lines += budget_spent(result)
    if not outcome.branch or outcome.toplevel is None or outcome.base_commit is None:
        return lines
    from ralph.gitops import run_git

    stat = run_git(outcome.toplevel, "diff", "--stat", "--no-color", outcome.base_commit, outcome.branch)
    lines += [line.rstrip() for line in stat.splitlines() if line.strip()]
    if outcome.applied:
        lines.append(f"applied to your working tree: {', '.join(outcome.applied)}")
    return [*lines, _next_commands(outcome, bool(outcome.applied))]


def _next_commands(outcome: Any, applied: bool) -> str:
    """How to see the fix and take it, in commands that work where the user stands: on a clean tree
    the branch is one commit on their HEAD (`git merge` fast-forwards); with uncommitted changes it
    sits on a snapshot of them, so the fix goes in as a patch onto the working tree (which `git apply`
    refuses whole when a file changed since). A file the fix changed that is untracked in the user's
    tree is not in the branch's base (the branch adds it whole): both would refuse it, so it is
    restored from the branch, and the rest goes in as a patch."""
    from ralph.gitops import run_git

    branch, base = outcome.branch, outcome.base_commit
    top = Path(outcome.toplevel)
    git = f"git -C {shlex.quote(str(top))}"
    quoted = shlex.quote(branch)
    steps = int(run_git(top, "rev-list", "--count", f"{base}..{branch}").strip() or 0)
    show = f"{git} show {quoted}" if steps == 1 else f"{git} diff {base[:12]} {quoted}"
    if applied:
        return f"next: {show}"
    changed = run_git(top, "diff", "--name-only", "--no-renames", "-z", base, branch).split("\0")
    known = set(run_git(top, "ls-tree", "-r", "-z", "--name-only", base).split("\0"))
    untracked = [p for p in changed if p and p not in known and (top / p).exists()]
    if outcome.head == base and not untracked:
        return f"next: {show}   |   {git} merge {quoted}"
    patch = f"{git} diff --binary --no-color --no-ext-diff {base[:12]} {quoted}"
    if untracked:
        rest = [p for p in changed if p and p not in untracked]
        restore = f"{git} restore --source={quoted} --worktree -- {' '.join(map(shlex.quote, untracked))}"
        if not rest:
            return f"next: {show}   |   {restore}"
        paths = " ".join(map(shlex.quote, rest))
        return f"next: {show}   |   {patch} -- {paths} | {git} apply && {restore}"
    return f"next: {show}   |   {patch} | {git} apply"


def _usage_errors() -> tuple[type[Exception], ...]:
    """click's exception base, as typer raises it: typer 0.29 vendors its own copy of click
    (`typer._click`), whose exceptions are not `click.ClickException`; older typers use click's."""
    found: list[type[Exception]] = []
    for module in ("typer._click.exceptions", "click.exceptions"):
        try:
            found.append(__import__(module, fromlist=["ClickException"]).ClickException)
        except (ImportError, AttributeError):
            continue
    return tuple(found)


def _terminate(signum: int, frame: object) -> None:
    raise KeyboardInterrupt
