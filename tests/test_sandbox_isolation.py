"""The bubblewrap sandbox against hostile code: each test runs a snippet and checks what it could do."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import ralph.sandboxes.bwrap as bwrap_module
from ralph.domain.results import ProcessResult
from ralph.sandboxes.bwrap import BwrapSandbox, available

UNAVAILABLE = available()
needs_bwrap = pytest.mark.skipif(UNAVAILABLE is not None, reason=f"bwrap sandbox unavailable: {UNAVAILABLE}")
PY = sys.executable
GIT_ENV = {
    "GIT_AUTHOR_NAME": "u",
    "GIT_AUTHOR_EMAIL": "u@e",
    "GIT_COMMITTER_NAME": "u",
    "GIT_COMMITTER_EMAIL": "u@e",
}


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A small git repository (the sandbox's writable workspace)."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "code.py").write_text("x = 1\n")
    env = {**os.environ, **GIT_ENV}
    for args in (["init", "-q"], ["add", "."], ["commit", "-qm", "init"]):
        subprocess.run(["git", *args], cwd=ws, env=env, check=True, capture_output=True)
    return ws


@pytest.fixture
def outside() -> Iterator[Path]:
    """A directory on the host's disk, outside the workspace and every masked tmpfs."""
    path = Path(tempfile.mkdtemp(prefix="ralph-outside-", dir="/var/tmp"))
    path.chmod(0o755)  # (as a home's parent is: the sandbox's user passes through it)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def sandbox(
    workspace: Path,
    *,
    memory_bytes: int = 1 << 30,
    file_bytes: int = 1 << 30,
    max_pids: int = 64,
    tmp_bytes: int = 8 << 20,
    max_output: int = 1 << 20,
    disk_bytes: int | None = None,
) -> BwrapSandbox:
    """A sandbox with limits small enough that the bombs below hit them quickly."""
    return BwrapSandbox(
        workspace,
        disk_bytes=disk_bytes,
        memory_bytes=memory_bytes,
        cpu_seconds=60,
        file_bytes=file_bytes,
        max_pids=max_pids,
        tmp_bytes=tmp_bytes,
        max_output=max_output,
    )


def run_py(box: BwrapSandbox, code: str, *args: str, timeout_s: float = 20.0) -> ProcessResult:
    return box.run([PY, "-c", code, *args], cwd=str(box.workspace), timeout_s=timeout_s)


def last_json(result: ProcessResult) -> Any:
    assert result.ok, result.output
    return json.loads(result.output.strip().splitlines()[-1])


def host_processes_with(token: str) -> list[int]:
    """Host pids whose command line contains `token` (how a namespaced pid is found from outside)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            if token.encode() in cmdline:
                found.append(int(entry))
    return found


def tree_digest(root: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        digest.update(str(path.relative_to(root)).encode())
        if path.is_file():
            digest.update(path.read_bytes())
    return digest.hexdigest()


# Appends to each path given; prints {path: "ok" or the errno name it failed with}.
TRY_WRITE = """
import errno, json, sys
out = {}
for path in sys.argv[1:]:
    try:
        with open(path, "a") as f:
            f.write("planted\\n")
        out[path] = "ok"
    except OSError as e:
        out[path] = errno.errorcode[e.errno]
