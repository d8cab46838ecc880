"""Can rival fixes tell a plausible fix from a correct one? A study on HumanEvalFix (issue 29).

For each task, every single-edit mutant the offline drafter's templates make of the buggy function
(`generate_mutants` over the function's lines) is run, in the sandbox, against the task's
`example_test` and its full `test`, compared with `canonical_solution` (the judge's criterion:
passes the full test and answers as the canonical solution does on the tests' inputs and their
neighbours; with shorter limits than the judge's: 1 s for a test, 1 s an input), and called on the
visible test's inputs and their neighbours (the judge's steps, and wider ones: a string shortened,
lengthened, reversed or its case swapped, a list's numbers moved), 0.25 s an input.

The mutants a test lets pass are that test's plausible fixes. Printed as a Markdown table, with the
example test visible and with the full test visible: what is accepted and how much of it is overfit
when the cheapest plausible mutant is taken; when a fix is refused as soon as another plausible
fix answers differently on a neighbour where both answered in time (the tests do not pin the
function down); and with an oracle that takes a correct plausible fix wherever there is one (the
floor for any chooser that never refuses). A task whose sandboxed run did not finish is counted
apart, as lost.

    python -m tests.study_rival_fixes ../shared/data/humanevalfix/humanevalpack.jsonl [--limit N]
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ralph.bench.judge import SANDBOX_HELPERS, inputs
from ralph.drafters.mutation_ops import generate_mutants
from ralph.sandboxes import select_sandbox

# Run in the sandbox, one task: each mutant loaded, run against both tests, judged against the
# canonical solution and called on the neighbours; writes out.json.
_WORKER = (
    SANDBOX_HELPERS
    + r"""
sys.setrecursionlimit(5000)  # (as the figures in docs/benchmarks.md were measured)
def answer(space, entry, args):
    state, value = within(0.25, lambda: space[entry](*copy.deepcopy(args)))
    if state != "ok":
        return f"{state}:{value}"
    try:
        return f"f{value:.6g}" if isinstance(value, float) else repr(value)[:300]
    except BaseException:
        return "unprintable"
def load(source):
    space = {"__name__": "solution"}
    exec(compile(source, "solution.py", "exec"), space)
    return space
def passes(space, test):
    return within(1, lambda: exec(compile(test, "test.py", "exec"), dict(space)))[0] == "ok"
task = json.load(open("task.json"))
entry = task["entry"]
canonical = load(task["canonical"])
judged = [(args, within(1, lambda a=args: canonical[entry](*copy.deepcopy(a)))) for args in task["judge_inputs"]]
out = []
for source in task["mutants"]:
    state, space = within(2, lambda: load(source))
    if state != "ok":
        out.append(None)
        continue
    example, full = passes(space, task["example_test"]), passes(space, task["test"])
    correct = full and all(
        want[0] != "ok" or (lambda got: got[0] == "ok" and same(got[1], want[1]))(
            within(1, lambda a=args: space[entry](*copy.deepcopy(a)))
        )
        for args, want in judged
    )
    plausible = example or full
    out.append({
        "example": example, "full": full, "correct": correct,
        "answers": {k: [answer(space, entry, a) for a in task[k]] for k in task["neighbourhoods"]} if plausible else {},
    })
json.dump(out, open("out.json", "w"))
"""
)

NEIGHBOURHOODS = ("example_near", "example_wide", "full_near", "full_wide")


class Lost(Exception):
    """A task's sandboxed run ended without its verdict (it outlived its limit, or crashed)."""


def wide_steps(value: Any) -> list[Any]:
    """More neighbours than the judge's: strings too (shorter, longer, reversed, case swapped,
    empty), an integer to zero or negated, a list of integers each moved by one, negated or sorted."""
    if isinstance(value, bool):
        return [not value]
    if isinstance(value, int):
        return [value - 1, value + 1, 0, -value]
    if isinstance(value, float):
        return [value - 0.5, value + 0.5]
    if isinstance(value, str):
        moved = ["", value[:-1], value[1:], value + value[-1:], value[::-1], value.swapcase(), value * 2]
    elif isinstance(value, list):
        moved = [value[:-1], value + value[-1:], value[::-1], value[1:], []] if value else [[0], [1]]
        if value and all(isinstance(x, int) and not isinstance(x, bool) for x in value):
            moved += [[x + 1 for x in value], [-x for x in value], sorted(value)]
    else:
        return []
    return [m for m in moved if m != value]


def neighbourhood(test: str, entry: str, wide: bool) -> list[tuple[Any, ...]]:
    """The test's own argument tuples and their neighbours (the judge's, or `wide_steps`)."""
    if not wide:
        return [args for args, _ in inputs(test, entry)]
    found: dict[str, tuple[Any, ...]] = {}
    own = [args for args, near in inputs(test, entry) if not near]
    for args in own:
        found.setdefault(repr(args), args)
    for args in own:
        for i, value in enumerate(args):
            for moved in wide_steps(value):
                near = (*args[:i], moved, *args[i + 1 :])
                found.setdefault(repr(near), near)
    return list(found.values())[:200]


