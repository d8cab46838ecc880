"""How `ralph bench fix` scales with its workers, on the local pool and on a Ray cluster started here:
the same tasks four ways (1 and 2 local workers, 1 and 2 Ray CPUs), each run through the real entry
point and timed whole (a Ray run's time includes starting and stopping its cluster), `--repeat`
times in turn; printed as a Markdown table with each median's ratio to one local worker's, and
whether every run fixed the same tasks.

    python -m tests.bench_scaling TASKS [--limit 10] [--repeat 2] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SETUPS = {
    "local pool, 1 worker": ["--workers", "1"],
    "local pool, 2 workers": ["--workers", "2"],
    "Ray (local cluster), 1 CPU": ["--workers", "1", "--ray"],
    "Ray (local cluster), 2 CPUs": ["--workers", "2", "--ray"],
}


def timed(tasks: Path, limit: int, out: Path, flags: list[str]) -> tuple[float, frozenset[str]]:
    """One whole run's wall time, and the tasks it fixed."""
    argv = [sys.executable, "-m", "ralph", "bench", "fix", str(tasks), "--limit", str(limit)]
    began = time.perf_counter()
    run = subprocess.run([*argv, "--out", str(out), "--json", *flags], capture_output=True, text=True)
    took = time.perf_counter() - began
    if run.returncode != 0:
        raise SystemExit(f"{' '.join(flags)}: exit {run.returncode}: {run.stderr.strip()[-500:]}")
    results = json.loads((out / "summary.json").read_text())["results"]
    return took, frozenset(r["task"] for r in results if r["outcome"] == "goal")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tasks", type=Path)
    parser.add_argument("--limit", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path(tempfile.mkdtemp(prefix="ralph-scaling-")))
    args = parser.parse_args()
    times: dict[str, list[float]] = {name: [] for name in SETUPS}
    fixed: set[frozenset[str]] = set()
    for i in range(args.repeat):
        for n, (name, flags) in enumerate(SETUPS.items()):
            took, done = timed(args.tasks, args.limit, args.out / f"{i}-{n}", flags)
            times[name].append(took)
            fixed.add(done)
            print(f"{name}, run {i + 1}: {took:.1f} s, {len(done)} fixed", file=sys.stderr)
    base = statistics.median(times["local pool, 1 worker"])
    print(f"| {args.limit} tasks, {args.repeat} runs each | wall time (median) | runs | vs 1 local worker |")
    print("|---|---|---|---|")
    for name, took in times.items():
        median = statistics.median(took)
        runs = ", ".join(f"{t:.1f}" for t in took)
        print(f"| {name} | {median:.1f} s | {runs} | {base / median:.2f}x |")
    counts = ", ".join(str(len(f)) for f in fixed)
    print(f"\nthe same tasks fixed by every run: {'yes' if len(fixed) == 1 else 'no'} (fixed: {counts})")


if __name__ == "__main__":
    main()