print(json.dumps(out))
"""


def test_available_names_the_missing_tool(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bwrap_module, "_tool", lambda name: None)
    assert available.__wrapped__() == "bubblewrap (bwrap) is not installed"


def test_available_agrees_with_a_real_run(tmp_path: Path) -> None:
    """None means a sandboxed command really runs; anything else is a one-line reason (and a skip)."""
    if UNAVAILABLE is not None:
        assert "\n" not in UNAVAILABLE
        pytest.skip(f"bwrap sandbox unavailable: {UNAVAILABLE}")
    result = BwrapSandbox(tmp_path).run(["true"], cwd=str(tmp_path))
    assert result.ok and result.output == ""


@needs_bwrap
def test_only_the_workspace_is_writable(workspace: Path, outside: Path) -> None:
    this_file = Path(__file__).resolve()
    before = this_file.read_bytes()
    targets = [workspace / "code.py", workspace / "new.txt", this_file, outside / "x", Path("/usr/ralph-x")]
    result = last_json(run_py(sandbox(workspace), TRY_WRITE, *map(str, targets)))
    # Read-only mounts refuse (EROFS); as root the sandbox's user is not the owner either (EACCES
    # may come first).
    refused = {"EROFS", "EACCES"}
    assert result[str(workspace / "code.py")] == result[str(workspace / "new.txt")] == "ok"
    assert {result[str(this_file)], result[str(outside / "x")], result["/usr/ralph-x"]} <= refused
    assert (workspace / "code.py").read_text() == "x = 1\nplanted\n"
    assert (workspace / "new.txt").read_text() == "planted\n"
    assert this_file.read_bytes() == before
    assert not (outside / "x").exists()
    assert not Path("/usr/ralph-x").exists()


@needs_bwrap
def test_home_tmp_and_run_are_empty_throwaway_mounts(
    workspace: Path, outside: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The home is a private tmpfs: its real files are invisible and writes never reach the disk."""
    home = outside / "home"
    home.mkdir()
    (home / ".netrc").write_text("machine example.com password hunter2\n")
    monkeypatch.setenv("HOME", str(home))
    code = """
import json, os
home = os.environ["HOME"]
with open(os.path.join(home, "planted"), "w") as f:
    f.write("x")
print(json.dumps({"home": home, "listing": sorted(os.listdir(home)), "run": os.listdir("/run"),
                  "tmp": sorted(os.listdir("/tmp"))}))
"""
    probe = Path(tempfile.mkstemp(prefix="ralph-leak-probe-", dir="/tmp")[1])
    try:
        result = last_json(run_py(sandbox(workspace), code))
    finally:
        probe.unlink()
    assert result["home"] == str(home)
    assert result["listing"] == ["planted"]  # .netrc is masked; the write went to the tmpfs
    assert result["run"] == []  # no daemon sockets (docker, dbus) reachable through /run
    assert sorted(os.listdir(home)) == [".netrc"]
    assert (home / ".netrc").read_text() == "machine example.com password hunter2\n"
    # /tmp only holds mount points leading to what is bound in (the workspace, and the interpreter
    # when it lives under /tmp, as in a fresh clone there), none of the host's own files.
    bound = {
        p.relative_to("/tmp").parts[0] for p in (workspace, Path(sys.prefix)) if p.is_relative_to("/tmp")
    }
    assert probe.name not in result["tmp"]
    assert set(result["tmp"]) <= bound


@needs_bwrap
def test_git_directory_cannot_be_modified(workspace: Path) -> None:
    before = tree_digest(workspace / ".git")
    code = """
import errno, json, os, shutil, subprocess
out = {}
try:
    with open(".git/hooks/pre-commit", "w") as f:
        f.write("#!/bin/sh\\ncurl evil\\n")
    out["hook"] = "ok"
except OSError as e:
    out["hook"] = errno.errorcode[e.errno]
try:
    shutil.rmtree(".git")
    out["rmtree"] = "ok"
except OSError as e:
    out["rmtree"] = errno.errorcode[e.errno]
out["log"] = subprocess.run(["git", "log", "--format=%s"], capture_output=True, text=True).stdout.strip()
print(json.dumps(out))
"""
    result = last_json(run_py(sandbox(workspace), code))
    assert result == {"hook": "EROFS", "rmtree": "EROFS", "log": "init"}  # reading history still works
    assert tree_digest(workspace / ".git") == before
    assert not (workspace / ".git/hooks/pre-commit").exists()


@needs_bwrap
def test_network_is_unreachable_but_loopback_works(workspace: Path) -> None:
    # 192.0.2.1 is TEST-NET-1 (RFC 5737): nothing answers there even with a route, and here there is none.
    code = """
import errno, json, socket, time
out = {}
start = time.monotonic()
try:
    socket.create_connection(("192.0.2.1", 80), timeout=2).close()
    out["remote"] = "connected"
except OSError as e:
    out["remote"] = errno.errorcode.get(e.errno, str(e))
out["seconds"] = time.monotonic() - start
server = socket.create_server(("127.0.0.1", 0))
client = socket.create_connection(server.getsockname(), timeout=2)
peer, _ = server.accept()
client.sendall(b"ping")
out["loopback"] = peer.recv(4).decode()
print(json.dumps(out))
"""
    result = last_json(run_py(sandbox(workspace), code, timeout_s=10))
    assert result["remote"] == "ENETUNREACH"
    assert result["seconds"] < 0.5
    assert result["loopback"] == "ping"


