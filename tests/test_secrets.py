"""Secrets never reach a child process, a trace, or the run directory."""

from __future__ import annotations

import subprocess
import sys

import pytest

SECRET = "sk-test-NEVER-LEAK-0123456789"
LEAKY = {
    "lib.py": "def answer():\n    return 41\n",
    "tests/test_env.py": (
        "import os\n\nfrom lib import answer\n\n\n"
        "def test_answer_and_show_the_environment():\n"
        "    assert answer() == 42, dict(os.environ)\n"
    ),
}


@pytest.mark.slow
def test_a_secret_is_absent_from_child_environments_and_the_run_directory(make_repo):
    repo = make_repo(LEAKY)
    env = {"PATH": "/usr/bin:/bin", "OPENAI_API_KEY": SECRET, "ANTHROPIC_API_KEY": SECRET, "HOME": str(repo)}
    proc = subprocess.run(
        [sys.executable, "-m", "ralph", "fix", str(repo), "--json"], env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    assert SECRET not in proc.stdout + proc.stderr
    run_files = [p for p in (repo / ".ralph").rglob("*") if p.is_file()]
    assert run_files
    # The failing test printed its whole environment into the trace: the key was never in it.
    assert any("PATH" in p.read_text(errors="replace") for p in run_files if p.suffix == ".jsonl")
    assert not [p for p in run_files if SECRET in p.read_text(errors="replace")]
