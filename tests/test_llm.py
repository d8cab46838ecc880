"""The litellm drafter, offline: litellm's mock_response, and a loopback OpenAI-compatible server."""

from __future__ import annotations

import functools
import logging
import os
import socket
import subprocess
import sys
import time
import traceback
from collections.abc import Iterator
from pathlib import Path

import pytest

from ralph.domain.candidate import PROTECTED_TESTS, Candidate, FileChange
from ralph.domain.errors import RalphError
from ralph.domain.protocols import DraftContext, Drafter
from ralph.domain.results import TestResult
from ralph.drafters.llm import REPEATED, LLMDrafter, create_llm_drafter
from ralph.edits.search_replace import REPAIR_PROMPT
from ralph.redact import MASK, is_secret_name, redact
from tests.llm_server import FakeModelServer

# The mock_response tests import litellm themselves; it must not fetch its price list when they do.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

KEY = "sk-test-SECRET123"
INCEPTION_KEY = "inc-test-SECRET456"

SOURCE = (
    "def mean(xs):\n"
    '    """The arithmetic mean of xs."""\n'
    "    total = sum(xs)\n"
    "    return total / (len(xs) - 1)\n"
    "\n"
    "\n"
    "def variance(xs):\n"
    "    total = sum(xs)\n"
    "    m = total / len(xs)\n"
    "    return sum((x - m) ** 2 for x in xs) / len(xs)\n"
)
FIXED = SOURCE.replace("(len(xs) - 1)", "len(xs)")
TEST_SOURCE = "from stats import mean\n\n\ndef test_mean():\n    assert mean([1, 2, 3]) == 2.0\n"

FIX = (
    "stats.py\n```python\n<<<<<<< SEARCH\n    return total / (len(xs) - 1)\n=======\n"
    "    return total / len(xs)\n>>>>>>> REPLACE\n```\n"
)
CHATTY_FIX = (
    "The bug is that `mean` divides by one less than the number of items.\n\n"
    + FIX
    + "\nWith this change `mean([1, 2, 3])` returns 2.0, as the test expects.\n"
)


@pytest.fixture(autouse=True)
def environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """A known key, and no ambient endpoint that could send a request anywhere but the fake server."""
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    for name in ("OPENAI_BASE_URL", "OPENAI_API_BASE", "INCEPTION_API_BASE", "INCEPTION_API_KEY"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def server() -> Iterator[FakeModelServer]:
    with FakeModelServer() as fake:
        yield fake


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "stats.py").write_text(SOURCE)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_stats.py").write_text(TEST_SOURCE)
    return tmp_path


def make_context(project: Path, **overrides: object) -> DraftContext:
    fields: dict[str, object] = dict(
        task="",
        project=project,
        state_id=0,
        failing_tests=(
            TestResult(
                "tests/test_stats.py::test_mean",
                "failed",
                message="def test_mean():\n>       assert mean([1, 2, 3]) == 2.0\nE       assert 3.0 == 2.0",
            ),
        ),
        diagnostics=(),
        failing_checks=(),
        suspicious=(("stats.py", 4),),
        protected=PROTECTED_TESTS,
    )
    fields.update(overrides)
    return DraftContext(**fields)  # type: ignore[arg-type]


def drafter(server: FakeModelServer, model: str = "openai/qwen-coder", **options: object) -> LLMDrafter:
    settings = {"prompt": "search-replace", **options}  # (a loopback server would get the function prompt)
    return LLMDrafter(model, api_base=server.base_url, backoff_s=0.001, **settings)  # type: ignore[arg-type]


def fixed_fingerprint() -> str:
    return Candidate("x", "x", (FileChange("stats.py", SOURCE, FIXED),)).fingerprint


def assert_no_key(*texts: object) -> None:
    for text in texts:
        assert KEY not in str(text) and INCEPTION_KEY not in str(text)


def assert_fixed(candidate: Candidate) -> None:
    assert candidate.error is None, candidate.error
    assert len(candidate.changes) == 1
    change = candidate.changes[0]
    assert (change.path, change.before, change.after) == ("stats.py", SOURCE, FIXED)


# --- chat replies through the loopback server ---------------------------------------------------------


@pytest.mark.slow
def test_an_edit_wrapped_in_chatter_becomes_a_candidate_with_the_file_before_and_after(server, project):
    server.reply(CHATTY_FIX, usage=(300, 60))
    [candidate] = drafter(server).draft(make_context(project), 1)
    assert_fixed(candidate)
    assert candidate.drafter == "llm:openai/qwen-coder"
    assert candidate.description == "The bug is that `mean` divides by one less than the number of items."
    assert candidate.tokens == 360
    assert candidate.cost_usd is None  # a local model has no price, and that is no error
    assert candidate.meta["model"] == "openai/qwen-coder"
    assert candidate.meta["finish_reason"] == "stop"
    assert isinstance(candidate.meta["latency_ms"], float) and candidate.draft_ms > 0
    assert "divides by one less" in str(candidate.meta["reply"])
    request = server.requests[0]
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == f"Bearer {KEY}"
    system, user = request.body["messages"]
    assert "SEARCH/REPLACE" in system["content"]
    assert "tests/test_stats.py::test_mean" in user["content"] and "assert 3.0 == 2.0" in user["content"]
    assert "    4 |     return total / (len(xs) - 1)" in user["content"]
    assert_no_key(candidate.meta, candidate.description)


