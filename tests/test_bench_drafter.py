"""`ralph bench drafter --drafter SPEC`: the figures' definitions on plain values, and the bench on a
served model (the loopback OpenAI-compatible fake, streaming) that answers with the known fix or with
garbage. The in-process diffusion models are benched in tests/test_diffusion.py and
tests/test_diffusion_gemma.py."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("litellm")

from ralph.bench.bug_tasks import TASKS, draft_context, passes, write_project
from ralph.bench.drafter import bench_drafts
from ralph.bench.timing import first_stable_s, first_valid_s, percentile
from ralph.config import check_config
from ralph.drafters import create_drafter
from tests.conftest import run_ralph
from tests.llm_server import FakeModelServer

FIX = ("calc.py", "fixed")  # stands for an edit in the timing tests


def task_of(body: dict[str, Any]) -> Any:
    """The bench task a request is about: the one whose buggy function its prompt shows."""
    prompt = body["messages"][-1]["content"]
    return next(task for task in TASKS if task.source.splitlines()[0] in prompt)


def fixed_function(body: dict[str, Any]) -> str:
    """A model that knows every fix: the corrected function, in the fence the prompt asks for."""
    return f"Here it is:\n```python\n{task_of(body).fixed}```\n"


def fixed_by_search_replace(body: dict[str, Any]) -> str:
    task = task_of(body)
    wrong = task.source.splitlines()[task.line - 1]
    right = task.fixed.splitlines()[task.line - 1]
    return f"calc.py\n<<<<<<< SEARCH\n{wrong}\n=======\n{right}\n>>>>>>> REPLACE\n"


def garbage(body: dict[str, Any]) -> str:
    return "I would rewrite it in Rust."


def bench_served(respond: Callable[[dict[str, Any]], str], **settings: Any) -> tuple[dict[str, Any], Any]:
    with FakeModelServer(chunk_delay_s=0.001, respond=respond) as server:
        models = {"openai/fake": {"api_base": server.base_url, **settings}}
        return bench_drafts("openai/fake", models=models), server


def test_a_draft_is_valid_from_its_first_applicable_edit_and_stable_from_where_it_stops_changing() -> None:
    other = ("calc.py", "other")
    growing = [(0.1, None), (0.2, other), (0.3, None), (0.4, FIX), (0.5, FIX)]
    assert first_valid_s(growing) == 0.2  # any edit that applies, even one a later step changes
    assert first_stable_s(growing) == 0.4  # from here on, the final edit at every step
    assert first_stable_s([(0.1, FIX), (0.2, other), (0.3, FIX)]) == 0.3
    assert first_stable_s([(0.1, FIX), (0.2, FIX)]) == 0.1
    assert first_stable_s([(0.1, FIX), (0.2, None)]) is None  # the complete draft applies no edit
    assert first_valid_s([(0.1, None)]) is None and first_stable_s([]) is None


def test_percentiles_interpolate_between_ranks() -> None:
    values = [4.0, 1.0, 3.0, 2.0]
    assert percentile(values, 50) == 2.5
    assert percentile(values, 95) == pytest.approx(3.85)
    assert percentile(values, 0) == 1.0 and percentile(values, 100) == 4.0
    assert percentile([7.0], 95) == 7.0 and percentile([], 50) is None


def test_a_task_passes_only_with_its_fix(tmp_path: Path) -> None:
    for task in TASKS:
        assert passes(task, task.fixed), task.name
        assert not passes(task, task.source), task.name
    assert not passes(TASKS[0], "while True:\n    pass\n", timeout_s=0.5)  # a hang fails
    context = draft_context(TASKS[0], write_project(TASKS[0], tmp_path))
    assert context.suspicious == (("calc.py", 2),) and context.failing_tests[0].failing


def test_a_served_model_that_knows_the_fixes_passes_every_task_at_every_concurrency() -> None:
    summary, server = bench_served(fixed_function)
    assert (summary["tasks"], summary["drafts"]) == (5, 5 * (1 + 2 + 4))
    assert summary["pass_rate"] == 1.0 and summary["valid_rate"] == 1.0
    assert [level["requests"] for level in summary["levels"]] == [1, 2, 4]
    for level in summary["levels"]:
        assert level["drafts"] == 5 * level["requests"] and level["pass_rate"] == 1.0
        assert 0 < level["latency_s_p50"] <= level["latency_s_p95"]
        assert 0 < level["first_valid_s_p50"] <= level["first_stable_s_p50"] <= level["latency_s_p95"]
        assert level["tokens_per_s"] > 0
    for result in summary["results"]:
        assert result["passed"] and result["first_valid_s"] <= result["first_stable_s"] <= result["latency_s"]
    assert all(request.body["stream"] for request in server.requests)  # streamed, chunk by chunk


def test_a_served_model_that_answers_garbage_passes_nothing() -> None:
    summary, _ = bench_served(garbage)
    assert summary["pass_rate"] == 0.0 and summary["valid_rate"] == 0.0
    for level in summary["levels"]:
        assert level["first_valid_s_p50"] is None and level["first_stable_s_p50"] is None
        assert level["latency_s_p95"] >= level["latency_s_p50"] > 0


def test_a_served_diffusion_model_streams_search_replace_edits_through_the_llm_drafter(
    tmp_path: Path,
) -> None:
    """A diffusion model behind vLLM's OpenAI-compatible API, configured as docs/models.md says:
    SEARCH/REPLACE blocks asked for, the reply streamed and read to its end."""
    settings = {"api_base": "", "prompt": "search-replace", "stream": True, "timeout_s": 30}
    config = check_config({"models": {"openai/diffusiongemma": settings}})
    task = TASKS[0]
    with FakeModelServer(chunk_delay_s=0.001, respond=fixed_by_search_replace) as server:
        models = {name: {**m.model_dump(), "api_base": server.base_url} for name, m in config.models.items()}
        drafter, _ = create_drafter("openai/diffusiongemma", models=models)
        (candidate,) = drafter.draft(draft_context(task, write_project(task, tmp_path)), 1)
        [request] = server.requests
        assert request.body["stream"] and "SEARCH" in request.body["messages"][0]["content"]
        assert server.streams[0].sent == server.streams[0].chunks and not server.streams[0].hung_up
    (change,) = candidate.changes
    assert change.after == task.fixed and candidate.error is None
    assert candidate.meta["completion_tokens"] == 40


@pytest.mark.slow
def test_bench_drafter_command_prints_json_and_a_markdown_table() -> None:
    with FakeModelServer(respond=fixed_function) as server:
        common = ("bench", "drafter", "--drafter", "openai/fake", "--api-base", server.base_url)
        as_json = run_ralph(*common, "--tasks", "2", "--concurrency", "1,2", "--json", timeout=120)
        table = run_ralph(*common, "--tasks", "1", "--concurrency", "1", "--markdown", timeout=120)
    assert as_json.returncode == 0, as_json.stderr
    summary = json.loads(as_json.stdout)
    assert summary["pass_rate"] == 1.0 and [level["drafts"] for level in summary["levels"]] == [2, 4]
    assert table.returncode == 0, table.stderr
    header, rule, row = table.stdout.strip().splitlines()
    assert header.startswith("| requests at once | drafts | pass rate |") and rule.startswith("|---|")
    assert row.startswith("| 1 | 1 | 1.0 |")
    neither = run_ralph("bench", "drafter", timeout=60)
    assert neither.returncode == 2 and "give --drafter SPEC" in neither.stderr
