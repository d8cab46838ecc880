"""Run untrusted code under bubblewrap: read-only host, writable workspace, no network, capped resources.

Layout inside the sandbox (every path keeps its host name, so tracebacks and paths in output match,
except the workspace's in a sandbox `mounted_at` the user's repository):

* ``/`` is the host's root, bound read-only; ``/proc`` and ``/dev`` are fresh (new PID namespace).
* the workspace and any extra ``writable`` paths are bound read-write; ``<workspace>/.git`` is bound
  read-only on top, so a test can run ``git status`` but cannot rewrite history or plant a hook.
* mounted at the user's repository (the gate's sandbox: the candidate runs where the user's own run
  would, not at a path that says "ralph"), the workspace is bound there instead, every path of the
  command's that names the workspace is translated (`inside`), what the command needs of the user's
  own beneath that path (their ``.venv``, hidden by the bind) is bound back read-only, and
  ``TMPDIR`` is the user's, a private tmpfs there.
* ``/tmp``, ``/dev/shm``, the home directory and ``/run`` (daemon sockets: docker, dbus, ...) are
  private, empty tmpfs mounts, each capped at ``tmp_bytes`` (an older bwrap without ``--size``
  leaves them uncapped in total, and only RLIMIT_FSIZE bounds each file); ``HOME`` points at the
  masked home. An interpreter or tool living under one of them is bound back read-only.
  Anything the host must read back has to be written under the workspace or a ``writable`` path.
* every namespace is new: the network namespace has only loopback, so nothing can leave the machine.
* the environment is cleared and only ``child_env``'s allowlist is set, so API keys never get in;
  no capabilities, no nested user namespaces, ``no_new_privs`` (bwrap sets it).

Resource limits are set by ``prlimit`` (util-linux) as the first process *inside* the sandbox: that
costs one small exec, avoids any race with a limit set from outside after the start, and keeps
`wrap` self-contained for callers that spawn the command themselves (the warm test runner).

Process count: ``RLIMIT_NPROC`` is counted per (user namespace, user), so for a non-root user it caps
exactly this sandbox's processes. It never binds a process whose real user is root, though, and as
root the sandbox's user namespace maps to host uid 0; there a child ``pids`` cgroup is used instead,
joined by a tiny ``sh`` before it execs bwrap (moving a process between cgroups waits for an RCU
grace period: docs/measurements.md). Without either (root, no writable pids cgroup) there is
no process cap beyond the timeout; `BwrapSandbox.pids_cap` says which applies.

Memory in total: where a memory cgroup can be made (cgroup v1 or a delegated v2), every command
joins one capped at ``memory_total_bytes`` (all its processes together; the kernel's OOM killer
ends one that goes past it); elsewhere only the per-process address-space limit applies
(`BwrapSandbox.memory_cap` says which).

Teardown: bwrap's first child is the PID namespace's init. When it dies the kernel kills every
process in the namespace (``setsid`` does not escape it) and only then lets it exit, so `run` kills
it through a pidfd and waits for that exit. ``--die-with-parent`` gives the same end, a moment
later, when bwrap itself is killed (the warm runner's ``killpg``).

Not covered: as root, the sandbox can still read every file root can outside the masked paths
(its user namespace maps to host uid 0); a Unix socket elsewhere on disk stays connectable (the
network namespace does not hide filesystem sockets); only the workspace's top-level ``.git`` is
protected, not nested repositories.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import itertools
import json
import os
import pwd
import re
import secrets
import select
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO

from ralph.domain.errors import UnsafePath
from ralph.domain.protocols import Command
from ralph.domain.results import ProcessResult
from ralph.sandboxes import seccomp
from ralph.sandboxes.local import child_env, feed_stdin, read_capped, wait_exit
from ralph.sandboxes.workspace import chown_tree, open_dir

_COUNTER = itertools.count()
_PRIVATE = re.compile(r"^ralph-\d+-")  # a run's private folder (`tempfile.mkdtemp` in the session)
_TOKEN = secrets.token_hex(3)  # a reused pid never meets a leaked cgroup's name


@functools.cache
def _tool(name: str) -> str | None:
    """`name`'s path, looked up in the system directories before our PATH."""
    return shutil.which(name, path="/usr/bin:/bin:/usr/sbin:/sbin:" + os.environ.get("PATH", ""))