@needs_bwrap
def test_secrets_in_our_environment_never_reach_the_child(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-SECRET")
    code = """
import os
print(dict(os.environ))
for pid in ("self", "1"):  # 1 is bwrap's init: its environment is readable (as root it is not)
    try:
        print(open(f"/proc/{pid}/environ", "rb").read())
    except PermissionError:
        print(pid, "unreadable")
"""
    box = sandbox(workspace)
    result = run_py(box, code)
    assert result.ok, result.output
    assert "OPENAI_API_KEY" not in result.output and "sk-test-SECRET" not in result.output
    argv = box.wrap([PY, "-c", code], cwd=workspace)
    try:  # a caller spawning `wrap` with our full environment still leaks nothing
        spawned = subprocess.run(
            argv, capture_output=True, text=True, timeout=20, check=True, pass_fds=argv.pass_fds
        )
    finally:
        argv.close()
        box.close()
    assert "sk-test-SECRET" not in spawned.stdout
    assert "PATH" in spawned.stdout


@needs_bwrap
def test_stdin_is_fed_to_the_child(workspace: Path) -> None:
    result = sandbox(workspace).run(["cat"], cwd=str(workspace), stdin="fed through a pipe\n")
    assert result.ok and result.output == "fed through a pipe\n"


@needs_bwrap
def test_sandbox_sees_its_own_processes_and_no_privileges(workspace: Path) -> None:
    code = """
import json, os
status = dict(line.split(":", 1) for line in open("/proc/self/status"))
print(json.dumps({"pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
                  "cap": status["CapEff"].strip(), "nnp": status["NoNewPrivs"].strip()}))
"""
    result = last_json(run_py(sandbox(workspace), code))
    assert result["cap"] == "0000000000000000"
    assert result["nnp"] == "1"
    # As root: bwrap's init (root's) and the command (prlimit exec'd it); as a user, the command is
    # the namespace's first process (an init of the sandbox's user could have its memory written).
    assert result["pids"] == ([1, 2] if os.geteuid() == 0 else [1])


@needs_bwrap
def test_fork_bomb_is_capped(workspace: Path) -> None:
    box = sandbox(workspace, max_pids=64)
    if box.pids_cap.startswith("none"):
        pytest.skip(f"no process cap here: {box.pids_cap}")
    count_forks = """
import json, os, time
children = 0
while True:
    try:
        pid = os.fork()
    except OSError as e:
        print(json.dumps({"children": children, "error": type(e).__name__}))
        break
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    children += 1
"""
    result = last_json(run_py(box, count_forks))
    # The cap counts the sandbox's init, prlimit->python and bwrap (cgroup) too.
    assert result["error"] == "BlockingIOError"
    assert 56 <= result["children"] < 64

    bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    start = time.monotonic()
    result_bomb = run_py(box, bomb, timeout_s=2)
    assert time.monotonic() - start < 6
    assert result_bomb.timed_out and not result_bomb.ok and result_bomb.returncode == -9


@needs_bwrap
def test_memory_bomb_is_stopped_and_reported(workspace: Path) -> None:
    code = "blocks = []\nwhile True:\n    blocks.append(bytearray(16 << 20))\n"
    result = run_py(sandbox(workspace, memory_bytes=256 << 20), code, timeout_s=20)
    assert not result.ok and not result.timed_out
    assert result.returncode == 1
    assert "MemoryError" in result.output
    assert result.duration_s < 10


GRANDCHILD = """
import os, signal, subprocess, sys, time
token, pidfile = sys.argv[1], sys.argv[2]
# A daemonising grandchild: own session, deaf to the polite signals.
subprocess.Popen([sys.executable, "-c", "import signal, sys, time\\n"
                  "signal.signal(signal.SIGTERM, signal.SIG_IGN)\\nsignal.signal(signal.SIGHUP, signal.SIG_IGN)\\n"
                  f"open({pidfile!r}, 'w').write(str(__import__('os').getpid()))\\ntime.sleep(600)", token],
                 start_new_session=True)
while not os.path.exists(pidfile):
    time.sleep(0.01)
print("daemon started", flush=True)
"""


@needs_bwrap
def test_timeout_kills_the_loop_and_setsid_grandchildren(workspace: Path) -> None:
    token = f"ralph-token-{uuid.uuid4().hex}"
    pidfile = workspace / "grandchild.pid"
    code = GRANDCHILD + "while True:\n    pass\n"
    result = run_py(sandbox(workspace), code, token, str(pidfile), timeout_s=2)
    assert result.timed_out and result.returncode == -9 and not result.ok
    assert "daemon started" in result.output
    assert int(pidfile.read_text()) > 1  # the grandchild ran (this is its pid inside the namespace)
    assert host_processes_with(token) == []  # ... and no longer exists under any pid


@needs_bwrap
def test_daemons_left_behind_by_a_finished_command_are_killed(workspace: Path) -> None:
    token = f"ralph-token-{uuid.uuid4().hex}"
    result = run_py(sandbox(workspace), GRANDCHILD, token, str(workspace / "daemon.pid"))
    assert result.ok and "daemon started" in result.output
    assert host_processes_with(token) == []


@needs_bwrap
def test_killing_a_wrapped_process_kills_the_whole_sandbox(workspace: Path) -> None:
    """The warm runner's way: Popen `wrap(...)` itself, keep the pipes, killpg it when done."""
    token = f"ralph-token-{uuid.uuid4().hex}"
    box = sandbox(workspace)
    code = GRANDCHILD + "import sys\nsys.stdin.readline()\n"
    argv = box.wrap([PY, "-c", code, token, str(workspace / "w.pid")], cwd=workspace)
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        start_new_session=True,
        text=True,
        pass_fds=argv.pass_fds,
    )
    argv.close()
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "daemon started\n"
        assert len(host_processes_with(token)) >= 2  # bwrap, its init, the python child and grandchild
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    deadline = time.monotonic() + 15  # --die-with-parent: the kernel tears the namespace down on its own
    while host_processes_with(token) and time.monotonic() < deadline:
        time.sleep(0.02)
    box.close()
    assert host_processes_with(token) == []
    if box._cgroup_parent is not None:
        assert not list(box._cgroup_parent.glob(f"ralph-{os.getpid()}-*"))


