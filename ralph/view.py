"""What the terminal shows: a live line per iteration and a summary table at the end."""

from __future__ import annotations

import sys
from typing import Any

from rich.console import Console
from rich.status import Status
from rich.table import Table


class QuietView:
    """For --json and tests: iterations are not shown; notices still go to stderr."""

    def iteration(self, record: dict[str, Any]) -> None:
        pass

    def notice(self, text: str) -> None:
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
        self.status.update(text)

    def notice(self, text: str) -> None:
        self.console.print(f"[yellow]ralph:[/] {text}", highlight=False)

    def iteration(self, record: dict[str, Any]) -> None:
        candidates = record["candidates"]
        last = candidates[-1] if candidates else None
        verdict = "nothing to try" if last is None else f"{last['verdict']}: {last['reason']}"
        style = "green" if record["accepted"] else "dim"
        self.console.print(
            f"[bold]#{record['i']}[/] {record['drafter']} · {len(candidates)} tried · "
            f"remaining {record['remaining_before']} → {record['remaining_after']} · "
            f"[{style}]{verdict}[/] · draft {record['draft_ms']:.0f} ms, verify {record['verify_ms']:.0f} ms",
            highlight=False,
        )


def summary_table(summary: dict[str, Any]) -> Table:
    table = Table(title="ralph fix", show_header=False)
    for key in ("outcome", "iterations", "accepted", "remaining", "branch", "trace", "wall_s"):
        value = summary.get(key)
        table.add_row(key, "—" if value is None else str(value))
    return table
