"""Specification of `changes_from_reply`, the one place a model's reply becomes file changes: pure
(replies are plain strings, the project a dict), and shared by the LLM, diffusion and replay drafters,
which therefore refuse a hostile path in the same words."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest

from ralph.domain.candidate import PROTECTED_TESTS, FileChange
from ralph.domain.protocols import DraftContext
from ralph.drafters.diffusion import edits_from_answer
from ralph.drafters.llm import LLMDrafter
from ralph.drafters.replay import ReplayDrafter
from ralph.edits import NOTHING_CHANGES, SearchReplace, changes_from_reply

CALC = "def add(a, b):\n    return a - b\n"
FIXED = "def add(a, b):\n    return a + b\n"
TEST = "from calc import add\n\n\ndef test_add():\n    assert add(1, 2) == 3\n"


def block(path: str, search: str = "    return a - b\n", replace: str = "    return a + b\n") -> str:
    return f"{path}\n```python\n<<<<<<< SEARCH\n{search}=======\n{replace}>>>>>>> REPLACE\n```\n"


class Project:
    """Files by path, and the paths read: what `changes_from_reply` is given instead of a disk."""

    def __init__(self, files: dict[str, str]) -> None:
        self.files = files
        self.reads: list[str] = []

    def read(self, path: str) -> str | None:
        self.reads.append(path)
        return self.files.get(path)


def test_a_search_replace_reply_becomes_one_change_per_changed_file() -> None:
    project = Project({"calc.py": CALC})
    changes, error = changes_from_reply("Fix the sign.\n\n" + block("calc.py"), project.read)
    assert error is None and changes == (FileChange("calc.py", CALC, FIXED),)


@pytest.mark.parametrize(
    ("reply", "refusal"),
    [
        (block("../x.py"), "points outside the project"),
        (block("/etc/x.py"), "is absolute"),
        (block(".git/hooks/pre-commit", "", "echo owned\n"), "inside .git"),
        ("--- a/../x.py\n+++ b/../x.py\n@@ -1 +1 @@\n-a\n+b\n", "points outside the project"),
        ("--- /dev/null\n+++ b//etc/x.py\n@@ -0,0 +1 @@\n+owned\n", "is absolute"),
    ],
)
def test_a_path_outside_the_project_is_refused_before_any_file_is_read(reply: str, refusal: str) -> None:
    project = Project({"calc.py": CALC})
    changes, error = changes_from_reply(reply, project.read)
    assert changes == () and error is not None and refusal in error
    assert project.reads == []


def test_new_contents_by_path_are_checked_like_any_reply() -> None:
    project = Project({"calc.py": CALC})
    changes, error = changes_from_reply({"calc.py": FIXED, "../x.py": "owned\n"}, project.read)
    assert changes == () and error is not None and "points outside the project" in error
    assert changes_from_reply({"./calc.py": FIXED}, project.read) == (
        (FileChange("calc.py", CALC, FIXED),),
        None,
    )


def test_protected_paths_are_all_named_and_never_read() -> None:
    project = Project({"calc.py": CALC, "tests/test_calc.py": TEST, "tests/test_more.py": TEST})
    reply = block("tests/test_calc.py", "    assert add(1, 2) == 3\n", "    pass\n") + block(
        "tests/test_more.py", "    assert add(1, 2) == 3\n", "    pass\n"
    )
    changes, error = changes_from_reply(reply, project.read, protected=PROTECTED_TESTS)
    assert changes == () and error is not None
    assert error.startswith("tests/test_calc.py, tests/test_more.py are protected")
    assert project.reads == []


def test_a_reply_without_an_edit_names_the_formats_it_may_use() -> None:
    project = Project({"calc.py": CALC})
    _, error = changes_from_reply("I am not sure.", project.read)
    assert error is not None
    assert error.startswith(
        "the reply contains no edit (no SEARCH/REPLACE blocks, no unified diff, no corrected whole function)"
    )
    assert "<<<<<<< SEARCH" in error  # the format to answer in
    _, error = changes_from_reply("I am not sure.", project.read, formats=("udiff",))
    assert error is not None and "no unified diff)" in error and "'--- a/path'" in error


def test_errors_advise_in_the_format_asked_for() -> None:
    """A whole function that cannot be placed by name: the SEARCH/REPLACE prompt's model is pointed
    to a SEARCH/REPLACE edit, the function prompt's model never hears of one."""
    twice = "class A:\n    def f(self):\n        return 1\n\n\nclass B:\n    def f(self):\n        return 2\n"
    project = Project({"m.py": twice})
    reply = "```python\ndef f(self):\n    return 3\n```"
    _, error = changes_from_reply(reply, project.read, suspicious=["m.py"])
    assert error is not None and error.startswith("`f` matches 2 definitions in m.py")
    assert error.endswith("use a SEARCH/REPLACE edit instead")
    _, error = changes_from_reply(reply, project.read, suspicious=["m.py"], asked="function")
    assert error is not None and error.startswith("`f` matches 2 definitions") and "SEARCH" not in error
    _, error = changes_from_reply("no idea", project.read, suspicious=["m.py"], asked="function")
    assert error == (
        "the reply contains no edit (no corrected whole function). Write the whole corrected function in "
        "one ```python block."
    )