def test_a_unified_diff_reply_is_applied_when_there_are_no_search_replace_blocks(server, project):
    server.reply(
        "Fix the divisor:\n\n```diff\n--- a/stats.py\n+++ b/stats.py\n@@ -3,2 +3,2 @@ def mean(xs):\n"
        "     total = sum(xs)\n-    return total / (len(xs) - 1)\n+    return total / len(xs)\n```\n"
    )
    [candidate] = drafter(server).draft(make_context(project), 1)
    assert_fixed(candidate)
    assert candidate.description == "Fix the divisor:"


def test_a_search_text_indented_differently_still_applies_where_it_matches_once(server, project):
    server.reply(
        "stats.py\n```python\n<<<<<<< SEARCH\ntotal = sum(xs)\nreturn total / (len(xs) - 1)\n=======\n"
        "total = sum(xs)\nreturn total / len(xs)\n>>>>>>> REPLACE\n```\n"
    )
    [candidate] = drafter(server).draft(make_context(project), 1)
    assert_fixed(candidate)


def test_a_search_text_matching_twice_comes_back_as_an_error_for_the_model(server, project):
    server.reply(
        "Sum once.\n\nstats.py\n```python\n<<<<<<< SEARCH\n    total = sum(xs)\n=======\n"
        "    total = float(sum(xs))\n>>>>>>> REPLACE\n```\n"
    )
    [candidate] = drafter(server).draft(make_context(project), 1)
    assert candidate.changes == ()
    assert candidate.error is not None and "matched 2 times" in candidate.error
    assert "more surrounding lines" in candidate.error


def test_a_search_text_that_matches_nothing_shows_the_model_the_closest_lines(server, project):
    server.reply(
        "stats.py\n<<<<<<< SEARCH\n    return total / (len(xs) - 2)\n=======\n"
        "    return total / len(xs)\n>>>>>>> REPLACE\n"
    )
    [candidate] = drafter(server).draft(make_context(project), 1)
    assert candidate.error is not None and "matched 0 times" in candidate.error
    assert "return total / (len(xs) - 1)" in candidate.error  # "did you mean these lines"


def test_a_block_without_its_divider_comes_back_as_an_error_that_shows_the_format(server, project):
    server.reply(
        "stats.py\n```python\n<<<<<<< SEARCH\n    return total / (len(xs) - 1)\n>>>>>>> REPLACE\n```\n"
    )
    [candidate] = drafter(server).draft(make_context(project), 1)
    assert candidate.error is not None and "=======" in candidate.error
    assert "<<<<<<< SEARCH" in candidate.error  # the format to follow


def test_a_reply_cut_off_at_the_token_limit_says_so_in_its_error(server, project):
    server.reply("Fix.\n\nstats.py\n```python\n<<<<<<< SEARCH\n    return total", finish_reason="length")
    [candidate] = drafter(server).draft(make_context(project), 1)
    assert candidate.error is not None and "cut off at the token limit" in candidate.error
    assert candidate.meta["finish_reason"] == "length"


def test_when_one_block_fails_the_model_is_asked_to_resend_them_all(server, project):
    server.reply(
        FIX + "\nstats.py\n<<<<<<< SEARCH\n    m = total / len(xs) + 0\n=======\n    m = 0\n>>>>>>> REPLACE\n"
    )
    [candidate] = drafter(server).draft(make_context(project), 1)
    assert candidate.error is not None and "SEARCH block 2" in candidate.error
    assert "send every block again" in candidate.error and "don't resend" not in candidate.error


def test_an_edit_to_a_test_file_is_refused(server, project):
    server.reply(
        "Relax the test.\n\ntests/test_stats.py\n<<<<<<< SEARCH\n    assert mean([1, 2, 3]) == 2.0\n=======\n"
        "    assert mean([1, 2, 3]) == 3.0\n>>>>>>> REPLACE\n"
    )
    [candidate] = drafter(server).draft(make_context(project), 1)
    assert candidate.changes == ()
    assert candidate.error is not None and "tests/test_stats.py is protected" in candidate.error


