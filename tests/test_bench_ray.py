"""`ralph bench fix --ray`: the tasks as Ray tasks on a cluster this test starts (`ray.init`), their
projects shipped to the workers, the same results as the local pool; and what goes wrong on the way
(no Ray, no cluster, a worker killed, a project that cannot be shipped), each in one line."""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from io import StringIO
from pathlib import Path

import pytest
from rich.console import Console

from ralph.bench.fix import load_tasks
from ralph.bench.shipping import Unshippable, pack, unpack
from ralph.cli import _optional_values, _progress_bar
from ralph.domain.errors import RalphError
from tests.conftest import run_ralph, write_files
from tests.test_bench_fix import FIXABLE, UNFIXABLE

FLIPPED = {
    **FIXABLE,
    "task_id": "Demo/2",
    "entry_point": "bigger",
    "prompt": 'def bigger(a, b):\n    """Whether a is bigger than b."""\n',
    "buggy_solution": "    return a < b\n",
    "test": "\n\ndef check(bigger):\n    assert bigger(2, 1)\n    assert not bigger(1, 2)\n\ncheck(bigger)\n",
}


def project(minus: bool) -> dict[str, str]:
    """A small project whose `add_one` subtracts where `minus` (the loop can fix it), or answers 42."""
    body = "return x - 1" if minus else "return 42"
    return {
        "calc.py": f"def add_one(x):\n    {body}\n",
        "tests/test_calc.py": "from calc import add_one\n\n\ndef test_add_one():\n"
        "    assert add_one(1) == 2\n    assert add_one(123456) == 123457\n",
    }


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """A local Ray cluster of two CPUs, started here as a user would start one: its address."""
    ray = pytest.importorskip("ray")
    started = ray.init(
        num_cpus=2,
        object_store_memory=200 * 2**20,  # (not a third of the machine's memory: these tasks are small)
        include_dashboard=False,
        logging_level=logging.ERROR,
        log_to_driver=False,
    )
    yield started.address_info["gcs_address"]
    ray.shutdown()


