"""End to end: the offline drafter stalls on a bug it cannot express, the stall router escalates to a
deep model (a loopback OpenAI-compatible server), which fixes it; the trace records why."""

from __future__ import annotations

import pytest

from ralph.config import RunConfig
from ralph.session import fix
from ralph.trace import read_trace
from ralph.view import QuietView
from tests.llm_server import FakeModelServer

# The greeting lacks the name: no template can write an f-string (the expected string of the
# first assertion, the one template that comes near, fails the second).
FILES = {
    "greet.py": 'def greet(name):\n    return "Hello"\n',
    "tests/test_greet.py": (
        "from greet import greet\n\n\ndef test_greet():\n"
        '    assert greet("Bob") == "Hello, Bob!"\n'
        '    assert greet("Al") == "Hello, Al!"\n'
    ),
}
REPLY = (
    "The greeting must name the person.\n\n"
    'greet.py\n```python\n<<<<<<< SEARCH\n    return "Hello"\n=======\n    return f"Hello, {name}!"\n'
    ">>>>>>> REPLACE\n```\n"
)


@pytest.mark.slow
def test_stall_escalates_to_the_deep_model_which_fixes_the_bug(make_repo, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-SECRET-escalation")
    repo = make_repo(FILES)
    with FakeModelServer() as server:
        server.reply(REPLY)
        config = RunConfig(
            deep="openai/fake-coder",
            k=2,
            candidates=2,
            max_cost=1.0,
            models={"openai/fake-coder": {"api_base": server.base_url, "timeout_s": 10}},
        )
        notices: list[str] = []
        view = QuietView(notices=False)
        view.notice = notices.append  # type: ignore[method-assign]
        outcome = fix(repo, config, view=view)
    assert outcome.result.outcome == "goal"
    iterations = [r for r in read_trace(outcome.trace) if r["type"] == "iteration"]
    assert [r["drafter"] for r in iterations][-1] == "llm:openai/fake-coder"
    assert "escalate" in iterations[-1]["route"]["reason"]
    assert iterations[-1]["candidates"][-1]["verdict"] == "accepted"
    meta = iterations[-1]["candidates"][-1]["meta"]  # the raw reply, kept in the trace
    assert (
        'return f"Hello, {name}!"' in meta["reply"]
        and meta["finish_reason"] == "stop"
        and meta["latency_ms"] > 0
    )
    assert "sk-test-SECRET-escalation" not in outcome.trace.read_text()
    # A local model has no known price: said at the start, and its tokens are counted apart.
    assert any("--max-cost cannot be enforced for llm:openai/fake-coder" in n for n in notices)
    end = [r for r in read_trace(outcome.trace) if r["type"] == "run_end"][-1]
    assert end["unpriced_tokens"] >= 160 and end["cost_usd"] == 0.0
