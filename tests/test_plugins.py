"""Sandboxes and drafters are chosen by name from their registries, or loaded as `module:Class`; a
plugin is checked against its Protocol when it is loaded, and a sandbox lacking any member is refused
(fail closed) rather than used with less isolation."""

from __future__ import annotations

from pathlib import Path

import pytest

from ralph.config import RunConfig, load_config
from ralph.domain.errors import RalphError
from ralph.domain.plugins import missing_members, protocol_members
from ralph.domain.protocols import Drafter, Sandbox
from ralph.drafters import create_drafter
from ralph.sandboxes import SANDBOXES, LocalSandbox, require_sandbox, select_sandbox
from tests.conftest import BUGGY_WINDOWS, git, run_ralph
from tests.test_bad_input import assert_one_line_error

SANDBOX_MEMBERS = {
    "name",
    "mount_at",
    "run",
    "wrap",
    "cancel",
    "close",
    "mounted_at",
    "prepare",
    "inside",
    "outside",
}

BOXES = '''
from ralph.sandboxes.local import LocalSandbox


class Methods:
    """Every method but `wrap`, on the local sandbox."""

    def __init__(self, workspace, writable=(), workspace_writable=True):
        self.box = LocalSandbox()

    def run(self, argv, **options):
        Full.runs += 1
        return self.box.run(argv, **options)

    def cancel(self):
        self.box.cancel()

    def close(self):
        pass

    def mounted_at(self, path):
        return None

    def prepare(self, argv, env=None):
        return []

    def inside(self, text):
        return text

    def outside(self, text):
        return text


class NoWrap(Methods):
    """Without `wrap`, a warm worker once started outside any sandbox."""

    name = "nowrap"
    mount_at = None


class Full(Methods):
    name = "full"
    mount_at = None
    runs = wraps = 0

    def wrap(self, argv, *, cwd, env=None):
        Full.wraps += 1
        return self.box.wrap(argv, cwd=cwd, env=env)


class Nameless(Methods):
    mount_at = None

    def wrap(self, argv, *, cwd, env=None):
        return self.box.wrap(argv, cwd=cwd, env=env)
'''

DRAFTS = """
class Minimal:
    name = "minimal"

    def draft(self, context, n):
        return []


class Remote(Minimal):
    remote = True
    priced = False


class NoDraft:
    name = "nodraft"


class Slotted:
    __slots__ = ()
    name = "slotted"

    def draft(self, context, n):
        return []
"""


