"""Faults end cleanly: whatever stops a run once its trace is open (a bug in a plugin or a stage, a
sandbox that cannot start, Ctrl-C, a full disk) leaves a trace whose last record is a run_end saying
why on one line, and the user sees one line on stderr, never a traceback. A disk full from the start
leaves no empty trace behind, and never costs a trace that was there before."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ralph.config import RunConfig
from ralph.domain.errors import RalphError
from ralph.session import fix, load_resume
from ralph.trace import TraceWriter, read_trace
from ralph.view import QuietView
from tests.conftest import BUGGY_WINDOWS, run_ralph

FIXED = BUGGY_WINDOWS["windows.py"].replace("len(xs) - k)", "len(xs) - k + 1)")
WRONG = BUGGY_WINDOWS["windows.py"].replace("len(xs) - k)", "len(xs) - k - 1)")

PLUGINS = '''
from ralph.domain.protocols import RouteDecision


class Breaks:
    """A drafter with a bug."""

    name = "breaks"

    def draft(self, context, n):
        raise RuntimeError("the plugin broke\\nin two lines")


class BreaksAfterOne:
    """A routing policy with a bug that shows on its second decision."""

    name = "breaks-after-one"

    def route(self, history, drafters):
        if history:
            return 1 / 0
        return RouteDecision(drafters[0], 1, "the first")
'''


def plugins(tmp_path: Path) -> Path:
    """A folder holding the module `faulty`: run ralph there and `faulty:Class` loads."""
    folder = tmp_path / "plugins"
    folder.mkdir(exist_ok=True)
    (folder / "faulty.py").write_text(PLUGINS)
    return folder


def replay(tmp_path: Path, *records: dict) -> str:
    file = tmp_path / "edits.jsonl"
    file.write_text("".join(json.dumps(r) + "\n" for r in records))
    return f"replay:{file}"


def only_trace(repo: Path) -> Path:
    (trace,) = (repo / ".ralph" / "runs").glob("*/trace.jsonl")
    return trace


def assert_one_line(stderr: str, *needles: str) -> None:
    assert "Traceback" not in stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert all(n in lines[0] for n in needles), stderr


@pytest.mark.slow
def test_a_drafter_that_raises_ends_the_trace_with_why_and_the_user_sees_one_line(make_repo, tmp_path):
    repo = make_repo(BUGGY_WINDOWS)
    proc = run_ralph("fix", str(repo), "--drafter", "faulty:Breaks", cwd=plugins(tmp_path))
    assert proc.returncode == 3
    assert_one_line(proc.stderr, "internal error", "RuntimeError: the plugin broke in two lines")
    trace = only_trace(repo)
    end = read_trace(trace)[-1]
    assert end["type"] == "run_end" and end["outcome"] == "error"
    assert end["error"] == "RuntimeError: the plugin broke in two lines"
    report = run_ralph("report", str(trace), "--json")
    assert json.loads(report.stdout)["runs"][0]["outcome"] == "error"
    # A run that ended in an error can be resumed (here it meets the same bug, and says so again).
    again = run_ralph("fix", str(repo), "--resume", trace.parent.name, cwd=plugins(tmp_path))
    assert again.returncode == 3 and "finished" not in again.stderr
    ends = [r for r in read_trace(trace) if r["type"] == "run_end"]
    assert [e["outcome"] for e in ends] == ["error", "error"]


@pytest.mark.slow
def test_a_router_that_raises_mid_run_ends_the_trace_after_its_iterations(make_repo, tmp_path):
    repo = make_repo(BUGGY_WINDOWS)
    drafter = replay(tmp_path, {"description": "wrong", "files": {"windows.py": WRONG}})
    proc = run_ralph(
        "fix",
        str(repo),
        "--drafter",
        drafter,
        "--router",
        "faulty:BreaksAfterOne",
        cwd=plugins(tmp_path),
    )
    assert proc.returncode == 3
    assert_one_line(proc.stderr, "ZeroDivisionError: division by zero")
    records = read_trace(only_trace(repo))
    assert [r["type"] for r in records] == ["run_start", "iteration", "run_end"]
    assert records[-1]["outcome"] == "error" and records[-1]["error"] == "ZeroDivisionError: division by zero"


@pytest.mark.slow
def test_a_bug_in_a_verifier_stage_ends_the_trace(make_repo, tmp_path, monkeypatch):
    from ralph.validators.pipeline import Verifier

    def broken(self, *args, **kwargs):
        raise KeyError("stage")

    monkeypatch.setattr(Verifier, "verify", broken)
    repo = make_repo(BUGGY_WINDOWS)
    drafter = replay(tmp_path, {"description": "fix", "files": {"windows.py": FIXED}})
    with pytest.raises(KeyError):
        fix(repo, RunConfig(drafter=drafter, candidates=1), view=QuietView(notices=False))
    end = read_trace(only_trace(repo))[-1]
    assert (end["type"], end["outcome"], end["error"]) == ("run_end", "error", "KeyError: 'stage'")


def test_a_sandbox_that_cannot_start_ends_the_trace_before_the_baseline(make_repo, monkeypatch):
    import ralph.session

    def cannot(*args, **kwargs):
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(ralph.session, "select_sandbox", cannot)
    repo = make_repo(BUGGY_WINDOWS)
    with pytest.raises(OSError):
        fix(repo, RunConfig(), view=QuietView(notices=False))
    trace = only_trace(repo)
    start, end = read_trace(trace)
    assert start["type"] == "run_start" and start["baseline"] == {"error": end["error"]}
    assert end["outcome"] == "error" and end["error"] == "OSError: [Errno 24] Too many open files"
    with pytest.raises(RalphError, match="no finished baseline"):  # nothing to resume from
        load_resume(repo, trace.parent.name)


@pytest.mark.slow
def test_ctrl_c_during_the_baseline_ends_the_trace_interrupted(make_repo):
    repo = make_repo(
        {
            **BUGGY_WINDOWS,
            "tests/test_slow.py": "import time\n\n\ndef test_slow():\n    time.sleep(30)\n",
        }
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "ralph", "fix", str(repo)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    runs = repo / ".ralph" / "runs"
    deadline = time.monotonic() + 60
    while not (runs.exists() and list(runs.glob("*/trace.jsonl"))) and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1.0)  # the trace is open and the baseline's tests are running
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert_one_line(stderr, "interrupted")
    records = read_trace(only_trace(repo))
    assert [r["type"] for r in records] == ["run_start", "run_end"]
    assert records[-1]["outcome"] == "interrupted"


# A full disk


def fill(folder: Path) -> None:
    """Write into `folder` until its file system is full."""
    with (folder / "filler").open("wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 4096)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC


@pytest.fixture
def full_disk(tmp_path: Path):
    """A 64 KiB file system (tmpfs), full; root only."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.mark.slow
