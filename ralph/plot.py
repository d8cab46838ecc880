"""`ralph report --plot`: remaining error against iteration and against wall time (matplotlib extra)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ralph.domain.errors import RalphError
from ralph.report import RunStats, run_stats
from ralph.trace_reader import Run


def plot_runs(runs: Sequence[Run], output: Path) -> None:
    """Write a PNG with one line per run, labelled with its repository, task and drafters."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise RalphError("--plot needs matplotlib: pip install 'ralph-loop[plot]'") from None
    fig = figure(runs)
    output.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(output, format="png", dpi=110)
    plt.close(fig)


def figure(runs: Sequence[Run]) -> Any:
    """The two plots side by side, and below them, outside both, the legend: a line per run (inside
    an axes, the legend covered the lines it names)."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    plotted = [run for run in runs if run.iterations]
    columns = 1 if len(plotted) <= 8 else 2
    rows = -(-len(plotted) // columns)
    fig, (by_step, by_time) = plt.subplots(1, 2, figsize=(11, 4.2 + 0.22 * rows), layout="constrained")
    markers = "os^vD<>ph*"
    for n, run in enumerate(plotted):
        steps, times = run.steps, run.times  # what was gated: a provisional accept is no progress
        # Runs that overlap stay apart: a marker each, and a small vertical offset.
        lift = 0.04 * (n % 5)
        style = {
            "where": "post",
            "label": run_label(run_stats(run)),
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
    if plotted:
        fig.legend(
            *by_step.get_legend_handles_labels(), loc="outside lower center", ncols=columns, fontsize="small"
        )
    return fig


def run_label(stats: RunStats) -> str:
    """A run as a reader knows it: its repository and task, its drafters, then its id."""
    task = f" · {stats.task[:30]}{'...' if len(stats.task) > 30 else ''}" if stats.task else ""
    return f"{stats.repo}{task} · {'+'.join(stats.drafters)} ({stats.run_id})"
