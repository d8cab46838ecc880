"""A hostile candidate against the sandbox itself, as root and as an unprivileged user: it gets no
privilege the host honours, cannot reach or forge the host's channels, reads nothing masked, and
nothing of it runs while the host works on the workspace.

Candidates come through `replay:FILE` and run through the real loop in real bubblewrap; each probe
is built so that a failing defence turns into a wrong verdict (a wrong fix taken, a true one lost)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ralph.domain.results import Scope
from ralph.sandboxes import seccomp
from ralph.sandboxes.bwrap import BwrapSandbox, available, sandbox_ids
from ralph.sandboxes.local import LocalSandbox
from ralph.sandboxes.workspace import _chmod_dir
from ralph.trace import read_trace
from tests.conftest import BUGGY_WINDOWS, run_ralph, write_files
from tests.test_sound_verdicts import FIXED, WRONG, replay, run_fix

needs_bwrap = pytest.mark.skipif(available() is not None, reason=f"bubblewrap cannot run here: {available()}")
PY = sys.executable


def _with_probe(source: str, probe: str) -> str:
    """`source` (the windows module) whose `sliding_sums` is right only when `probe` (run once at
    import, setting BREACHED) found no way out: a defence that fails makes the fix wrong."""
    fixed_line = "    return [sum(xs[i : i + k]) for i in range(len(xs) - k + 1)]"
    assert fixed_line in source
    guarded = "    return [sum(xs[i : i + k]) for i in range(len(xs) - k + 1 - BREACHED)]"
    return probe + "\n\n" + source.replace(fixed_line, guarded)


def _goal(outcome) -> bool:
    return outcome.result.outcome == "goal" and outcome.branch is not None


# No privilege inside the sandbox


CORE_PATTERN = """import os
BREACHED = 0
try:  # writes back the value it read: harmless should it ever succeed
    with open("/proc/sys/kernel/core_pattern", "r+") as f:
        f.write(f.read())
    BREACHED = 1
except OSError:
    pass
"""


@pytest.mark.slow
@needs_bwrap
def test_a_candidate_cannot_write_the_kernels_settings(make_repo, tmp_path):
    repo = make_repo(BUGGY_WINDOWS)
    drafter = replay(
        tmp_path,
        {"description": "fix + core_pattern", "files": {"windows.py": _with_probe(FIXED, CORE_PATTERN)}},
    )
    assert _goal(run_fix(repo, drafter, max_iterations=1))


@needs_bwrap
def test_the_sandbox_runs_unprivileged_with_a_syscall_filter(tmp_path):
    box = BwrapSandbox(tmp_path)
    code = """
import json, os, subprocess
status = dict(line.split(":\\t", 1) for line in open("/proc/self/status").read().splitlines() if ":\\t" in line)
def refused(argv):
    return subprocess.run(argv, capture_output=True).returncode != 0
print(json.dumps({
    "uid": os.getuid(), "caps": status["CapEff"].strip(), "bounding": status["CapBnd"].strip(),
    "seccomp": status["Seccomp"].strip(), "no_new_privs": status["NoNewPrivs"].strip(),
    "userns": refused(["unshare", "--user", "true"]), "mount": refused(["unshare", "--mount", "true"]),
}))
"""
    result = box.run([PY, "-c", code], cwd=str(tmp_path), timeout_s=30)
    assert result.ok, result.output
    seen = json.loads(result.output.strip().splitlines()[-1])
    assert seen["caps"] == "0000000000000000" and seen["seccomp"] == "2" and seen["no_new_privs"] == "1"
    assert seen["userns"] and seen["mount"]  # (seccomp refuses unshare; no new user namespace)
    if os.geteuid() == 0:  # root: an id of nobody on the host, no capability even in the bounding set
        assert seen["uid"] == sandbox_ids()[0] != 0 and seen["bounding"] == "0000000000000000"
    else:
        assert seen["uid"] == os.getuid()


def test_the_filter_refuses_what_no_test_needs():
    program = seccomp.program()
    assert isinstance(program, bytes) and len(program) > 8
    assert {"ptrace", "mount", "keyctl", "bpf", "perf_event_open", "kexec_load", "init_module"} <= set(
        seccomp.DENIED
    )
    assert {"userfaultfd", "unshare", "setns"} <= set(seccomp.DENIED)


# The host's channels


FORGER = """import glob, json, os
BREACHED = 0
forged = 0
for path in glob.glob("/proc/*/fd/*"):  # bwrap's init, the worker, anything a test can reach
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:
        continue
    try:
        for i in range(1, 40):
            reply = {"id": i, "returncode": 0, "timed_out": False, "seconds": 0.01, "disk_exceeded": False,
                     "leftovers_alive": False, "leftovers": 0, "readied": False}
            os.write(fd, (json.dumps(reply) + "\\n").encode())
        forged += 1
    except OSError:
        pass
    finally:
        os.close(fd)
