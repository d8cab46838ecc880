"""The plugins docs/extending.md shows are real files (docs/plugins/), and each one works as the page
says against the real code: the validator in the verifier, the drafter, the router and the sandbox
in the real loop on a real git repository; and the settings of every recipe for serving a model
(docs/models.md) reach a model through the real entry point."""

from __future__ import annotations

import importlib
import os
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

from ralph.config import RunConfig
from ralph.domain.candidate import Candidate, FileChange
from ralph.domain.protocols import IterationSummary
from ralph.sandboxes.local import LocalSandbox
from ralph.sandboxes.workspace import Workspace
from ralph.session import fix
from ralph.trace import read_trace
from ralph.validators.facts import VerifySettings
from ralph.validators.pipeline import Verifier
from ralph.validators.plan import STAGES
from ralph.validators.toolchain import Toolchain
from ralph.view import QuietView
from tests.conftest import BUGGY_WINDOWS, git, model_recipes, run_ralph, write_files
from tests.llm_server import FakeModelServer

PLUGINS = Path(__file__).resolve().parent.parent / "docs" / "plugins"
TRACE_PAGE = PLUGINS.parent / "trace-format.md"
# One run of the loop, in line: the plugins are what is under test, not the lanes or the gate.
IN_LINE = {"background_gate": False, "jobs": 1, "max_iterations": 4}


@pytest.fixture
def plugin(monkeypatch: pytest.MonkeyPatch):
    """A docs/plugins module by name, imported as `ralph fix` imports `module:Class`."""
    monkeypatch.syspath_prepend(str(PLUGINS))

    def load(name: str) -> ModuleType:
        sys.modules.pop(name, None)
        return importlib.import_module(name)

    return load


def iterations(trace: Path) -> list[dict]:
    return [r for r in read_trace(trace) if r["type"] == "iteration"]


def test_the_validator_rejects_an_edit_that_adds_a_print_and_passes_one_that_does_not(plugin, tmp_path):
    no_print = plugin("no_print")
    project = {
        "calc.py": "def double(x):\n    return x + 2\n",
        "tests/test_calc.py": "from calc import double\n\n\ndef test_double():\n    assert double(3) == 6\n",
    }
    write_files(tmp_path / "ws", project)
    workspace = Workspace(tmp_path / "ws")
    toolchain = Toolchain(sys.executable, LocalSandbox(), workspace.project)
    verifier = Verifier(toolchain, VerifySettings(), registry=(*STAGES, no_print.ENTRY))
    fixed = "def double(x):\n    return x * 2\n"
    try:
        state, _ = verifier.baseline()
        noisy = FileChange(
            "calc.py", project["calc.py"], fixed.replace("    return", "    print(x)\n    return")
        )
        workspace.apply([noisy])
        report = verifier.verify(Candidate("test", "fix, printing", (noisy,)), state, reset=workspace.restore)
        workspace.rollback([noisy])
        assert not report.accepted and report.failed_stage == "no-print"
        assert "the edit adds a print() call" in report.reason
        clean = FileChange("calc.py", project["calc.py"], fixed)
        workspace.apply([clean])
        report = verifier.verify(Candidate("test", "fix", (clean,)), state, reset=workspace.restore)
        assert report.accepted, report.reason
        assert any(s.stage == "no-print" and s.ok for s in report.stages)
    finally:
        verifier.close()


@pytest.mark.slow
def test_the_drafter_fixes_a_range_that_stops_one_short_in_the_real_loop(plugin, make_repo):
    plugin("range_bound")
    repo = make_repo(BUGGY_WINDOWS)
    config = RunConfig(drafter="range_bound:RangeBound", **IN_LINE)
    outcome = fix(repo, config, view=QuietView(notices=False))
    assert outcome.result.outcome == "goal"
    fixed = git(repo, "show", f"{outcome.branch}:windows.py")
    assert "range(len(xs) - k + 1)" in fixed
    (accepted,) = [
        c for it in iterations(outcome.trace) for c in it["candidates"] if c["verdict"] == "accepted"
    ]
    assert accepted["drafter"] == "range-bound"


def test_the_drafter_says_it_has_nothing_to_try_where_no_range_bound_fixes_anything(plugin, make_repo):
    plugin("range_bound")
    only_double_wrong = (
        BUGGY_WINDOWS["windows.py"].replace("len(xs) - k", "len(xs) - k + 1").replace("x * 2", "x * 3")
    )
    repo = make_repo({**BUGGY_WINDOWS, "windows.py": only_double_wrong})
    outcome = fix(repo, RunConfig(drafter="range_bound:RangeBound", **IN_LINE), view=QuietView(notices=False))
    assert outcome.result.outcome == "stalled"  # (not max_iterations: it never offers a rejected edit again)