def bench(tasks: Path, out: Path, *where: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return run_ralph(
        "bench",
        "fix",
        str(tasks),
        "--out",
        str(out),
        "--max-iterations",
        "3",
        "--json",
        *where,
        timeout=timeout,
    )


def test_ralph_imports_and_runs_without_ray():
    """Nothing imports Ray until --ray is given; given without Ray installed, it is one line, exit 2."""
    probe = "import sys, ralph.cli, ralph.bench.fix, ralph.bench.on_ray; assert 'ray' not in sys.modules"
    assert subprocess.run([sys.executable, "-c", probe], capture_output=True).returncode == 0
    no_ray = (  # (Ray made unimportable, as where it is not installed; then the real entry point)
        "import sys; sys.modules['ray'] = None; from ralph.cli import main;"
        "sys.argv = ['ralph', 'bench', 'fix', 'tasks.jsonl', '--ray']; main()"
    )
    proc = subprocess.run([sys.executable, "-c", no_ray], capture_output=True, text=True)
    assert (
        proc.returncode == 2
        and proc.stderr == "ralph: error: --ray needs Ray: pip install 'ralph-loop[ray]'\n"
    )


def test_ray_alone_is_a_cluster_started_here():
    assert _optional_values(["t.jsonl", "--ray"]) == ["t.jsonl", "--ray", "local"]
    assert _optional_values(["t.jsonl", "--ray", "--out", "o"]) == ["t.jsonl", "--ray", "local", "--out", "o"]
    assert _optional_values(["t.jsonl", "--ray", "10.0.0.1:6379"]) == ["t.jsonl", "--ray", "10.0.0.1:6379"]
    here = str(Path(__file__))  # the tasks right after `--ray`: no address, the tasks
    assert _optional_values(["--ray", here, "--limit", "1"]) == ["--ray", "local", here, "--limit", "1"]


def test_a_list_file_names_projects_and_what_is_asked_of_each(tmp_path):
    write_files(tmp_path / "projects" / "cart", project(minus=True))
    (tmp_path / "tasks.toml").write_text(
        '[[tasks]]\nrepo = "projects/cart"\ntask = "add_one is off"\n\n'
        '[[tasks]]\nrepo = "projects/gone"\nname = "second"\n'
    )
    first, second = load_tasks(tmp_path / "tasks.toml")
    assert (first.name, first.source, first.description) == (
        "cart",
        tmp_path / "projects" / "cart",
        "add_one is off",
    )
    assert (second.name, second.source) == (
        "second",
        tmp_path / "projects" / "gone",
    )  # (missing: found when shipped)
    (tmp_path / "tasks.json").write_text(json.dumps([{"repo": str(tmp_path / "projects" / "cart")}]))
    assert [t.name for t in load_tasks(tmp_path / "tasks.json")] == ["cart"]
    for text, needle in [
        ('[[tasks]]\nrepo = "a"\nbranch = "x"\n', "task 1: branch: Extra inputs are not permitted"),
        ('[[tasks]]\ntask = "x"\n', "task 1: repo: Field required"),
        ('[[tasks]]\nrepo = "a"\n[[tasks]]\nrepo = "b/a"\n', "two tasks named a"),
        ("[tasks]\nrepo = 'a'\n", "no tasks: expected [[tasks]] tables"),
        ("[[tasks]\n", "unreadable list of tasks"),
    ]:
        (tmp_path / "bad.toml").write_text(text)
        with pytest.raises(RalphError, match=needle.replace("[", r"\[")):
            load_tasks(tmp_path / "bad.toml")


def test_a_project_is_shipped_without_its_history_and_what_cannot_be_shipped_is_named(tmp_path):
    write_files(tmp_path / "p", {**project(minus=True), ".git/HEAD": "x", "pkg/__pycache__/c.pyc": "x"})
    (tmp_path / "p" / "link.py").symlink_to(tmp_path / "p" / "calc.py")
    unpack(pack(tmp_path / "p"), tmp_path / "there")
    shipped = sorted(str(f.relative_to(tmp_path / "there")) for f in (tmp_path / "there").rglob("*"))
    assert shipped == ["calc.py", "link.py", "pkg", "tests", "tests/test_calc.py"]
    assert (tmp_path / "there" / "link.py").read_text() == project(minus=True)["calc.py"]  # (followed)
    with pytest.raises(Unshippable, match=r"gone: cannot be shipped \(no such directory\)"):
        pack(tmp_path / "gone")
    (tmp_path / "p" / "dangling.py").symlink_to(tmp_path / "nowhere.py")
    with pytest.raises(Unshippable, match=r"cannot be shipped \(dangling.py: No such file"):
        pack(tmp_path / "p")
    (tmp_path / "p" / "dangling.py").unlink()
    os.mkfifo(tmp_path / "p" / "pipe")
    with pytest.raises(Unshippable, match="pipe is not a file or a directory"):
        pack(tmp_path / "p")


def test_the_progress_bar_is_drawn_on_a_terminal_only():
    for terminal in (True, False):
        written = StringIO()
        with _progress_bar(Console(file=written, force_terminal=terminal, width=60)) as (note, advance):
            advance(0, 2)
            note("1/2 Demo-0: goal")
            advance(1, 2)
            time.sleep(0.3)  # (the bar is redrawn ten times a second)
        assert "1/2 Demo-0: goal" in written.getvalue()
        assert ("━" in written.getvalue()) is terminal, written.getvalue()


def test_an_unreachable_cluster_is_one_line_before_any_work(tmp_path):
    pytest.importorskip("ray")
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps(FIXABLE) + "\n")
    proc = bench(tasks, tmp_path / "out", "--ray", f"127.0.0.1:{port}", timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.splitlines() == [
        f"ralph: error: --ray 127.0.0.1:{port}: unreachable (Connection refused); start a cluster there "
        "(`ray start --head`), or give --ray alone for one on this machine"
    ]
    assert not (tmp_path / "out").exists()


def comparable(out: Path) -> dict:
    """What must be the same wherever the tasks ran: the summary's keys, each task's outcome and
    result keys, the files written."""
    summary = json.loads((out / "summary.json").read_text())
    return {
        "keys": sorted(summary),
        "results": {
            r["task"]: (r["outcome"], sorted(r), r["trace"].replace(str(out), "OUT"))
            for r in summary["results"]
        },
        "fixed": summary["fixed"],
        "files": sorted(str(p.relative_to(out)) for p in out.glob("*/*")),
    }


@pytest.mark.slow
def test_the_same_tasks_give_the_same_results_locally_and_on_ray(cluster, tmp_path):
    # (five: more than the four the cluster's two CPUs are given at once, so some wait their turn)
    names = ("one", "two", "three", "four", "never")
    for name in names:
        write_files(tmp_path / "projects" / name, project(minus=name != "never"))
    entries = [{"repo": f"projects/{n}", "task": "add_one must add one"} for n in names]
    (tmp_path / "tasks.json").write_text(json.dumps(entries))
    local = bench(tmp_path / "tasks.json", tmp_path / "local", "--workers", "2")
    assert local.returncode == 0, local.stderr
    on_ray = bench(tmp_path / "tasks.json", tmp_path / "ray", "--ray", cluster)
    assert on_ray.returncode == 0 and "Traceback" not in on_ray.stderr, on_ray.stderr
    assert comparable(tmp_path / "ray") == comparable(tmp_path / "local")
    results = {r["task"]: r for r in json.loads((tmp_path / "ray" / "summary.json").read_text())["results"]}
    assert {n for n, r in results.items() if r["outcome"] == "goal"} == {"one", "two", "three", "four"}
    # The fix came back with its repository, on its branch, and the trace says what was asked.
    repo = tmp_path / "ray" / "repos" / "one"
    (branch,) = subprocess.run(
        ["git", "branch", "--list", "ralph/*", "--format=%(refname:short)"],
        cwd=repo,
        capture_output=True,
        text=True,
    ).stdout.split()
    shown = subprocess.run(
        ["git", "show", f"{branch}:calc.py"], cwd=repo, capture_output=True, text=True
    ).stdout
    assert "return x + 1" in shown
    start = json.loads((tmp_path / "ray" / "traces" / "one.jsonl").read_text().splitlines()[0])
    assert start["config"]["task"] == "add_one must add one"


def kill_when_seen(counts: dict[str, int], stop: threading.Event, killed: list[str]) -> None:
    """SIGKILL the Ray worker running each named task (its process is titled `ray::ralph-bench:NAME`),
    as many times as `counts` says."""
    seen: set[str] = set()
    while not stop.is_set():
        for pid in os.listdir("/proc"):
            if not pid.isdigit() or pid in seen:
                continue
            try:
                title = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()
            except OSError:
                continue
            name = title.removeprefix("ray::ralph-bench:")
            if name != title and counts.get(name):
                seen.add(pid)
                counts[name] -= 1
                os.kill(int(pid), signal.SIGKILL)
                killed.append(name)
        time.sleep(0.01)


@pytest.mark.slow
def test_a_worker_that_dies_is_run_once_more_and_a_second_death_is_that_tasks_result(cluster, tmp_path):
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps(t) + "\n" for t in (FIXABLE, UNFIXABLE, FLIPPED)))
    killed: list[str] = []
    stop = threading.Event()
    killer = threading.Thread(target=kill_when_seen, args=({"Demo-0": 2, "Demo-2": 1}, stop, killed))
    killer.start()
    try:
        proc = bench(tasks, tmp_path / "out", "--ray", cluster)
    finally:
        stop.set()
        killer.join()
    assert sorted(killed) == ["Demo-0", "Demo-0", "Demo-2"]
    # The bench is incomplete: exit 1, with one line after the summary (the others' results kept).
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.splitlines()[-1].startswith(
        "1 of 3 tasks failed twice on Ray (Demo-0: WorkerCrashedError: The worker died"
    ), proc.stderr
    assert proc.stderr.splitlines()[-1].endswith(
        f"the others' results are in {tmp_path / 'out' / 'summary.json'}"
    )
    assert proc.stdout.startswith("{") and proc.stdout.count("\n") == 1, proc.stdout[
        :3000
    ]  # (nothing of Ray's)
    summary = json.loads(proc.stdout)
    assert summary["retried"] == ["Demo-0", "Demo-2"] and summary["errors"] == 1
    results = {r["task"]: r for r in json.loads((tmp_path / "out" / "summary.json").read_text())["results"]}
    assert results["Demo-0"]["outcome"] == "error"
    assert results["Demo-0"]["error"].startswith("failed twice on Ray: WorkerCrashedError: The worker died")
    assert results["Demo-2"]["outcome"] == "goal" and results["Demo-1"]["outcome"] not in ("goal", "error")
    assert (
        results["Demo-2"]["retried"].startswith("WorkerCrashedError") and "retried" not in results["Demo-1"]
    )
    assert (tmp_path / "out" / "traces" / "Demo-2.jsonl").exists()
    # One line for each death (the second is the task's result), one for each task's end; no other.
    died = [line for line in proc.stderr.splitlines() if line.endswith("; running it once more")]
    assert sorted(line.split(":")[0] for line in died) == ["Demo-0", "Demo-2"], proc.stderr
    ends = [line for line in proc.stderr.splitlines() if re.match(r"[123]/3 Demo-[012]: ", line)]
    assert len(ends) == 3 and len(died) + len(ends) + 1 == len(proc.stderr.splitlines()), proc.stderr
    assert any(line.startswith(f"{n}/3 Demo-0: error (failed twice on Ray: ") for n in "123" for line in ends)