def test_a_disk_full_from_the_start_leaves_no_empty_trace_nor_its_folders(make_repo, full_disk):
    repo = make_repo(BUGGY_WINDOWS)
    kept = full_disk / "kept.jsonl"  # a trace that was there before, filling its page (4 KiB) whole
    record = '{"type": "run_start", "schema": 1, "pad": "%s"}\n'
    kept.write_text(record % ("x" * (4096 - len(record % ""))))
    before = kept.read_bytes()
    fill(full_disk)
    proc = run_ralph("fix", str(repo), "--trace", str(full_disk / "runs" / "r1" / "trace.jsonl"))
    assert proc.returncode == 2
    assert_one_line(proc.stderr, "cannot write the trace", "No space left on device")
    assert sorted(p.name for p in full_disk.iterdir()) == ["filler", "kept.jsonl"]
    proc = run_ralph("fix", str(repo), "--trace", str(kept))
    assert proc.returncode == 2 and "cannot write the trace" in proc.stderr
    assert kept.read_bytes() == before


FULL_FROM_THE_START = """
import errno, sys
from ralph.trace import TraceWriter

def full(self, data):
    raise OSError(errno.ENOSPC, "No space left on device")

TraceWriter._write = full
sys.argv[0] = "ralph"
from ralph.cli import main
main()
"""


def run_ralph_on_a_full_disk(*args: str) -> subprocess.CompletedProcess[str]:
    """The real command line, every write of its trace failing as on a full disk (ENOSPC)."""
    return subprocess.run(
        [sys.executable, "-c", FULL_FROM_THE_START, *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_trace_that_never_got_a_record_is_removed_with_the_run_folder(make_repo):
    repo = make_repo(BUGGY_WINDOWS)
    proc = run_ralph_on_a_full_disk("fix", str(repo))
    assert proc.returncode == 2
    assert_one_line(proc.stderr, "cannot write the trace", "No space left on device")
    assert list(repo.glob(".ralph/runs/*")) == []  # no run folder, no empty trace


@pytest.mark.slow
def test_a_trace_that_was_there_before_is_never_removed(make_repo, tmp_path):
    repo = make_repo(BUGGY_WINDOWS)
    empty, kept = tmp_path / "empty.jsonl", tmp_path / "kept.jsonl"
    empty.touch()
    kept.write_text('{"type": "run_start", "schema": 1}\n')
    for trace in (empty, kept):
        before = trace.read_bytes()
        proc = run_ralph_on_a_full_disk("fix", str(repo), "--trace", str(trace))
        assert proc.returncode == 2
        assert_one_line(proc.stderr, "cannot write the trace")
        assert trace.read_bytes() == before


def test_a_writer_removes_only_what_it_made(tmp_path):
    made = TraceWriter(tmp_path / "runs" / "r1" / "trace.jsonl")
    made.close()
    assert not (tmp_path / "runs").exists()
    there = tmp_path / "there.jsonl"
    there.touch()
    TraceWriter(there).close()
    assert there.exists()
    written = TraceWriter(tmp_path / "w" / "trace.jsonl")
    written.write("run_start")
    written.close()
    assert [r["type"] for r in read_trace(tmp_path / "w" / "trace.jsonl")] == ["run_start"]


def test_a_trace_path_that_cannot_be_a_file_is_bad_input(make_repo, tmp_path):
    repo = make_repo(BUGGY_WINDOWS)
    proc = run_ralph("fix", str(repo), "--trace", str(tmp_path))  # a directory
    assert proc.returncode == 2
    assert_one_line(proc.stderr, "cannot write the trace")
