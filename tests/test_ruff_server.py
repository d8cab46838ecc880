"""The resident ruff (`ruff server`): it answers only where it says what `ruff check` would, never
decides an accept, and any failure of it falls back to `ruff check`."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from ralph.domain.candidate import Candidate, FileChange
from ralph.domain.results import Diagnostic, Scope, StageResult
from ralph.sandboxes.local import LocalSandbox
from ralph.sandboxes.workspace import Workspace
from ralph.validators.facts import VerifySettings
from ralph.validators.pipeline import Verifier
from ralph.validators.ruff import RESIDENT, Accepted, RuffValidator
from ralph.validators.ruff_server import ResidentRuff
from ralph.validators.toolchain import Toolchain
from tests.conftest import write_files

# (`== None`: the planted configuration's E711 would find it, if anything read that file)
BAD = 'import os\n\n\ndef BadName():\n    return "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"\n\n\nN = BadName == None\n'
CONFIGURED = {
    "pyproject.toml": (
        '[tool.ruff]\nline-length = 40\nextend-exclude = ["skip"]\n'
        '[tool.ruff.lint]\nselect = ["E501", "F401", "N802", "E402"]\n'
        'per-file-ignores = {"pkg/ignored.py" = ["F401"]}\n'
    ),
    "pkg/a.py": BAD,
    "pkg/ignored.py": BAD,
    "skip/s.py": BAD,
    # Planted beside the files: neither `ruff check` nor the server may read it.
    "pkg/ruff.toml": '[lint]\nselect = ["E711"]\n',
}
ISOLATED = {"m.py": "import os\nx = 1\nimport sys\nprint(sys, x == None)\ny = lambda: 0\n"}


def _ruff(root: Path, files: dict[str, str], resident: bool = True) -> RuffValidator:
    write_files(root, files)
    return RuffValidator(Toolchain(sys.executable, LocalSandbox(), root), resident=resident)


def _keys(result: StageResult) -> list[tuple[str, str, str, int, bool]]:
    return sorted((d.path, d.code, d.message, d.line, d.fixable) for d in result.diagnostics)


def _accepted(ruff: RuffValidator, path: str) -> dict[str, Accepted]:
    """`path` as it is now, with `ruff check`'s findings in it: the accepted state of a candidate."""
    cli = ruff.check(Scope(paths=(path,)))
    return {path: Accepted((ruff.toolchain.project / path).read_text(), tuple(cli.diagnostics))}


@pytest.mark.parametrize("files", [CONFIGURED, ISOLATED], ids=["configured", "isolated"])
def test_the_server_finds_what_ruff_check_finds_in_every_file(tmp_path, files):
    ruff = _ruff(tmp_path, files)
    try:
        for path in [p for p in files if p.endswith(".py")]:
            accepted = _accepted(ruff, path)
            served = ruff.start(Scope(paths=(path,)), accepted)()
            assert served.detail.endswith(RESIDENT), (path, served.detail)
            assert _keys(served) == _keys(ruff.check(Scope(paths=(path,)))), path
    finally:
        ruff.close()
    if files is CONFIGURED:  # the planted configuration's rule is nowhere
        assert "E711" not in {k[1] for k in _keys(ruff.check(Scope(paths=("pkg/a.py",))))}


def test_a_finding_the_accepted_text_lacks_is_described_by_ruff_check(tmp_path):
    ruff = _ruff(tmp_path, CONFIGURED)
    try:
        accepted = _accepted(ruff, "pkg/a.py")
        (tmp_path / "pkg/a.py").write_text("import sys\n" + BAD)  # a new unused import: fixable
        served = ruff.start(Scope(paths=("pkg/a.py",)), accepted)()
        cli = ruff.check(Scope(paths=("pkg/a.py",)))
        assert not served.detail.endswith(RESIDENT)
        assert _keys(served) == _keys(cli)
        assert any(d.code == "F401" and d.fixable for d in served.diagnostics)
    finally:
        ruff.close()


