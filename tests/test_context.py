"""What model drafters are told: failing checks, the implicated code with line numbers, past attempts."""

from __future__ import annotations

from ralph.context import localize, render, trim_message
from ralph.domain.protocols import DraftContext
from ralph.domain.results import TestResult

SOURCE = "import os\n\n\ndef mean(xs):\n    total = sum(xs)\n    return total / (len(xs) - 1)\n\n\ndef other():\n    return 1\n"


def context(tmp_path, **kw) -> DraftContext:
    (tmp_path / "stats.py").write_text(SOURCE)
    defaults = dict(
        task="make test_mean pass",
        project=tmp_path,
        state_id=0,
        failing_tests=(TestResult("tests/test_stats.py::test_mean", "failed", message="assert 3.0 == 2.0"),),
        diagnostics=(),
        failing_checks=(),
        suspicious=(("stats.py", 6),),
    )
    return DraftContext(**{**defaults, **kw})


def test_the_enclosing_function_is_shown_with_line_numbers(tmp_path):
    text = render(context(tmp_path))
    assert "make test_mean pass" in text
    assert "tests/test_stats.py::test_mean" in text and "assert 3.0 == 2.0" in text
    assert "    6 |     return total / (len(xs) - 1)" in text
    assert "def other" not in text  # only the implicated function


def test_rejected_attempts_are_listed_so_the_model_does_not_repeat_them(tmp_path):
    text = render(context(tmp_path, attempts=(("-a\n+b", "tests: breaks test t::x"),)))
    assert "Already tried" in text and "tests: breaks test t::x" in text


def test_a_symlink_to_a_file_outside_the_project_is_never_read(tmp_path):
    secret = tmp_path / "secret.py"
    secret.write_text("API_KEY = 'sk-do-not-leak'\n")
    project = tmp_path / "project"
    project.mkdir()
    (project / "leak.py").symlink_to(secret)
    assert localize(project, [("leak.py", 1)]) == []


def test_long_messages_keep_their_head_and_tail():
    message = "File x.py line 1\n" + "noise\n" * 2000 + "AssertionError: assert 1 == 2"
    trimmed = trim_message(message)
    assert len(trimmed) < 1600
    assert trimmed.startswith("File x.py") and trimmed.endswith("assert 1 == 2")
