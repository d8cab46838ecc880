"""`ralph report --plot`: remaining error against iteration and against wall time (matplotlib extra)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ralph.domain.errors import RalphError
from ralph.report import run_stats


def plot_runs(loaded: Sequence[tuple[Path, list[dict[str, Any]]]], output: Path) -> None:
    """Write a PNG with one line per run, labelled with its drafters."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise RalphError("--plot needs matplotlib: pip install 'ralph-loop[plot]'") from None
    fig, (by_step, by_time) = plt.subplots(1, 2, figsize=(11, 4.2))
    for path, records in loaded:
        stats = run_stats(records, str(path))
        iterations = [r for r in records if r.get("type") == "iteration"]
        if not iterations:
            continue
        label = f"{'+'.join(stats.drafters)} ({stats.run_id})"
        remaining = [iterations[0]["remaining_before"], *(r["remaining_after"] for r in iterations)]
        elapsed = [0.0, *(r.get("elapsed_s", 0.0) for r in iterations)]
        by_step.step(range(len(remaining)), remaining, where="post", label=label)
        by_time.step(elapsed, remaining, where="post", label=label)
    by_step.set(xlabel="iteration", ylabel="remaining error", title="Remaining error per iteration")
    by_time.set(xlabel="wall time (s)", ylabel="remaining error", title="Remaining error over time")
    by_step.legend(fontsize="small")
    fig.tight_layout()
    output.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(output, format="png", dpi=110)
    plt.close(fig)