if os.fork() == 0:  # and stay: a helper that outlives the request
    os.setsid()
    import time
    time.sleep(60)
    os._exit(0)
"""


@needs_bwrap
def test_a_forged_worker_reply_never_gives_a_verdict(make_repo, tmp_path):
    """A wrong fix whose tests try to write passing replies into every descriptor they can open,
    then leave a daemon: no reply of theirs is taken, and the wrong fix never becomes the goal; a
    true fix after it is still judged on its own."""
    repo = make_repo(BUGGY_WINDOWS)
    wrong = FORGER + "\n\n" + WRONG
    drafter = replay(
        tmp_path,
        {"description": "forge", "files": {"windows.py": wrong}},
        {"description": "fix", "files": {"windows.py": FIXED}},
    )
    outcome = run_fix(repo, drafter, max_iterations=2)
    records = read_trace(outcome.trace)
    candidates = [c for r in records if r["type"] == "iteration" for c in r["candidates"]]
    assert candidates[0]["verdict"] == "rejected"
    assert _goal(outcome)
    shown = subprocess.run(
        ["git", "show", f"{outcome.branch}:windows.py"], cwd=repo, capture_output=True, text=True, check=True
    )
    assert shown.stdout == FIXED


# Masked stays masked


@needs_bwrap
def test_a_tool_on_path_under_home_exposes_its_bin_and_nothing_beside_it(tmp_path, monkeypatch):
    home = tmp_path / "home"
    tool = home / ".sometool"
    (tool / "bin").mkdir(parents=True)
    (tool / "credentials.toml").write_text("token = 'canary-4711'\n")
    (tool / "bin" / "sometool").write_text("#!/bin/sh\necho tool ran\n")
    (tool / "bin" / "sometool").chmod(0o755)
    for folder in (tmp_path, home, tool, tool / "bin"):
        folder.chmod(0o755)
    monkeypatch.setenv("HOME", str(home))
    workspace = tmp_path / "ws"
    workspace.mkdir()
    box = BwrapSandbox(workspace)
    path = f"{tool / 'bin'}:/usr/bin:/bin"
    ran = box.run(["sometool"], cwd=str(workspace), env={"PATH": path})
    assert ran.ok and "tool ran" in ran.output
    # (read from inside, as a test would: a path among the command's own arguments is bound in)
    read = box.run(
        ["sh", "-c", "cat $HOME/.sometool/credentials.toml"], cwd=str(workspace), env={"PATH": path}
    )
    assert not read.ok and "canary-4711" not in read.output


# Restore follows no link


def test_a_directory_swapped_for_a_link_is_never_chmodded_through(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir(mode=0o700)
    outside.chmod(0o700)
    (tmp_path / "ws").mkdir()
    os.symlink(outside, tmp_path / "ws" / "tests")
    fd = os.open(tmp_path / "ws", os.O_RDONLY | os.O_DIRECTORY)
    try:
        with pytest.raises(OSError):
            _chmod_dir("tests", 0o777, fd)
    finally:
        os.close(fd)
    assert (outside.stat().st_mode & 0o777) == 0o700


# Host tools read only the configuration found at the start


def test_a_planted_nested_ruff_config_is_never_read_by_the_host(tmp_path):
    from ralph.sandboxes.local import LocalSandbox
    from ralph.validators.ruff import RuffValidator
    from ralph.validators.toolchain import Toolchain

    (tmp_path / "pyproject.toml").write_text('[tool.ruff.lint]\nselect = ["F"]\n')
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "m.py").write_text("import os\n")
    secret = tmp_path / "secret.toml"
    secret.write_text("first line of a masked file\n")
    (tmp_path / "sub" / "ruff.toml").write_text(f'extend = "{secret}"\n')
    ruff = RuffValidator(Toolchain(PY, LocalSandbox(), tmp_path))
    argv = ruff._argv("check", "--output-format=json", "--exit-zero")
    assert f"--config={tmp_path / 'pyproject.toml'}" in argv
    result = subprocess.run(
        [*argv, "--", "sub/m.py"], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    assert "first line" not in result.stdout + result.stderr
    assert "F401" in result.stdout  # the project's own settings still apply


# Through the real entry point, as a user runs it


@pytest.mark.slow
@needs_bwrap
def test_the_kernel_settings_probe_through_the_command_line(make_repo, tmp_path):
    repo = make_repo(BUGGY_WINDOWS)
    drafter = replay(
        tmp_path,
        {"description": "fix + core_pattern", "files": {"windows.py": _with_probe(FIXED, CORE_PATTERN)}},
    )
    proc = run_ralph(
        "fix", str(repo), "--drafter", drafter, "--candidates", "1", "--max-iterations", "1", "--json"
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["outcome"] == "goal"


# The warm worker itself


def _warm_project(tmp_path) -> tuple[object, object]:
    from ralph.validators.pytest_run import PytestValidator
    from ralph.validators.toolchain import Toolchain
    from ralph.validators.warm import WarmRunner

    project = tmp_path / "project"
    write_files(
        project,
        {
            "lib.py": "def answer():\n    return 42\n",
            "tests/test_lib.py": "from lib import answer\n\n\ndef test_ok():\n    assert answer() == 42\n",
        },
    )
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    box = BwrapSandbox(project, writable=[scratch]) if available() is None else LocalSandbox()
    toolchain = Toolchain(PY, box, project, scratch=scratch)
    warm = WarmRunner(toolchain)
    return PytestValidator(toolchain, warm=warm), warm


def _close(warm) -> None:
    warm.close()
    if callable(close := getattr(warm.toolchain.sandbox, "close", None)):
        close()  # (its pids cgroups)


def test_a_module_a_candidate_adds_never_runs_in_the_worker(tmp_path):
    """A new top-level module named like one the worker imports at its start (pytest imports
    pygments; a venv's .pth imports _virtualenv) would run inside the worker, which holds the channel:
    the worker sees our plugin on its path, not the workspace."""
    validator, warm = _warm_project(tmp_path)
    project = validator.toolchain.project
    marker = validator.toolchain.scratch / "imported"
    for name in ("pygments", "_virtualenv", "pluggy", "iniconfig"):
        write_files(
            project,
            {f"{name}/__init__.py": f"import sys\nopen({str(marker)!r}, 'a').write(sys.argv[0] + '\\n')\n"},
        )
    try:
        result = validator.check(Scope(tests=("tests/test_lib.py::test_ok",)))
        assert [t.outcome for t in result.tests] == ["passed"]
        starters = marker.read_text().splitlines() if marker.exists() else []
        assert not any(line.endswith("ralph_worker.py") for line in starters), starters
    finally:
        _close(warm)


@pytest.mark.slow
def test_no_child_is_readied_on_what_a_requests_tests_wrote(tmp_path):
    """A test writes a conftest that starts a daemon: the readied child would import it, after the
    host's check, on the workspace as the tests left it. It is forked only once the host says the
    workspace is put back, and only on a clean one."""
    validator, warm = _warm_project(tmp_path)
    project = validator.toolchain.project
    token = f"ralph-token-{os.getpid()}-daemon"
    conftest = (
        "import os, subprocess, sys\n"
        f"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)', {token!r}], start_new_session=True)\n"
    )
    write_files(
        project,
        {
            "tests/test_plant.py": f"def test_plant():\n    open('tests/conftest.py', 'w').write({conftest!r})\n"
        },
    )
    try:
        warm.run(
            ["-p", "ralph_pytest_report", "-x"],
            ["tests/test_plant.py::test_plant"],
            env={},
            timeout_s=60,
            spare=True,
        )
        assert (project / "tests" / "conftest.py").exists()
        time.sleep(1)  # what a readied child would start, it would have started by now
        assert _processes_with(token) == []
        warm.restored(clean=False)  # the workspace had to be put back: no child is readied
        time.sleep(1)
        assert _processes_with(token) == []
    finally:
        _close(warm)


def test_a_lone_process_left_under_the_worker_is_seen(tmp_path):
    from ralph.validators.warm import _chain, _left_in_sandbox

    parent = subprocess.Popen(
        [
            PY,
            "-c",
            "import subprocess, sys\nsys.stdin.readline()\nsubprocess.Popen(['sleep', '30'])\nsys.stdin.readline()",
        ],
        stdin=subprocess.PIPE,
        text=True,
    )
    try:
        chain = _chain(parent.pid)
        assert chain == [parent.pid] and _left_in_sandbox(parent.pid, chain) is None
        assert parent.stdin is not None
        parent.stdin.write("\n")
        parent.stdin.flush()
        deadline = time.monotonic() + 10
        while _left_in_sandbox(parent.pid, chain) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "still running" in (_left_in_sandbox(parent.pid, chain) or "")
    finally:
        subprocess.run(["pkill", "-KILL", "-P", str(parent.pid)], check=False)
        parent.kill()
        parent.wait()


def _processes_with(token: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if token.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                    found.append(int(entry))
            except OSError:
                continue
    return found
