"""A parameter an edit cut from what its function does: the pure reading (`dataflow.cuts`), and the
plausibility stage rejecting such a fix on a real repository, the right fix accepted after it."""

from __future__ import annotations

import json
from pathlib import Path

from ralph.config import RunConfig
from ralph.session import fix
from ralph.trace import read_trace
from ralph.validators.dataflow import cuts
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
