"""Git safety: the ralph branch holds what the user would commit, and the user's HEAD, index, working
tree, stash and untracked files are byte-identical after every run. Real git repositories in tmp_path."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from ralph.config import RunConfig
from ralph.gitops import snapshot
from ralph.session import fix
from ralph.trace import read_trace
from ralph.view import QuietView
from tests.conftest import BUGGY_WINDOWS, GIT_ENV, git, run_ralph

FIXED = BUGGY_WINDOWS["windows.py"].replace("len(xs) - k)", "len(xs) - k + 1)")


def user_state(repo: Path) -> dict[str, object]:
    """Everything of the user's that a run must leave as it was."""
    files = {}
    for file in sorted(repo.rglob("*")):
        rel = file.relative_to(repo).as_posix()
        if rel.startswith((".git/", ".ralph/")) or not file.is_file() or "__pycache__" in rel:
            continue
        files[rel] = hashlib.sha256(file.read_bytes()).hexdigest()
    index = repo / ".git" / "index"
    return {
        "head": git(repo, "rev-parse", "HEAD").strip(),
        "symbolic": git(repo, "symbolic-ref", "-q", "HEAD").strip(),
        "index": hashlib.sha256(index.read_bytes()).hexdigest() if index.exists() else None,
        "stash": git(repo, "stash", "list"),
        "files": files,
    }


def replay(tmp_path: Path, *records: dict) -> str:
    file = tmp_path / "edits.jsonl"
    file.write_text("".join(json.dumps(r) + "\n" for r in records))
    return f"replay:{file}"


@pytest.mark.slow
def test_untracked_files_are_used_by_the_tests_but_not_committed(make_repo, tmp_path):
    files = {
        **BUGGY_WINDOWS,
        "tests/test_windows.py": BUGGY_WINDOWS["tests/test_windows.py"]
        + "\n\ndef test_the_env_file_is_there():\n    import pathlib\n"
        "    assert pathlib.Path(__file__).parent.parent.joinpath('.env').read_text() == 'TOKEN=s3cret\\n'\n",
    }
    repo = make_repo(files)
    (repo / ".env").write_text("TOKEN=s3cret\n")
    (repo / "notes.txt").write_text("mine\n")
    before = user_state(repo)
    drafter = replay(tmp_path, {"description": "fix", "files": {"windows.py": FIXED}})
    outcome = fix(repo, RunConfig(drafter=drafter, candidates=1), view=QuietView(notices=False))
    assert outcome.result.outcome == "goal"  # the tests saw .env
    tracked = git(repo, "ls-tree", "-r", "--name-only", outcome.branch).split()
    assert ".env" not in tracked and "notes.txt" not in tracked
    assert git(repo, "show", f"{outcome.branch}:windows.py") == FIXED
    assert outcome.untracked == (".env", "notes.txt")
    assert user_state(repo) == before


def test_include_untracked_commits_them(make_repo, tmp_path):
    repo = make_repo(BUGGY_WINDOWS)
    (repo / "notes.txt").write_text("mine\n")
    drafter = replay(tmp_path, {"description": "fix", "files": {"windows.py": FIXED}})
    outcome = fix(
        repo, RunConfig(drafter=drafter, candidates=1, include_untracked=True), view=QuietView(notices=False)
    )
    assert "notes.txt" in git(repo, "ls-tree", "-r", "--name-only", outcome.branch).split()


@pytest.mark.slow
def test_an_untracked_file_the_fix_edits_is_committed_with_the_fix_only(make_repo, tmp_path):
    """In a repository with nothing committed yet, the fix is in an untracked file: that file goes on
    the branch (the user would commit it), the other untracked files do not."""
    repo = make_repo(BUGGY_WINDOWS, commit=False)
    (repo / ".env").write_text("TOKEN=s3cret\n")
    drafter = replay(tmp_path, {"description": "fix", "files": {"windows.py": FIXED}})
    outcome = fix(repo, RunConfig(drafter=drafter, candidates=1), view=QuietView(notices=False))
    assert outcome.result.outcome == "goal"
    assert git(repo, "ls-tree", "-r", "--name-only", outcome.branch).split() == ["windows.py"]
    assert git(repo, "show", f"{outcome.branch}:windows.py") == FIXED


