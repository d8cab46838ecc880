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