@pytest.fixture
def plugins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder on the path (ours and a child ralph's) holding the modules `ralph_test_boxes` and
    `ralph_test_drafts`."""
    folder = tmp_path / "plugins"
    folder.mkdir()
    (folder / "ralph_test_boxes.py").write_text(BOXES)
    (folder / "ralph_test_drafts.py").write_text(DRAFTS)
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.setenv("PYTHONPATH", str(folder))
    return folder


def test_the_sandbox_protocol_declares_every_member_the_code_calls_and_both_sandboxes_have_them(tmp_path):
    from ralph.sandboxes.bwrap import BwrapSandbox

    assert protocol_members(Sandbox) == SANDBOX_MEMBERS
    (tmp_path / "ws").mkdir()
    for box in (LocalSandbox(), BwrapSandbox(tmp_path / "ws")):
        assert isinstance(box, Sandbox) and missing_members(box, Sandbox) == []
        defined = set(dir(type(box))) | set(vars(box))
        assert defined >= SANDBOX_MEMBERS, type(box)
    assert set(SANDBOXES) == {"bwrap", "local"}


def test_the_local_sandbox_maps_nothing_and_wraps_a_command_as_it_is(tmp_path):
    box = LocalSandbox()
    assert (box.mount_at, box.mounted_at(tmp_path), box.prepare(["python"])) == (None, None, [])
    assert box.inside("/a/b.py::t") == box.outside("/a/b.py::t") == "/a/b.py::t"
    command = box.wrap(["python", "-c", "pass"], cwd=tmp_path)
    assert command == ["python", "-c", "pass"] and command.pass_fds == ()
    command.close()
    box.close()  # (nothing to release)
    assert box.run(["true"], cwd=str(tmp_path)).ok


def test_a_sandbox_plugin_lacking_a_member_is_refused_before_it_runs_anything(plugins, tmp_path):
    for name in ("ralph_test_boxes:NoWrap", "ralph_test_boxes:Nameless"):
        with pytest.raises(RalphError) as refused:
            select_sandbox(name, tmp_path, [])
        lacking = "wrap" if name.endswith("NoWrap") else "name"
        assert str(refused.value) == f"isolation {name}: not a Sandbox (it lacks {lacking}); refusing to run"
    with pytest.raises(RalphError, match="lacks wrap"):  # (at the start of a run: before any work)
        require_sandbox("ralph_test_boxes:NoWrap")
    from ralph_test_boxes import Full

    assert isinstance(select_sandbox("ralph_test_boxes:Full", tmp_path, [tmp_path]), Full)


@pytest.mark.slow
def test_the_command_line_refuses_a_bad_sandbox_in_one_line(plugins, make_repo):
    repo = make_repo({**BUGGY_WINDOWS})
    status = git(repo, "status", "--porcelain")
    assert_one_line_error(
        run_ralph("fix", str(repo), "--isolation", "telepathy"),
        "unknown sandbox 'telepathy'; available: bwrap, local, or module:Class",
    )
    assert_one_line_error(
        run_ralph("fix", str(repo), "--isolation", "ralph_test_boxes:NoWrap"),
        "not a Sandbox (it lacks wrap); refusing to run",
    )
    assert_one_line_error(run_ralph("fix", str(repo), "--isolation", "no_such_module:Box"), "cannot load it")
    (repo / "ralph.toml").write_text('isolation = "telepathy"\n')
    assert_one_line_error(run_ralph("fix", str(repo)), "unknown sandbox 'telepathy'")
    (repo / "ralph.toml").unlink()
    assert git(repo, "status", "--porcelain") == status
    assert not (repo / ".ralph").exists() and git(repo, "branch", "--list", "ralph/*") == ""


def test_isolation_names_the_sandbox_and_no_sandbox_still_means_local(tmp_path, monkeypatch):
    monkeypatch.delenv("RALPH_NO_SANDBOX", raising=False)
    assert RunConfig().chosen_sandbox == "bwrap"
    assert RunConfig(isolation="local").chosen_sandbox == "local"
    assert RunConfig(sandbox=False, isolation="pkg.mod:Box").chosen_sandbox == "local"
    (tmp_path / "pyproject.toml").write_text('[tool.ralph]\nisolation = "pkg.mod:Box"\n')
    assert load_config(tmp_path, {}).chosen_sandbox == "pkg.mod:Box"
    assert load_config(tmp_path, {"sandbox": False}).chosen_sandbox == "local"  # --no-sandbox
    monkeypatch.setenv("RALPH_NO_SANDBOX", "1")
    assert load_config(tmp_path, {}).chosen_sandbox == "local"


def test_a_run_uses_the_sandbox_plugin_it_names_for_tests_and_the_warm_worker(
    plugins, make_repo, monkeypatch
):
    from ralph_test_boxes import Full

    from ralph.session import fix
    from ralph.view import QuietView

    monkeypatch.delenv("RALPH_NO_SANDBOX", raising=False)
    repo = make_repo(BUGGY_WINDOWS)
    config = RunConfig(isolation="ralph_test_boxes:Full", background_gate=False, jobs=1)
    assert fix(repo, config, view=QuietView(notices=False)).result.outcome == "goal"
    assert Full.runs > 0 and Full.wraps > 0


def test_drafters_by_name_prefix_or_plugin(plugins, tmp_path):
    from ralph.drafters.llm import LLMDrafter
    from ralph.drafters.mutation import MutationDrafter
    from ralph.drafters.replay import ReplayDrafter

    auto, notice = create_drafter("auto")
    assert isinstance(auto, MutationDrafter) and notice and "mutation" in notice
    assert create_drafter("mutation")[1] is None
    (tmp_path / "edits.jsonl").write_text("")
    assert isinstance(create_drafter(f"replay:{tmp_path / 'edits.jsonl'}")[0], ReplayDrafter)
    llm, _ = create_drafter("openai/coder", models={"openai/coder": {"api_base": "http://127.0.0.1:9/v1"}})
    assert isinstance(llm, LLMDrafter) and llm.remote
    with pytest.raises(RalphError, match=r"unknown drafter 'telepathy'; available: auto, mutation"):
        create_drafter("telepathy")
    for drafter in (auto, llm):
        assert {"remote", "priced"} <= set(dir(type(drafter)))  # declared by every built-in


def test_a_drafter_plugin_with_only_name_and_draft_is_given_the_defaults(plugins):
    minimal, _ = create_drafter("ralph_test_drafts:Minimal")
    assert isinstance(minimal, Drafter) and (minimal.remote, minimal.priced) == (False, True)
    remote, _ = create_drafter("ralph_test_drafts:Remote")
    assert (remote.remote, remote.priced) == (True, False)  # what it declares is kept
    with pytest.raises(RalphError, match=r"not a Drafter \(it lacks draft;"):
        create_drafter("ralph_test_drafts:NoDraft")
    with pytest.raises(RalphError, match="declare `remote` and `priced` on it"):
        create_drafter("ralph_test_drafts:Slotted")
