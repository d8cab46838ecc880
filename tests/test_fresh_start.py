"""Fresh starts: after `fresh_start_after` iterations in a row on one state whose candidates were all
rejected, drafters are no longer shown those attempts; the edits themselves stay refused."""

from __future__ import annotations

import pytest

from ralph.config import RunConfig, load_config
from ralph.domain.candidate import Candidate, FileChange
from ralph.domain.errors import RalphError
from ralph.domain.verdict import VerifyReport
from ralph.drafters.llm import REPEATED
from ralph.edits.search_replace import REPAIR_PROMPT
from ralph.memory import Rejections
from tests.llm_server import FakeModelServer

# A `mean` and a `variance` that are both wrong: one fix moves the loop to a new state.
STATS = (
    "def mean(xs):\n"
    "    total = sum(xs)\n"
    "    return total / (len(xs) - 1)\n"
    "\n"
    "\n"
    "def variance(xs):\n"
    "    m = sum(xs) / len(xs)\n"
    "    return sum((x - m) ** 2 for x in xs) / (len(xs) + 1)\n"
)
TESTS = (
    "from stats import mean, variance\n\n\n"
    "def test_mean():\n    assert mean([1, 2, 3]) == 2.0\n\n\n"
    "def test_variance():\n    assert variance([1, 3]) == 1.0\n"
)
MEAN_LINE = "    return total / (len(xs) - 1)\n"
VARIANCE_LINE = "    return sum((x - m) ** 2 for x in xs) / (len(xs) + 1)\n"


def _edit(line: str, new: str) -> str:
    return f"stats.py\n```python\n<<<<<<< SEARCH\n{line}=======\n{new}>>>>>>> REPLACE\n```\n"


WRONG_MEAN = _edit(MEAN_LINE, "    return total / (len(xs) + 1)\n")
FIX_MEAN = _edit(MEAN_LINE, "    return total / len(xs)\n")
WRONG_VARIANCE = _edit(VARIANCE_LINE, "    return sum((x - m) ** 2 for x in xs) / (len(xs) + 2)\n")
WRONGER_VARIANCE = _edit(VARIANCE_LINE, "    return sum((x - m) ** 2 for x in xs) / (len(xs) * 2)\n")


def _rejected(rejections: Rejections, name: str, state: int = 0) -> None:
    candidate = Candidate("x", name, (FileChange("a.py", "a\n", name + "\n"),))
    rejections.reject(candidate, VerifyReport(False, f"{name}: no improvement"), state)


def _shown(rejections: Rejections) -> list[str]:
    return [why.split(":")[0] for _, why in rejections.attempts]


def test_the_attempts_are_dropped_after_k_rejected_iterations_on_one_state_and_the_edits_stay_refused():
    rejections = Rejections()
    _rejected(rejections, "first")
    assert not rejections.end_round(0, True, fresh_start_after=2)
    assert _shown(rejections) == ["first"]  # before k: shown
    _rejected(rejections, "second")
    assert rejections.end_round(0, True, fresh_start_after=2)
    assert rejections.attempts == [] and rejections.best is None  # k in a row: a fresh start
    assert len(rejections.rejected) == 2  # what dedup refuses is all still there
    _rejected(rejections, "third")
    assert not rejections.end_round(0, True, fresh_start_after=2)
    assert _shown(rejections) == ["third"]  # the count starts again


def test_a_new_state_or_an_iteration_without_rejections_resets_nothing_it_should_not():
    rejections = Rejections()
    _rejected(rejections, "first")
    rejections.end_round(0, True, fresh_start_after=2)
    assert not rejections.end_round(1, False, fresh_start_after=2)  # accepted: a new state
    _rejected(rejections, "second", state=1)
    assert not rejections.end_round(1, True, fresh_start_after=2)  # the first of this state
    assert len(rejections.attempts) == 2
    assert not rejections.end_round(1, False, fresh_start_after=2)  # nothing verified: no attempt
    _rejected(rejections, "third", state=1)
    assert rejections.end_round(1, True, fresh_start_after=2)


def test_zero_never_starts_fresh():
    rejections = Rejections()
    for i in range(5):
        _rejected(rejections, f"attempt {i}")
        assert not rejections.end_round(0, True, fresh_start_after=0)
    assert len(rejections.attempts) == 5


def test_the_key_defaults_to_three_and_a_negative_one_is_bad_input(tmp_path):
    assert load_config(tmp_path, {}).fresh_start_after == 3
    (tmp_path / "ralph.toml").write_text("fresh_start_after = 0\n")
    assert load_config(tmp_path, {}).fresh_start_after == 0
    (tmp_path / "ralph.toml").write_text("fresh_start_after = -1\n")
    with pytest.raises(RalphError, match="invalid configuration: fresh_start_after: Input should be greater"):
        load_config(tmp_path, {})


def _prompt(request) -> str:
    return request.body["messages"][-1]["content"]


def _shows_attempts(prompt: str) -> bool:
    return any(mark in prompt for mark in ("Already tried", "closest attempt", REPAIR_PROMPT))


@pytest.mark.slow
def test_the_model_is_sent_no_earlier_attempt_after_k_rejected_iterations(make_repo, monkeypatch):
    """Through the loop and a loopback model (k = 2, one candidate an iteration): the attempts are
    shown until two iterations in a row on one state were rejected, an accept starts the count
    again, and after the fresh start an edit rejected before it is still refused."""
    from ralph.session import fix
    from ralph.trace import read_trace
    from ralph.view import QuietView

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    for name in ("OPENAI_BASE_URL", "OPENAI_API_BASE"):
        monkeypatch.delenv(name, raising=False)
    repo = make_repo({"stats.py": STATS, "tests/test_stats.py": TESTS})
    with FakeModelServer() as fake:
        for reply in (WRONG_MEAN, FIX_MEAN, WRONG_VARIANCE, WRONGER_VARIANCE, WRONG_VARIANCE):
            fake.reply(reply)
        config = RunConfig(
            drafter="openai/coder",
            candidates=1,
            max_iterations=5,
            fresh_start_after=2,
            models={"openai/coder": {"api_base": fake.base_url, "prompt": "search-replace"}},
        )
        outcome = fix(repo, config, view=QuietView(notices=False))
        prompts = [_prompt(r) for r in fake.requests]
    assert len(prompts) == 5
    assert not _shows_attempts(prompts[0])
    assert "(len(xs) + 1)" in prompts[1].split("Already tried")[1]  # one rejected: still shown
    # FIX_MEAN was accepted: a new state, whose first rejection is shown (the count started again)
    assert "(len(xs) + 2)" in prompts[3].split("Already tried")[1]
    # Two rejected in a row on this state: the fifth request starts fresh...
    assert not _shows_attempts(prompts[4])
    assert "(len(xs) + 2)" not in prompts[4] and "(len(xs) * 2)" not in prompts[4]
    # ...and its repeat of a rejected edit is refused unverified all the same.
    records = read_trace(outcome.trace)
    last = [r for r in records if r["type"] == "iteration"][-1]
    assert [c["reason"] for c in last["candidates"]] == [REPEATED]