@functools.cache
def _bwrap_options() -> frozenset[str]:
    """The options this bwrap accepts (``--size`` and ``--disable-userns`` are recent additions)."""
    bwrap = _tool("bwrap")
    if bwrap is None:
        return frozenset()
    out = subprocess.run([bwrap, "--help"], capture_output=True, text=True, timeout=10, check=False)
    return frozenset(w for w in (out.stdout + out.stderr).split() if w.startswith("--"))


@functools.cache
def available() -> str | None:
    """None when bwrap can build our sandbox here, else a one-line reason it cannot."""
    bwrap, prlimit = _tool("bwrap"), _tool("prlimit")
    if bwrap is None:
        return "bubblewrap (bwrap) is not installed"
    if prlimit is None:
        return "prlimit (util-linux) is not installed"
    if os.geteuid() == 0 and _tool("setpriv") is None:
        return "setpriv (util-linux) is not installed: as root it drops the sandbox to an unprivileged user"
    if isinstance(why := seccomp.program(), str):
        return why
    probe = [bwrap, *_namespaces(), "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev"]
    probe += [
        "--tmpfs",
        "/tmp",
        "--seccomp",
        "{fd}",
        "--",
        *_drop_privileges(),
        prlimit,
        "--nofile=64",
        "true",
    ]
    fd = seccomp.program_fd()
    probe[probe.index("{fd}")] = str(fd)
    try:
        out = subprocess.run(
            probe, capture_output=True, text=True, timeout=30, check=False, env={}, pass_fds=(fd,)
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bwrap failed to start: {exc}"
    finally:
        os.close(fd)
    if out.returncode != 0:
        why = (out.stderr.strip().splitlines() or [f"exit status {out.returncode}"])[-1]
        return f"bwrap cannot create namespaces here (user namespaces unavailable?): {why}"
    return None


def sandbox_ids() -> tuple[int, int] | None:
    """The user and group every sandboxed process runs as when ralph runs as root (None otherwise:
    an unprivileged user's sandbox runs as that user, in a user namespace of its own)."""
    return _unprivileged_ids() if os.geteuid() == 0 else None


@functools.cache
def _unprivileged_ids() -> tuple[int, int]:
    """A user and group id of nobody on this host (no password or group entry): the host honours
    nothing for it, and no other process or file belongs to it."""
    import grp

    for uid in range(61000, 65000):
        try:
            pwd.getpwuid(uid)
            continue
        except KeyError:
            pass
        try:
            grp.getgrgid(uid)
            continue
        except KeyError:
            return uid, uid
    return 65534, 65534


def _namespaces() -> list[str]:
    """bwrap's namespace options. As root, bwrap makes every namespace but the user one (root may),
    and `_drop_privileges` then runs the command as an unprivileged user of the host: in a user
    namespace of its own the sandbox's uid would map to the host's root, whom /proc/sys and every
    root-owned file honour. Otherwise a user namespace holds the sandbox, with no capabilities and
    no nested user namespace."""
    common = ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    common += ["--die-with-parent", "--new-session"]
    if os.geteuid() == 0:
        return common
    options = ["--unshare-user", *common, "--cap-drop", "ALL"]
    if "--disable-userns" in _bwrap_options():  # no nested user namespace: no capabilities to regain
        options.append("--disable-userns")
    return options


def _drop_privileges() -> list[str]:
    """As root, what runs first inside the sandbox: become the unprivileged sandbox user with no
    capability (bounding set included), no supplementary group and no_new_privs."""
    ids = sandbox_ids()
    if ids is None:
        return []
    uid, gid = ids
    setpriv = _tool("setpriv") or "setpriv"
    return [
        setpriv,
        f"--reuid={uid}",
        f"--regid={gid}",
        "--clear-groups",
        "--inh-caps=-all",
        "--bounding-set=-all",
        "--no-new-privs",
        "--",
    ]


class BwrapSandbox:
    """Runs commands in a bubblewrap sandbox around `workspace`; see the module docstring.

    `writable` paths (a cache directory, a report directory) must exist when a command is built;
    missing ones are skipped. The limits apply per process (``memory_bytes`` is address space,
    ``cpu_seconds`` CPU time, ``file_bytes`` the largest file, output included), except
    ``max_pids``, which caps the whole sandbox; `pids_cap` tells how it is enforced here.
    """

    name = "bwrap"

    def __init__(
        self,
        workspace: Path,
        *,
        writable: Sequence[Path] = (),
        memory_bytes: int = 4 << 30,
        cpu_seconds: int = 600,
        file_bytes: int = 1 << 30,
        open_files: int = 1024,
        max_pids: int = 512,
        tmp_bytes: int = 256 << 20,
        max_output: int = 1 << 20,
        workspace_writable: bool = True,
        disk_bytes: int | None = None,
        memory_total_bytes: int = 8 << 30,
        mount_at: Path | None = None,
    ) -> None:
        self.workspace = Path(workspace).resolve()
        # Where commands see the workspace: the user's repository (`mounted_at`), else its own path.
        self.mount_at = Path(mount_at).resolve() if mount_at is not None else None
        self.workspace_writable = workspace_writable
        # What its processes may take of the workspace's filesystem, watched while a command runs.
        self.disk_bytes = disk_bytes or int(os.environ.get("RALPH_DISK_CAP") or 1 << 30)
        self.writable = tuple(Path(p).resolve() for p in writable)
        self.memory_bytes = memory_bytes
        self.cpu_seconds = cpu_seconds
        self.file_bytes = file_bytes
        self.open_files = open_files
        self.max_pids = max_pids
        self.tmp_bytes = tmp_bytes
        self.max_output = max_output
        self.homes = _homes()
        # As root: the unprivileged user the sandbox runs as owns what it may write.
        self.ids = sandbox_ids()
        for path in (self.workspace, *self.writable) if workspace_writable else self.writable:
            if path.exists():
                chown_tree(path, self.ids)
        self._cgroup_parent = _cgroup_parent("pids") if os.geteuid() == 0 else None
        # The sandbox's memory in total (every process together), where a memory cgroup can be made.
        self.memory_total_bytes = memory_total_bytes
        self._memory_parent = _cgroup_parent("memory")
        self._cgroups: list[Path] = []  # made by `wrap` for callers we cannot clean up after
        self._live: set[subprocess.Popen[bytes]] = set()  # what `run` runs now, for `cancel`
        self._cancelled = threading.Event()  # (shared with `mounted_at` copies, as `_live` is)
        self._starting = threading.Lock()  # a command starts, or the sandbox is cancelled: not both
        if os.geteuid() != 0:
            self.pids_cap = f"RLIMIT_NPROC={max_pids} in the sandbox's user namespace"
        elif self._cgroup_parent is not None:
            self.pids_cap = f"pids.max={max_pids} in a cgroup under {self._cgroup_parent}"
        else:
            self.pids_cap = "none: running as root without a writable pids cgroup (timeout only)"
        self.memory_cap = (
            f"{memory_total_bytes} bytes in all, in a memory cgroup under {self._memory_parent}"
            if self._memory_parent is not None
            else f"{memory_bytes} bytes of address space per process (no writable memory cgroup)"
        )

    def mounted_at(self, path: Path) -> BwrapSandbox:
        """This sandbox showing the workspace at `path`, the user's repository (the copy's own path
        says "ralph", and a candidate can make its code right there alone), with the user's
        TMPDIR. It shares this one's running commands, cancellation and cgroups: `cancel` and
        `close` on either reach both."""
        other = copy.copy(self)
        other.mount_at = Path(path).resolve()
        other.__dict__.pop("_translations", None)
        return other

    def inside(self, text: str) -> str:
        """`text` (a path, an option's value, a list of paths, node ids) as the sandbox's commands
        see it: the workspace's own path replaced by the one it is mounted at."""
        return self._translations[0](text)

    def outside(self, text: str) -> str:
        """What a command said (a path, a node id) back as the host sees it: `inside` undone."""
        return self._translations[1](text)

    @functools.cached_property
    def _translations(self) -> tuple[Callable[[str], str], Callable[[str], str]]:
        if self.mount_at is None:
            return (str, str)
        return _replacer(self.workspace, self.mount_at), _replacer(self.mount_at, self.workspace)

    def prepare(self, argv: Sequence[str], env: Mapping[str, str] | None = None) -> list[Path]:
        """Make the mount points in the workspace for what commands like `argv` bind back of the
        user's own beneath `mount_at` (the interpreter's ``.venv``); the ones made. Call it before
        the workspace's state is captured, or its restore takes them for what a test wrote. (A
        command makes any that are missing itself, owned by the sandbox's user.)"""
        if self.mount_at is None:
            return []
        child = self._child_env(env)
        wanted = self._exposed(argv, self.workspace, child, self._masked(child))
        return self._mount_points(wanted)[1]

    def wrap(self, argv: Sequence[str], *, cwd: str | Path, env: Mapping[str, str] | None = None) -> Command:
        """The full command line running `argv` in the sandbox, for callers that spawn it themselves
        (with its `pass_fds`, then `close` it).

        It starts with ``env -i``: the sandbox can read bwrap's own environment at /proc/1/environ,
        so whatever environment the caller spawns it with must not reach bwrap. Killing the spawned
        process kills everything in the sandbox; call `close` to remove the pids cgroups made here.
        """
        cgroups = self._new_cgroup()
        self._cgroups += cgroups
        filter_fd = seccomp.program_fd()
        command = Command(
            [
                _tool("env") or "/usr/bin/env",
                "-i",
                *self._command(argv, cwd=cwd, env=env, cgroups=cgroups, filter_fd=filter_fd),
            ]
        )
        command.pass_fds = (filter_fd,)
        return command

    def run(
        self,
        argv: Sequence[str],
        *,
        cwd: str,
        env: Mapping[str, str] | None = None,
        timeout_s: float = 300.0,
        stdin: str | None = None,
    ) -> ProcessResult:
        """Run `argv` in `cwd` inside the sandbox; on timeout everything it started is killed.

        A child killed by a signal shows as bwrap reports it: 128 + the signal number.
        """
        start = time.monotonic()
        cgroups = self._new_cgroup()
        info_read, info_write = os.pipe()
        filter_fd = -1
        try:
            # Output goes to an unlinked temp file: a child printing gigabytes costs us no memory,
            # and RLIMIT_FSIZE caps the file at `file_bytes` on disk.
            with tempfile.TemporaryFile() as out:
                filter_fd = seccomp.program_fd()
                command = self._command(
                    argv, cwd=cwd, env=env, cgroups=cgroups, info_fd=info_write, filter_fd=filter_fd
                )
                proc = self._spawn(command, out, stdin is not None, (info_write, filter_fd))
                if proc is None:
                    return ProcessResult(-9, "", 0.0, error="cancelled")
                for fd in (info_write, filter_fd):
                    os.close(fd)
                info_write = filter_fd = -1
                init = _open_init(info_read)
                if stdin is not None and proc.stdin is not None:
                    threading.Thread(
                        target=feed_stdin, args=(proc.stdin, stdin.encode()), daemon=True
                    ).start()
                try:
                    ended = _wait_watching_disk(proc, timeout_s, self.workspace, self.disk_bytes)
                finally:
                    _end_sandbox(proc, init)
                    self._live.discard(proc)
                returncode = proc.returncode if ended == "exited" else -9
                output = read_capped(out, self.max_output)
        finally:
            for fd in (info_read, info_write, filter_fd):
                if fd >= 0:
                    os.close(fd)
            for cgroup in cgroups:
                _remove_cgroup(cgroup)
        error = "the command wrote more than the disk cap allows (killed)" if ended == "disk" else None
        return ProcessResult(returncode, output, time.monotonic() - start, ended == "timeout", error=error)

    def _spawn(
        self, command: Sequence[str], out: IO[bytes], stdin: bool, fds: tuple[int, ...]
    ) -> subprocess.Popen[bytes] | None:
        """Start bwrap (None once the sandbox is cancelled: then nothing starts)."""
        with self._starting:
            if self._cancelled.is_set():
                return None
            proc = subprocess.Popen(
                command,
                env={},  # bwrap's own environment is readable in the sandbox at /proc/1/environ
                stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                pass_fds=fds,
                start_new_session=True,
            )
            self._live.add(proc)
        return proc

    def cancel(self) -> None:
        """Kill what `run` runs now (from another thread), and run nothing more: bwrap dies, and with
        it (--die-with-parent) everything in its sandbox; `run` returns at once with the kill's status,
        and every later `run` at once with "cancelled"."""
        with self._starting:
            self._cancelled.set()
        for proc in list(self._live):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)

    def close(self) -> None:
        """Kill what is left in, and remove, the pids cgroups `wrap` made."""
        for cgroup in self._cgroups:
            _remove_cgroup(cgroup)
        self._cgroups.clear()

    def _command(
        self,
        argv: Sequence[str],
        *,
        cwd: str | Path,
        env: Mapping[str, str] | None,
        cgroups: Sequence[Path],
        info_fd: int | None = None,
        filter_fd: int,
    ) -> list[str]:
        bwrap, prlimit = _tool("bwrap"), _tool("prlimit")
        if bwrap is None or prlimit is None:
            raise RuntimeError(available() or "bwrap or prlimit is missing")
        options = _bwrap_options()
        # Private mounts: capped where this bwrap can, writable by whoever the sandbox runs as.
        size = ["--size", str(self.tmp_bytes)] if "--size" in options else []
        size = ["--perms", "1777", *size] if self.ids is not None else size
        command = [bwrap, *_namespaces(), "--seccomp", str(filter_fd)]
        if info_fd is not None:
            command += ["--info-fd", str(info_fd)]
            if self.ids is None:
                # In a user namespace bwrap's init runs as the sandbox's user, so a test could open
                # its memory and forge the exit status it reports: the command is the namespace's
                # first process instead, its status read by bwrap outside, out of the sandbox's sight.
                command.append("--as-pid-1")
        command += ["--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", *size, "--tmpfs", "/dev/shm"]
        # The kernel's settings and triggers stay read-only whoever the sandbox runs as.
        for knob in ("sys", "sysrq-trigger", "irq", "bus"):
            command += ["--ro-bind-try", f"/proc/{knob}", f"/proc/{knob}"]
        child = self._child_env(env)
        command += self._mounts(argv, cwd, child, size)
        at = self.mount_at or self.workspace
        git = self.workspace / ".git"
        if git.exists():  # a directory, or the file of a worktree (its target is outside: read-only)
            command += ["--ro-bind", str(git), str(at / ".git")]
        command += ["--chdir", self.inside(str(cwd)), "--clearenv"]
        for key, value in child.items():
            command += ["--setenv", key, self.inside(value)]
        limits = [
            f"--as={self.memory_bytes}",
            f"--cpu={self.cpu_seconds}",
            f"--fsize={self.file_bytes}",
            f"--nofile={self.open_files}",
            # As root every sandbox of the host runs as one user, whose processes RLIMIT_NPROC counts
            # together: the pids cgroup caps each sandbox, the limit only what all may hold.
            f"--nproc={self.max_pids * (16 if self.ids and self._cgroup_parent else 1)}",
            "--core=0",
        ]
        command += ["--", *_drop_privileges(), prlimit, *limits, "--", *map(self.inside, argv)]
        if cgroups:
            # Join the cgroups before bwrap forks anything: the procs files come first as arguments.
            joins = " && ".join(f'echo $$ > "${i}"' for i in range(len(cgroups)))
            script = (
                f'{joins} && shift {len(cgroups) - 1} && exec "$@"'
                if len(cgroups) > 1
                else f'{joins} && exec "$@"'
            )
            command = ["/bin/sh", "-c", script, *(str(c / "cgroup.procs") for c in cgroups), *command]
        return command

    def _mounts(
        self, argv: Sequence[str], cwd: str | Path, child: Mapping[str, str], size: list[str]
    ) -> list[str]:
        """The masking tmpfs mounts and the binds, parents before children, so a workspace under
        /tmp or $HOME shows through the tmpfs and a home inside the workspace stays masked; at the
        same path the bind wins."""
        masked = self._masked(child)
        mounts = [(len(p.parts), 0, [*size, "--tmpfs", str(p)]) for p in masked]
        bind = "--bind" if self.workspace_writable else "--ro-bind"
        at = self.mount_at or self.workspace
        mounts.append((len(at.parts), 1, [bind, str(self.workspace), str(at)]))
        mounts += [(len(p.parts), 1, ["--bind-try", str(p), str(p)]) for p in self.writable]
        # (found from the host's paths: the workspace's own, before they are translated)
        exposed, _ = self._mount_points(self._exposed(argv, cwd, child, masked))
        for path in exposed:
            mounts.append((len(path.parts), 1, ["--ro-bind", str(path), str(path)]))
        # The folders on the way to a bind inside a private mount: bwrap would make them for root
        # alone, and the sandbox's user must pass through them.
        binds = [at, *self.writable]
        for folder in _folders_between(masked, [*binds, *exposed]):
            if not any(folder.is_relative_to(b) and folder != b for b in binds):  # (those exist)
                mounts.append((len(folder.parts), 0, ["--perms", "0755", "--dir", str(folder)]))
        return [op for _, _, ops in sorted(mounts, key=lambda m: m[:2]) for op in ops]

    def _child_env(self, env: Mapping[str, str] | None) -> dict[str, str]:
        """The command's environment: the allowlist, `env`, the masked home; mounted at the user's
        repository, the user's TMPDIR too."""
        child = child_env(env)
        if not env or "HOME" not in env:
            child["HOME"] = str(self.homes[0]) if self.homes else "/tmp"
        if self.mount_at is not None and "TMPDIR" in os.environ:
            child.setdefault("TMPDIR", os.environ["TMPDIR"])
        return child

    def _masked(self, env: Mapping[str, str]) -> list[Path]:
        """The folders hidden under a private tmpfs: /tmp, /run, the homes, and the command's TMPDIR
        when it names a folder of its own outside the workspace."""
        masked = [Path("/tmp"), *_run_dirs(), *self.homes]
        # Our private folder around the workspace (its host-only copy, the other lanes' and the
        # gate's): hidden too, and passable by the sandbox's user wherever TMPDIR puts it.
        private = self.workspace.parent
        if _PRIVATE.match(private.name) and not any(private.is_relative_to(m) for m in masked):
            masked.append(private)
        tmpdir = env.get("TMPDIR", "")
        if os.path.isabs(tmpdir) and os.path.isdir(tmpdir):
            found = Path(tmpdir).resolve()
            at = self.mount_at or self.workspace
            if found != Path("/") and not found.is_relative_to(at) and found not in masked:
                masked.append(found)
        return masked

    def _exposed(
        self, argv: Sequence[str], cwd: str | Path, env: Mapping[str, str], masked: Sequence[Path]
    ) -> list[Path]:
        """Paths under a masked directory that the command needs, to bind back read-only.

        An interpreter or tool under $HOME or /tmp (pyenv, a venv in a home checkout) would vanish
        under the tmpfs: the command's directory, each PATH and PYTHONPATH entry itself and the
        prefix of each Python interpreter among them (a venv's directory, the installation its
        binary belongs to) are re-exposed; never the parent of a tool's ``bin``, which may hold its
        credentials (``~/.cargo/credentials.toml`` beside ``~/.cargo/bin``). Mounted at the user's
        repository, the same goes for what the bind of the workspace hides there: a folder of the
        user's that the workspace does not hold (their ``.venv``), never one it does (the
        candidate's files are the workspace's).
        """
        wanted: list[Path] = [Path(cwd)]
        dirs = [*env.get("PATH", "").split(os.pathsep), env.get("VIRTUAL_ENV", "")]
        dirs += env.get("PYTHONPATH", "").split(os.pathsep)
        wanted += [Path(d) for d in dirs if os.path.isabs(d)]
        program = shutil.which(argv[0], path=env.get("PATH")) if argv else None
        if program is not None:
            wanted += [Path(program).parent, Path(program).resolve().parent]
        wanted += [Path(a) for a in argv[1:] if os.path.isabs(a)]
        wanted += [prefix for path in list(wanted) for prefix in _python_prefixes(path)]
        owned = [self.workspace, *self.writable]
        found: list[Path] = []
        hidden: list[Path] = []  # the user's own, under the path the workspace is mounted at
        for path in wanted:
            if not path.exists():
                continue
            path = path.resolve()
            if self.mount_at is not None and path.is_relative_to(self.mount_at):
                if path != self.mount_at and path.is_dir() and self._not_the_workspaces(path):
                    hidden.append(path)
                continue
            inside = any(path.is_relative_to(m) and path != m for m in masked)
            if inside and not any(path.is_relative_to(o) for o in owned):
                found.append(path)
        # The outermost of nested paths is enough.
        return [*_outermost(found), *_outermost(hidden)]

    def _not_the_workspaces(self, path: Path) -> bool:
        """Whether the workspace, at the same place as `path` beneath the user's repository, has
        nothing (no entry, or an empty folder: a mount point) that binding `path` would hide."""
        assert self.mount_at is not None
        parts = path.relative_to(self.mount_at).parts
        try:
            with open_dir(self.workspace, parts) as fd:
                return not os.listdir(fd)
        except FileNotFoundError:
            return True
        except (OSError, UnsafePath):  # a file, or a link, there: the workspace's
            return False

    def _mount_points(self, exposed: list[Path]) -> tuple[list[Path], list[Path]]:
        """The exposed paths that can be bound, with the mount points made in the workspace for those
        beneath the user's repository (bwrap would make them for root; a link on the way: not bound)."""
        if self.mount_at is None:
            return exposed, []
        kept: list[Path] = []
        made: list[Path] = []
        for path in exposed:
            if not path.is_relative_to(self.mount_at):
                kept.append(path)
                continue
            parts = path.relative_to(self.mount_at).parts
            point = self.workspace.joinpath(*parts)
            existed = os.path.lexists(point)
            try:
                with open_dir(self.workspace, parts, create=True, owner=self.ids):
                    pass
            except (OSError, UnsafePath):
                continue
            kept.append(path)
            if not existed:
                made.append(point)
        return kept, made

    def _new_cgroup(self) -> list[Path]:
        """The cgroups a command joins (pids, memory; one directory where both share a hierarchy)."""
        name = f"ralph-{os.getpid()}-{_TOKEN}-{next(_COUNTER)}"
        made: dict[Path, None] = {}
        if self._cgroup_parent is not None:
            cgroup = self._cgroup_parent / name
            cgroup.mkdir()
            (cgroup / "pids.max").write_text(str(self.max_pids))
            made[cgroup] = None
        if self._memory_parent is not None:
            cgroup = self._memory_parent / name
            cgroup.mkdir(exist_ok=True)
            for limit in ("memory.max", "memory.limit_in_bytes"):  # cgroup v2, v1
                if (cgroup / limit).exists():
                    with contextlib.suppress(OSError):
                        (cgroup / limit).write_text(str(self.memory_total_bytes))
            made[cgroup] = None
        return list(made)


