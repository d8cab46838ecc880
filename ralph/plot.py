"""`ralph report --plot`: remaining error against iteration and against wall time (matplotlib extra)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ralph.domain.errors import RalphError
from ralph.report import RunStats, run_stats
from ralph.trace_reader import Run, TracedStart


def plot_runs(runs: Sequence[Run], output: Path) -> None:
    """Write a PNG with one line per run, labelled with its drafters."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise RalphError("--plot needs matplotlib: pip install 'ralph-loop[plot]'") from None
    from matplotlib.ticker import MaxNLocator

    fig, (by_step, by_time) = plt.subplots(1, 2, figsize=(11, 4.2))
    markers = "os^vD<>ph*"
    for n, run in enumerate(runs):
        if not run.iterations:
            continue
        steps, times = run.steps, run.times  # what was gated: a provisional accept is no progress
        # Runs that overlap stay apart: a marker each, and a small vertical offset.
        lift = 0.04 * (n % 5)
        style = {
            "where": "post",
            "label": run_label(run, run_stats(run)),
            "marker": markers[n % len(markers)],
        }
        by_step.step(range(len(steps)), [v + lift for v in steps], markersize=4, **style)
        by_time.step([t for t, _ in times], [v + lift for _, v in times], markersize=4, **style)
    by_step.set(xlabel="iteration", ylabel="remaining error", title="Remaining error per iteration")
    by_time.set(
        xlabel="time since the loop started (s)", ylabel="remaining error", title="Remaining error over time"
    )
    for axis in (by_step.xaxis, by_step.yaxis, by_time.yaxis):
        axis.set_major_locator(MaxNLocator(integer=True))  # iterations and errors are counts
    by_step.legend(fontsize="small")
    fig.tight_layout()
    output.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(output, format="png", dpi=110)
    plt.close(fig)


def run_label(run: Run, stats: RunStats) -> str:
    """A run as a reader knows it: its project and task, its drafters, then its id."""
    start = run.start or TracedStart()
    project = Path(start.repo or "?").name
    if start.project is not None:
        project += f"/{start.project}"
    task = start.task.strip()
    task = f" · {task[:30]}{'...' if len(task) > 30 else ''}" if task else ""
    return f"{project}{task} · {'+'.join(stats.drafters)} ({stats.run_id})"