def test_a_reply_without_any_edit_asks_for_search_replace_blocks(server, project):
    server.reply("I think the bug is in `mean`, but I am not sure how to fix it.")
    [candidate] = drafter(server).draft(make_context(project), 1)
    assert candidate.error is not None and candidate.error.startswith("the reply contains no edit")
    assert candidate.description == "I think the bug is in `mean`, but I am not sure how to fix it."


def test_a_reply_with_the_corrected_whole_function_replaces_that_function(server, project):
    # What a small model most often answers with (seen with SmolLM2): the function, fixed, fenced.
    server.reply(
        "Here is the corrected function:\n\n```python\ndef mean(xs):\n"
        '    """The arithmetic mean of xs."""\n    total = sum(xs)\n    return total / len(xs)\n```\n'
    )
    [candidate] = drafter(server).draft(make_context(project), 1)
    assert_fixed(candidate)


def test_a_whole_function_that_no_suspicious_file_defines_is_no_edit(server, project):
    server.reply("```python\ndef median(xs):\n    return sorted(xs)[len(xs) // 2]\n```\n")
    [candidate] = drafter(server).draft(make_context(project), 1)
    assert candidate.error is not None and candidate.error.startswith("the reply contains no edit")


def test_n_candidates_come_from_one_call_that_asks_for_n_choices(server, project):
    other = FIX.replace("len(xs)\n>>>", "max(len(xs), 1)\n>>>")
    server.reply(CHATTY_FIX, other, usage=(300, 101))
    candidates = drafter(server).draft(make_context(project), 2)
    assert len(server.requests) == 1 and server.requests[0].body["n"] == 2
    assert [c.changes[0].after for c in candidates] == [
        FIXED,
        SOURCE.replace("(len(xs) - 1)", "max(len(xs), 1)"),
    ]
    assert sorted(c.tokens for c in candidates) == [200, 201]  # the call's 401 tokens, shared out


def test_a_server_that_ignores_n_is_asked_again_for_the_rest(server, project):
    server.reply(CHATTY_FIX)
    server.reply(FIX.replace("len(xs)\n>>>", "max(len(xs), 1)\n>>>"))
    server.reply(FIX.replace("len(xs)\n>>>", "(len(xs) or 1)\n>>>"))
    candidates = drafter(server).draft(make_context(project), 3)
    assert [r.body.get("n") for r in server.requests] == [3, 2, None]
    assert len({c.fingerprint for c in candidates}) == 3


def test_duplicates_and_rejected_edits_are_dropped_but_their_tokens_still_count(server, project):
    rejected = fixed_fingerprint()
    other = FIX.replace("len(xs)\n>>>", "max(len(xs), 1)\n>>>")
    server.reply(CHATTY_FIX, other, other, usage=(100, 50))
    candidates = drafter(server).draft(make_context(project, rejected=frozenset({rejected})), 3)
    assert len(candidates) == 1 and "max(len(xs), 1)" in (candidates[0].changes[0].after or "")
    assert candidates[0].tokens == 150


@pytest.mark.slow
def test_when_every_draft_repeats_a_rejected_edit_the_model_is_told_so(server, project):
    rejected = fixed_fingerprint()
    server.reply(CHATTY_FIX, FIX, usage=(100, 50))
    [candidate] = drafter(server).draft(make_context(project, rejected=frozenset({rejected})), 2)
    assert candidate.error == REPEATED and candidate.tokens == 150


def test_a_rejected_attempt_is_shown_with_its_failure_and_the_model_asked_to_repair_it(server, project):
    attempt = (
        "--- a/stats.py\n+++ b/stats.py\n@@ -4 +4 @@\n-    return total / (len(xs) - 1)\n"
        "+    return total / (len(xs) + 1)\n",
        "tests: tests/test_stats.py::test_mean still fails: assert 1.5 == 2.0",
    )
    server.reply(CHATTY_FIX)
    drafter(server).draft(make_context(project, attempts=(attempt,)), 1)
    user = server.requests[0].body["messages"][1]["content"]
    assert "return total / (len(xs) + 1)" in user and "assert 1.5 == 2.0" in user
    assert user.endswith(REPAIR_PROMPT)


# --- fill in the middle ----------------------------------------------------------------------------


def test_fim_sends_the_code_around_the_suspicious_body_and_replaces_just_that_body(server, project):
    server.reply("    total = sum(xs)\n    return total / len(xs)\n\n\n")
    [candidate] = drafter(server, fim=True).draft(make_context(project), 1)
    assert_fixed(candidate)
    request = server.requests[0]
    assert request.path == "/v1/completions"
    prompt, suffix = request.body["prompt"], request.body["suffix"]
    assert prompt.endswith('def mean(xs):\n    """The arithmetic mean of xs."""\n')  # the docstring stays
    assert "# Bug: tests/test_stats.py::test_mean fails: E       assert 3.0 == 2.0\ndef mean" in prompt
    assert suffix == SOURCE.split("(len(xs) - 1)\n", 1)[1]
    assert candidate.meta["mode"] == "fim"


