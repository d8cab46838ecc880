"""The trace survives crashes: every finished record is on disk, a torn last line is skipped."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ralph.trace import TraceWriter, read_trace
from tests.conftest import git, run_ralph

UNFIXABLE = {
    "calc.py": "def magic(x):\n    return x * 3 + 1\n",
    "tests/test_calc.py": (
        "import time\n\nfrom calc import magic\n\n\n"
        "def test_magic():\n    time.sleep(0.2)\n    assert magic(2) == 1234\n"
    ),
}


def test_records_have_the_stable_fields(tmp_path):
    writer = TraceWriter(tmp_path / "t.jsonl")
    writer.write("run_start", run_id="r")
    writer.write("iteration", i=1, drafter="mutation", remaining_before=2, remaining_after=1)
    writer.close()
    records = read_trace(tmp_path / "t.jsonl")
    assert [r["type"] for r in records] == ["run_start", "iteration"]
    assert all(r["schema"] == 1 for r in records)


def test_a_torn_last_record_is_skipped(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"type": "run_start", "schema": 1}) + "\n" + '{"type": "itera')
    assert [r["type"] for r in read_trace(path)] == ["run_start"]


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (state first, then the parent), or None."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _descendants(root: int) -> set[int]:
    """The live processes below `root` (bubblewrap's, the worker's and the tests' it forked): only
    what this test started, whatever else runs on the machine."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (fields := _stat(int(entry.name))) and fields[0] != "Z":
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    found, todo = set(), [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def _alive(pids: set[int]) -> set[int]:
    return {p for p in pids if (fields := _stat(p)) is not None and fields[0] != "Z"}


@pytest.mark.slow
def test_trace_is_parseable_after_the_process_is_killed_mid_run(make_repo, tmp_path):
    repo = make_repo(UNFIXABLE)
    status = git(repo, "status", "--porcelain")
    trace = tmp_path / "trace.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "ralph", "fix", str(repo), "--trace", str(trace), "--candidates", "1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            if trace.exists() and sum(r["type"] == "iteration" for r in read_trace(trace)) >= 2:
                break
            time.sleep(0.05)
        started = _descendants(proc.pid)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=10)
    assert started, "the run had no child processes to check"
    lines = trace.read_text().splitlines()
    records = read_trace(trace)
    assert records[0]["type"] == "run_start"
    iterations = [r for r in records if r["type"] == "iteration"]
    assert len(iterations) >= 2
    assert len(records) >= len(lines) - 1  # at most the last line torn
    # Nothing ralph started outlives it: the sandbox (or the worker's watch on its parent) takes the
    # worker and the test it was running down with it.
    deadline = time.monotonic() + 10
    while _alive(started) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(started)
    for r in iterations:
        assert {
            "i",
            "drafter",
            "remaining_before",
            "remaining_after",
            "draft_ms",
            "verify_ms",
            "candidates",
        } <= r.keys()
    assert git(repo, "status", "--porcelain") == status


@pytest.mark.slow
@pytest.mark.parametrize("own_trace", [False, True], ids=["run-folder", "--trace FILE"])
def test_ctrl_c_records_interrupted_exits_130_and_says_how_to_resume(make_repo, tmp_path, own_trace):
    repo = make_repo(UNFIXABLE)
    status = git(repo, "status", "--porcelain")
    mine = tmp_path / "elsewhere" / "mine.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "ralph", "fix", str(repo), "--candidates", "1"]
        + (["--trace", str(mine)] if own_trace else []),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    runs = repo / ".ralph" / "runs"
    trace = None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        traces = [mine] if mine.exists() else list(runs.glob("*/trace.jsonl")) if runs.exists() else []
        if traces and any(r["type"] == "iteration" for r in read_trace(traces[0])):
            trace = traces[0]
            break
        time.sleep(0.05)
    assert trace is not None
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert read_trace(trace)[-1]["type"] == "run_end"
    assert read_trace(trace)[-1]["outcome"] == "interrupted"
    run = str(trace) if own_trace else trace.parent.name
    command = f"ralph fix {repo} --resume {run}"
    assert f"interrupted; to continue: {command}" in stdout  # the exact command to go on
    assert git(repo, "status", "--porcelain") == status
    # ... and it does go on: the same run, its trace one segment longer.
    again = run_ralph(*command.split()[1:], "--max-iterations", "2")
    assert again.returncode == 1, again.stderr  # (its budget, now spent)
    starts = [r for r in read_trace(trace) if r["type"] == "run_start"]
    assert len(starts) == 2 and starts[0]["run_id"] == starts[1]["run_id"]


# A test that keeps deleting and rewriting project files while it runs (as a test's fixtures may).
CHURNING = {
    "calc.py": "def magic(x):\n    return x * 3 + 1\n",
    "data.txt": "x",
    "more.txt": "x",
    "tests/test_calc.py": (
        "import os\nimport time\n\nfrom calc import magic\n\n\n"
        "def test_magic():\n"
        "    end = time.monotonic() + 1.5\n"
        "    while time.monotonic() < end:\n"
        "        for name in ('data.txt', 'more.txt'):\n"
        "            if os.path.exists(name):\n"
        "                os.remove(name)\n"
        "            with open(name, 'w') as f:\n"
        "                f.write('x')\n"
        "    assert magic(2) == 1234\n"
    ),
}


@pytest.mark.slow
def test_ctrl_c_while_a_candidates_tests_write_kills_them_before_the_workspace_is_put_back(make_repo):
    """Ctrl-C lands while a candidate's tests run: the workspace is put back only once they are gone.
    Restoring beside a test still writing there failed on a file it had just rewritten or removed
    (FileExistsError, FileNotFoundError: an internal error instead of exit 130)."""
    repo = make_repo(CHURNING)
    status = git(repo, "status", "--porcelain")
    proc = subprocess.Popen(
        [sys.executable, "-m", "ralph", "fix", str(repo), "--candidates", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    runs, deadline = repo / ".ralph" / "runs", time.monotonic() + 60
    while time.monotonic() < deadline and not any(
        r["type"] == "run_start" for t in runs.glob("*/trace.jsonl") for r in read_trace(t)
    ):
        time.sleep(0.02)
    time.sleep(0.8)  # the baseline is over: the first candidate's 1.5 s test is running
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr and "internal error" not in stderr, stderr
    assert git(repo, "status", "--porcelain") == status


TWO_BUGS = {
    "calc.py": "def double(x):\n    return x * 3\n\n\ndef inc(x):\n    return x - 1\n",
    "tests/test_calc.py": (
        "import time\n\nfrom calc import double, inc\n\n\n"
        "def test_double():\n    time.sleep(0.3)\n    assert double(2) == 4\n\n\n"
        "def test_inc():\n    time.sleep(0.3)\n    assert inc(1) == 2\n"
    ),
}


@pytest.mark.slow
def test_a_killed_run_resumes_where_it_stopped(make_repo):
    repo = make_repo(TWO_BUGS)
    proc = subprocess.Popen(
        [sys.executable, "-m", "ralph", "fix", str(repo), "--candidates", "1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    runs = repo / ".ralph" / "runs"
    deadline = time.monotonic() + 90
    trace = None
    try:
        while time.monotonic() < deadline:
            traces = list(runs.glob("*/trace.jsonl")) if runs.exists() else []
            if traces and any(r["type"] == "iteration" and r["commit"] for r in read_trace(traces[0])):
                branch = read_trace(traces[0])[0]["branch"]
                if git(repo, "branch", "--list", branch).strip():  # (the trace is written first)
                    trace = traces[0]
                    break
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=10)
    assert trace is not None, "the run never accepted a first fix"
    done = [r for r in read_trace(trace) if r["type"] == "iteration"]
    branch = read_trace(trace)[0]["branch"]
    tip = git(repo, "rev-parse", branch).strip()
    with trace.open("a") as f:
        f.write('{"type": "iteration", "i": 99, "torn')  # a crash mid-write

    resumed = subprocess.run(
        [sys.executable, "-m", "ralph", "fix", str(repo), "--resume", trace.parent.name, "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert resumed.returncode == 0, resumed.stderr
    iterations = [r for r in read_trace(trace) if r["type"] == "iteration"]
    numbers = [r["i"] for r in iterations]
    assert numbers == sorted(set(numbers)) and numbers[: len(done)] == [r["i"] for r in done]  # none redone
    assert 99 not in numbers
    records = read_trace(trace)
    later = [
        r["commit"]
        for r in records[records.index(done[-1]) + 1 :]
        if r.get("commit") not in (None, tip) and r["type"] != "run_end"
    ]
    assert later and git(repo, "rev-parse", f"{later[0]}^").strip() == tip  # it grew from where it was
    base = records[0]["snapshot_commit"]
    assert git(repo, "rev-list", "--count", f"{base}..{branch}").strip() == "1"  # then one commit: all of it
    fixed = git(repo, "show", f"{branch}:calc.py")
    assert "x * 2" in fixed and "x + 1" in fixed