def _outermost(paths: list[Path]) -> list[Path]:
    """`paths` without those beneath another of them, each once."""
    unique = list(dict.fromkeys(paths))
    return [p for p in unique if not any(p != q and p.is_relative_to(q) for q in unique)]


def _replacer(old: Path, new: Path) -> Callable[[str], str]:
    """A function replacing the path `old` with `new` wherever it stands whole in a text (alone, after
    `=`, `:`, `[` or a quote; followed by `/`, the end or a separator, never by more of a name)."""
    pattern = re.compile(r"(?<![\w.~/-])" + re.escape(str(old)) + r"(?![\w.~-])")
    target = str(new)
    return lambda text: pattern.sub(lambda _: target, text)


def _folders_between(masked: Sequence[Path], targets: Sequence[Path]) -> list[Path]:
    """The folders strictly between a masked mount and a target below it, each once."""
    found: dict[Path, None] = {}
    for target in targets:
        roots = [m for m in masked if target.is_relative_to(m) and target != m]
        if roots:
            root = max(roots, key=lambda m: len(m.parts))
            found |= dict.fromkeys(p for p in target.parents if p.is_relative_to(root) and p != root)
    return list(found)


@functools.cache
def _python_prefixes(directory: Path) -> tuple[Path, ...]:
    """When `directory` is a Python interpreter's ``bin``: the prefixes it runs from (a venv's own
    directory, and the installation of the binary it links to), else nothing."""
    found: list[Path] = []
    for name in ("python3", "python"):
        interpreter = directory / name
        if not interpreter.is_file() or not _is_binary(interpreter.resolve()):
            continue  # (a shim or wrapper script says nothing of where an installation lies)
        if (directory.parent / "pyvenv.cfg").is_file():
            found.append(directory.parent)
        real = interpreter.resolve().parent.parent
        if next(real.glob("lib/python3*/os.py"), None) is not None:  # an installation's own stdlib
            found.append(real)
        break
    return tuple(found)