def test_a_fim_completion_that_echoes_the_suffix_replaces_just_the_body(server, project):
    """`transformers serve` appends the suffix to its text: taken as is, the diff repeated everything
    after the function."""
    suffix = SOURCE.split("(len(xs) - 1)\n", 1)[1]
    server.reply("    total = sum(xs)\n    return total / len(xs)\n" + suffix)
    [candidate] = drafter(server, fim=True).draft(make_context(project), 1)
    assert_fixed(candidate)


def test_a_timeout_against_a_local_server_is_not_retried(project, monkeypatch):
    import litellm

    calls = []

    def slow(**kwargs):
        calls.append(kwargs)
        raise litellm.Timeout("Request timed out", model="smol", llm_provider="openai")

    monkeypatch.setattr(litellm, "completion", slow)
    local = LLMDrafter("openai/smol", api_base="http://127.0.0.1:9/v1", retries=3, backoff_s=0.001)
    with pytest.raises(RalphError, match="no answer after 1 attempt"):
        local.draft(make_context(project), 1)
    assert len(calls) == 1  # the server is still busy with it: asking again would queue behind it


@pytest.mark.slow
def test_inception_fim_goes_to_its_fim_route_with_the_configured_key(server, project, monkeypatch):
    monkeypatch.setenv("INCEPTION_API_KEY", INCEPTION_KEY)
    server.reply("    total = sum(xs)\n    return total / len(xs)\n", usage=(200, 20))
    server.reply("    return sum(xs) / len(xs)\n", usage=(200, 10))
    fim = drafter(server, "text-completion-inception/mercury-edit-2", api_key_env="INCEPTION_API_KEY")
    assert fim.fim  # text-completion-* models fill in the middle by default
    candidates = fim.draft(make_context(project), 2)
    # Inception's FIM endpoint takes no `n`: one call per candidate, and no temperature either.
    assert [r.path for r in server.requests] == ["/v1/fim/completions"] * 2
    assert all("n" not in r.body and "temperature" not in r.body for r in server.requests)
    assert server.requests[0].headers["authorization"] == f"Bearer {INCEPTION_KEY}"
    assert_fixed(candidates[0])
    assert candidates[1].changes[0].after == SOURCE.replace(
        "    total = sum(xs)\n    return total / (len(xs) - 1)\n", "    return sum(xs) / len(xs)\n", 1
    )
    assert sum(c.tokens or 0 for c in candidates) == 430
    # litellm lists mercury-edit-2's price: the cost of both calls is shared out over the candidates.
    assert sum(c.cost_usd or 0 for c in candidates) == pytest.approx(400 * 2.5e-07 + 30 * 7.5e-07)
    assert_no_key(*(c.meta for c in candidates))


def test_fim_with_nothing_suspicious_has_nothing_to_try(server, project):
    assert drafter(server, fim=True).draft(make_context(project, suspicious=()), 2) == []
    assert server.requests == []


# --- failures ---------------------------------------------------------------------------------------


def test_a_rate_limit_is_retried_with_backoff_until_the_model_answers(server, project):
    server.fail(429, "Rate limit reached for requests", headers={"retry-after": "0"})
    server.fail(503, "The server is overloaded")
    server.reply(CHATTY_FIX)
    [candidate] = drafter(server, retries=3).draft(make_context(project), 1)
    assert_fixed(candidate)
    assert len(server.requests) == 3


def test_a_server_error_that_persists_gives_up_after_the_retries(server, project):
    for _ in range(3):
        server.fail(500, "internal error")
    with pytest.raises(RalphError, match="no answer after 3 attempts"):
        drafter(server, retries=2).draft(make_context(project), 1)
    assert len(server.requests) == 3


def test_a_rejected_key_is_a_one_line_error_that_never_shows_the_key(server, project, caplog, capfd):
    caplog.set_level(logging.DEBUG)
    server.fail(401, f"Incorrect API key provided: {KEY}. You can find your API key at https://example.com.")
    with pytest.raises(RalphError) as caught:
        drafter(server).draft(make_context(project), 1)
    message = str(caught.value)
    assert message.startswith("llm:openai/qwen-coder: authentication failed")
    assert "Incorrect API key provided" in message and MASK in message
    assert "\n" not in message
    assert caught.value.__cause__ is None and caught.value.__context__ is None
    assert_no_key(message, repr(caught.value), "".join(traceback.format_exception(caught.value)))
    assert len(server.requests) == 1  # not retried
    assert_no_key(caplog.text, *capfd.readouterr())


def test_an_unreachable_server_is_retried_then_reported_in_one_line(project):
    with socket.socket() as probe:  # a port nothing listens on once the probe closes
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    unreachable = LLMDrafter(
        "openai/qwen-coder", api_base=f"http://127.0.0.1:{port}/v1", retries=1, backoff_s=0.001
    )
    with pytest.raises(
        RalphError, match=r"^llm:openai/qwen-coder: no answer after 2 attempts: Connection error"
    ):
        unreachable.draft(make_context(project), 1)