def test_fewer_findings_than_the_accepted_text_are_the_servers_to_report(tmp_path):
    ruff = _ruff(tmp_path, CONFIGURED)
    try:
        accepted = _accepted(ruff, "pkg/a.py")
        (tmp_path / "pkg/a.py").write_text(BAD.replace("BadName", "good_name"))
        served = ruff.start(Scope(paths=("pkg/a.py",)), accepted)()
        assert served.detail.endswith(RESIDENT)
        assert _keys(served) == _keys(ruff.check(Scope(paths=("pkg/a.py",))))
        assert "N802" not in {d.code for d in served.diagnostics}
    finally:
        ruff.close()


def test_where_the_server_and_the_accepted_findings_disagree_ruff_check_answers(tmp_path):
    ruff = _ruff(tmp_path, CONFIGURED)
    try:
        accepted = _accepted(ruff, "pkg/a.py")
        made_up = Diagnostic("ruff", "pkg/a.py", 1, "F999", "not a finding ruff check made")
        lying = {
            "pkg/a.py": Accepted(accepted["pkg/a.py"].text, (*accepted["pkg/a.py"].diagnostics, made_up))
        }
        served = ruff.start(Scope(paths=("pkg/a.py",)), lying)()
        assert not served.detail.endswith(RESIDENT)
        assert _keys(served) == _keys(ruff.check(Scope(paths=("pkg/a.py",))))
    finally:
        ruff.close()


def test_a_server_that_died_leaves_ruff_check_to_answer(tmp_path):
    ruff = _ruff(tmp_path, CONFIGURED)
    try:
        accepted = _accepted(ruff, "pkg/a.py")
        assert ruff.start(Scope(paths=("pkg/a.py",)), accepted)().detail.endswith(RESIDENT)
        assert ruff.resident is not None and ruff.resident._proc is not None
        ruff.resident._proc.kill()
        ruff.resident._proc.wait()
        (tmp_path / "pkg/a.py").write_text(BAD.replace("BadName", "good_name"))
        served = ruff.start(Scope(paths=("pkg/a.py",)), accepted)()
        assert not served.detail.endswith(RESIDENT)
        assert served.error is None and _keys(served) == _keys(ruff.check(Scope(paths=("pkg/a.py",))))
        assert ruff.resident.broken
    finally:
        ruff.close()


def test_a_server_that_cannot_start_leaves_ruff_check_to_answer(tmp_path):
    ruff = _ruff(tmp_path, CONFIGURED)
    assert ruff.resident is not None
    ruff.resident.binary = str(tmp_path / "no-such-ruff")
    accepted = _accepted(ruff, "pkg/a.py")
    served = ruff.start(Scope(paths=("pkg/a.py",)), accepted)()
    assert not served.detail.endswith(RESIDENT) and served.error is None
    assert {d.code for d in served.diagnostics} == {"F401", "N802", "E501"}


BUGGY = {
    "shapes.py": "import os\n\n\ndef area(w, h):\n    return w + h\n",
    "tests/test_shapes.py": "from shapes import area\n\n\ndef test_area():\n    assert area(2, 3) == 6\n",
}


def test_an_accept_rests_on_ruff_check_not_on_the_server(tmp_path):
    write_files(tmp_path / "ws", BUGGY)
    ws = Workspace(tmp_path / "ws")
    v = Verifier(Toolchain(sys.executable, LocalSandbox(), ws.project), VerifySettings())
    try:
        state, _ = v.baseline()
        before = ws.read("shapes.py")
        assert before is not None
        change = FileChange("shapes.py", before, before.replace("w + h", "w * h"))
        ws.apply([change])
        ws.capture()
        report = v.verify(Candidate("test", "fix", (change,)), state, reset=ws.restore)
        assert report.accepted, report.reason
        lints = [s for s in report.stages if s.stage == "ruff"]
        assert [s.detail.endswith(RESIDENT) for s in lints] == [True, False]
        assert [d.code for d in lints[1].diagnostics] == ["F401"]  # the project's own, kept
    finally:
        v.close()


