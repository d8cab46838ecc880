"""The warm test runner, run by the target's interpreter: `python ralph_worker.py MODULE...`.

It imports pytest, our report plugin and the given third-party modules once (never the repo's own
modules), then serves requests: one JSON line on stdin -> fork -> `pytest.main(args)` in the child ->
one JSON line on stdout. A child that runs past its timeout is killed with its whole process group.
Depends on nothing but the standard library and pytest.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import signal
import sys
import time
import traceback


def _pytest_plugins() -> tuple[list[str], list[str]]:
    """pytest's builtin plugins, and the installed ones it would autoload: importing them is most of
    what a run spends before collecting (one third-party plugin measured here cost 72 ms)."""
    from importlib.metadata import entry_points

    from _pytest.config import default_plugins

    builtin = [f"_pytest.{name}" for name in default_plugins if name != "python_path"]
    return builtin, [ep.value.split(":")[0] for ep in entry_points(group="pytest11")]


def _preload(modules: list[str]) -> list[str]:
    loaded = []
    for name in modules:
        try:
            importlib.import_module(name)
            loaded.append(name)
        except BaseException:  # a dependency that fails to import just is not preloaded
            continue
    return loaded


def _forget_project_modules(own: list[str], root: str) -> None:
    """Drop the project's own modules (an installed copy a dependency imported, say): each child must
    import them from the workspace."""
    own_names = {name for name in own if name}
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None) or ""
        if name.split(".")[0] in own_names or file.startswith(root + os.sep):
            del sys.modules[name]


# Ralph's pid. The worker watches it rather than asking for a parent-death signal, which Linux ties
# to the thread that started the worker (a thread pool's thread in ralph), not to the process.
_PARENT = os.getppid()


def _die_with_parent() -> None:
    """Linux, in each test child: be killed when the worker goes, so a test looping forever never
    outlives the worker that started it."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _run_child(request: dict) -> None:
    """In the forked child: become a process-group leader, redirect output, run pytest, exit."""
    _die_with_parent()
    os.setpgid(0, 0)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)  # the requests pipe is the worker's alone
    os.close(devnull)
    fd = os.open(request["output"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    os.chdir(request["cwd"])
    os.environ.update(request.get("env", {}))
    sys.path[:0] = [p for p in request.get("path", []) if p not in sys.path]
    code = 3
    try:
        import pytest

        # Preloaded plugins cannot have their asserts rewritten; pytest warns, and a suite that turns
        # warnings into errors would stop on it.
        code = int(pytest.main(["-W", "ignore::pytest.PytestAssertRewriteWarning", *request["args"]]))
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _serve_one(request: dict) -> dict:
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:
        _run_child(request)
    deadline = start + float(request.get("timeout", 300))
    status = None
    while status is None:
        done, raw = os.waitpid(pid, os.WNOHANG)
        if done:
            status = raw
        elif time.monotonic() > deadline:
            break
        elif os.getppid() != _PARENT:  # ralph is gone: take the test down with us
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
            os._exit(1)
        else:
            time.sleep(0.002)
    timed_out = status is None
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)  # the child's stragglers too (a test that forked)
    if timed_out:
        _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status) if status is not None else -9
    return {
        "id": request.get("id"),
        "returncode": code,
        "timed_out": timed_out,
        "seconds": time.monotonic() - start,
    }


def main() -> None:
    import pytest  # noqa: F401

    builtin, plugins = _pytest_plugins()
    loaded = _preload(["ralph_pytest_report", *builtin, *plugins, *sys.argv[1:]])
    _forget_project_modules(os.environ.get("RALPH_OWN_MODULES", "").split(","), os.getcwd())
    out = sys.stdout
    out.write(json.dumps({"ready": True, "preloaded": loaded}) + "\n")
    out.flush()
    for line in sys.stdin:
        if not line.strip():
            continue
        reply = _serve_one(json.loads(line))
        out.write(json.dumps(reply) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