def test_a_bad_request_is_not_retried(server, project):
    server.fail(400, "max_tokens is too large: 4096")
    with pytest.raises(RalphError, match="refused the request: max_tokens is too large"):
        drafter(server).draft(make_context(project), 1)
    assert len(server.requests) == 1


def test_a_local_server_without_a_key_gets_a_placeholder_key(server, project, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY")
    server.reply(CHATTY_FIX)
    [candidate] = drafter(server).draft(make_context(project), 1)
    assert_fixed(candidate)
    assert server.requests[0].headers["authorization"] == "Bearer EMPTY"


def test_a_missing_key_variable_is_a_configuration_error(monkeypatch):
    monkeypatch.delenv("MY_MODEL_KEY", raising=False)
    with pytest.raises(RalphError, match=r"\$MY_MODEL_KEY is not set"):
        LLMDrafter("anthropic/claude-sonnet-4-5", api_key_env="MY_MODEL_KEY")


# --- litellm's mock_response ------------------------------------------------------------------------


@pytest.fixture
def mock_reply(monkeypatch: pytest.MonkeyPatch):
    """Make litellm answer every completion with `text` itself, without any request."""
    import litellm

    def set_reply(text: str) -> None:
        monkeypatch.setattr(litellm, "completion", functools.partial(litellm.completion, mock_response=text))

    return set_reply


def test_identical_choices_make_one_candidate_that_carries_the_whole_calls_tokens_and_cost(
    mock_reply, project
):
    import litellm

    mock_reply(CHATTY_FIX)
    [candidate] = LLMDrafter("openai/gpt-4o-mini").draft(make_context(project), 3)
    assert_fixed(candidate)
    # litellm's mock usage: 10 prompt and 20 completion tokens, priced as gpt-4o-mini.
    price = litellm.model_cost["gpt-4o-mini"]
    assert candidate.tokens == 30
    assert candidate.cost_usd == pytest.approx(
        10 * price["input_cost_per_token"] + 20 * price["output_cost_per_token"]
    )


def test_a_mocked_reply_without_an_edit_becomes_an_error_candidate(mock_reply, project, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    mock_reply("Could you share more of the code?")
    [candidate] = LLMDrafter("anthropic/claude-sonnet-4-5").draft(make_context(project), 2)
    assert candidate.error is not None and "no edit" in candidate.error
    # Anthropic takes no `n`: two calls of 30 mock tokens each, whose identical errors make one candidate.
    assert candidate.tokens == 60 and candidate.cost_usd is not None and candidate.cost_usd > 0


# --- construction -----------------------------------------------------------------------------------


def test_the_factory_builds_a_drafter_and_names_unknown_options(monkeypatch):
    monkeypatch.setenv("INCEPTION_API_KEY", "sk-test")
    made = create_llm_drafter("inception/mercury-2", timeout_s=30, retries=1)
    assert isinstance(made, Drafter) and made.name == "llm:inception/mercury-2" and not made.fim
    with pytest.raises(RalphError, match="unknown option tmperature"):
        create_llm_drafter("inception/mercury-2", tmperature=0.5)
    with pytest.raises(RalphError, match="bad option value"):
        create_llm_drafter("inception/mercury-2", timeout_s="soon")


def test_a_model_that_cannot_be_reached_whatever_the_retries_is_an_error_at_once(monkeypatch):
    """No key for a hosted provider, or a model litellm cannot route: one line before the run starts
    (litellm's "missing credentials" was retried like a network error: 28 s, then an error)."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("OPENAI_API_BASE", raising=False)
    with pytest.raises(RalphError, match=r"^llm:openai/gpt-4o-mini: \$OPENAI_API_KEY is not set; export it"):
        LLMDrafter("openai/gpt-4o-mini")
    with pytest.raises(RalphError, match="litellm cannot use this model: LLM Provider NOT provided"):
        LLMDrafter("nosuchprovider/model", api_base="http://127.0.0.1:9/v1")
    LLMDrafter("openai/gpt-4o-mini", api_base="http://127.0.0.1:9/v1")  # a local server needs no key


@pytest.mark.slow
def test_a_missing_key_through_the_command_line_is_bad_input_with_no_traceback(make_repo):
    from tests.conftest import BUGGY_WINDOWS

    repo = make_repo(BUGGY_WINDOWS)
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_API_BASE")
    }
    started = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-m", "ralph", "fix", str(repo), "--drafter", "openai/gpt-4o-mini"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert out.returncode == 2, out.stderr
    assert time.monotonic() - started < 30
    assert (
        out.stderr.strip()
        .splitlines()[-1]
        .startswith("ralph: error: llm:openai/gpt-4o-mini: $OPENAI_API_KEY")
    )
    assert "Traceback" not in out.stderr


def test_importing_the_drafter_does_not_import_litellm():
    code = "import sys, ralph.drafters.llm; print('litellm' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# --- redaction --------------------------------------------------------------------------------------


def test_values_of_secret_environment_variables_are_masked():
    environ = {"OPENAI_API_KEY": "abc123-not-a-known-shape", "HF_TOKEN": "tok-0123456789", "HOME": "/home/me"}
    text = "key abc123-not-a-known-shape, token tok-0123456789, home /home/me"
    assert redact(text, environ=environ) == f"key {MASK}, token {MASK}, home /home/me"


def test_common_key_shapes_and_credential_headers_are_masked_wherever_they_come_from():
    text = (
        "Incorrect API key provided: sk-proj-abcdefghijklmnop. "
        "anthropic: sk-ant-api03-ABCDEFGHIJKLMNOP; headers {'Authorization': 'Bearer eyJhbGciOiJIUzI1NiJ9', "
        "'x-api-key': 'plainsecretvalue'} api_key=another-secret-value"
    )
    masked = redact(text, environ={})
    for secret in ("sk-proj-", "sk-ant-", "eyJhbGci", "plainsecretvalue", "another-secret-value"):
        assert secret not in masked
    assert "Bearer [REDACTED]" in masked and "Incorrect API key provided: [REDACTED]" in masked


def test_explicit_secrets_are_masked_and_short_or_harmless_values_are_not():
    environ = {
        "OPENAI_API_KEY": "EMPTY",
        "TOKENIZERS_PARALLELISM": "false",
        "SSH_AUTH_SOCK": "/tmp/agent.sock",
    }
    text = "EMPTY false /tmp/agent.sock hunter2hunter2"
    assert redact(text, ["hunter2hunter2", None], environ=environ) == f"EMPTY false /tmp/agent.sock {MASK}"


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("OPENAI_API_KEY", True),
        ("ANTHROPIC_API_KEY", True),
        ("INCEPTION_API_KEY", True),
        ("GITHUB_TOKEN", True),
        ("AWS_SECRET_ACCESS_KEY", True),
        ("AUTHORIZATION", True),
        ("TOKENIZERS_PARALLELISM", False),
        ("KEYBOARD_LAYOUT", False),
        ("PATH", False),
    ],
)
def test_secret_variables_are_recognised_by_name(name, secret):
    assert is_secret_name(name) is secret


def test_a_model_that_repeats_itself_is_asked_again_with_a_higher_temperature(server, project):
    server.reply(CHATTY_FIX)
    server.reply(CHATTY_FIX)
    server.reply(CHATTY_FIX)
    model = drafter(server, temperature=0.2)
    context = make_context(project)
    for _ in range(3):
        model.draft(context, 1)
    temperatures = [r.body["temperature"] for r in server.requests]
    assert temperatures[0] == pytest.approx(0.2)
    assert temperatures[1] == pytest.approx(0.2)  # the first repeat is seen in this reply...
    assert temperatures[2] == pytest.approx(0.5)  # ...and the next request is hotter
    server.reply(CHATTY_FIX)
    model.draft(make_context(project, state_id=1), 1)  # a new state starts cool again
    assert server.requests[-1].body["temperature"] == pytest.approx(0.2)


def test_a_model_that_keeps_failing_fails_its_drafts_not_the_run(make_repo, monkeypatch):
    """A refused request is that draft's failure (an error candidate with the server's reason); after
    three iterations in a row whose every draft failed, the drafter is not asked again and the run
    ends with its trace closed."""
    from ralph.config import RunConfig
    from ralph.session import fix
    from ralph.trace import read_trace
    from ralph.view import QuietView
    from tests.conftest import BUGGY_WINDOWS

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    repo = make_repo(BUGGY_WINDOWS)
    notices: list[str] = []

    class View(QuietView):
        def notice(self, text: str) -> None:
            notices.append(text)

    with FakeModelServer() as fake:
        for _ in range(6):
            fake.fail(400, "Server is pinned to 'smol'; requested 'other'.")
        config = RunConfig(
            drafter="openai/other",
            candidates=2,  # two requests at once, failing together: one failed iteration each time
            max_iterations=6,
            models={"openai/other": {"api_base": fake.base_url, "timeout_s": 10}},
        )
        outcome = fix(repo, config, view=View(notices=False))
        asked = len(fake.requests)
    assert asked == 6
    assert outcome.result.outcome == "stalled"
    records = read_trace(outcome.trace)
    errors = [c["reason"] for r in records if r["type"] == "iteration" for c in r["candidates"]]
    assert len(errors) == 6 and all("Server is pinned to 'smol'" in e for e in errors)
    assert records[-1]["type"] == "run_end"
    assert any("every draft failed 3 iterations in a row; not asked again" in n for n in notices)


def test_the_reply_budget_is_sized_to_the_code_in_question(server, project):
    """Unless configured: a few times the code the prompt shows, not 4096 tokens a slow local model
    spends in its timeout."""
    server.reply(CHATTY_FIX)
    drafter(server).draft(make_context(project), 1)
    assert 256 <= server.requests[0].body["max_tokens"] <= 400
    server.reply(CHATTY_FIX)
    drafter(server, max_tokens=260).draft(make_context(project, state_id=1), 1)
    assert server.requests[1].body["max_tokens"] == 260  # a configured one is used as given


def test_the_function_prompt_asks_for_the_corrected_function_and_replaces_it_by_name(server, project):
    reply = '```python\ndef mean(xs):\n    """The arithmetic mean of xs."""\n    total = sum(xs)\n    return total / len(xs)\n```'
    server.reply(reply)
    [candidate] = drafter(server, prompt="function").draft(make_context(project), 1)
    assert_fixed(candidate)
    system, user = (m["content"] for m in server.requests[0].body["messages"])
    assert "SEARCH" not in system + user
    assert "def mean(xs):" in user and "assert 3.0 == 2.0" in user
    assert user.endswith("Write the whole corrected function in one ```python block.")
    with pytest.raises(RalphError, match="prompt must be auto, search-replace, function"):
        drafter(server, prompt="diff")
    assert LLMDrafter("openai/smol", api_base=server.base_url).prompt == "function"  # local: auto
    assert LLMDrafter("openai/gpt-4o-mini", api_base="https://api.example.com/v1").prompt == "search-replace"


STREAMED_FIX = (
    "Here is the fix:\n```python\ndef mean(xs):\n"
    '    """The arithmetic mean of xs."""\n    total = sum(xs)\n    return total / len(xs)\n```\n'
)


def test_a_streamed_function_reply_is_cut_at_the_first_line_of_prose_after_its_function(project):
    """The function prompt's answer is fenced functions: what a small model writes after them
    (prose, the function again) is not waited for, and hanging up stops the server's stream."""
    rambling = STREAMED_FIX + "This works because the mean divides by the count.\n" * 80
    with FakeModelServer(chunk_chars=6, chunk_delay_s=0.002) as slow:
        slow.reply(rambling, usage=(90, 700))
        [candidate] = drafter(slow, prompt="function").draft(make_context(project), 1)
        assert_fixed(candidate)
        assert slow.requests[0].body["stream"] is True
        assert candidate.meta["finish_reason"] == "answered"
        assert candidate.meta["reply"].count("works because") == 1  # the line that ended the code
        [stream] = slow.streams
        deadline = time.monotonic() + 5
        while not stream.hung_up and time.monotonic() < deadline:
            time.sleep(0.01)
        assert stream.hung_up and stream.sent < stream.chunks / 4
        # No usage came (the stream was cut before it): the tokens are counted, not left unknown.
        assert candidate.tokens is not None and 0 < candidate.tokens < 790


def test_a_stream_is_read_to_its_end_when_no_function_closes_it(server, project):
    server.reply("I think the bug is in `mean`, but I am not sure.", usage=(90, 14))
    [candidate] = drafter(server, prompt="function").draft(make_context(project), 1)
    assert candidate.error and not candidate.changes
    assert candidate.meta["finish_reason"] == "stop" and candidate.tokens == 104
    assert not server.streams[0].hung_up


def test_the_error_sent_back_speaks_the_format_the_prompt_asked_for(server, project):
    """A model shown only the function prompt is never told to answer with SEARCH/REPLACE blocks it
    was never taught: its errors say how to answer with a whole function; the SEARCH/REPLACE prompt's
    errors still show the blocks."""
    server.reply("I think the bug is in `mean`.")
    [candidate] = drafter(server, prompt="function").draft(make_context(project), 1)
    assert candidate.error and not candidate.changes and "SEARCH" not in candidate.error
    assert candidate.error.endswith("Write the whole corrected function in one ```python block.")
    server.reply("I think the bug is in `mean`.")
    [candidate] = drafter(server, prompt="search-replace").draft(make_context(project, state_id=100), 1)
    assert candidate.error and "<<<<<<< SEARCH" in candidate.error


def test_streaming_is_off_for_the_search_replace_prompt_unless_asked(server, project):
    server.reply(CHATTY_FIX)
    drafter(server).draft(make_context(project), 1)
    assert "stream" not in server.requests[0].body
    server.reply(CHATTY_FIX)
    [candidate] = drafter(server, stream=True).draft(make_context(project, state_id=1), 1)
    assert server.requests[1].body["stream"] is True and not server.streams[0].hung_up
    assert_fixed(candidate)
    server.reply(STREAMED_FIX)
    drafter(server, prompt="function", stream=False).draft(make_context(project, state_id=2), 1)
    assert "stream" not in server.requests[2].body


def test_a_streamed_reply_is_not_cut_at_a_function_that_is_no_answer(project):
    """The test shown back, or the function as it is, comes before the fix: reading goes on."""
    test_back = "```python\ndef test_mean():\n    assert mean([1, 2, 3]) == 2.0\n```\n"
    unchanged = "```python\n" + SOURCE.split("\n\n\n")[0] + "\n```\n"
    with FakeModelServer(chunk_chars=6, chunk_delay_s=0.001) as slow:
        slow.reply(test_back + unchanged + STREAMED_FIX + "Done.\n" * 200)
        [candidate] = drafter(slow, prompt="function").draft(make_context(project), 1)
        assert_fixed(candidate)
        assert candidate.meta["finish_reason"] == "answered"


# --- several functions in one reply ----------------------------------------------------------------

MEAN_FIXED = (
    'def mean(xs):\n    """The arithmetic mean of xs."""\n    total = sum(xs)\n    return total / len(xs)\n'
)
VARIANCE_BY_MEAN = "def variance(xs):\n    m = mean(xs)\n    return sum((x - m) ** 2 for x in xs) / len(xs)\n"
COUNT = "def count(xs):\n    return len(xs) - 1\n"
COUNT_FIXED = "def count(xs):\n    return len(xs)\n"


def fences(*functions: str) -> str:
    return "".join(f"```python\n{function}```\n\n" for function in functions)


def test_a_streamed_reply_of_two_functions_is_read_past_the_first_and_is_one_candidate(project):
    """Blank lines after a complete function keep the stream going (another fence may follow); the
    prose after the second ends it, and both functions are one edit."""
    reply = "Both need fixing:\n" + fences(MEAN_FIXED, VARIANCE_BY_MEAN) + "This is right now.\n" * 80
    with FakeModelServer(chunk_chars=6, chunk_delay_s=0.001) as slow:
        slow.reply(reply)
        [candidate] = drafter(slow, prompt="function").draft(make_context(project), 1)
        assert candidate.error is None, candidate.error
        [change] = candidate.changes
        assert change.after == FIXED.replace(
            "    total = sum(xs)\n    m = total / len(xs)\n", "    m = mean(xs)\n"
        )
        assert candidate.meta["finish_reason"] == "answered"
        [stream] = slow.streams
        assert stream.sent < stream.chunks / 2  # cut at the prose, not read to the end


def test_corrected_functions_of_two_suspicious_files_are_one_candidate(server, project):
    (project / "counting.py").write_text(COUNT)
    context = make_context(project, suspicious=(("stats.py", 4), ("counting.py", 2)))
    server.reply(fences(COUNT_FIXED, MEAN_FIXED) + "Done.\n")
    [candidate] = drafter(server, prompt="function").draft(context, 1)
    assert candidate.error is None, candidate.error
    assert [(c.path, c.after) for c in candidate.changes] == [
        ("counting.py", COUNT_FIXED),
        ("stats.py", FIXED),
    ]


def test_a_reply_with_a_function_no_suspicious_file_defines_applies_nothing(server, project):
    server.reply(fences(MEAN_FIXED, "def halve(x):\n    return x / 2\n") + "Done.\n")
    [candidate] = drafter(server, prompt="function").draft(make_context(project), 1)
    assert candidate.changes == () and candidate.error is not None
    assert candidate.error.startswith("no function `halve` in stats.py")


def test_a_streamed_reply_is_cut_where_it_gives_the_same_function_again(project):
    """What a small model writes after its answer: the function again. The second fence's def line
    is enough: it is not read to its end."""
    again = "```python\n" + MEAN_FIXED * 30
    with FakeModelServer(chunk_chars=6, chunk_delay_s=0.001) as slow:
        slow.reply(fences(MEAN_FIXED) + again)
        [candidate] = drafter(slow, prompt="function").draft(make_context(project), 1)
        assert_fixed(candidate)
        assert candidate.meta["finish_reason"] == "answered"
        assert slow.streams[0].sent < slow.streams[0].chunks / 4


def test_a_line_announcing_another_block_is_read_past():
    from ralph.drafters.llm import _code_ended

    one = fences(MEAN_FIXED)
    assert not _code_ended(one, {"mean"})  # nothing after it yet
    assert not _code_ended(one + "\n\n", {"mean"})
    assert not _code_ended(one + "And the helper it needs:\n", {"mean"})
    assert not _code_ended(one + "```python\ndef variance(xs):\n", {"mean"})
    assert _code_ended(one + "```python\ndef mean(xs):\n", {"mean"})
    assert not _code_ended(one + "This is why", {"mean"})  # a line not yet whole
    assert _code_ended(one + "This is why.\n", {"mean"})
