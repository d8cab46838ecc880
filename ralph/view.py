"""What the terminal shows: a live line per iteration and a summary table at the end."""

from __future__ import annotations

import sys
from typing import Any

from rich.console import Console
from rich.status import Status
from rich.table import Table
from rich.text import Text

from ralph.domain.events import IterationRecord


class QuietView:
    """For --json, benchmarks and tests: iterations are not shown; notices go to stderr unless muted."""

    def __init__(self, notices: bool = True) -> None:
        self.notices = notices

    def iteration(self, record: IterationRecord) -> None:
        pass

    def notice(self, text: str) -> None:
        if self.notices:
            print(f"ralph: {text}", file=sys.stderr)

    def progress(self, text: str) -> None:
        pass


class RichView:
    """A live status line (what is being verified now) above which each finished iteration is printed:
    drafter, candidates tried, remaining error, verdict."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.status = Status("verifying the starting state", console=console)

    def __enter__(self) -> RichView:
        self.status.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.status.stop()

    def progress(self, text: str) -> None:
        self.status.update(Text(plain(text)))

    def notice(self, text: str) -> None:
        self.console.print(Text.assemble(("ralph:", "yellow"), " ", plain(text)), highlight=False)

    def iteration(self, record: IterationRecord) -> None:
        # What came from the project or a model (test ids, messages, descriptions) is text: never
        # Rich markup, never a terminal escape sequence (a forged test id once made a hyperlink).
        candidates = record["candidates"]
        last = candidates[-1] if candidates else None
        verdict = "nothing to try" if last is None else f"{last['verdict']}: {last['reason']}"
        if record["accepted"] and "state" in record:  # its gate runs beside the loop: not yet true
            verdict = verdict.replace("accepted", "accepted, gate pending", 1)
        style = "green" if record["accepted"] else "dim"
        line = Text.assemble(
            (f"#{record['i']}", "bold"),
            f" {plain(str(record['drafter']))} · {len(candidates)} tried · "
            f"remaining {record['remaining_before']} → {record['remaining_after']} · ",
            (plain(verdict), style),
            f" · draft {record['draft_ms']:.0f} ms, verify {record['verify_ms']:.0f} ms",
        )
        self.console.print(line, highlight=False)


def plain(text: str) -> str:
    """`text` without control characters (escape sequences included), for the terminal."""
    return "".join(
        c if c in "\t\n" or (c >= " " and c != "\x7f" and not 0x80 <= ord(c) < 0xA0) else "?" for c in text
    )


def summary_table(summary: dict[str, Any]) -> Table:
    table = Table(title="ralph fix", show_header=False)
    table.add_column("what", no_wrap=True)
    table.add_column("value", overflow="fold")  # a long path folds to the terminal's width, never cut
    for key in ("outcome", "iterations", "accepted", "remaining", "branch", "trace", "wall_s", "baseline_s"):
        value = summary.get(key)
        table.add_row(key, Text("—" if value is None else plain(str(value))))
    for line in summary.get("disabled_stages") or ():
        table.add_row("stage off", Text(plain(line)))
    untracked = summary.get("untracked_not_committed") or []
    if untracked:
        shown = ", ".join(untracked[:8]) + (f" (+{len(untracked) - 8} more)" if len(untracked) > 8 else "")
        table.add_row(
            "untracked", Text(plain(f"used, not committed: {shown} (--include-untracked commits them)"))
        )
    return table


def report_tables(data: dict[str, Any], budget_s: float) -> list[Table]:
    """`ralph report`: one table of runs, one of drafters (r, cycle time, what it predicts)."""
    runs = Table(title="Runs")
    runs.add_column("run")
    runs.add_column("repo")
    runs.add_column("task", max_width=40, overflow="fold")  # a long task wraps, never cut
    for column in (
        "drafters",
        "outcome",
        "iters",
        "accepted",
        "error",
        "to green",
        "wall",
        "draft/verify/other",
        "gate (beside)",
    ):
        runs.add_column(column)
    for r in data["runs"]:
        f = r["fractions"]
        green = "—" if r["time_to_green_s"] is None else f"{r['time_to_green_s']:.1f}s"
        runs.add_row(
            r["run_id"],
            Text(plain(r.get("repo", ""))),
            Text(plain(r.get("task", "")) or "—"),
            "+".join(r["drafters"]),
            r["outcome"],
            str(r["iterations"]),
            str(r["accepted"]),
            f"{r['remaining_at_start']} → {r['remaining']}",
            green,
            f"{r['wall_s']:.1f}s",
            f"{f['draft']:.0%} / {f['verify']:.0%} / {f['overhead']:.0%}",
            f"{f.get('gate', 0.0):.0%}",
        )
    drafters = Table(title="Improvement per step (r = sum of error removed / sum of error faced)")
    for column in (
        "drafter",
        "r",
        "iters",
        "accepted",
        "cycle",
        "projected: fixed after 10 steps",
        f"projected: fixed in {budget_s:.0f}s",
    ):
        drafters.add_column(column)
    for name, d in data["drafters"].items():
        r, cycle = d["r"], d["median_cycle_s"]
        in_budget = 1 - (1 - r) ** (budget_s / cycle) if cycle > 0 else 0.0
        # 1 - (1 - r)^n projects from what was accepted: with nothing accepted there is nothing to project.
        projected = (f"{1 - (1 - r) ** 10:.0%}", f"{in_budget:.0%}") if d["accepted"] else ("—", "—")
        drafters.add_row(
            name, f"{r:.3f}", str(d["iterations"]), str(d["accepted"]), f"{cycle:.2f}s", *projected
        )
    return [runs, drafters]