def test_ignored_files_are_never_committed(make_repo, tmp_path):
    repo = make_repo({**BUGGY_WINDOWS, ".gitignore": "secret.txt\n"})
    (repo / "secret.txt").write_text("hush\n")
    drafter = replay(tmp_path, {"description": "fix", "files": {"windows.py": FIXED}})
    outcome = fix(
        repo, RunConfig(drafter=drafter, candidates=1, include_untracked=True), view=QuietView(notices=False)
    )
    assert "secret.txt" not in git(repo, "ls-tree", "-r", "--name-only", outcome.branch).split()


def _conflict(repo: Path) -> None:
    git(repo, "checkout", "-q", "-b", "other")
    (repo / "windows.py").write_text(BUGGY_WINDOWS["windows.py"].replace("double", "twice"))
    git(repo, "commit", "-qam", "other")
    git(repo, "checkout", "-q", "main")
    (repo / "windows.py").write_text(BUGGY_WINDOWS["windows.py"].replace("double", "dub"))
    git(repo, "commit", "-qam", "main")
    subprocess.run(["git", "merge", "other"], cwd=repo, env={**os.environ, **GIT_ENV}, capture_output=True)


def test_a_merge_in_progress_is_bad_input_and_nothing_is_committed(make_repo):
    repo = make_repo(BUGGY_WINDOWS)
    _conflict(repo)
    assert "<<<<<<<" in (repo / "windows.py").read_text()
    before = user_state(repo)
    branches = git(repo, "branch", "--list")
    proc = run_ralph("fix", str(repo), "--no-sandbox")
    assert proc.returncode == 2
    assert "a merge is in progress" in proc.stderr and proc.stderr.strip().count("\n") == 0
    assert user_state(repo) == before and git(repo, "branch", "--list") == branches


def test_an_unmerged_index_entry_is_bad_input(make_repo):
    repo = make_repo(BUGGY_WINDOWS)
    _conflict(repo)
    (repo / ".git" / "MERGE_HEAD").unlink()  # the merge state gone, the conflict still in the index
    proc = run_ralph("fix", str(repo), "--no-sandbox")
    assert proc.returncode == 2 and "unmerged files in the index (windows.py)" in proc.stderr


def test_the_snapshot_sees_a_same_size_edit_inside_the_index_timestamp(make_repo):
    """The race git's racy-clean check exists for: a file changed, size kept, within the timestamp the
    index was written in. A copy of the index with a fresh mtime would make git trust the stale stat."""
    repo = make_repo(BUGGY_WINDOWS)
    file, index = repo / "windows.py", repo / ".git" / "index"
    stamp = (1_700_000_000, 1_700_000_000)
    os.utime(file, stamp)
    git(repo, "update-index", "--refresh")  # the entry records mtime == stamp
    os.utime(index, stamp)  # ...and the index was written in that same second
    edited = BUGGY_WINDOWS["windows.py"].replace("x * 2", "x + x")
    assert len(edited) == len(BUGGY_WINDOWS["windows.py"])
    file.write_text(edited)
    os.utime(file, stamp)  # same size, same mtime: only the contents tell
    snap = snapshot(repo)
    assert git(repo, "show", f"{snap.commit}:windows.py") == edited


def _kill_free_run(repo: Path, tmp_path: Path, *records: dict, branch: str | None = None, **config: object):
    return fix(
        repo,
        RunConfig(drafter=replay(tmp_path, *records), candidates=1, **config),
        view=QuietView(notices=False),
        branch=branch,
    )


WRONG = BUGGY_WINDOWS["windows.py"].replace("len(xs) - k)", "len(xs) - k - 1)")


@pytest.mark.slow
def test_a_full_disk_while_writing_the_trace_leaves_no_torn_record_and_no_branch_ahead(
    make_repo, tmp_path, monkeypatch
):
    import errno

    import pytest

    from ralph.domain.errors import RalphError
    from ralph.trace import TraceWriter

    repo = make_repo(BUGGY_WINDOWS)
    before = user_state(repo)
    real = TraceWriter._write

    def short_then_full(self, data):
        if getattr(self, "_short", False):
            raise OSError(errno.ENOSPC, "No space left on device")  # ...then the disk is full
        if b'"type": "iteration"' in bytes(data[:40]):
            self._short = True
            return real(self, data[:10])  # a short write...
        return real(self, data)

    monkeypatch.setattr(TraceWriter, "_write", short_then_full)
    with pytest.raises(RalphError, match="cannot write the trace"):
        _kill_free_run(
            repo, tmp_path, {"description": "fix", "files": {"windows.py": FIXED}}, branch="ralph/full"
        )
    trace = next((repo / ".ralph" / "runs").glob("*/trace.jsonl"))
    lines = trace.read_bytes().splitlines(keepends=True)
    assert all(line.endswith(b"\n") and json.loads(line) for line in lines)  # whole records only
    # (the disk stays full: even run_end may not fit; what is there is whole)
    assert [json.loads(line)["type"] for line in lines] in (["run_start"], ["run_start", "run_end"])
    assert git(repo, "branch", "--list", "ralph/full").strip() == ""  # the branch is not ahead of it
    assert user_state(repo) == before
    monkeypatch.setattr(TraceWriter, "_write", real)
    proc = run_ralph("fix", str(repo), "--resume", trace.parent.name, "--json", "--no-sandbox")
    assert (proc.returncode == 2 and "finished" not in proc.stderr) or proc.returncode == 0, proc.stderr


