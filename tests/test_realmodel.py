"""End to end with a real model: SmolLM2-135M behind `transformers serve` (tests/realmodel.py), the real
`ralph` entry point, the sandbox on. The model is weak: these tests assert the plumbing (requests
reach the server, real replies are parsed or rejected with a reason, rejections are fed back, tokens
are counted and the cost is unknown, the run ends within its budget), never that it fixes the bug.
Minutes each: deselect with `-m "not realmodel"`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ralph.trace import read_trace
from tests import realmodel
from tests.conftest import model_recipes, run_ralph

pytestmark = pytest.mark.realmodel

ONE_TOKEN_BUG = {
    "calc.py": "def add(a, b):\n    return a - b\n",
    "tests/test_calc.py": "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n",
}
# No single-token mutation adds the missing `return`: the offline drafter stalls, the deep model is asked.
MISSING_RETURN = {
    "calc.py": "def double(x):\n    x * 2\n",
    "tests/test_calc.py": "from calc import double\n\n\ndef test_double():\n    assert double(4) == 8\n",
}


def _models(api_base: str) -> str:
    return (
        '[tool.pytest.ini_options]\ntestpaths = ["tests"]\n\n'
        "[tool.ralph]\nk = 1  # escalate after one iteration without progress\n\n"
        '[tool.ralph.models."openai/smol"]\n'
        f'api_base = "{api_base}"\ntimeout_s = 120\ntemperature = 0.7\nmax_tokens = 200\n'
    )


def _trace(repo: Path) -> list[dict]:
    [trace] = repo.glob(".ralph/runs/*/trace.jsonl")
    return read_trace(trace)


def _model_candidates(records: list[dict]) -> list[dict]:
    return [
        c
        for r in records
        if r["type"] == "iteration"
        for c in r["candidates"]
        if c["drafter"] == "llm:openai/smol"
    ]


@pytest.mark.slow
def test_the_real_model_as_the_fast_drafter(make_repo, smol_server):
    repo = make_repo({**ONE_TOKEN_BUG, "pyproject.toml": _models(smol_server)})
    began = time.monotonic()
    out = run_ralph(
        "fix", str(repo), "--drafter", "openai/smol", "--candidates", "2", "--max-iterations", "3",
        "--max-seconds", "240", "--json", timeout=600,
    )  # fmt: skip
    assert out.returncode in (0, 1), out.stderr
    assert time.monotonic() - began < 420
    summary = json.loads(out.stdout)
    records = _trace(repo)
    assert records[-1]["type"] == "run_end"
    candidates = _model_candidates(records)
    assert candidates, "no reply reached verification"
    replied = [c for c in candidates if (c.get("meta") or {}).get("reply")]
    assert replied and all(c["meta"]["latency_ms"] > 0 for c in replied)  # the raw replies are kept
    assert all(c["verdict"] in ("accepted", "rejected") and c["reason"] for c in candidates)
    assert sum(c["tokens"] or 0 for c in candidates) > 0
    assert summary["unpriced_tokens"] > 0 and summary["cost_usd"] is None  # a local model: unknown cost
    if summary["outcome"] != "goal" and summary["iterations"] > 1:  # rejections were fed back
        later = [r for r in records if r["type"] == "iteration"][1:]
        assert any(r["candidates"] for r in later)


@pytest.mark.slow
def test_the_real_model_as_the_deep_reasoner_behind_the_offline_drafter(make_repo, smol_server):
    repo = make_repo({**MISSING_RETURN, "pyproject.toml": _models(smol_server)})
    out = run_ralph(
        "fix", str(repo), "--deep", "openai/smol", "--candidates", "2", "--max-iterations", "3",
        "--max-seconds", "240", "--max-cost", "1", "--json", timeout=600,
    )  # fmt: skip
    assert out.returncode in (0, 1), out.stderr
    assert "--max-cost cannot be enforced for llm:openai/smol" in out.stderr
    records = _trace(repo)
    iterations = [r for r in records if r["type"] == "iteration"]
    assert iterations[0]["drafter"] == "mutation"
    deep = [r for r in iterations if r["drafter"] == "llm:openai/smol"]
    assert deep and "escalate" in deep[0]["route"]["reason"]
    assert _model_candidates(records)
    assert records[-1]["type"] == "run_end"


@pytest.mark.slow
def test_the_documented_transformers_serve_recipe_serves_the_model_ralph_reaches(make_repo, tmp_path):
    """docs/models.md's commands as written (after its installs), on a free port instead of 8000,
    and its settings: the real model answers the real `ralph fix`."""
    why = realmodel.missing()
    if why is not None:
        pytest.skip(why)
    shell, settings = model_recipes()["transformers serve"]
    port = realmodel._free_port()
    script = "\n".join(line for line in shell.splitlines() if not line.startswith("pip install"))
    assert "--port 8000" in script and "8000" in settings
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    root = Path(__file__).resolve().parent.parent
    with (tmp_path / "serve.log").open("wb") as log:
        server = subprocess.Popen(
            ["bash", "-ec", script.replace("--port 8000", f"--port {port}")],
            cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 300
            while not realmodel._healthy(f"http://127.0.0.1:{port}"):
                assert server.poll() is None, (tmp_path / "serve.log").read_text()[-2000:]
                assert time.monotonic() < deadline, "the documented server never became healthy"
                time.sleep(0.5)
            pyproject = '[tool.pytest.ini_options]\ntestpaths = ["tests"]\n\n' + settings.replace(
                "8000", str(port)
            )
            repo = make_repo({**ONE_TOKEN_BUG, "pyproject.toml": pyproject})
            out = run_ralph(
                "fix", str(repo), "--candidates", "1", "--max-iterations", "1", "--json", timeout=600
            )  # fmt: skip
        finally:
            os.killpg(server.pid, signal.SIGTERM)  # bash and the server it started
            try:
                server.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
                server.wait(timeout=15)
    assert out.returncode in (0, 1), out.stderr
    candidates = _model_candidates(_trace(repo))
    assert candidates and sum(c["tokens"] or 0 for c in candidates) > 0
