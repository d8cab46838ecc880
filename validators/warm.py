"""The host side of the warm test runner: a long-lived worker per workspace that forks per request.

The worker (``_plugin/ralph_worker.py``) runs in the target's interpreter with pytest, our report plugin
and the project's third-party imports already loaded, so a candidate pays for fork + collection + its
tests, not for interpreter start-up and imports. A worker that dies is restarted on the next request.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import json
import os
import secrets
import select
import signal
import stat
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from ralph.domain.candidate import is_protected
from ralph.domain.pyast import parse
from ralph.domain.results import ProcessResult
from ralph.sandboxes.local import ScratchDir, child_env, kill_group, read_capped, read_line
from ralph.validators.policy import PYTEST_CONFIG_FILES, tool_tables
from ralph.validators.selection import project_sources
from ralph.validators.toolchain import PLUGIN_DIR, Toolchain

WORKER = PLUGIN_DIR / "ralph_worker.py"
# How much a candidate's processes may take of the workspace's filesystem ($RALPH_DISK_CAP overrides).
DISK_CAP = 1 << 30
# Modules whose import does something (opens a browser, prints, needs a display).
_NEVER_PRELOAD = frozenset({"antigravity", "this", "tkinter", "turtle", "idlelib", "pdb", "site"})


class WarmRunner:
    """Runs `pytest.main(args)` in a fork of a warm worker; falls back to nothing: callers decide."""

    def __init__(
        self,
        toolchain: Toolchain,
        preload: Sequence[str] = (),
        fixed: Sequence[str] = (),
        *,
        plugins: bool = True,
    ) -> None:
        self.toolchain = toolchain
        self.preload = list(preload)
        self.plugins = plugins  # whether the worker imports pytest's installed plugins ahead too
        # Project files besides conftests that a readied child may import while configuring, none of
        # which a candidate may edit (`fixed_package_files`).
        self.fixed = list(fixed)
        self._proc: subprocess.Popen[str] | None = None
        self._next_id = 0
        self.starts = 0
        self.readied = 0  # runs served by a child the worker had configured ahead
        self._cancelled = False
        self._chain: list[int] = []  # host pids from the spawned process down to the worker
        self._init: int | None = None  # a pidfd of the sandbox's init, when there is one
        self._spare_wanted = False  # the last request asked for a readied child

    def _start(self) -> subprocess.Popen[str]:
        # The worker drops these after preloading, should a dependency have imported an installed
        # copy of the project (its own modules must always come fresh from the workspace).
        own = ",".join(sorted(project_modules(self.toolchain.project)))
        spare = "1" if spare_safe(self.toolchain.project) else "0"
        cap = os.environ.get("RALPH_DISK_CAP") or str(DISK_CAP)
        settings = {"RALPH_OWN_MODULES": own, "RALPH_SPARE": spare, "RALPH_DISK_CAP": cap}
        if self.fixed:
            settings["RALPH_FIXED"] = json.dumps(self.fixed)
        if not self.plugins:
            settings["RALPH_PRELOAD_PLUGINS"] = "0"
        env = child_env(self.toolchain.python_env(settings))
        # The worker itself imports nothing of the workspace: a candidate's top-level module named
        # like one it imports at start (pygments, a venv's `_virtualenv` .pth hook) would run in the
        # worker, which holds the channel. Its test processes get the project's path per request.
        env["PYTHONPATH"] = str(self.toolchain.plugin_dir)
        # The worker, and every test it forks, runs inside the sandbox, on a channel of its own.
        argv = [self.toolchain.python, str(self.toolchain.plugin_dir / WORKER.name), *self.preload]
        proc = self.toolchain.start_resident(argv, env, channel=True)
        if proc is None:
            raise RuntimeError("the warm test runner did not start")
        try:
            self._chain = _chain(proc.pid)
        except OSError as exc:  # (fail closed: a sandbox whose processes cannot be seen)
            kill_group(proc)
            raise RuntimeError(f"the warm test runner's processes cannot be seen: {exc}") from None
        self._init = _pidfd(self._chain[1]) if len(self._chain) > 2 else None
        self.starts += 1
        return proc

    def run(
        self,
        args: Sequence[str],
        tests: Sequence[str] = (),
        *,
        env: Mapping[str, str],
        timeout_s: float,
        spare: bool = False,
    ) -> ProcessResult:
        """One run of `pytest args tests`; output is captured to a file and returned head/tail-capped.
        With `spare`, the worker then forks the next child ahead, configured for the same `args`."""
        proc = None if self._cancelled else self._worker()
        if self._cancelled:  # (also when `cancel` came while the worker started: it found none)
            self.close()
            return ProcessResult(-9, "", 0.0, error="cancelled")
        assert proc is not None and proc.stdin is not None
        self._next_id += 1
        secret = secrets.token_hex(16)
        with ScratchDir(self.toolchain.scratch, "ralph-warm-") as tmp:
            request = self._request(args, tests, env, timeout_s, spare, Path(tmp.path) / "output")
            start = time.monotonic()
            try:
                line = _exchange(proc, request, timeout_s + 30, secret)
            except BaseException:
                # Ctrl-C while the tests run: they are killed, their whole sandbox gone, before the
                # caller puts the workspace back (a test still writing there raced the restore).
                self._drop(proc)
                raise
            if not line:  # the worker itself died or hung: start afresh next time
                self._drop(proc)
                return ProcessResult(
                    -9,
                    "the warm test runner died",
                    time.monotonic() - start,
                    timed_out=False,
                    error="the warm test runner died",
                )
            parsed = _parse_reply(line)
            if parsed is None or parsed[0].get("id") != request["id"] or parsed[0].get("secret") != secret:
                # Not the worker's reply to this request (a forgery, or out of step): no verdict.
                self._drop(proc)
                why = "unreadable reply" if parsed is None else "a reply that does not match its request"
                return ProcessResult(-9, f"the warm test runner gave {why}", 0.0, error=why)
            reply, returncode, seconds, timed_out = parsed
            if leftover := _left_in_sandbox(proc.pid, self._chain):
                # Something of the request still runs: nothing on the host may start beside it.
                self._drop(proc)
                return ProcessResult(-9, leftover, seconds, timed_out, error=leftover)
            self._spare_wanted = spare  # forked once the workspace is put back (`restored`)
            self.readied += bool(reply.get("readied"))
            text = _read_output(tmp.fd)
            error = self._reply_error(reply)
        return ProcessResult(returncode, text, seconds, timed_out, error=error)

    @functools.cached_property
    def _pythonpath(self) -> str:
        return self.toolchain.python_env()["PYTHONPATH"]

    def _worker(self) -> subprocess.Popen[str]:
        """The running worker, started afresh when there is none or it has exited."""
        proc = self._proc  # (`cancel` may clear it from another thread)
        if proc is None or proc.poll() is not None:
            proc = self._proc = self._start()
        return proc

    def _drop(self, proc: subprocess.Popen[str]) -> None:
        """Kill a worker that can no longer be trusted, so the next request starts a new one; returns
        once its whole sandbox is gone (its init's exit: the kernel has killed all else first)."""
        kill_group(proc)
        self._proc = None
        self._spare_wanted = False
        init, self._init = self._init, None
        if init is not None:
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(init, signal.SIGKILL)
                select.select([init], [], [], 10)
            os.close(init)

    def _request(
        self,
        args: Sequence[str],
        tests: Sequence[str],
        env: Mapping[str, str],
        timeout_s: float,
        spare: bool,
        output: Path,
    ) -> dict[str, Any]:
        """The worker's request for one run, numbered with the latest request id; its paths as the
        sandbox shows them (the workspace may be mounted at the user's repository path)."""
        seen = self.toolchain.sandbox.inside
        return {
            "id": self._next_id,
            "args": [seen(a) for a in args],
            "tests": [seen(t) for t in tests],
            "spare": spare,
            # (the worker runs with our plugin alone on its path: its test processes get the project's)
            "env": {k: seen(v) for k, v in {"PYTHONPATH": self._pythonpath, **env}.items()},
            "cwd": seen(str(self.toolchain.project)),
            "path": [seen(str(self.toolchain.plugin_dir)), seen(str(self.toolchain.project))],
            "timeout": timeout_s,
            "output": seen(str(output)),
        }

    def _reply_error(self, reply: dict[str, Any]) -> str | None:
        """Why a finished run's outcome is void (closing the worker when its tests' processes survive)."""
        if reply.get("disk_exceeded"):
            return "the tests wrote more than the disk cap allows (killed)"
        if reply.get("leftovers_alive"):
            self.close()  # its sandbox goes with it
            return "processes the tests started could not be killed"
        return None

    def restored(self, clean: bool) -> None:
        """The workspace is put back to a state (after the last request, and after the gate); when
        `clean` (nothing of the last request's tests had to be undone), the worker may now fork the
        child it readies ahead. Never sooner: it imports conftests from the workspace as it is."""
        wanted, self._spare_wanted = self._spare_wanted, False
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return
        if not clean:
            self.discard_spare()  # (one readied on an earlier state may have seen what was undone)
        elif wanted:
            _send(proc, {"spare_now": True})

    def discard_spare(self) -> None:
        """Drop the test child readied ahead: it configured pytest while the workspace still held
        what a candidate's tests wrote (the next request forks a fresh one)."""
        if self._proc is not None and self._proc.poll() is None and self._proc.stdin is not None:
            _send(self._proc, {"discard_spare": True})

    def close(self) -> None:
        if (proc := self._proc) is not None:
            self._drop(proc)

    def cancel(self) -> None:
        """From another thread: kill the worker (and the run it serves: that run gives no verdict)
        and start nothing more."""
        self._cancelled = True
        self.close()


def _send(proc: subprocess.Popen[str], message: dict[str, Any], secret: str = "") -> bool:
    """Write one framed message (its length, a newline, the JSON; then the request's secret)."""
    assert proc.stdin is not None
    body = json.dumps(message)  # (ASCII: its length in characters is its length in bytes)
    try:
        proc.stdin.write(f"{len(body)}\n{body}" + (f"{secret}\n" if secret else ""))
        proc.stdin.flush()
    except (BrokenPipeError, OSError, ValueError):
        return False
    return True


def _exchange(
    proc: subprocess.Popen[str], request: dict[str, Any], timeout_s: float, secret: str
) -> str | None:
    """Send the worker one request and wait for its reply line; None when the pipe broke or it hung."""
    if not _send(proc, request, secret):
        return None
    try:
        return read_line(proc, timeout_s)
    except (OSError, ValueError):
        return None


def _children(pid: int) -> list[int]:
    """The children of `pid` (of every thread), from /proc; empty when it is gone. Raises OSError
    where the kernel does not list children (no verdict can rest on a check that cannot look)."""
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return found
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                found += [int(c) for c in f.read().split()]
        except FileNotFoundError:
            if os.path.isdir(f"/proc/{pid}/task/{tid}"):
                raise
    return found


def _chain(pid: int) -> list[int]:
    """The processes from `pid` (what was spawned: env/sh/bwrap, or the worker itself) down to the
    worker, each the only child of the one before; taken when the worker has said it is ready."""
    chain = [pid]
    while len(chain) < 8 and len(children := _children(chain[-1])) == 1:
        chain.append(children[0])
    return chain


def _left_in_sandbox(pid: int, chain: Sequence[int]) -> str | None:
    """Why the worker's sandbox holds more than it did when the worker started, or None: the same
    chain of single children down to the worker, and the worker with no child once it has replied.
    Any other process is one the request started, still running."""
    try:
        if _chain(pid) == list(chain) and not _children(chain[-1]):
            return None
    except OSError:
        return "the sandbox's processes cannot be seen (/proc/PID/task/TID/children): no verdict"
    return "processes the tests started were still running after the reply (killed; no verdict)"


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except OSError:
        return None


def _parse_reply(line: str) -> tuple[dict[str, Any], int, float, bool] | None:
    """The worker's reply with its returncode, seconds and timed_out; None when it is not a reply."""
    try:
        reply = json.loads(line)
        returncode, seconds, timed_out = (
            int(reply["returncode"]),
            float(reply["seconds"]),
            bool(reply["timed_out"]),
        )
    except (ValueError, KeyError, TypeError):
        return None
    return reply, returncode, seconds, timed_out


def _read_output(dir_fd: int) -> str:
    """The run's captured output, capped; empty when the output file is missing or not a regular file."""
    fd = _open_output(dir_fd)
    if fd is None:
        return ""
    with fd as f:
        return read_capped(f, 1 << 20)  # a test printing gigabytes costs a megabyte


def _open_output(dir_fd: int) -> IO[bytes] | None:
    """The run's output file, unless a test put something other than a regular file there."""
    try:
        fd = os.open("output", os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return None
    f = os.fdopen(fd, "rb")
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        f.close()
        return None
    return f


def spare_safe(project: Path, limit: int = 20000) -> bool:
    """Whether a test child configured before the candidate is written behaves as one started after
    it: no pytest settings below the project root (found from the tests' paths, unknown in advance).
    A file of a settings name that holds none (tomlkit's `tests/examples/pyproject.toml`, a TOML
    sample) is not one: pytest passes over it, and no candidate may add settings to it
    (`policy.config_edits`). Conftest files load while configuring, but no candidate may edit one,
    so the readied child loads the same; the worker still refuses one whose configuring imported a
    project file. What a conftest reads otherwise is not watched, and need not be: a readied child
    serves only the targeted stages, which the gate (a child of its own pytest-only worker)
    re-judges before anything is committed."""
    settings = PYTEST_CONFIG_FILES - {"conftest.py"}
    # With no settings at the root, pytest (8.1 on) takes the first `pyproject.toml` above the tests
    # as its configuration file, settings or none: then a nested one decides where tests lie below.
    bare = not any(pytest_settings(project / f) for f in settings if (project / f).is_file())
    seen = 0
    for here, files in _folders(project):
        if here != project and any(pytest_settings(here / f) for f in settings & set(files)):
            return False
        if here != project and bare and "pyproject.toml" in files and _holds_python(here):
            return False
        seen += len(files)
        if seen > limit:
            return False
    return True


def _folders(project: Path) -> Iterator[tuple[Path, list[str]]]:
    """The project's folders with their file names, outside hidden and generated folders."""
    for directory, dirs, files in os.walk(project):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d not in ("__pycache__", "node_modules")]
        yield Path(directory), files


def _holds_python(folder: Path) -> bool:
    """Whether any Python file lies in or below `folder` (where tests could be)."""
    return next(iter(folder.rglob("*.py")), None) is not None


# The sections pytest reads its settings from, by file (pytest.ini and pytest.toml: the whole file).
_INI_SECTIONS = {"tox.ini": ("[pytest]",), "setup.cfg": ("[tool:pytest]", "[pytest]")}


def pytest_settings(path: Path) -> bool:
    """Whether pytest would take its settings from this file (a file it cannot read: yes)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return True
    if path.name == "pyproject.toml":
        tool = tool_tables(text)  # (a file that does not parse: not a table, so settings)
        return tool is not None and (not isinstance(tool, dict) or "pytest" in tool)
    sections = _INI_SECTIONS.get(path.name)
    if sections is None:
        return True
    # (a header may carry a comment: `[pytest] # ours`)
    heads = (line.split("#", 1)[0].split(";", 1)[0].strip().lower() for line in text.splitlines())
    return any(head in sections for head in heads)


def candidates_runner(toolchain: Toolchain, protected: Sequence[str]) -> WarmRunner:
    """The warm runner of the candidates' targeted stages: the project's third-party imports
    preloaded, and the files configuring may import that no candidate may edit."""
    project = toolchain.project
    return WarmRunner(toolchain, third_party_imports(project), fixed_package_files(project, protected))


def fixed_package_files(project: Path, protected: Sequence[str], limit: int = 20000) -> list[str]:
    """The `__init__.py` files of the packages that hold a conftest (importing `tests.conftest`
    imports `tests` first: tomlkit's), when `protected` keeps every candidate from editing them;
    root-relative. A package of the project's own code (`pkg/conftest.py` beside `pkg/__init__.py`)
    is editable, so a child whose configuring imported it is never used."""
    found: set[str] = set()
    seen = 0
    for folder, files in _folders(project):
        seen += len(files)
        if seen > limit:
            break
        if "conftest.py" not in files:
            continue
        while folder != project and (folder / "__init__.py").is_file():
            found.add((folder / "__init__.py").relative_to(project).as_posix())
            folder = folder.parent
    return sorted(f for f in found if is_protected(f, tuple(protected)))


def project_modules(project: Path) -> set[str]:
    """Top-level module names the project itself defines (at its root or under src/)."""
    own: set[str] = set()
    for base in (project, project / "src"):
        if base.is_dir():
            own |= {p.stem for p in base.glob("*.py")} | {p.name for p in base.iterdir() if p.is_dir()}
    return own


def third_party_imports(project: Path, limit: int = 2000) -> list[str]:
    """Modules the project imports that are not its own (safe to preload in the worker): each top-level
    name, then the dotted names it imports below one (`unittest.mock`, and for `from a.b import c`
    both `a.b` and `a.b.c`, which may be a module). The worker imports a dotted name only below the
    standard library (`_plugin/ralph_worker.py`): importing `unittest.mock` (and asyncio with it) is
    ~10 ms of a child's collection; a package's submodule may depend on what a conftest sets first
    (matplotlib.pyplot's backend)."""
    own = project_modules(project)
    found: dict[str, None] = {}
    dotted: dict[str, None] = {}
    for source in project_sources(project, skip=("build", "dist"), limit=limit).values():
        try:
            tree = parse(source)
        except (SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module, *(f"{node.module}.{a.name}" for a in node.names if a.name != "*")]
            for name in names:
                top = name.split(".")[0]
                if top in own or top in ("conftest", "__future__") or top.startswith("test"):
                    continue
                found[top] = None
                if name != top and not any(part.startswith("_") for part in name.split(".")[1:]):
                    dotted[name] = None  # (never `unittest.__main__`: importing it runs tests)
    return [n for n in (*found, *dotted) if n.split(".")[0] not in _NEVER_PRELOAD]