@pytest.mark.slow
def test_a_stale_branch_lock_is_named_and_the_trace_still_ends(make_repo, tmp_path):
    import pytest

    from ralph.domain.errors import RalphError

    repo = make_repo(BUGGY_WINDOWS)
    lock = repo / ".git" / "refs" / "heads" / "ralph" / "locked.lock"
    lock.parent.mkdir(parents=True)
    lock.write_text("")
    with pytest.raises(RalphError, match=re.escape("ralph/locked.lock exists")):
        _kill_free_run(
            repo, tmp_path, {"description": "fix", "files": {"windows.py": FIXED}}, branch="ralph/locked"
        )
    trace = next((repo / ".ralph" / "runs").glob("*/trace.jsonl"))
    assert read_trace(trace)[-1]["type"] == "run_end" and read_trace(trace)[-1]["outcome"] == "error"


@pytest.mark.slow
def test_resume_refuses_a_finished_run_and_bad_budgets(make_repo, tmp_path):
    repo = make_repo(BUGGY_WINDOWS)
    outcome = _kill_free_run(
        repo, tmp_path, {"description": "wrong", "files": {"windows.py": WRONG}}, max_iterations=1
    )
    run_id = outcome.run_id
    proc = run_ralph("fix", str(repo), "--resume", run_id, "--no-sandbox")
    assert proc.returncode == 2 and "finished (max_iterations)" in proc.stderr
    # An interrupted run can go on, with budgets validated as on a first run.
    with outcome.trace.open("a") as f:
        f.write(json.dumps({"type": "run_start", "schema": 1}) + "\n")  # a segment killed before its end
    proc = run_ralph("fix", str(repo), "--resume", run_id, "--max-iterations", "0", "--no-sandbox")
    assert proc.returncode == 2 and "--max-iterations" in proc.stderr and "Traceback" not in proc.stderr


def test_resume_leaves_a_file_that_is_no_trace_as_it_is(make_repo, tmp_path):
    """--resume FILE names a file the user typed: one that is not a trace of this repository exits 2
    and keeps every byte (a torn last record is cut off only in a trace to resume)."""
    repo = make_repo(BUGGY_WINDOWS)
    notes = tmp_path / "notes.txt"
    notes.write_text("line one\nimportant last line")
    proc = run_ralph("fix", str(repo), "--resume", str(notes), "--no-sandbox")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert notes.read_text() == "line one\nimportant last line"


@pytest.mark.slow
def test_resume_never_verifies_again_what_the_run_rejected(make_repo, tmp_path):
    repo = make_repo(BUGGY_WINDOWS)
    records = [
        {"description": "wrong", "files": {"windows.py": WRONG}},
        {"description": "fix", "files": {"windows.py": FIXED}},
    ]
    outcome = _kill_free_run(repo, tmp_path, *records[:1], max_iterations=1)
    with outcome.trace.open("a") as f:  # as if it had been interrupted there
        f.write(json.dumps({"type": "run_end", "schema": 1, "outcome": "interrupted"}) + "\n")
    replay_file = tmp_path / "again.jsonl"
    replay_file.write_text("".join(json.dumps(r) + "\n" for r in records))
    from ralph.session import load_resume

    resumed = load_resume(repo, outcome.run_id)
    config = resumed.config.model_copy(update={"drafter": f"replay:{replay_file}", "max_iterations": 3})
    second = fix(repo, config, view=QuietView(notices=False), resume=resumed)
    verified = [
        c["description"]
        for r in read_trace(second.trace)
        if r["type"] == "iteration"
        for c in r["candidates"]
    ]
    assert verified.count("wrong") == 1  # the first segment's, never again
    assert second.result.outcome == "goal"


