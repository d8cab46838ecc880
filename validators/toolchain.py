"""How validators run tools on the target project: its interpreter, our sandbox, a clean environment."""

from __future__ import annotations

import atexit
import functools
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from ralph.domain.errors import RalphError
from ralph.domain.protocols import Sandbox
from ralph.domain.results import ProcessResult
from ralph.sandboxes.local import LocalSandbox, Started, kill_group, popen_owned, read_line

PLUGIN_DIR = Path(__file__).resolve().parent / "_plugin"  # (past the link ralph/validators)


@functools.cache
def _private_plugins() -> Path:
    """A copy of our plugins outside every repository, readable by the sandbox's user, removed at
    exit: where ralph runs from the repository it fixes (an editable install), the gate shows the
    workspace at that path, and the plugins found there would be the candidate's."""
    folder = Path(tempfile.mkdtemp(prefix="ralph-plugins-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    for source in PLUGIN_DIR.glob("*.py"):
        target = folder / source.name
        target.write_bytes(source.read_bytes())
        target.chmod(0o444)
    folder.chmod(0o555)
    return folder


@dataclass
class Toolchain:
    """The target's interpreter and the sandbox every tool runs in."""

    python: str
    sandbox: Sandbox  # runs the project's code (tests, check commands): untrusted
    project: Path  # the project directory inside the workspace
    env: dict[str, str] = field(default_factory=dict)
    # Where files passed between ralph and a sandboxed process live (a sandbox's /tmp is private).
    scratch: Path | None = None
    # Runs trusted tools that execute no project code and read only what the policy keeps the
    # candidate from changing (ruff, git).
    tools: LocalSandbox = field(default_factory=LocalSandbox)
    # Runs the type checker: the workspace read-only, nothing writable (None: `sandbox`).
    checker: Sandbox | None = None
    # The repository's copy the project lies in: tool configuration is looked up no further up.
    root: Path | None = None
    # The user's repository `root` copies (the snapshot's toplevel): the gate runs there (`as_the_user`).
    user_root: Path | None = None

    @property
    def user_project(self) -> Path:
        """The project at the user's own path, for what a person reads (an error names their
        repository, never ralph's copy of it); the copy's when the user's is not known."""
        if self.user_root is None or self.root is None or not self.project.is_relative_to(self.root):
            return self.project
        return self.user_root / self.project.relative_to(self.root)

    @property
    def plugin_dir(self) -> Path:
        """Where our plugins load from: their folder, or a private copy of it when that lies in the
        user's repository (which the workspace shows, the candidate's files, at the gate)."""
        here = PLUGIN_DIR.resolve()
        roots = [r.resolve() for r in (self.user_root, self.root) if r is not None]
        return _private_plugins() if any(here.is_relative_to(r) for r in roots) else PLUGIN_DIR

    def as_the_user(self) -> Toolchain:
        """This toolchain with its sandbox showing the workspace at `user_root`, with the user's TMPDIR,
        as the user's own run would see it (the copy's path names ralph: a candidate can be right
        there alone); itself when there is none, or its sandbox cannot (no bubblewrap) or already
        does. Then call `make_mount_points` before the workspace's state is captured."""
        if self.user_root is None or self.root is None or self.sandbox.mount_at is not None:
            return self
        mounted = self.sandbox.mounted_at(self.user_root)
        return self if mounted is None else replace(self, sandbox=mounted)

    def make_mount_points(self) -> list[Path]:
        """Where the sandbox shows the workspace at the user's path, what the interpreter needs of the
        user's own there (their .venv) is bound back over it, on folders made in the workspace now
        (the ones made): part of the state a restore keeps when made before it is captured."""
        return self.sandbox.prepare([self.python], self.python_env())

    def python_env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """Environment for the target's Python: our plugin and the workspace's code come first on the path."""
        paths = [str(self.plugin_dir), str(self.project)]
        if (self.project / "src").is_dir():
            paths.append(str(self.project / "src"))
        # The target's scripts (pytest, ruff, ...) resolve first for custom check commands.
        bins = [str(Path(self.python).parent), str(Path(sys.executable).parent), os.environ.get("PATH", "")]
        env = {
            "PYTHONPATH": os.pathsep.join(paths),
            "PYTHONNOUSERSITE": "1",
            "PATH": os.pathsep.join(dict.fromkeys(b for b in bins if b)),
            **self.env,
        }
        env.update(extra or {})
        return env

    def run(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        timeout_s: float = 300.0,
        stdin: str | None = None,
    ) -> ProcessResult:
        return self.sandbox.run(argv, cwd=str(self.project), env=env, timeout_s=timeout_s, stdin=stdin)

    def run_tool(
        self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, timeout_s: float = 300.0
    ) -> ProcessResult:
        return self.tools.run(argv, cwd=str(self.project), env=env, timeout_s=timeout_s)

    @functools.cached_property
    def reads_our_bytecode(self) -> bool:
        """Whether the target interpreter loads .pyc files this interpreter writes (same cache tag
        and magic number, not run with -O): then bytecode compiled here can serve its imports."""
        if Path(self.python).resolve() == Path(sys.executable).resolve():
            return True  # (we compile with optimize=0; the worker runs without -O)
        probe = "import sys, importlib.util as u; print(sys.implementation.cache_tag, u.MAGIC_NUMBER.hex(), sys.flags.optimize)"
        result = self.tools.run([self.python, "-c", probe], cwd=str(self.project), timeout_s=60)
        ours = f"{sys.implementation.cache_tag} {importlib.util.MAGIC_NUMBER.hex()} 0"
        return result.ok and result.output.strip() == ours

    def start_tool(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None) -> Started:
        return self.tools.start(argv, cwd=str(self.project), env=env)

    def start_resident(
        self,
        argv: Sequence[str],
        env: Mapping[str, str],
        sandbox: Sandbox | None = None,
        *,
        channel: bool = False,
    ) -> subprocess.Popen[str] | None:
        """A long-lived helper (the warm test runner, the type checker) inside `sandbox` (default:
        the tests' sandbox), talking JSON lines; None unless it says it is ready.

        With `channel`, it talks on a pipe pair of its own, at descriptors named in its
        $RALPH_CHANNEL ("READ,WRITE"), and its stdin and stdout are /dev/null: the sandbox's first
        process (bwrap's init, readable at /proc/1/fd by a process of the sandbox running as the
        same user) keeps only the standard descriptors, so no test can reach that pair. The
        returned process's `stdin`/`stdout` are then the host's ends of it."""
        pipes: list[int] = []
        extra: dict[str, str] = {}
        if channel:
            request_read, request_write = os.pipe()
            reply_read, reply_write = os.pipe()
            pipes = [request_read, reply_write]
            extra["RALPH_CHANNEL"] = f"{request_read},{reply_write}"
        env = {**env, **extra}
        command = (sandbox or self.sandbox).wrap(argv, cwd=str(self.project), env=env)
        try:
            proc = popen_owned(
                command,
                cwd=self.project,
                env=env,
                stdin=subprocess.DEVNULL if channel else subprocess.PIPE,
                stdout=subprocess.DEVNULL if channel else subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
                start_new_session=True,
                pass_fds=(*pipes, *command.pass_fds),
            )
        finally:
            command.close()
            for fd in pipes:
                os.close(fd)
        if channel:
            proc.stdin = open(request_write, "w", encoding="utf-8")  # noqa: SIM115 (the process's)
            proc.stdout = open(reply_read, encoding="utf-8")  # noqa: SIM115 (the process's)
        ready = read_line(proc, 120)
        try:
            if ready and json.loads(ready).get("ready"):
                return proc
        except ValueError:
            pass
        kill_group(proc)
        return None

    def has_module(self, module: str) -> bool:
        result = self.run([self.python, "-c", f"import {module}"], env=self.python_env(), timeout_s=60)
        return result.ok


def project_relative(path: str, project: Path) -> str:
    """`path` relative to the (resolved) project, as tools report it; unchanged when outside it."""
    try:
        return Path(path).resolve().relative_to(project).as_posix()
    except ValueError:
        return path


def find_python(project: Path, repo_root: Path, explicit: str | None) -> str:
    """The target's interpreter: --python, else a .venv in the project or repo, else ours."""
    if explicit:
        found = shutil.which(explicit) or explicit
        if not Path(found).exists():
            raise RalphError(f"--python {explicit}: no such interpreter")
        return found
    for base in (project, repo_root):
        candidate = base / ".venv" / "bin" / "python"
        if candidate.exists():
            return str(candidate)
    return sys.executable


@functools.cache
def ruff_bin() -> str:
    """The ruff executable installed with ralph (else one on PATH)."""
    try:
        from ruff.__main__ import find_ruff_bin

        return str(find_ruff_bin())
    except (ImportError, FileNotFoundError):
        return shutil.which("ruff") or "ruff"