def study_task(row: dict[str, Any], python: str, sandbox: str) -> list[dict[str, Any]] | None:
    """Every plausible mutant of the task's buggy function, judged (None: the task has no example);
    raises Lost when the sandboxed run gave no verdict."""
    source, entry = row["prompt"] + row["buggy_solution"], row["entry_point"]
    found = [n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name == entry]
    if not row.get("example_test") or not found:
        return None
    lines = list(range(found[-1].body[0].lineno, (found[-1].end_lineno or 0) + 1))
    mutants = generate_mutants(source, lines)
    task = {
        "entry": entry,
        "canonical": row["prompt"] + row["canonical_solution"],
        "example_test": row["example_test"],
        "test": row["test"],
        "judge_inputs": [args for args, _ in inputs(row["test"], entry)],
        "example_near": neighbourhood(row["example_test"], entry, wide=False),
        "example_wide": neighbourhood(row["example_test"], entry, wide=True),
        "full_near": neighbourhood(row["test"], entry, wide=False),
        "full_wide": neighbourhood(row["test"], entry, wide=True),
        "neighbourhoods": NEIGHBOURHOODS,
        "mutants": [m.source for m in mutants],
    }
    with tempfile.TemporaryDirectory(prefix="ralph-rivals-") as tmp:
        folder = Path(tmp)
        (folder / "task.json").write_text(json.dumps(task, default=list), encoding="utf-8")
        box = select_sandbox(sandbox, folder, [folder])
        try:
            box.run([python, "-c", _WORKER], cwd=str(box.mount_at or folder), timeout_s=600)
        finally:
            box.close()
        try:
            judged = json.loads((folder / "out.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            raise Lost(row["task_id"]) from None
    calls = {  # the literal calls of the function each test makes (its own inputs, no neighbours)
        "example": sum(not near for _, near in inputs(row["example_test"], entry)),
        "full": sum(not near for _, near in inputs(row["test"], entry)),
    }
    return [
        {**j, "cost": m.cost, "edit": m.description, "calls": calls}
        for m, j in zip(mutants, judged, strict=True)
        if j is not None and (j["example"] or j["full"])
    ]


def outcome(
    tasks: list[list[dict[str, Any]]], seen: str, refuse_on: str | None, weak_below: int | None = None
) -> dict[str, int]:
    """With the `seen` test visible ("example" or "full"): accepted (the cheapest plausible mutant),
    overfit among them, and the tasks refused because a rival differs on the `refuse_on`
    neighbourhood (None: never refused; "oracle": a correct plausible mutant wherever there is one),
    with `weak_below` only where that test calls the function on fewer literal inputs than that."""
    counts = {"plausible": 0, "accepted": 0, "overfit": 0, "refused": 0, "refused_correct": 0}
    for mutants in tasks:
        fixes = [m for m in mutants if m[seen]]
        if not fixes:
            continue
        counts["plausible"] += 1
        pick = min(fixes, key=lambda m: m["cost"])
        if refuse_on == "oracle":
            pick = next((m for m in fixes if m["correct"]), pick)
        elif (
            refuse_on is not None
            and (weak_below is None or pick["calls"][seen] < weak_below)
            and any(differ(pick, m, refuse_on) for m in fixes)
        ):
            counts["refused"] += 1
            counts["refused_correct"] += pick["correct"]
            continue
        counts["accepted"] += 1
        counts["overfit"] += not pick["correct"]
    return counts


def differ(a: dict[str, Any], b: dict[str, Any], neighbourhood: str) -> bool:
    """Whether two fixes answer differently on an input of `neighbourhood` where both answered in time."""
    return any(
        x != y and "timeout:" not in (x[:8], y[:8])
        for x, y in zip(a["answers"][neighbourhood], b["answers"][neighbourhood], strict=True)
    )


POLICIES: dict[str, tuple[str | None, str | None, int | None]] = {
    "the cheapest plausible mutant": (None, None, None),
    "refused where a rival differs on the judge's neighbours": ("example_near", "full_near", None),
    "refused where a rival differs on wider neighbours": ("example_wide", "full_wide", None),
    "the same, only where the test calls the function on fewer than 5 literal inputs": (
        "example_wide",
        "full_wide",
        5,
    ),
    "an oracle: a correct plausible mutant where there is one": ("oracle", "oracle", None),
}


def table(tasks: list[list[dict[str, Any]]]) -> str:
    rows = [
        "| policy | example visible: accepted | overfit (rate) | correct refused | full test visible: accepted | correct refused |",
        "|---|---|---|---|---|---|",
    ]
    for name, (on_example, on_full, weak_below) in POLICIES.items():
        ex = outcome(tasks, "example", on_example, weak_below)
        full = outcome(tasks, "full", on_full, weak_below)
        rate = ex["overfit"] / max(1, ex["accepted"])
        rows.append(
            f"| {name} | {ex['accepted']} of {ex['plausible']} | {ex['overfit']} ({rate:.1%}) | "
            f"{ex['refused_correct']} | {full['accepted']} of {full['plausible']} | {full['refused_correct']} |"
        )
    return "\n".join(rows)


def _or_lost(row: dict[str, Any], sandbox: str) -> list[dict[str, Any]] | str | None:
    try:
        return study_task(row, sys.executable, sandbox)
    except Lost as lost:
        return str(lost)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tasks", type=Path)
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--sandbox", default="bwrap")
    parser.add_argument("--out", type=Path, default=None, help="Also write every judged mutant here (JSON).")
    args = parser.parse_args()
    rows = [json.loads(line) for line in args.tasks.read_text(encoding="utf-8").splitlines() if line.strip()]
    rows = rows[: args.limit]
    with ThreadPoolExecutor(args.workers) as pool:
        judged = list(pool.map(lambda row: _or_lost(row, args.sandbox), rows))
    tasks = [t for t in judged if isinstance(t, list)]
    lost = [t for t in judged if isinstance(t, str)]
    if args.out is not None:
        args.out.write_text(json.dumps(dict(zip((r["task_id"] for r in rows), judged, strict=True))))
    print(f"{len(tasks)} tasks with an example test" + (f"; lost: {', '.join(lost)}" if lost else ""))
    print(table(tasks))


if __name__ == "__main__":
    main()
