"""A parameter an edit cut from what its function does: the pure reading (`dataflow.cuts`), and the
plausibility stage rejecting such a fix on a real repository, the right fix accepted after it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ralph.config import RunConfig
from ralph.domain.candidate import FileChange, edit_size
from ralph.session import fix
from ralph.trace import read_trace
from ralph.validators.dataflow import cuts, swallowed
from ralph.view import QuietView
from tests.conftest import git

RESCALE = """def rescale(value, old_min, old_max, new_min, new_max):
    if new_max < new_min:
        raise ValueError("new_max is below new_min")
    ratio = (value - old_min) / (old_max - old_min)
    return new_min + ratio * (new_max - old_min)
"""
# Passes a weak test (new_min == 0) and ignores new_max in the result: it is read on the check alone.
CUT = RESCALE.replace("(new_max - old_min)", "(new_min - old_min)")
RIGHT = RESCALE.replace("(new_max - old_min)", "(new_max - new_min)")


def _cut(before: str, after: str) -> list[tuple[str, str, str]]:
    return [(c.function, c.parameter, c.kind) for c in cuts(before, after)]


def test_a_parameter_cut_from_the_result_is_found_though_still_read():
    assert _cut(RESCALE, CUT) == [("rescale", "new_max", "result")]
    assert cuts(RESCALE, CUT)[0].message() == "parameter `new_max` of rescale no longer reaches its result"


def test_a_fix_that_keeps_every_parameter_flowing_cuts_nothing():
    assert _cut(RESCALE, RIGHT) == []
    # through a new local, a loop, a container, a condition over the result
    through = RESCALE.replace(
        "    return new_min + ratio * (new_max - old_min)\n",
        "    span = [new_max]\n    for top in span:\n        width = top - new_min\n"
        "    return new_min + ratio * width\n",
    )
    assert _cut(RESCALE, through) == []


def test_a_raise_and_an_effect_cut_are_found_too():
    before = "def put(store, key, value):\n    if key is None:\n        raise KeyError(key)\n    store[key] = value\n"
    assert (
        _cut(before, before.replace("raise KeyError(key)", "raise KeyError('missing')")) == []
    )  # (key: the if)
    assert _cut(before, before.replace("store[key] = value", "store[key] = None")) == [
        ("put", "value", "effect")
    ]
    logs = "def log(lines, text):\n    lines.append(text)\n"
    assert _cut(logs, logs.replace("append(text)", "append('')")) == [("log", "text", "effect")]


def test_an_outcome_the_edit_removed_altogether_is_no_cut():
    """A return a mutant added (`return key` early in `__init__`), taken out by the true fix."""
    fixed = "class A:\n    def __init__(self, *args):\n        self.items = list(args)\n"
    mutant = fixed.replace("        self.items", "        return args\n        self.items")
    assert _cut(mutant, fixed) == []
    assert _cut(mutant, fixed.replace("list(args)", "[]")) == [("A.__init__", "args", "effect")]


def test_only_the_functions_the_edit_changed_and_never_self():
    before = "class A:\n    def name(self, x):\n        return self.x + x\n\n\ndef other(y):\n    return y\n"
    after = before.replace("return self.x + x", "return 1 + x")
    assert _cut(before, after) == []  # (self is the instance, not a value the method was given)
    assert _cut(before, before.replace("return y", "return 2")) == [("other", "y", "result")]
    assert cuts(before, "def broken(:\n") == []  # (the syntax stage says why)


def _run(repo: Path, tmp_path: Path, **config: object):
    file = tmp_path / "edits.jsonl"
    records = [{"description": "cut new_max", "files": {"scale.py": CUT}}, {"files": {"scale.py": RIGHT}}]
    file.write_text("".join(json.dumps(r) + "\n" for r in records))
    settings = RunConfig(drafter=f"replay:{file}", candidates=1, **config)
    return fix(repo, settings, view=QuietView(notices=False))


@pytest.mark.slow
def test_a_fix_that_cuts_a_parameter_from_the_result_is_rejected_and_the_right_one_accepted(
    make_repo, tmp_path
):
    repo = make_repo(
        {
            "scale.py": RESCALE,
            # Weak: the cut fix passes it too (10 + 0.5 * (10 - 0) == 10 + 0.5 * (20 - 10)).
            "tests/test_scale.py": "from scale import rescale\n\n\n"
            "def test_rescale():\n    assert rescale(5, 0, 10, 10, 20) == 15\n",
        }
    )
    outcome = _run(repo, tmp_path)
    first, second = (r for r in read_trace(outcome.trace) if r["type"] == "iteration")
    [rejected] = first["candidates"]
    assert rejected["verdict"] == "rejected" and rejected["failed_stage"] == "plausibility"
    assert "parameter `new_max` of rescale no longer reaches its result" in rejected["reason"]
    assert second["candidates"][0]["verdict"] == "accepted"
    assert git(repo, "show", f"{outcome.branch}:scale.py") == RIGHT


def _swallowed(before: str, after: str) -> list[tuple[str, str]]:
    return [(s.function, s.caught) for s in swallowed(before, after)]


SUM = "def total(xs):\n    return sum(int(x) for x in xs)\n"


def test_an_added_handler_that_catches_anything_and_hides_it_is_found():
    hidden = "def total(xs):\n    try:\n        return sum(int(x) for x in xs)\n    except Exception:\n        return 0\n"
    assert _swallowed(SUM, hidden) == [("total", "Exception")]
    bare = hidden.replace("except Exception:\n        return 0", "except:\n        pass")
    assert _swallowed(SUM, bare) == [("total", "every exception")]
    assert swallowed(SUM, hidden)[0].message() == (
        "total now swallows Exception (its handler does nothing or returns a constant)"
    )
    assertion = hidden.replace("except Exception:", "except (ValueError, AssertionError):")
    assert _swallowed(SUM, assertion) == [("total", "(ValueError, AssertionError)")]


def test_a_named_exception_handled_or_a_handler_already_there_is_no_finding():
    named = hidden = (
        "def total(xs):\n    try:\n        return sum(int(x) for x in xs)\n    except ValueError:\n        return 0\n"
    )
    assert _swallowed(SUM, named) == []  # (a default for a named failure is often the fix itself)
    hidden = named.replace("ValueError", "Exception")
    assert _swallowed(hidden, hidden.replace("int(x)", "float(x)")) == []  # (the project's own)
    raises = hidden.replace("        return 0\n", "        raise\n")
    assert _swallowed(SUM, raises) == []


MEAN = "def mean(xs):\n    return sum(xs) / len(xs)\n"
HIDES = "def mean(xs):\n    try:\n        return sum(xs) / len(xs)\n    except Exception:\n        return 0\n"
EMPTY = "def mean(xs):\n    if not xs:\n        return 0\n    return sum(xs) / len(xs)\n"


@pytest.mark.slow
def test_a_fix_that_hides_every_failure_is_rejected_and_the_right_one_accepted(make_repo, tmp_path):
    repo = make_repo(
        {
            "stats.py": MEAN,
            "tests/test_stats.py": "from stats import mean\n\n\n"
            "def test_mean():\n    assert mean([1, 3]) == 2\n\n\n"
            "def test_mean_of_nothing():\n    assert mean([]) == 0\n",
        }
    )
    file = tmp_path / "edits.jsonl"
    records = [{"description": "hide it", "files": {"stats.py": HIDES}}, {"files": {"stats.py": EMPTY}}]
    file.write_text("".join(json.dumps(r) + "\n" for r in records))
    outcome = fix(repo, RunConfig(drafter=f"replay:{file}", candidates=1), view=QuietView(notices=False))
    first, second = (r for r in read_trace(outcome.trace) if r["type"] == "iteration")
    [rejected] = first["candidates"]
    assert rejected["verdict"] == "rejected" and rejected["failed_stage"] == "plausibility"
    assert "mean now swallows Exception" in rejected["reason"]
    assert second["candidates"][0]["verdict"] == "accepted"
    assert git(repo, "show", f"{outcome.branch}:stats.py") == EMPTY


def test_of_two_fixes_in_one_batch_the_smaller_edit_is_accepted(make_repo, tmp_path):
    repo = make_repo(
        {
            "stats.py": "def mean(xs):\n    return sum(xs) / (len(xs) + 1)\n",
            "tests/test_stats.py": "from stats import mean\n\n\ndef test_mean():\n    assert mean([1, 3]) == 2\n",
        }
    )
    # Both pass; the first, drafted first, rewrites the function around the test.
    fitted = "def mean(xs):\n    if xs == [1, 3]:\n        return 2\n    return sum(xs) / (len(xs) + 1)\n"
    smallest = "def mean(xs):\n    return sum(xs) / (len(xs) + 0)\n"
    file = tmp_path / "edits.jsonl"
    file.write_text("".join(json.dumps({"files": {"stats.py": t}}) + "\n" for t in (fitted, smallest)))
    outcome = fix(repo, RunConfig(drafter=f"replay:{file}", candidates=2), view=QuietView(notices=False))
    assert outcome.result.outcome == "goal"
    [iteration] = [r for r in read_trace(outcome.trace) if r["type"] == "iteration"]
    assert [c["verdict"] for c in iteration["candidates"]] == ["accepted"]  # the larger never ran
    assert git(repo, "show", f"{outcome.branch}:stats.py") == smallest


def test_an_edits_size_counts_the_tokens_it_changed():
    def size(before: str, after: str) -> int:
        return edit_size((FileChange("m.py", before, after),))

    body = "def f(x):\n    return x + 1\n"
    assert size(body, body.replace("+", "-")) == 1
    assert size(body, body.replace("x + 1", "abs(x + 1)")) == 3
    assert size(body, body.replace("x + 1", "x")) == 2
    assert size(body, "def f(x):\n    if x == 3:\n        return 4\n    return x + 1\n") == 8  # (`==`: two)
    module = "".join(f"x{i} = f({i})\n" for i in range(3000))
    assert size(module, "import os\n" + module + "y = 1\n") == 2 + 3  # (hunk by hunk: two far apart)
    swapped = module.replace("x10 = f(10)", "x10 = g(10)").replace("x2990 = f(", "x2990 = g(")
    assert size(module, swapped) == 2
    rewritten = "".join(f"y{i} = h({i})\n" for i in range(3000))  # one hunk of 18,000 tokens a side
    assert size(module, rewritten) == 6 * 3000  # (too large to diff: its longer side)


def test_the_semantic_readings_parse_each_text_of_an_edit_once(monkeypatch):
    # plausibility (ruff's rules aside: `cuts`, `swallowed`, the changed functions), special-case and
    # deleted-behaviour all read the same two texts: tabulate's 3,000 lines cost ~20 ms a parse.
    import ast

    from ralph.validators import dataflow
    from ralph.validators.deleted import deletions
    from ralph.validators.plausibility import changed_functions
    from ralph.validators.special_case import special_cases

    filler = "".join(f"def g{i}(x):\n    return x + {i}\n\n\n" for i in range(20))
    before = filler + "def f(a, b):\n    if a:\n        print(a)\n    return a + b\n"
    after = filler + "def f(a, b):\n    return a\n"
    dataflow._parsed.cache_clear()
    seen: list[str] = []
    real = ast.parse

    def counting(source, *args, **kwargs):
        seen.append(source)
        return real(source, *args, **kwargs)

    monkeypatch.setattr(ast, "parse", counting)
    assert [c.parameter for c in dataflow.cuts(before, after)] == ["b"]
    assert dataflow.swallowed(before, after) == []
    special_cases(before, after, {"tests/test_f.py::test_f": {("int", "1")}})
    assert changed_functions(before, after)
    deletions(before, after, {82: ["tests/test_f.py::test_f"], 83: ["tests/test_f.py::test_f"]})
    assert sorted(seen) == sorted([before, after])