def test_a_rejection_by_the_tests_needs_no_ruff_process(tmp_path):
    write_files(tmp_path / "ws", BUGGY)
    ws = Workspace(tmp_path / "ws")
    v = Verifier(Toolchain(sys.executable, LocalSandbox(), ws.project), VerifySettings())
    try:
        state, _ = v.baseline()
        before = ws.read("shapes.py")
        assert before is not None
        change = FileChange("shapes.py", before, before.replace("w + h", "w - h"))
        ws.apply([change])
        ws.capture()
        report = v.verify(Candidate("test", "worse", (change,)), state, reset=ws.restore)
        assert not report.accepted and report.failed_stage != "ruff"
        lints = [s for s in report.stages if s.stage == "ruff"]
        assert len(lints) == 1 and lints[0].detail.endswith(RESIDENT)
    finally:
        v.close()


def test_no_accept_rests_on_the_servers_count_of_what_remains(tmp_path, monkeypatch):
    # A server that stops seeing a finding `ruff check` still makes (here: it answers nothing for a
    # candidate's text marked QUIET) makes the targeted step count an improvement; the settled step's
    # `ruff check` counts again, and with the gate beside the loop (the gate's own count comes later)
    # the candidate is rejected there.
    quiet: set[tuple[int, int]] = set()
    ask, answer = ResidentRuff.ask, ResidentRuff.answer

    def asking(self, file, text, timeout_s=5.0):
        asked = ask(self, file, text, timeout_s)
        if asked is not None and "QUIET" in text:
            quiet.add((id(self), asked.ident))
        return asked

    def answering(self, asked):
        found = answer(self, asked)
        return [] if found is not None and (id(self), asked.ident) in quiet else found

    monkeypatch.setattr(ResidentRuff, "ask", asking)
    monkeypatch.setattr(ResidentRuff, "answer", answering)
    write_files(
        tmp_path,
        {
            "shapes.py": "import os\n\n\ndef area(w, h):\n    return w * h\n",
            "tests/test_shapes.py": "from shapes import area\n\n\ndef test_area():\n    assert area(2, 3) == 6\n",
        },
    )
    workspace = Workspace(tmp_path)
    toolchain = Toolchain(sys.executable, LocalSandbox(), workspace.project)
    verifier = Verifier(toolchain, VerifySettings(background=True, only=("shapes.py",)))
    try:
        state, _ = verifier.baseline()
        assert verifier.score(state).remaining > 0  # (the unused import)
        before = workspace.read("shapes.py")
        change = FileChange("shapes.py", before, before + "# QUIET\n")
        workspace.apply([change])
        workspace.capture()
        report = verifier.verify(Candidate("t", "a comment", (change,)), state, reset=workspace.restore)
        served = [s for s in report.stages if s.stage == "ruff"]
        assert served and served[0].detail.endswith(RESIDENT)  # (the server's word was taken first)
        assert not report.accepted, report.reason
        assert "no improvement" in report.reason
    finally:
        verifier.close()


def test_a_candidate_the_policy_refuses_never_starts_the_server_on_its_configuration(tmp_path):
    # The static step's ruff starts before the policy reads the edit only once the server runs: a
    # first candidate that also edits ruff's settings would otherwise start it on those settings,
    # kept for every later candidate.
    files = {**BUGGY, "pyproject.toml": '[project]\nname = "shapes"\n\n[tool.ruff]\nline-length = 100\n'}
    write_files(tmp_path / "ws", files)
    ws = Workspace(tmp_path / "ws")
    v = Verifier(Toolchain(sys.executable, LocalSandbox(), ws.project), VerifySettings())
    try:
        state, _ = v.baseline()
        ws.capture()

        def judged(changes: dict[str, str]) -> object:
            edit = tuple(FileChange(p, ws.read(p), text) for p, text in changes.items())
            ws.apply(list(edit))
            try:
                return v.detect(Candidate("test", "edit", edit), state)
            finally:
                ws.restore()
                v.restored(False)

        quiet = files["pyproject.toml"] + '[tool.ruff.lint]\nignore = ["F821"]\n'
        refused = judged({"pyproject.toml": quiet, "shapes.py": BUGGY["shapes.py"].replace("w + h", "w * h")})
        assert refused.failed_stage == "policy"
        broken = judged({"shapes.py": BUGGY["shapes.py"].replace("w + h", "w * undefined")})
        assert broken.failed_stage == "ruff" and "F821" in broken.reason, broken.reason
    finally:
        v.close()
