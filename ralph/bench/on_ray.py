"""`ralph bench fix --ray ADDRESS`: each task a Ray task on a cluster (or on one started here). The
task's project is packed and shipped to the worker, which runs it with the local pool's own
`_run_task` in a scratch folder and sends back its result, its trace and its repository, which land
in the output folder where a local run writes them. A task whose worker fails (it dies, its node is
lost, it raises) runs once more; a second failure is that task's result. Ray is imported only here,
and only when `--ray` is given: ralph runs without it."""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import socket
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ralph.bench.fix import Finished, Runner, Task, _run_task, failed, shipped
from ralph.bench.shipping import Unshippable, pack, unpack
from ralph.domain.errors import RalphError

FAILED_TWICE = "failed twice on Ray: "  # the error of a task whose worker failed twice: it has no result

MISSING = "--ray needs Ray: pip install 'ralph-loop[ray]'"
# How long a cluster's address may take to answer a connection before it is called unreachable.
REACH_S = 5.0


@dataclass(frozen=True)
class Returned:
    """What a worker sends back: the task's result, its trace and its repository (with the fix's
    branch), each packed; None where the task left none."""

    result: dict[str, Any]
    trace: bytes | None
    repo: bytes | None


def run_shipped(task: Task, config: dict[str, Any]) -> Returned:
    """On a Ray worker: the shipped task run in a scratch folder, what it left packed for the way back."""
    with tempfile.TemporaryDirectory(prefix="ralph-ray-") as scratch:
        root = Path(scratch)
        result = _run_task(task, root, config)
        trace = root / "traces" / f"{task.name}.jsonl"
        repo = root / "repos" / task.name
        return Returned(
            result,
            trace.read_bytes() if trace.is_file() else None,
            pack(repo, leave_out=("__pycache__",)) if repo.is_dir() else None,
        )


def landed(returned: Returned, out: Path) -> dict[str, Any]:
    """A worker's result, its trace and repository written where a local run writes them."""
    name = returned.result["task"]
    trace = out / "traces" / f"{name}.jsonl"
    trace.parent.mkdir(parents=True, exist_ok=True)
    if returned.trace is None:
        trace.unlink(missing_ok=True)
    else:
        trace.write_bytes(returned.trace)
    if returned.repo is not None:
        unpack(returned.repo, out / "repos" / name)
    return returned.result | {"trace": str(trace)}


def _ray() -> Any:
    try:
        return importlib.import_module("ray")
    except ImportError:
        raise RalphError(MISSING) from None


@contextlib.contextmanager
def ray_session(address: str, workers: int, progress: Callable[[str], None]) -> Iterator[Runner]:
    """Connected to the cluster at `address` ("local": a new one here with `workers` CPUs), a
    runner of tasks on it; the connection (and a cluster started here) ends on exit."""
    ray = _ray()
    _connect(ray, address, workers)
    # The cluster's news of a dead worker, printed to our standard output (ahead of --json's summary)
    # by a thread of Ray's: each failure is told in one line of ours instead. (Ray's own switch, used
    # while a debugger holds a task; tests/test_bench_ray.py sees the summary alone on stdout.)
    with contextlib.suppress(AttributeError):
        ray._private.worker._worker_logs_enabled = False
    try:
        yield lambda chosen, out, config, finished: _run_all(ray, chosen, out, config, finished, progress)
    finally:
        ray.shutdown()


def _connect(ray: Any, address: str, workers: int) -> None:
    quiet: dict[str, Any] = {"logging_level": logging.ERROR, "log_to_driver": False}
    if address == "local":
        try:
            ray.init(address="local", num_cpus=max(1, workers), include_dashboard=False, **quiet)
        except (ConnectionError, ValueError, RuntimeError) as exc:
            raise RalphError(f"--ray: no Ray cluster could be started here ({exc})") from None
        return
    _reachable(address)
    with _stderr_kept() as said:
        try:
            ray.init(address=address, **quiet)
        except (ConnectionError, ValueError, RuntimeError, SystemExit) as exc:
            heard = f"; it said: {said()}" if said() else ""
            raise RalphError(f"--ray {address}: no Ray cluster to use there ({exc}{heard})") from None


def _reachable(address: str) -> None:
    """A HOST:PORT (or ray://HOST:PORT) that refuses or never answers is unreachable in seconds (Ray
    itself retries for minutes, then exits the process)."""
    host, colon, port = address.removeprefix("ray://").rpartition(":")
    if not colon or not port.isdigit():
        return  # "auto", or what Ray will refuse itself
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=REACH_S).close()
    except OSError as exc:
        why = exc.strerror or str(exc) or type(exc).__name__
        raise RalphError(
            f"--ray {address}: unreachable ({why}); start a cluster there (`ray start --head`), "
            "or give --ray alone for one on this machine"
        ) from None


@contextlib.contextmanager
def _stderr_kept() -> Iterator[Callable[[], str]]:
    """Standard error, file descriptor and all, kept aside while Ray connects: its C++ client
    writes warnings there directly. Yields what it wrote, as its last line."""
    saved = os.dup(2)
    with tempfile.TemporaryFile() as kept:
        os.dup2(kept.fileno(), 2)
        try:
            yield lambda: _last_line(kept)
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def _last_line(file: Any) -> str:
    file.seek(0)
    lines = [line.strip() for line in file.read().decode(errors="replace").splitlines() if line.strip()]
    return lines[-1].split("] ", 1)[-1][:200] if lines else ""


def _run_all(
    ray: Any,
    chosen: list[Task],
    out: Path,
    config: dict[str, Any],
    finished: Finished,
    progress: Callable[[str], None],
) -> None:
    """The tasks submitted as the cluster takes them (twice as many as it has CPUs, so that none
    waits for the driver, and no more: each holds its packed project in the cluster's memory),
    each result handed on as it comes back; a failed task submitted once more."""
    remote = ray.remote(num_cpus=1, max_retries=0)(run_shipped)
    in_flight = max(2, int(2 * ray.cluster_resources().get("CPU", 1)))
    waiting = iter(chosen)
    pending: dict[Any, tuple[str, Any, str]] = {}  # a running task: its name, shipped task, first failure

    def submit(name: str, task: Any, first_failure: str = "") -> None:
        pending[remote.options(name=f"ralph-bench:{name}").remote(task, config)] = (name, task, first_failure)

    def top_up() -> None:
        while len(pending) < in_flight and (task := next(waiting, None)) is not None:
            try:
                submit(task.name, ray.put(shipped(task)))
            except Unshippable as exc:
                finished(failed(task.name, out, str(exc), unshipped=True))

    top_up()
    while pending:
        (ref,), _ = ray.wait(list(pending), num_returns=1)
        name, task, first_failure = pending.pop(ref)
        try:
            returned = ray.get(ref)
        except ray.exceptions.RayError as exc:
            why = _why(exc)
            if not first_failure:
                progress(f"{name}: {why}; running it once more")
                submit(name, task, why)
                continue
            finished(failed(name, out, f"{FAILED_TWICE}{why}", retried=first_failure))
        else:
            finished(landed(returned, out) | ({"retried": first_failure} if first_failure else {}))
        top_up()


def _why(exc: BaseException) -> str:
    """A Ray failure on one line: the worker's own exception where it raised one."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, BaseException):
        return f"{type(cause).__name__}: {' '.join(str(cause).split())}"[:300].rstrip(".")
    first = next((line.strip() for line in str(exc).splitlines() if line.strip()), "")
    return f"{type(exc).__name__}: {first}"[:300].rstrip(".")