@pytest.mark.slow
def test_what_a_run_killed_with_sigkill_left_is_removed_by_the_next(make_repo, tmp_path):
    import signal
    import sys
    import tempfile
    import time

    slow = {
        **BUGGY_WINDOWS,
        "tests/test_slow.py": "import time\n\n\ndef test_slow():\n    time.sleep(30)\n",
    }
    repo = make_repo(slow)
    proc = subprocess.Popen(
        [sys.executable, "-m", "ralph", "fix", str(repo), "--no-sandbox"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    left = Path(tempfile.gettempdir())
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not list(left.glob(f"ralph-{proc.pid}-*/ws")):
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    assert list(left.glob(f"ralph-{proc.pid}-*")), "the run never made its workspace"
    other = make_repo(BUGGY_WINDOWS, name="other")
    drafter = replay(tmp_path, {"description": "fix", "files": {"windows.py": FIXED}})
    fix(other, RunConfig(drafter=drafter, candidates=1, sandbox=False), view=QuietView(notices=False))
    assert not list(left.glob(f"ralph-{proc.pid}-*"))


def test_a_private_index_left_by_a_run_killed_inside_it_is_swept(make_repo):
    """CI once killed a run while it held a private index: the directory had no owner lock, so
    the next run's sweep never took it."""
    import sys
    import tempfile

    repo = make_repo(BUGGY_WINDOWS)
    script = (
        "import os, signal, sys\n"
        "from pathlib import Path\n"
        "from ralph.gitops import temporary_index\n"
        "with temporary_index(Path(sys.argv[1]), seed=True) as env:\n"
        "    print(Path(env['GIT_INDEX_FILE']).parent, flush=True)\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    proc = subprocess.run([sys.executable, "-c", script, str(repo)], capture_output=True, text=True)
    assert proc.returncode == -9
    left = Path(proc.stdout.strip())
    assert left.parent == Path(tempfile.gettempdir()) and left.is_dir()
    from ralph.sandboxes import sweep_stale

    sweep_stale()
    assert not left.exists()
    # Killed between making the directory and locking it (or after emptying it): an empty one of a
    # process that is gone goes too; an empty one of a live process stays.
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    empty = Path(tempfile.mkdtemp(prefix=f"ralph-{gone.stdout.strip()}-index-"))
    fresh = Path(tempfile.mkdtemp(prefix=f"ralph-{gone.stdout.strip()}-index-"))
    alive = Path(tempfile.mkdtemp(prefix="ralph-1-index-"))
    old = time.time() - 3600
    for made in (empty, alive):
        os.utime(made, (old, old))
    try:
        sweep_stale()
        assert not empty.exists() and alive.exists()
        # One made lately stays: its process may live in another PID namespace, about to use it.
        assert fresh.exists()
    finally:
        alive.rmdir()
        fresh.rmdir()


CRLF_TESTS = BUGGY_WINDOWS["tests/test_windows.py"]


def _crlf_repo(make_repo, autocrlf: bool):
    repo = make_repo(
        {"tests/test_windows.py": CRLF_TESTS, "pyproject.toml": BUGGY_WINDOWS["pyproject.toml"]}, commit=False
    )
    if autocrlf:
        git(repo, "config", "core.autocrlf", "true")
    (repo / "windows.py").write_bytes(BUGGY_WINDOWS["windows.py"].replace("\n", "\r\n").encode())
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "crlf")
    return repo


@pytest.mark.slow
def test_a_fix_in_a_crlf_file_changes_one_line_and_applies_to_a_clean_tree(make_repo):
    repo = _crlf_repo(make_repo, autocrlf=False)
    outcome = fix(repo, RunConfig(), view=QuietView(notices=False), apply=True)
    assert outcome.result.outcome == "goal" and outcome.applied == ["windows.py"], outcome
    assert git(repo, "diff", "--numstat", "main", outcome.branch).split()[:2] == ["1", "1"]
    assert (repo / "windows.py").read_bytes() == FIXED.replace("\n", "\r\n").encode()


@pytest.mark.slow
def test_a_fix_under_autocrlf_is_normalized_on_the_branch_and_crlf_in_the_tree(make_repo):
    repo = _crlf_repo(make_repo, autocrlf=True)
    assert git(repo, "show", "main:windows.py") == BUGGY_WINDOWS["windows.py"]  # stored with LF
    outcome = fix(repo, RunConfig(), view=QuietView(notices=False), apply=True)
    assert outcome.result.outcome == "goal" and outcome.applied == ["windows.py"], outcome
    assert git(repo, "show", f"{outcome.branch}:windows.py") == FIXED
    assert git(repo, "diff", "--numstat", "main", outcome.branch).split()[:2] == ["1", "1"]
    assert (repo / "windows.py").read_bytes() == FIXED.replace("\n", "\r\n").encode()


@pytest.mark.slow
def test_a_file_without_a_final_newline_and_with_a_bom_keeps_both(make_repo, tmp_path):
    source = "\ufeff" + BUGGY_WINDOWS["windows.py"].rstrip("\n")
    repo = make_repo({**BUGGY_WINDOWS, "windows.py": source})
    outcome = fix(repo, RunConfig(), view=QuietView(notices=False))
    assert outcome.result.outcome == "goal"
    committed = subprocess.run(
        ["git", "show", f"{outcome.branch}:windows.py"], cwd=repo, capture_output=True, check=True
    ).stdout
    assert committed == ("\ufeff" + FIXED.rstrip("\n")).encode()


def test_report_on_a_resumed_trace_gives_the_last_segments_outcome_and_totals(tmp_path):
    from ralph.report import run_stats
    from ralph.trace_reader import parse_run

    def iteration(i: int, before: int, after: int) -> dict:
        return {
            "type": "iteration",
            "i": i,
            "drafter": "mutation",
            "remaining_before": before,
            "remaining_after": after,
            "candidates": [{}],
            "draft_ms": 1.0,
            "verify_ms": 10.0,
        }

    records = [
        {"type": "run_start", "run_id": "r", "baseline": {"remaining": 2}},
        iteration(1, 2, 1),
        {"type": "run_end", "outcome": "interrupted", "wall_s": 5.0, "remaining": 1},
        {"type": "run_start", "run_id": "r", "baseline": {"remaining": 1}, "resumed_after": 1},
        iteration(2, 1, 0),
        {"type": "run_end", "outcome": "goal", "wall_s": 3.0, "remaining": 0},
    ]
    stats = run_stats(parse_run(records))
    assert (stats.outcome, stats.iterations, stats.accepted, stats.remaining_at_start) == ("goal", 2, 2, 2)
    assert stats.wall_s == 8.0 and stats.remaining == 0


def test_apply_writes_a_fix_into_an_untracked_file(make_repo, tmp_path):
    repo = make_repo(BUGGY_WINDOWS, commit=False)
    drafter = replay(tmp_path, {"description": "fix", "files": {"windows.py": FIXED}})
    outcome = fix(repo, RunConfig(drafter=drafter, candidates=1), view=QuietView(notices=False), apply=True)
    assert outcome.applied == ["windows.py"] and not outcome.apply_refused
    assert (repo / "windows.py").read_text() == FIXED


def test_a_file_with_mixed_line_endings_is_never_rewritten(make_repo, tmp_path):
    repo = make_repo(BUGGY_WINDOWS)
    mixed = BUGGY_WINDOWS["windows.py"].replace("\n", "\r\n", 1).encode()
    (repo / "windows.py").write_bytes(mixed)
    git(repo, "commit", "-qam", "mixed")
    drafter = replay(tmp_path, {"description": "fix", "files": {"windows.py": FIXED}})
    outcome = fix(
        repo, RunConfig(drafter=drafter, candidates=1, max_iterations=1), view=QuietView(notices=False)
    )
    [candidate] = [c for r in read_trace(outcome.trace) if r["type"] == "iteration" for c in r["candidates"]]
    assert candidate["failed_stage"] == "apply" and "mixed line endings" in candidate["reason"]
    assert (repo / "windows.py").read_bytes() == mixed


def test_the_sweep_removes_only_abandoned_run_directories_of_ours(tmp_path, monkeypatch):
    import tempfile

    from ralph.sandboxes import hold_owner_lock, sweep_stale

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    abandoned, live, foreign = (
        tmp_path / "ralph-4194301-a",
        tmp_path / "ralph-4194302-b",
        tmp_path / "ralph-20240101-x",
    )
    for d in (abandoned, live, foreign):
        d.mkdir()
    os.close(hold_owner_lock(abandoned))  # its run died: the lock is free
    held = hold_owner_lock(live)  # a run still going (in another PID namespace, say)
    try:
        sweep_stale()
    finally:
        os.close(held)
    assert not abandoned.exists() and live.exists() and foreign.exists()