@pytest.mark.slow
@pytest.mark.parametrize("where", ["local", "ray"])
def test_a_project_that_cannot_be_shipped_is_one_line_and_the_others_results_are_kept(where, tmp_path):
    write_files(tmp_path / "projects" / "good", project(minus=True))
    (tmp_path / "tasks.toml").write_text(
        '[[tasks]]\nrepo = "projects/good"\n\n[[tasks]]\nrepo = "projects/gone"\n'
    )
    if where == "ray":
        pytest.importorskip("ray")
    flags = ["--workers", "2", "--ray"] if where == "ray" else []  # (--ray alone: a cluster started by ralph)
    proc = bench(tmp_path / "tasks.toml", tmp_path / "out", *flags)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    (error,) = [line for line in proc.stderr.splitlines() if line.startswith("ralph: error:")]
    assert error == (
        f"ralph: error: 1 of 2 tasks could not be shipped ({tmp_path}/projects/gone: cannot be shipped "
        f"(no such directory)); the others' results are in {tmp_path}/out/summary.json"
    )
    assert proc.stdout.startswith("{") and proc.stdout.count("\n") == 1, proc.stdout[
        :3000
    ]  # (nothing of Ray's)
    summary = json.loads(proc.stdout)
    assert (summary["fixed"], summary["unshipped"]) == (1, ["gone"])
    assert (tmp_path / "out" / "traces" / "good.jsonl").exists()