def test_a_reply_in_a_format_not_asked_for_is_no_edit() -> None:
    diff = "--- a/calc.py\n+++ b/calc.py\n@@ -1,2 +1,2 @@\n def add(a, b):\n-    return a - b\n+    return a + b\n"
    project = Project({"calc.py": CALC})
    assert changes_from_reply(diff, project.read)[0] == (FileChange("calc.py", CALC, FIXED),)
    changes, error = changes_from_reply(diff, project.read, formats=("search-replace",))
    assert changes == () and error is not None and error.startswith("the reply contains no edit")


def test_a_reply_that_changes_nothing_is_an_error() -> None:
    project = Project({"calc.py": CALC})
    assert changes_from_reply(block("calc.py", replace="    return a - b\n"), project.read) == (
        (),
        NOTHING_CHANGES,
    )
    assert changes_from_reply([], project.read) == ((), NOTHING_CHANGES)


def test_a_reply_is_used_whole_so_a_partly_failed_one_must_be_resent_whole() -> None:
    project = Project({"calc.py": CALC})
    reply = block("calc.py") + block("calc.py", "    return a * b\n", "    return b\n")
    changes, error = changes_from_reply(reply, project.read)
    assert changes == () and error is not None and "SEARCH block 2" in error
    assert "send every block again" in error and "don't resend" not in error


def test_a_corrected_function_replaces_its_namesake_in_the_most_suspicious_unprotected_file() -> None:
    project = Project({"calc.py": CALC, "tests/test_calc.py": "def add(a, b):\n    return 0\n"})
    reply = "Here it is:\n```python\ndef add(a, b):\n    return a + b\n```\n"
    changes, error = changes_from_reply(
        reply, project.read, protected=PROTECTED_TESTS, suspicious=["tests/test_calc.py", "calc.py"]
    )
    assert error is None and changes == (FileChange("calc.py", CALC, FIXED),)
    assert project.reads == ["calc.py"]


SUB = "def sub(a, b):\n    return a + b\n"
SUB_FIXED = "def sub(a, b):\n    return a - b\n"


def fenced(*functions: str) -> str:
    return "".join(f"```python\n{function}```\n\n" for function in functions)


def test_several_corrected_functions_of_one_file_are_one_change() -> None:
    project = Project({"calc.py": CALC + "\n\n" + SUB})
    changes, error = changes_from_reply(fenced(FIXED, SUB_FIXED), project.read, suspicious=["calc.py"])
    assert error is None and changes == (
        FileChange("calc.py", CALC + "\n\n" + SUB, FIXED + "\n\n" + SUB_FIXED),
    )