def summary(drafter: str, *, accepted: bool = False, exhausted: bool = False) -> IterationSummary:
    return IterationSummary(
        0, drafter, 1, 0 if accepted else 1, accepted, 0 if exhausted else 2, exhausted, 0, 0
    )


def test_the_router_gives_each_drafter_a_turn_until_none_has_anything_new(plugin):
    router = plugin("take_turns").TakeTurns()
    names = ["fast", "deep"]
    assert router.route([], names).drafter == "fast"
    assert router.route([summary("fast")], names).drafter == "deep"
    assert router.route([summary("fast"), summary("deep")], names).drafter == "fast"
    assert router.route([summary("fast", exhausted=True), summary("deep")], names).drafter == "deep"
    assert router.route([summary("fast", exhausted=True), summary("deep", exhausted=True)], names) is None
    progress = [summary("fast", exhausted=True), summary("deep", accepted=True)]
    assert router.route(progress, names).drafter == "fast"  # progress: everyone is fresh again


@pytest.mark.slow
def test_the_router_routes_the_real_loop(plugin, make_repo, tmp_path):
    plugin("range_bound")
    plugin("take_turns")
    wrong = '{"description": "a wrong guess", "edits": [{"path": "windows.py", "search": "- k", "replace": "- k - 1"}]}\n'
    (tmp_path / "guess.jsonl").write_text(wrong)
    repo = make_repo(BUGGY_WINDOWS)
    config = RunConfig(
        drafter=f"replay:{tmp_path / 'guess.jsonl'}",
        deep="range_bound:RangeBound",
        router="take_turns:TakeTurns",
        **IN_LINE,
    )
    outcome = fix(repo, config, view=QuietView(notices=False))
    assert outcome.result.outcome == "goal"
    turns = [(it["drafter"], it["route"]["reason"]) for it in iterations(outcome.trace)]
    assert turns == [
        ("replay", "take-turns: replay's turn"),
        ("range-bound", "take-turns: range-bound's turn"),
    ]


def test_the_sandbox_runs_the_tests_and_the_warm_worker_niced_in_the_real_loop(
    plugin, make_repo, monkeypatch
):
    plugin("nice_sandbox")
    if os.nice(0) >= 19:
        pytest.skip("this process is at the lowest priority already: a niced test cannot tell")
    monkeypatch.delenv("RALPH_NO_SANDBOX", raising=False)  # (it would choose the local sandbox)
    niced = "import os\n\n\ndef test_runs_at_the_lowest_priority():\n    assert os.nice(0) == 19\n"
    repo = make_repo({**BUGGY_WINDOWS, "tests/test_priority.py": niced})
    config = RunConfig(drafter="mutation", isolation="nice_sandbox:NiceSandbox", **IN_LINE)
    outcome = fix(repo, config, view=QuietView(notices=False))
    assert outcome.result.outcome == "goal"  # unniced, test_priority would fail and nothing could fix it


def test_the_cli_reference_is_what_the_code_says(monkeypatch):
    """docs/cli.md is generated: a command, an option or a configuration key changed in the code
    and not regenerated (`python docs/gen_cli.py`) fails here."""
    monkeypatch.syspath_prepend(str(PLUGINS.parent))
    gen_cli = importlib.import_module("gen_cli")
    written = (PLUGINS.parent / "cli.md").read_text()
    assert written == gen_cli.render(), "docs/cli.md is stale: run `python docs/gen_cli.py`"
    assert "## `ralph bench fix`" in written and '- `on_gate_failure` (default `"rollback"`)' in written


def documented_fields() -> dict[str, set[str]]:
    """The fields docs/trace-format.md lists, per record (and for a candidate and a stage): the
    names in the first column of each section's table."""
    page = TRACE_PAGE.read_text()
    fields: dict[str, set[str]] = {}
    section = ""
    for line in page.splitlines():
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
            section = {"A candidate": "candidate", "A stage": "stage"}.get(heading, heading.strip("`"))
        elif line.startswith("| `"):
            fields.setdefault(section, set()).update(re.findall(r"`(\w+)`", line.split("|")[1]))
    return fields