def _is_binary(file: Path) -> bool:
    """Whether `file` is an executable binary (ELF), not a script."""
    try:
        with file.open("rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


def _wait_watching_disk(proc: subprocess.Popen[bytes], timeout_s: float, where: Path, cap: int) -> str:
    """ "exited", "timeout", or "disk" when the filesystem holding `where` lost more than `cap` bytes
    since the start (checked every quarter second: the files are deleted when the state is restored)."""
    deadline = time.monotonic() + timeout_s
    free = _free_bytes(where)
    while True:
        left = deadline - time.monotonic()
        if wait_exit(proc, max(0.0, min(0.25, left))):
            return "exited"
        if left <= 0.25:
            return "timeout"
        now = _free_bytes(where)
        if free is not None and now is not None and free - now > cap:
            return "disk"


def _free_bytes(path: Path) -> int | None:
    try:
        info = os.statvfs(path)
    except OSError:
        return None
    return info.f_bavail * info.f_frsize


def _homes() -> list[Path]:
    """The home directories to mask: $HOME's and the password database's, when they exist."""
    found = [Path(os.path.expanduser("~"))]
    with contextlib.suppress(KeyError):
        found.append(Path(pwd.getpwuid(os.getuid()).pw_dir))
    homes = [h.resolve() for h in found if h.is_dir()]
    return [h for h in dict.fromkeys(homes) if h != Path("/")]


def _run_dirs() -> list[Path]:
    """/run and /var/run (when a real directory): where daemons keep sockets a netns cannot hide."""
    return [p for p in (Path("/run"), Path("/var/run")) if p.is_dir() and not p.is_symlink()]


@functools.cache
def _cgroup_parent(controller: str) -> Path | None:
    """Our own cgroup in a hierarchy with `controller` (pids, memory), if we can create children in it."""
    try:
        mountinfo = Path("/proc/self/mountinfo").read_text().splitlines()
        membership = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    ours = {}  # controller list ("" for cgroup v2) -> our path in that hierarchy
    for line in membership:
        _, controllers, path = line.split(":", 2)
        ours[controllers] = path
    for line in mountinfo:
        fields, _, tail = line.partition(" - ")
        root, mountpoint = fields.split()[3:5]
        fstype, _, super_options = tail.split()[:3]
        mine: str | None
        if fstype == "cgroup" and controller in super_options.split(","):
            mine = next((p for c, p in ours.items() if controller in c.split(",")), None)
        elif fstype == "cgroup2":
            mine = ours.get("")
        else:
            continue
        if mine is None or not mine.startswith(root):
            continue
        parent = Path(mountpoint) / mine[len(root) :].lstrip("/")
        if fstype == "cgroup2" and not _v2_delegates(parent, controller):
            continue
        probe = parent / f"ralph-probe-{os.getpid()}"
        try:
            probe.mkdir()
            probe.rmdir()
        except OSError:
            continue
        return parent
    return None


def _v2_delegates(cgroup: Path, controller: str) -> bool:
    """Whether children of this cgroup v2 directory get `controller` (enabling it if we may)."""
    control = cgroup / "cgroup.subtree_control"
    with contextlib.suppress(OSError):
        if controller not in control.read_text().split():
            control.write_text(f"+{controller}")  # refused (EBUSY) where processes live in `cgroup`
        return controller in control.read_text().split()
    return False


def _open_init(info_fd: int) -> int | None:
    """A pidfd for the sandbox's init, whose host pid bwrap writes to --info-fd as JSON.

    Opened right away, while init is still bwrap's unreaped child, so the pid cannot have been
    reused; None if bwrap failed before creating it, or on kernels without pidfds (before 5.3).
    """
    data = b""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        ready, _, _ = select.select([info_fd], [], [], deadline - time.monotonic())
        chunk = os.read(info_fd, 4096) if ready else b""
        if not chunk:
            return None
        data += chunk
        with contextlib.suppress(ValueError):
            pid = int(json.loads(data)["child-pid"])
            try:
                return os.pidfd_open(pid)
            except OSError:
                return None
    return None


def _end_sandbox(proc: subprocess.Popen[bytes], init: int | None) -> None:
    """Kill the sandbox's init and wait until it is gone, then reap bwrap.

    When init dies the kernel kills every process in its PID namespace and only then lets init
    itself exit, so once its pidfd reports the exit nothing the command started is left. This is
    needed on a normal exit too: bwrap returns as soon as init reports the command's status,
    while daemons the command left behind may still be alive for a moment.
    """
    if init is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            signal.pidfd_send_signal(init, signal.SIGKILL)
        select.select([init], [], [], 10)
        os.close(init)
    elif proc.poll() is None:  # no pidfd: kill bwrap, and --die-with-parent kills init
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)
    if proc.poll() is None:  # bwrap stuck before it created init
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)


def sweep_cgroups() -> None:
    """Remove the cgroups runs killed with SIGKILL left behind (and kill what is still in them)."""
    from ralph.sandboxes import stale

    for parent in {_cgroup_parent("pids"), _cgroup_parent("memory")} - {None}:
        assert parent is not None
        with contextlib.suppress(OSError):
            for name in stale(os.listdir(parent)):
                _remove_cgroup(parent / name)


def _remove_cgroup(cgroup: Path) -> None:
    """Kill anything still in `cgroup` and remove it (a cgroup can only be removed when empty)."""
    kill = cgroup / "cgroup.kill"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            cgroup.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            pass
        if kill.exists():
            with contextlib.suppress(OSError):
                kill.write_text("1")
        else:
            with contextlib.suppress(OSError):
                for pid in (cgroup / "cgroup.procs").read_text().split():
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(int(pid), signal.SIGKILL)
        time.sleep(0.01)
