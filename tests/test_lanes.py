"""Candidates in parallel (`--jobs N`): each verified on its own copy of the accepted state, the first
improving candidate in the drafter's order wins whatever finishes first, the others are cancelled or
undone, and every copy holds the accepted state afterwards. Real git repositories, real pytest."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ralph.config import RunConfig
from ralph.session import fix
from ralph.trace import read_trace
from ralph.view import QuietView
from tests.conftest import git

BUGS = {
    "f.py": "def f(x):\n    return x + 2\n",
    "g.py": "def g(x):\n    return x - 2\n",
    "tests/test_f.py": "from f import f\n\n\ndef test_f():\n    assert f(1) == 2\n",
    "tests/test_g.py": "from g import g\n\n\ndef test_g():\n    assert g(3) == 2\n",
    "pyproject.toml": '[tool.pytest.ini_options]\ntestpaths = ["tests"]\n',
}
F_FIXED = "def f(x):\n    return x + 1\n"
# As right, and slow: importing it takes a second and a half. (Both change the file's length, so
# the drafter's order is kept: a batch is sorted by how many files change length.)
F_SLOW = "import time\n\ntime.sleep(1.5)\n\n\ndef f(x):\n    return x + 1\n"
F_FAST = F_SLOW.replace("1.5", "0.0")
G_FIXED = "def g(x):\n    return x - 1\n"
G_DUD = "def g(x):\n    return x - 3\n"


def _run(repo: Path, tmp_path: Path, *batches: list[dict], **config: object):
    file = tmp_path / "edits.jsonl"
    file.write_text("".join(json.dumps(r) + "\n" for batch in batches for r in batch))
    settings = {"candidates": len(batches[0]), "jobs": 2, **config}
    return fix(repo, RunConfig(drafter=f"replay:{file}", **settings), view=QuietView(notices=False))


@pytest.mark.slow
def test_the_first_improving_candidate_in_the_drafters_order_wins(make_repo, tmp_path):
    repo = make_repo(BUGS)
    outcome = _run(
        repo,
        tmp_path,
        [
            {"description": "slow fix", "files": {"f.py": F_SLOW}},
            {"description": "fast fix", "files": {"f.py": F_FAST}},  # done first, on the other lane
        ],
        [
            {"description": "dud", "files": {"g.py": G_DUD}},
            {"description": "fix g", "files": {"g.py": G_FIXED}},
        ],
    )
    assert outcome.result.outcome == "goal"
    assert git(repo, "show", f"{outcome.branch}:f.py") == F_SLOW
    assert git(repo, "show", f"{outcome.branch}:g.py") == G_FIXED
    first, second = (r for r in read_trace(outcome.trace) if r["type"] == "iteration")
    assert [c["description"] for c in first["candidates"]] == ["slow fix"]
    assert [c["description"] for c in second["candidates"]] == ["dud", "fix g"]


@pytest.mark.slow
def test_a_later_candidate_still_verifying_is_cancelled_at_its_next_step(make_repo, tmp_path):
    repo = make_repo(BUGS)
    outcome = _run(
        repo,
        tmp_path,
        [
            {"description": "fix", "files": {"f.py": F_FAST}},
            {"description": "slow fix", "files": {"f.py": F_SLOW}},  # still in its tests at the accept
        ],
        [{"description": "fix g", "files": {"g.py": G_FIXED}}],
        background_gate=False,  # its gate would be its next step
    )
    assert outcome.result.outcome == "goal"
    assert git(repo, "show", f"{outcome.branch}:f.py") == F_FAST
    first = next(r for r in read_trace(outcome.trace) if r["type"] == "iteration")
    assert first["cancelled"] == 1
    assert [c["description"] for c in first["candidates"]] == ["fix"]


@pytest.mark.slow
def test_one_job_verifies_one_candidate_at_a_time(make_repo, tmp_path):
    repo = make_repo(BUGS)
    outcome = _run(
        repo,
        tmp_path,
        [
            {"description": "fix f", "files": {"f.py": F_FIXED}},
            {"description": "dud", "files": {"g.py": G_DUD}},
        ],
        [{"description": "fix g", "files": {"g.py": G_FIXED}}],
        jobs=1,
    )
    assert outcome.result.outcome == "goal"
    first = next(r for r in read_trace(outcome.trace) if r["type"] == "iteration")
    assert "cancelled" not in first


@pytest.mark.slow
def test_a_failed_background_gate_undoes_its_state_on_every_lane(make_repo, tmp_path):
    from tests.test_background_gate import F_FIXED as F_OK
    from tests.test_background_gate import F_FIXED_H_BROKEN, TWO_BUGS
    from tests.test_background_gate import G_FIXED as G_OK

    repo = make_repo(TWO_BUGS)
    dud = {"description": "dud", "files": {"g.py": TWO_BUGS["g.py"].replace("x - 2", "x - 3")}}
    outcome = _run(
        repo,
        tmp_path,
        [{"description": "fix f, break h", "files": {"f.py": F_FIXED_H_BROKEN}}, dud],
        [dud, {"description": "fix g", "files": {"g.py": G_OK}}],
        [dud, {"description": "fix f", "files": {"f.py": F_OK}}],
        [dud, {"description": "fix g", "files": {"g.py": G_OK}}],
        background_gate=True,
    )
    assert outcome.result.outcome == "goal"
    records = read_trace(outcome.trace)
    assert next(r for r in records if r["type"] == "gate")["verdict"] == "rejected"
    # Every lane went back to the start: no candidate drafted there met a lane in another state.
    candidates = [c for r in records if r["type"] == "iteration" for c in r["candidates"]]
    assert not [c for c in candidates if c["failed_stage"] == "apply"], candidates
    third = next(r for r in records if r["type"] == "iteration" and r["i"] == 3)
    assert any(
        c["description"] == "fix f" and "-" + TWO_BUGS["f.py"].splitlines()[1] in c["diff"]
        for c in third["candidates"]
    )
    assert git(repo, "show", f"{outcome.branch}:f.py") == F_OK