def test_every_field_a_real_run_writes_is_on_the_trace_format_page(make_repo):
    repo = make_repo(BUGGY_WINDOWS)
    config = RunConfig(drafter="mutation", background_gate=True, jobs=1, max_iterations=4)
    outcome = fix(repo, config, view=QuietView(notices=False))
    records = read_trace(outcome.trace)
    assert {r["type"] for r in records} == {"run_start", "iteration", "gate", "run_end"}
    documented = documented_fields()
    written: dict[str, set[str]] = {}
    for record in records:
        written.setdefault(record["type"], set()).update(set(record) - {"type", "schema"})
        for candidate in record.get("candidates", []):
            written.setdefault("candidate", set()).update(candidate)
            for stage in candidate["stages"]:
                written.setdefault("stage", set()).update(stage)
    missing = {kind: sorted(names - documented.get(kind, set())) for kind, names in written.items()}
    assert not any(missing.values()), f"written by the run, not on docs/trace-format.md: {missing}"
    start = records[0]
    score_prose = TRACE_PAGE.read_text().split("A `score`")[1].split("\n\n")[0]
    assert set(start["baseline"]["score"]) <= set(re.findall(r"`(\w+)`", score_prose))


RECIPES = ("transformers serve", "vLLM", "llama.cpp", "Ollama")
ADD_BUG = {
    "calc.py": "def add(a, b):\n    return a - b\n",
    "tests/test_calc.py": "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n",
}
PYTEST_SETTINGS = '[tool.pytest.ini_options]\ntestpaths = ["tests"]\n\n'


def test_the_serving_recipes_are_the_ones_tested():
    assert tuple(model_recipes()) == RECIPES


def test_the_readme_table_of_servers_agrees_with_the_tested_recipes():
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    rows = {m[0]: m[1:] for m in re.findall(r"^\| ([^|`]+?) \| `([^`]+)` \| `([^`]+)` \|$", readme, re.M)}
    assert tuple(rows) == RECIPES
    for recipe, (shell, settings) in model_recipes().items():
        start, api_base = rows[recipe]
        documented = [line.split("#")[0] for line in shell.splitlines()]
        for part in start.split(" & "):  # (the table's one line for the recipe's two)
            assert any(part.strip() in line for line in documented), (recipe, part)
        assert f'api_base = "{api_base}"' in settings, recipe


@pytest.mark.slow
@pytest.mark.parametrize("recipe", RECIPES)
def test_each_serving_recipe_reaches_its_model_and_applies_its_reply(recipe, make_repo, monkeypatch):
    """The recipe's TOML as documented, its server's address swapped for a stand-in's, through the
    real entry point: the request names the recipe's model, and its reply is the fix."""
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_API_BASE"):  # as on a fresh machine
        monkeypatch.delenv(name, raising=False)
    _, settings = model_recipes()[recipe]
    model = re.search(r'^drafter = "openai/([^"]+)"', settings, re.M)
    assert model is not None
    with FakeModelServer() as fake:
        toml = re.sub(r"http://[\w.]+:\d+/v1", fake.base_url, settings)
        assert toml != settings
        repo = make_repo({**ADD_BUG, "pyproject.toml": PYTEST_SETTINGS + toml})
        fake.reply("```python\ndef add(a, b):\n    return a + b\n```\nThe sign was wrong.\n")
        out = run_ralph("fix", str(repo), "--candidates", "1", "--max-iterations", "1", "--apply")
        requests = list(fake.requests)
    assert out.returncode == 0, out.stderr
    assert [r.body["model"] for r in requests] == [model.group(1)]
    assert (repo / "calc.py").read_text() == "def add(a, b):\n    return a + b\n"


WORKFLOWS = sorted((PLUGINS.parent.parent / "examples" / "github").glob("*.yml"))


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=lambda path: path.name)
def test_the_example_workflows_call_ralph_as_it_is(workflow: Path):
    """Each `ralph ...` line of an example workflow (docs/many-repositories.md, docs/usage.md) is one
    ralph's command line parses (its options exist, their values are of their types), and what a
    step gives ralph's action is among action.yml's inputs."""
    import shlex

    import typer.main
    import yaml

    from ralph.cli import app

    root = typer.main.get_command(app)
    context = root.context_class(root, info_name="ralph")
    inputs = set(yaml.safe_load((PLUGINS.parent.parent / "action.yml").read_text())["inputs"])
    steps = [step for job in yaml.safe_load(workflow.read_text())["jobs"].values() for step in job["steps"]]
    calls = 0
    for step in steps:
        if step.get("uses", "").startswith("ralph-loop/ralph@"):
            assert set(step.get("with", {})) <= inputs, step
            calls += 1
        for line in step.get("run", "").splitlines():
            if line.strip().startswith("ralph "):  # (an expression `${{ ... }}` stands for a value)
                name, *args = shlex.split(re.sub(r"\$\{\{.*?\}\}", "VALUE", line))[1:]
                command = root.get_command(context, name)
                assert command is not None, line
                command.make_context(name, args, parent=context)  # (a usage error raises)
                calls += 1
    assert calls, f"{workflow.name} calls no ralph"
