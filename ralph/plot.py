"""`ralph report --plot`: remaining error against iteration and against wall time (matplotlib extra)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ralph.domain.errors import RalphError
from ralph.report import gated_progress, run_stats


def plot_runs(loaded: Sequence[tuple[Path, list[dict[str, Any]]]], output: Path) -> None:
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
    for n, (path, records) in enumerate(loaded):
        stats = run_stats(records, str(path))
        if not any(r.get("type") == "iteration" for r in records):
            continue
        steps, times = gated_progress(records)  # what was gated: a provisional accept is no progress
        # Runs that overlap stay apart: a marker each, and a small vertical offset.
        lift = 0.04 * (n % 5)
        style = {"where": "post", "label": run_label(records, stats), "marker": markers[n % len(markers)]}
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


def run_label(records: Sequence[dict[str, Any]], stats: Any) -> str:
    """A run as a reader knows it: its project and task, its drafters, then its id."""
    start = next((r for r in records if r.get("type") == "run_start"), {})
    project = Path(str(start.get("repo") or "?")).name
    if start.get("project") not in (None, "", "."):
        project += f"/{start['project']}"
    task = str(start.get("task") or "").strip()
    task = f" · {task[:30]}{'...' if len(task) > 30 else ''}" if task else ""
    return f"{project}{task} · {'+'.join(stats.drafters)} ({stats.run_id})"