def peak_rss_kb() -> int:
    status = Path("/proc/self/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("VmHWM:")).split()[1])


@pytest.mark.slow
@needs_bwrap
def test_a_gigabyte_of_output_is_capped_with_bounded_memory(workspace: Path) -> None:
    code = "import sys\nblock = b'y' * (1 << 20)\nfor _ in range(1024):\n    sys.stdout.buffer.write(block)\n"
    before = peak_rss_kb()
    # The gigabyte lands in the output's temp file, on the disk the disk cap watches (1 GiB by
    # default, counting whatever else writes there meanwhile): room for it, so only output is capped.
    box = sandbox(workspace, file_bytes=2 << 30, max_output=1 << 20, disk_bytes=3 << 30)
    result = run_py(box, code, timeout_s=60)
    assert result.ok, result.output[-500:]
    assert f"[... {(1 << 30) - (1 << 20)} bytes of output dropped ...]" in result.output
    assert len(result.output) < (1 << 20) + 100
    assert peak_rss_kb() - before < 32 << 10  # KiB: nowhere near the gigabyte


@needs_bwrap
def test_output_beyond_the_file_size_limit_stops_the_writer(workspace: Path) -> None:
    code = "import sys\nblock = b'y' * (1 << 20)\nwhile True:\n    sys.stdout.buffer.write(block)\n"
    result = run_py(sandbox(workspace, file_bytes=8 << 20, max_output=1 << 20), code, timeout_s=20)
    # Python ignores SIGXFSZ, so its write fails with EFBIG instead and it cannot even flush at exit.
    assert result.returncode == 120 and not result.timed_out
    # The output file stopped at exactly file_bytes; the middle of it was dropped.
    assert f"[... {(8 << 20) - (1 << 20)} bytes of output dropped ...]" in result.output


@needs_bwrap
def test_filling_tmp_and_shm_hits_the_tmpfs_cap(workspace: Path) -> None:
    code = """
import errno, json
out = {}
for path in ("/tmp/fill", "/dev/shm/fill"):
    written = 0
    try:
        with open(path, "wb") as f:
            while True:
                written += f.write(b"z" * (1 << 20))
                f.flush()
    except OSError as e:
        out[path] = [errno.errorcode[e.errno], written]
print(json.dumps(out))
"""
    result = last_json(run_py(sandbox(workspace, tmp_bytes=8 << 20), code))
    for path in ("/tmp/fill", "/dev/shm/fill"):
        name, written = result[path]
        assert name == "ENOSPC"
        assert written <= 8 << 20
