"""What verification reads of the accepted state's files is learnt before a candidate edits them."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from ralph.validators import policy, read_ahead, selection
from tests.conftest import write_files


def test_the_facts_of_the_projects_sources_are_learnt_ahead_and_its_tests_are_not_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    source = f"def run(cmd):\n    return exec(cmd)  # {uuid.uuid4()}\n"
    write_files(
        tmp_path,
        {
            "pkg/tool.py": source,
            "tests/test_tool.py": "def test_run():\n    pass\n",
            ".hidden/skip.py": "x = 1\n",
            "venv/lib/site.py": "x = 1\n",
        },
    )
    texts = list(read_ahead.project_texts(tmp_path, lambda path: path.startswith("tests/")))
    assert texts == [("pkg/tool.py", source)]
    read_ahead.start(lambda: texts).join(timeout=30)

    def never(*args, **kwargs):
        raise AssertionError("computed again")

    # Learnt: asked for now, neither is computed again (nothing is parsed or walked).
    monkeypatch.setattr(policy, "_Reach", never)
    monkeypatch.setattr(selection, "parse", never)
    monkeypatch.setattr(policy, "_parse", never)
    learnt = policy._accepted(source)
    assert learnt is not None and learnt.kinds == {("dynamic-code", "exec")}
    assert selection._outline(source)[0][0].name == "run"


def test_a_text_that_fails_to_be_read_ends_the_thread_quietly():
    def texts():
        yield "pkg/f.py", "def f(:\n"  # (does not parse: no facts, no error)
        raise OSError("gone")

    read_ahead.start(texts).join(timeout=30)


def test_the_states_sources_are_read_at_the_baseline_not_when_a_candidate_may_be_applied(
    tmp_path, monkeypatch
):
    import sys

    from ralph.sandboxes.local import LocalSandbox
    from ralph.validators.facts import VerifySettings
    from ralph.validators.pipeline import Verifier
    from ralph.validators.toolchain import Toolchain
    from tests.conftest import write_files

    write_files(
        tmp_path,
        {
            "m.py": "def f():\n    return 1\n",
            "tests/test_m.py": "from m import f\n\n\ndef test_f():\n    assert f() == 1\n",
        },
    )
    started = []
    monkeypatch.setattr(read_ahead, "start", lambda files, learn=None: started.append(files))
    verifier = Verifier(Toolchain(sys.executable, LocalSandbox(), tmp_path), VerifySettings())
    try:
        verifier.baseline()
    finally:
        verifier.close()
    (tmp_path / "m.py").write_text("def f():\n    return 2\n")  # a candidate, applied before the thread ran
    assert dict(started[0]())["m.py"] == "def f():\n    return 1\n"
