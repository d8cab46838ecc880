"""`ralph ci`: a fix branch pushed to a real (local bare) remote, a summary, idempotence, and pull
requests against a loopback stand-in for GitHub's API."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest

from tests.conftest import BUGGY_WINDOWS, git
from tests.test_bad_input import assert_one_line_error


def clone_with_failure(tmp_path: Path, make_repo) -> tuple[Path, Path]:
    origin = make_repo(BUGGY_WINDOWS, name="origin")
    remote = tmp_path / "remote.git"
    git(tmp_path, "clone", "-q", "--bare", str(origin), str(remote))
    work = tmp_path / "work"
    git(tmp_path, "clone", "-q", str(remote), str(work))
    return work, remote


def ralph_ci(work: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ralph", "ci", ".", *args],
        cwd=work,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.mark.slow
def test_ci_pushes_a_fix_branch_and_writes_a_summary_then_does_nothing_the_second_time(tmp_path, make_repo):
    work, remote = clone_with_failure(tmp_path, make_repo)
    summary_file = tmp_path / "step-summary.md"
    first = ralph_ci(work, env={"GITHUB_STEP_SUMMARY": str(summary_file)})
    assert first.returncode == 0, first.stderr
    branch = "ralph/ci-" + git(work, "rev-parse", "--short=12", "HEAD").strip()
    assert git(remote, "branch", "--list", branch).strip().endswith(branch)
    assert "range(len(xs) - k + 1)" in git(remote, "show", f"{branch}:windows.py")
    summary = summary_file.read_text()
    assert "## ralph: goal" in summary and "tests/test_windows.py::test_every_window" in summary
    assert "```diff" in summary and f"Branch: `{branch}`" in summary and "Trace:" in summary
    assert first.stdout.strip() == summary.strip()

    second = ralph_ci(work)
    assert second.returncode == 0, second.stderr
    assert "already on branch" in second.stdout
    assert git(remote, "branch", "--list", "ralph/*").split() == [branch]


class FakeGitHub(BaseHTTPRequestHandler):
    calls: ClassVar[list[tuple[str, str, dict | None]]] = []
    open_prs: ClassVar[list[dict]] = []

    def _reply(self, status: int, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _record(self) -> dict | None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        assert self.headers["Authorization"] == "Bearer ghp-test-TOKEN"
        FakeGitHub.calls.append((self.command, self.path, body))
        return body

    def do_GET(self) -> None:
        self._record()
        self._reply(200, FakeGitHub.open_prs)

    def do_POST(self) -> None:
        self._record()
        self._reply(201, {"number": 7, "html_url": "https://github.example/acme/demo/pull/7"})

    def do_PATCH(self) -> None:
        self._record()
        self._reply(200, {"number": 7, "html_url": "https://github.example/acme/demo/pull/7"})

    def log_message(self, *args: object) -> None:
        pass


def serve() -> tuple[ThreadingHTTPServer, str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeGitHub)
    threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_port}"


@pytest.mark.slow
def test_pr_is_opened_then_updated_through_the_github_api(tmp_path, make_repo):
    FakeGitHub.calls, FakeGitHub.open_prs = [], []
    server, url = serve()
    env = {"GITHUB_API_URL": url, "GITHUB_TOKEN": "ghp-test-TOKEN", "GITHUB_REPOSITORY": "acme/demo"}
    try:
        work, remote = clone_with_failure(tmp_path, make_repo)
        proc = ralph_ci(work, "--pr", env={**env, "GITHUB_BASE_REF": "main"})
        assert proc.returncode == 0, proc.stderr
        assert "https://github.example/acme/demo/pull/7" in proc.stdout
        method, path, body = FakeGitHub.calls[-1]
        assert (method, path) == ("POST", "/repos/acme/demo/pulls")
        assert (
            body["base"] == "main"
            and body["head"].startswith("ralph/ci-")
            and "## ralph: goal" in body["body"]
        )

        # An open pull request for the branch is updated, not duplicated.
        FakeGitHub.open_prs = [{"number": 7, "html_url": "https://github.example/acme/demo/pull/7"}]
        git(remote, "branch", "-D", body["head"])
        proc = ralph_ci(work, "--pr", env=env)
        assert proc.returncode == 0, proc.stderr
        assert [c[0] for c in FakeGitHub.calls[-2:]] == ["GET", "PATCH"]
        assert "ghp-test-TOKEN" not in proc.stdout + proc.stderr
    finally:
        server.shutdown()


def test_pr_without_a_token_is_a_one_line_error(tmp_path, make_repo):
    work, _ = clone_with_failure(tmp_path, make_repo)
    env = {k: v for k, v in os.environ.items() if k not in ("GITHUB_TOKEN", "GH_TOKEN")}
    proc = subprocess.run(
        [sys.executable, "-m", "ralph", "ci", ".", "--pr"], cwd=work, env=env, capture_output=True, text=True
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("ralph: error: --pr needs a token")


@pytest.mark.slow
def test_no_remote_or_an_unreachable_one_is_a_one_line_error_before_any_work(make_repo):
    repo = make_repo(BUGGY_WINDOWS)
    status = git(repo, "status", "--porcelain")
    proc = ralph_ci(repo)
    assert_one_line_error(proc, "no remote 'origin'", str(repo), "it has none", "git remote add origin URL")
    git(repo, "remote", "add", "upstream", str(repo.parent / "nowhere.git"))
    assert_one_line_error(ralph_ci(repo), "no remote 'origin'", "its remotes: upstream", "--remote")
    proc = ralph_ci(repo, "--remote", "upstream")
    assert_one_line_error(
        proc, "remote 'upstream' is not reachable", "does not appear to be a git repository"
    )
    assert "and the repository exists" not in proc.stderr  # (git's last line, which read as garble)
    assert proc.stdout == ""
    assert git(repo, "branch", "--list", "ralph/*") == "" and not (repo / ".ralph").exists()
    assert git(repo, "status", "--porcelain") == status


def test_the_action_and_the_example_workflow_run_ralph_ci():
    import yaml

    root = Path(__file__).parent.parent
    action = yaml.safe_load((root / "action.yml").read_text())
    assert action["runs"]["using"] == "composite"
    steps = " ".join(str(step.get("run", "")) + str(step.get("uses", "")) for step in action["runs"]["steps"])
    assert "ralph" in steps and "args=(ci" in steps and "upload-artifact" in steps
    workflow = yaml.safe_load((root / "examples" / "github" / "ralph-on-failure.yml").read_text())
    job_steps = workflow["jobs"]["test"]["steps"]
    assert any("failure()" in str(step.get("if", "")) for step in job_steps)


def test_the_summary_lists_only_the_changes_that_reached_the_branch(tmp_path):
    """An edit accepted on its targeted stages and then undone by its background gate is not on the
    pushed branch: the summary does not say it was changed."""
    from ralph.ci import markdown_summary

    def accepted(i: int, description: str, **extra: object) -> dict:
        candidate = {"verdict": "accepted", "description": description, "drafter": "fast", "diff": f"+{i}\n"}
        return {"type": "iteration", "i": i, "remaining_before": 1, "remaining_after": 0,
                "candidates": [candidate], **extra}  # fmt: skip

    records = [
        {"type": "run_start", "baseline": {"remaining": 1, "score": {"failing_targets": ["t.py::a"]}}},
        accepted(1, "breaks another test", state=1),
        {"type": "gate", "state": 1, "iteration": 1, "verdict": "rejected", "remaining": 1, "discarded": []},
        accepted(2, "the real fix"),
        {"type": "run_end", "outcome": "goal", "iterations": 2, "remaining_at_start": 1, "remaining": 0},
    ]
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in records))
    summary = markdown_summary(trace, "ralph/ci-x", "origin")
    assert "- the real fix (fast)" in summary and "breaks another test" not in summary
    assert "+2" in summary and "+1\n" not in summary
    assert "| 2 | 1 → 0 | 0.0 s | $0.0000 |" in summary


def test_the_action_uploads_the_traces_from_the_top_of_the_repository(tmp_path):
    """A project in a subfolder: its runs are written at the repository's top, where the upload looks."""
    import yaml

    action = yaml.safe_load((Path(__file__).parent.parent / "action.yml").read_text())
    steps = {step.get("name"): step for step in action["runs"]["steps"]}
    assert steps["Upload the trace"]["with"]["path"] == "${{ steps.traces.outputs.runs }}"
    repo = tmp_path / "repo"
    (repo / "services" / "api").mkdir(parents=True)
    git(repo, "init", "-q")
    out = tmp_path / "github_output"
    script = steps["Find the traces"]["run"].replace("${{ inputs.path }}", "services/api")
    subprocess.run(
        ["bash", "-c", script], cwd=repo, env={**os.environ, "GITHUB_OUTPUT": str(out)}, check=True
    )
    assert out.read_text() == f"runs={repo.resolve()}/.ralph/runs\n"