def test_corrected_functions_of_two_suspicious_files_are_one_reply_changing_both() -> None:
    project = Project({"calc.py": CALC, "ops.py": SUB})
    reply = "Two bugs:\n" + fenced(SUB_FIXED, FIXED) + "Both fixed."
    changes, error = changes_from_reply(reply, project.read, suspicious=["calc.py", "ops.py"])
    assert error is None
    assert changes == (FileChange("calc.py", CALC, FIXED), FileChange("ops.py", SUB, SUB_FIXED))


def test_a_function_no_suspicious_file_defines_makes_the_whole_reply_an_error() -> None:
    project = Project({"calc.py": CALC, "ops.py": SUB})
    helper = "def halve(x):\n    return x / 2\n"
    changes, error = changes_from_reply(fenced(FIXED, helper), project.read, suspicious=["calc.py", "ops.py"])
    assert changes == () and error is not None
    assert error.startswith("no function `halve` in calc.py, ops.py") and "used whole" in error


def test_a_test_shown_back_beside_the_corrected_function_is_no_edit_and_no_error() -> None:
    project = Project({"calc.py": CALC, "tests/test_calc.py": TEST})
    reply = fenced("def test_add():\n    assert add(1, 2) == 3\n", FIXED)
    changes, error = changes_from_reply(
        reply, project.read, protected=PROTECTED_TESTS, suspicious=["calc.py", "tests/test_calc.py"]
    )
    assert error is None and changes == (FileChange("calc.py", CALC, FIXED),)


def test_pre_split_blocks_apply_like_parsed_ones() -> None:
    project = Project({"calc.py": CALC})
    edits = [SearchReplace("calc.py", "    return a - b\n", "    return a + b\n")]
    assert changes_from_reply(edits, project.read) == ((FileChange("calc.py", CALC, FIXED),), None)


# --- the three drafters share it ---------------------------------------------------------------------


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "calc.py").write_text(CALC)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_calc.py").write_text(TEST)
    return tmp_path


def context(project: Path) -> DraftContext:
    return DraftContext("", project, 0, (), (), (), (("calc.py", 2),), protected=PROTECTED_TESTS)


def llm_error(project: Path, reply: str, monkeypatch: pytest.MonkeyPatch) -> str | None:
    import litellm

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setattr(litellm, "completion", functools.partial(litellm.completion, mock_response=reply))
    [candidate] = LLMDrafter("openai/gpt-4o-mini").draft(context(project), 1)
    assert candidate.changes == ()
    return candidate.error


def diffusion_error(project: Path, reply: str) -> str | None:
    changes, error = edits_from_answer(context(project), reply)
    assert changes == ()
    return error


def replay_error(project: Path, reply: str) -> str | None:
    record = project.parent / "replay.jsonl"
    record.write_text(json.dumps({"description": "recorded", "search_replace": reply}) + "\n")
    [candidate] = ReplayDrafter(record).draft(context(project), 1)
    assert candidate.changes == ()
    return candidate.error


@pytest.mark.parametrize(
    ("hostile", "refusal"),
    [("../x.py", "points outside the project"), ("/tmp/x.py", "is absolute"), (".git/config", "inside .git")],
)
def test_every_drafter_refuses_a_path_outside_the_project_in_the_same_words(
    project: Path, monkeypatch: pytest.MonkeyPatch, hostile: str, refusal: str
) -> None:
    reply = "Create it.\n\n" + block(hostile, "", "owned = True\n")
    errors = {
        "llm": llm_error(project, reply, monkeypatch),
        "diffusion": diffusion_error(project, reply),
        "replay": replay_error(project, reply),
    }
    assert len(set(errors.values())) == 1, errors
    assert errors["llm"] is not None and refusal in errors["llm"]
    assert not (project.parent / "x.py").exists()


def test_the_model_drafters_refuse_a_protected_path_in_the_same_words(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reply = block("tests/test_calc.py", "    assert add(1, 2) == 3\n", "    pass\n")
    llm, diffusion = llm_error(project, reply, monkeypatch), diffusion_error(project, reply)
    assert llm == diffusion and llm is not None and llm.startswith("tests/test_calc.py is protected")
