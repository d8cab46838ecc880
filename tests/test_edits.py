"""Specification of ralph.edits: parsing edits out of model replies and applying them to file contents."""

from __future__ import annotations

import difflib
import random
import re
import textwrap
from collections.abc import Callable

import pytest

from ralph.domain.candidate import shared_ends
from ralph.edits import (
    MAX_EDIT_BYTES,
    EditError,
    FilePatch,
    FunctionReplacement,
    SearchReplace,
    apply_function_replacement,
    apply_search_replace,
    apply_unified_diff,
    parse_function_blocks,
    parse_search_replace,
    parse_unified_diff,
    validate_edit_path,
)


def dedent(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


CALC = dedent(
    """
    def add(a, b):
        return a - b


    def mul(a, b):
        return a * b
    """
)


# ---------------------------------------------------------------------------------------------------
# Path validation


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("calc.py", "calc.py"),
        ("./src//pkg/mod.py", "src/pkg/mod.py"),
        ("src\\pkg\\mod.py", "src/pkg/mod.py"),
        ("a/../b.py", "b.py"),
        (".github/workflows/ci.yml", ".github/workflows/ci.yml"),
        (".gitignore", ".gitignore"),
    ],
)
def test_valid_paths_are_normalized_to_relative_posix(path: str, expected: str) -> None:
    assert validate_edit_path(path) == expected


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("../x", "outside the project"),
        ("a/../../b", "outside the project"),
        ("..\\..\\etc\\passwd", "outside the project"),
        ("/etc/passwd", "absolute"),
        ("C:\\Windows\\win.ini", "absolute"),
        ("\\\\server\\share\\x", "absolute"),
        (".git/hooks/pre-commit", ".git"),
        (".GIT/config", ".git"),
        (".Git/config", ".git"),
        ("vendor/lib/.git/config", ".git"),
        (".git./config", ".git"),
        ("", "empty"),
        ("   ", "empty"),
        ("a\0b.py", "control character"),
        (".", "project directory"),
    ],
)
def test_unsafe_paths_are_rejected_with_the_reason(path: str, reason: str) -> None:
    with pytest.raises(EditError, match=reason):
        validate_edit_path(path)


def test_oversize_content_is_rejected() -> None:
    assert validate_edit_path("a.txt", content="x" * MAX_EDIT_BYTES) == "a.txt"
    with pytest.raises(EditError, match=r"a\.txt would be 1048577 bytes, over the 1048576-byte limit"):
        validate_edit_path("a.txt", content="x" * (MAX_EDIT_BYTES + 1))
    with pytest.raises(EditError, match="over the 10-byte limit"):
        validate_edit_path("a.txt", content="é" * 6, max_bytes=10)


@pytest.mark.parametrize("parse", [parse_search_replace, parse_unified_diff])
def test_oversize_edit_text_is_rejected_before_parsing(parse: Callable[[str], object]) -> None:
    with pytest.raises(EditError, match="edit text too large"):
        parse("<<<<<<< SEARCH\n" + "x" * (4 * MAX_EDIT_BYTES))


# ---------------------------------------------------------------------------------------------------
# SEARCH/REPLACE: parsing

REPLY = dedent(
    """
    The bug is in `add`: it subtracts. Here's the fix, plus a test.

    calc.py
    ```python
    <<<<<<< SEARCH
    def add(a, b):
        return a - b
    =======
    def add(a, b):
        return a + b
    >>>>>>> REPLACE
    ```

    Now the new test file:

    ```python
    tests/test_calc.py
    <<<<<<< SEARCH
    =======
    from calc import add


    def test_add():
        assert add(2, 3) == 5
    >>>>>>> REPLACE
    ```

    Let me know if you want more tests.
    """
)


def test_parses_blocks_from_a_realistic_reply_with_chatter_and_fences() -> None:
    assert parse_search_replace(REPLY) == [
        SearchReplace("calc.py", "def add(a, b):\n    return a - b\n", "def add(a, b):\n    return a + b\n"),
        SearchReplace(
            "tests/test_calc.py",
            "",
            "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n",
        ),
    ]


def test_reply_without_blocks_parses_to_nothing() -> None:
    assert parse_search_replace("I don't think any change is needed.\n```python\nx = 1\n```\n") == []


def test_path_may_precede_the_marker_directly_and_be_decorated() -> None:
    reply = "**`src/app.py`**:\n<<<<<<< SEARCH\na\n=======\nb\n>>>>>>> REPLACE\n"
    assert parse_search_replace(reply) == [SearchReplace("src/app.py", "a\n", "b\n")]


def test_marker_variants_trailing_spaces_and_crlf_are_tolerated() -> None:
    reply = "calc.py\r\n```\r\n<<<<<<<< SEARCH  \r\nold\r\n=====\r\nnew\r\n>>>>>>>>> REPLACE\r\n```\r\n"
    assert parse_search_replace(reply) == [SearchReplace("calc.py", "old\n", "new\n")]


def test_a_block_right_after_another_reuses_its_path() -> None:
    reply = dedent(
        """
        calc.py
        ```python
        <<<<<<< SEARCH
        a
        =======
        b
        >>>>>>> REPLACE

        <<<<<<< SEARCH
        c
        =======
        d
        >>>>>>> REPLACE
        ```
        """
    )
    assert [edit.path for edit in parse_search_replace(reply)] == ["calc.py", "calc.py"]


def test_block_without_a_path_is_an_error_saying_where_to_put_it() -> None:
    reply = "Here is the fix:\n```python\n<<<<<<< SEARCH\na\n=======\nb\n>>>>>>> REPLACE\n```\n"
    with pytest.raises(EditError, match="SEARCH block 1 has no file path: put the path alone on the line"):
        parse_search_replace(reply)


def test_block_missing_its_divider_is_an_error() -> None:
    reply = "calc.py\n<<<<<<< SEARCH\na\nb\n>>>>>>> REPLACE\n"
    with pytest.raises(EditError, match=re.escape("SEARCH block 1 for calc.py has no ======= line")) as info:
        parse_search_replace(reply)
    assert "<<<<<<< SEARCH" in str(info.value)  # shows the expected format


def test_block_missing_its_replace_marker_is_an_error() -> None:
    reply = "calc.py\n<<<<<<< SEARCH\na\n=======\nb\n```\nThat's it.\n"
    with pytest.raises(
        EditError, match=re.escape("SEARCH block 1 for calc.py does not end with a >>>>>>> REPLACE")
    ):
        parse_search_replace(reply)


def test_stray_replace_marker_is_an_error() -> None:
    with pytest.raises(EditError, match="without a <<<<<<< SEARCH line"):
        parse_search_replace("calc.py\nold\n=======\nnew\n>>>>>>> REPLACE\n")


def test_block_with_an_unsafe_path_is_rejected_when_parsing() -> None:
    with pytest.raises(EditError, match=r"SEARCH block 1: file path '\.\./x\.py' points outside"):
        parse_search_replace("../x.py\n<<<<<<< SEARCH\n=======\nboom\n>>>>>>> REPLACE\n")


# ---------------------------------------------------------------------------------------------------
# SEARCH/REPLACE: applying


def test_applies_blocks_to_several_files_and_creates_new_ones() -> None:
    result = apply_search_replace({"calc.py": CALC}, parse_search_replace(REPLY))
    assert result == {
        "calc.py": CALC.replace("a - b", "a + b"),
        "tests/test_calc.py": "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n",
    }


def test_later_blocks_see_the_changes_of_earlier_ones() -> None:
    edits = [
        SearchReplace("calc.py", "    return a - b\n", "    return a + b\n"),
        SearchReplace("calc.py", "    return a + b\n", "    return b + a\n"),
    ]
    assert apply_search_replace({"calc.py": CALC}, edits)["calc.py"] == CALC.replace("a - b", "b + a")


def test_untouched_files_are_not_returned() -> None:
    files = {"calc.py": CALC, "other.py": "x = 1\n"}
    assert apply_search_replace(
        files, [SearchReplace("calc.py", "    return a * b\n", "    return b * a\n")]
    ).keys() == {"calc.py"}


def test_search_matching_nothing_names_the_block_shows_the_closest_lines_and_keeps_the_rest() -> None:
    edits = [
        SearchReplace("calc.py", "def mul(a, b):\n", "def mul(a: int, b: int):\n"),
        SearchReplace("calc.py", "def add(x, y):\n    return x - y\n", "def add(x, y):\n    return x + y\n"),
    ]
    with pytest.raises(EditError) as info:
        apply_search_replace({"calc.py": CALC}, edits)
    message = str(info.value)
    assert message.startswith("SEARCH block 2 for calc.py matched 0 times")
    assert "Did you mean these lines (1-2)?\n```\ndef add(a, b):\n    return a - b\n```" in message
    assert "1 other block applied fine; don't resend it" in message
    assert info.value.partial == {"calc.py": CALC.replace("def mul(a, b)", "def mul(a: int, b: int)")}


def test_search_matching_nothing_similar_says_so() -> None:
    with pytest.raises(EditError, match="No similar lines were found") as info:
        apply_search_replace({"calc.py": CALC}, [SearchReplace("calc.py", "import os\n", "import sys\n")])
    assert info.value.partial is None


def test_search_matching_twice_is_an_error_naming_the_count() -> None:
    files = {"calc.py": "x = 0\nx += 1\nprint(x)\nx += 1\n"}
    with pytest.raises(EditError) as info:
        apply_search_replace(files, [SearchReplace("calc.py", "x += 1\n", "x += 2\n")])
    assert str(info.value) == (
        "SEARCH block 1 for calc.py matched 2 times (at lines 2, 4); include more surrounding lines in "
        "SEARCH to make it unique."
    )


def test_an_already_made_change_is_pointed_out() -> None:
    files = {"calc.py": CALC.replace("a - b", "a + b")}
    with pytest.raises(EditError, match=re.escape("The REPLACE lines are already in calc.py")):
        apply_search_replace(files, [SearchReplace("calc.py", "    return a - b\n", "    return a + b\n")])


def test_search_with_less_indentation_and_trailing_spaces_matches_and_replacement_is_reindented() -> None:
    files = {"m.py": "class A:\n    def f(self):\n        return 1\n"}
    edit = SearchReplace("m.py", "def f(self):   \n    return 1\n", "def f(self):\n    return 2\n")
    assert apply_search_replace(files, [edit]) == {"m.py": "class A:\n    def f(self):\n        return 2\n"}


def test_search_with_more_indentation_matches_and_replacement_is_dedented() -> None:
    files = {"m.py": "def f():\n    return 1\n"}
    edit = SearchReplace("m.py", "    def f():\n        return 1\n", "    def f():\n        return 2\n")
    assert apply_search_replace(files, [edit]) == {"m.py": "def f():\n    return 2\n"}


def test_a_search_matching_twice_only_when_whitespace_is_ignored_is_still_ambiguous() -> None:
    files = {"m.py": "if a:\n  x = 1\nif b:\n    x = 1\n"}
    with pytest.raises(EditError, match=r"matched 2 times \(at lines 2, 4\)"):
        apply_search_replace(files, [SearchReplace("m.py", "x = 1\n", "x = 2\n")])


def test_whitespace_tolerance_never_ignores_differences_inside_a_line() -> None:
    files = {"m.py": "x = a+b\n"}
    with pytest.raises(EditError, match="matched 0 times"):
        apply_search_replace(files, [SearchReplace("m.py", "x = a + b\n", "x = 0\n")])


def test_elided_code_in_both_sections_is_kept() -> None:
    files = {
        "m.py": dedent(
            """
            def f(x):
                a = x + 1
                b = a * 2
                c = b - 3
                return c
            """
        )
    }
    edit = SearchReplace(
        "m.py",
        "def f(x):\n    # ... existing code ...\n    return c\n",
        "def f(x: int) -> int:\n    # ... existing code ...\n    return c + 1\n",
    )
    assert apply_search_replace(files, [edit])["m.py"] == dedent(
        """
        def f(x: int) -> int:
            a = x + 1
            b = a * 2
            c = b - 3
            return c + 1
        """
    )


def test_elision_in_search_but_not_in_replace_is_an_error() -> None:
    files = {"m.py": "def f():\n    a = 1\n    return a\n"}
    edit = SearchReplace("m.py", "def f():\n    ...\n    return a\n", "def f():\n    return 2\n")
    with pytest.raises(EditError, match="REPLACE has a different number of them"):
        apply_search_replace(files, [edit])


def test_elided_pieces_must_each_match_once_in_order() -> None:
    files = {"m.py": "def f():\n    return 1\n\n\ndef g():\n    return 1\n"}
    edit = SearchReplace("m.py", "def f():\n...\n    return 2\n", "def f():\n...\n    return 3\n")
    with pytest.raises(
        EditError, match=r"the part starting '    return 2' matched 0 times \(it must match once\)"
    ):
        apply_search_replace(files, [edit])


def test_a_literal_ellipsis_line_matches_exactly_before_any_elision() -> None:
    files = {"p.py": "class P(Protocol):\n    def f(self) -> int:\n        ...\n"}
    edit = SearchReplace(
        "p.py", "    def f(self) -> int:\n        ...\n", "    def f(self) -> str:\n        ...\n"
    )
    assert (
        apply_search_replace(files, [edit])["p.py"]
        == "class P(Protocol):\n    def f(self) -> str:\n        ...\n"
    )


def test_crlf_files_keep_their_line_endings() -> None:
    files = {"w.py": "a = 1\r\nb = 2\r\n"}
    assert apply_search_replace(files, [SearchReplace("w.py", "b = 2\n", "b = 3\n")]) == {
        "w.py": "a = 1\r\nb = 3\r\n"
    }


def test_file_without_final_newline_can_be_edited_at_its_end() -> None:
    files = {"m.py": "a = 1\nb = 2"}
    assert apply_search_replace(files, [SearchReplace("m.py", "b = 2\n", "b = 3\nc = 4\n")]) == {
        "m.py": "a = 1\nb = 3\nc = 4\n"
    }


def test_editing_a_missing_file_suggests_close_paths() -> None:
    with pytest.raises(EditError, match=r"calcs\.py does not exist \(did you mean calc\.py\?\)"):
        apply_search_replace({"calc.py": CALC}, [SearchReplace("calcs.py", "a\n", "b\n")])


def test_empty_search_on_an_existing_file_is_an_error_not_an_overwrite() -> None:
    with pytest.raises(
        EditError,
        match=re.escape("empty SEARCH section, which creates a new file, but calc.py already exists"),
    ):
        apply_search_replace({"calc.py": CALC}, [SearchReplace("calc.py", "", "x = 1\n")])


def test_empty_search_fills_an_existing_empty_file() -> None:
    assert apply_search_replace({"__init__.py": ""}, [SearchReplace("__init__.py", "", "x = 1\n")]) == {
        "__init__.py": "x = 1\n"
    }


def test_applying_validates_paths_and_result_size() -> None:
    with pytest.raises(EditError, match=r"SEARCH block 1: file path '\.git/config' is inside \.git"):
        apply_search_replace({}, [SearchReplace(".git/config", "", "x")])
    with pytest.raises(EditError, match="over the 1048576-byte limit"):
        apply_search_replace({}, [SearchReplace("big.txt", "", "x" * (MAX_EDIT_BYTES + 1))])


# ---------------------------------------------------------------------------------------------------
# Unified diffs


def make_diff(path: str, before: str, after: str) -> str:
    lines = difflib.unified_diff(
        before.splitlines(keepends=True), after.splitlines(keepends=True), f"a/{path}", f"b/{path}"
    )
    return "".join(
        line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines
    )


GIT_DIFF = dedent(
    """
    I fixed `add` and made `mul` commutative-safe:

    ```diff
    diff --git a/calc.py b/calc.py
    index 3b18e51..a9c2d4f 100644
    --- a/calc.py
    +++ b/calc.py
    @@ -1,6 +1,6 @@
     def add(a, b):
    -    return a - b
    +    return a + b


     def mul(a, b):
    ```

    This should make the tests pass.
    """
)


def test_git_diff_inside_chatter_and_fence_is_parsed_with_prefixes_stripped() -> None:
    [patch] = parse_unified_diff(GIT_DIFF)
    assert (patch.path, patch.old_path, patch.is_delete, patch.is_binary) == (
        "calc.py",
        "calc.py",
        False,
        False,
    )
    assert apply_unified_diff({"calc.py": CALC}, [patch]) == {"calc.py": CALC.replace("a - b", "a + b")}


@pytest.mark.parametrize(
    ("before", "after"),
    [
        (CALC, CALC.replace("a - b", "a + b").replace("a * b", "b * a")),
        ("a\nb\nc", "a\nB\nc"),
        ("a\nb\n", "a\nb\nc"),
        ("".join(f"line {i}\n" for i in range(40)), "".join(f"line {i}\n" for i in range(40) if i % 9)),
    ],
)
def test_diffs_from_a_real_diff_tool_reproduce_the_new_text(before: str, after: str) -> None:
    patches = parse_unified_diff(make_diff("f.txt", before, after))
    assert apply_unified_diff({"f.txt": before}, patches) == {"f.txt": after}


def test_new_file_from_dev_null() -> None:
    diff = "--- /dev/null\n+++ b/pkg/new.py\n@@ -0,0 +1,2 @@\n+x = 1\n+y = 2\n"
    [patch] = parse_unified_diff(diff)
    assert (patch.path, patch.old_path, patch.is_delete) == ("pkg/new.py", None, False)
    assert apply_unified_diff({}, [patch]) == {"pkg/new.py": "x = 1\ny = 2\n"}


def test_new_file_that_already_exists_is_an_error() -> None:
    diff = "--- /dev/null\n+++ b/calc.py\n@@ -0,0 +1 @@\n+x = 1\n"
    with pytest.raises(EditError, match=re.escape("creates calc.py (from /dev/null), but it already exists")):
        apply_unified_diff({"calc.py": CALC}, parse_unified_diff(diff))


def test_deleted_file() -> None:
    diff = "diff --git a/old.py b/old.py\ndeleted file mode 100644\n--- a/old.py\n+++ /dev/null\n@@ -1 +0,0 @@\n-x = 1\n"
    [patch] = parse_unified_diff(diff)
    assert (patch.path, patch.old_path, patch.is_delete) == ("old.py", "old.py", True)
    assert apply_unified_diff({"old.py": "x = 1\n"}, [patch]) == {"old.py": None}
    with pytest.raises(EditError, match=re.escape("deletes old.py does not exist")):
        apply_unified_diff({}, [patch])


def test_rename_with_changes() -> None:
    diff = dedent(
        """
        diff --git a/old.py b/new.py
        similarity index 90%
        rename from old.py
        rename to new.py
        --- a/old.py
        +++ b/new.py
        @@ -1,2 +1,2 @@
         x = 1
        -y = 2
        +y = 3
        """
    )
    [patch] = parse_unified_diff(diff)
    assert (patch.path, patch.old_path) == ("new.py", "old.py")
    assert apply_unified_diff({"old.py": "x = 1\ny = 2\n"}, [patch]) == {
        "old.py": None,
        "new.py": "x = 1\ny = 3\n",
    }


def test_pure_rename_moves_the_contents() -> None:
    diff = "diff --git a/old.py b/new.py\nsimilarity index 100%\nrename from old.py\nrename to new.py\n"
    assert apply_unified_diff({"old.py": "x = 1\n"}, parse_unified_diff(diff)) == {
        "old.py": None,
        "new.py": "x = 1\n",
    }


def test_diffs_for_several_files_in_separate_fences_with_chatter_between() -> None:
    reply = dedent(
        """
        First `a.py`:
        ```diff
        --- a/a.py
        +++ b/a.py
        @@ -1 +1 @@
        -a = 1
        +a = 2
        ```
        Then `b.py`:
        ```diff
        --- a/b.py
        +++ b/b.py
        @@ -1 +1 @@
        -b = 1
        +b = 2
        ```
        """
    )
    files = {"a.py": "a = 1\n", "b.py": "b = 1\n"}
    assert apply_unified_diff(files, parse_unified_diff(reply)) == {"a.py": "a = 2\n", "b.py": "b = 2\n"}


def test_llm_diff_with_wrong_hunk_counts_and_dropped_context_spaces_is_recounted() -> None:
    diff = dedent(
        """
        --- calc.py
        +++ calc.py
        @@ -1,3 +1,9 @@
         def add(a, b):
        -    return a - b
        +    return a + b

        @@ -5,1 +5,1 @@
         def mul(a, b):
        -    return a * b
        +    return b * a

        That's all!
        """
    )
    patches = parse_unified_diff(diff)
    assert [len(hunk.lines) for hunk in patches[0].hunks] == [3, 3]
    assert apply_unified_diff({"calc.py": CALC}, patches) == {
        "calc.py": CALC.replace("a - b", "a + b").replace("a * b", "b * a")
    }


def test_bare_hunk_headers_without_line_numbers_are_placed_by_content() -> None:
    diff = "--- a/calc.py\n+++ b/calc.py\n@@ ... @@\n def mul(a, b):\n-    return a * b\n+    return b * a\n"
    [patch] = parse_unified_diff(diff)
    assert patch.hunks[0].old_start is None
    assert apply_unified_diff({"calc.py": CALC}, [patch]) == {"calc.py": CALC.replace("a * b", "b * a")}


def test_wrong_line_numbers_do_not_matter_when_the_context_is_unique() -> None:
    diff = "--- a/calc.py\n+++ b/calc.py\n@@ -40,2 +40,2 @@\n def add(a, b):\n-    return a - b\n+    return a + b\n"
    assert apply_unified_diff({"calc.py": CALC}, parse_unified_diff(diff)) == {
        "calc.py": CALC.replace("a - b", "a + b")
    }


def test_ambiguous_context_is_an_error_unless_the_line_number_points_at_one_match() -> None:
    text = "x = 0\nx += 1\nprint(x)\nx += 1\nprint(x)\n"
    wrong = "--- a/m.py\n+++ b/m.py\n@@ -7,2 +7,2 @@\n-x += 1\n+x += 2\n print(x)\n"
    with pytest.raises(EditError) as info:
        apply_unified_diff({"m.py": text}, parse_unified_diff(wrong))
    assert str(info.value).startswith(
        "the hunk for m.py matched 2 places (lines 2, 4); add more unchanged context lines"
    )
    exact = wrong.replace("@@ -7,2 +7,2 @@", "@@ -4,2 +4,2 @@")
    assert apply_unified_diff({"m.py": text}, parse_unified_diff(exact)) == {
        "m.py": "x = 0\nx += 1\nprint(x)\nx += 2\nprint(x)\n"
    }


def test_hunks_match_whitespace_tolerantly_and_keep_the_files_own_context_lines() -> None:
    files = {"m.py": "class A:\n    def f(self):  \n        return 1\n"}
    diff = "--- a/m.py\n+++ b/m.py\n@@ -2,2 +2,2 @@\n def f(self):\n-    return 1\n+    return 2\n"
    assert apply_unified_diff(files, parse_unified_diff(diff)) == {
        "m.py": "class A:\n    def f(self):  \n        return 2\n"
    }


def test_failing_hunks_are_all_reported_and_nothing_is_applied() -> None:
    diff = dedent(
        """
        --- a/calc.py
        +++ b/calc.py
        @@ -1,2 +1,2 @@
         def add(a, b):
        -    return a - b
        +    return a + b
        @@ -5,2 +5,2 @@
         def mul(x, y):
        -    return x * y
        +    return y * x
        """
    )
    with pytest.raises(EditError) as info:
        apply_unified_diff({"calc.py": CALC}, parse_unified_diff(diff))
    message = str(info.value)
    assert message.startswith("hunk 2 of 2 for calc.py (starting 'def mul(x, y):') matched 0 times")
    assert "Did you mean these lines (5-6)?\n```\ndef mul(a, b):\n    return a * b\n```" in message
    assert "Nothing from this diff was applied" in message
    assert info.value.partial is None


def test_hunk_without_context_or_line_numbers_is_an_error() -> None:
    diff = "--- a/calc.py\n+++ b/calc.py\n@@\n+import math\n"
    with pytest.raises(EditError, match="has no context or '-' lines, so nothing says where it goes"):
        apply_unified_diff({"calc.py": CALC}, parse_unified_diff(diff))


def test_pure_insertion_uses_the_line_number() -> None:
    diff = "--- a/m.py\n+++ b/m.py\n@@ -1,0 +2,1 @@\n+b = 2\n"
    assert apply_unified_diff({"m.py": "a = 1\nc = 3\n"}, parse_unified_diff(diff)) == {
        "m.py": "a = 1\nb = 2\nc = 3\n"
    }


def test_no_newline_at_end_of_file_markers_are_honoured() -> None:
    diff = "--- a/m.txt\n+++ b/m.txt\n@@ -1 +1 @@\n-a\n\\ No newline at end of file\n+b\n\\ No newline at end of file\n"
    assert apply_unified_diff({"m.txt": "a"}, parse_unified_diff(diff)) == {"m.txt": "b"}


def test_crlf_file_keeps_its_line_endings_under_a_diff() -> None:
    diff = "--- a/w.txt\n+++ b/w.txt\n@@ -1,2 +1,2 @@\n a\n-b\n+c\n"
    assert apply_unified_diff({"w.txt": "a\r\nb\r\n"}, parse_unified_diff(diff)) == {"w.txt": "a\r\nc\r\n"}


@pytest.mark.parametrize(
    "diff",
    [
        "diff --git a/logo.png b/logo.png\nindex 1234567..89abcde 100644\nBinary files a/logo.png and b/logo.png differ\n",
        "diff --git a/logo.png b/logo.png\nindex 1234567..89abcde 100644\nGIT binary patch\nliteral 12\nTcmZ?wbhEHbRA5kG00001\n",
    ],
)
def test_binary_changes_are_rejected(diff: str) -> None:
    with pytest.raises(EditError, match=re.escape("logo.png: binary changes are not supported")):
        parse_unified_diff(diff)


def test_deleting_a_binary_file_needs_no_contents() -> None:
    diff = "diff --git a/logo.png b/logo.png\ndeleted file mode 100644\nBinary files a/logo.png and /dev/null differ\n"
    [patch] = parse_unified_diff(diff)
    assert (patch.is_delete, patch.is_binary) == (True, True)
    assert apply_unified_diff({}, [patch]) == {"logo.png": None}


@pytest.mark.parametrize("target", ["b/../escape.py", "b/.git/hooks/pre-commit", "/etc/passwd"])
def test_diff_paths_are_validated(target: str) -> None:
    with pytest.raises(EditError, match=r"outside the project|inside \.git|absolute"):
        parse_unified_diff(f"--- /dev/null\n+++ {target}\n@@ -0,0 +1 @@\n+x\n")


def test_text_without_a_diff_parses_to_nothing() -> None:
    assert parse_unified_diff("No changes needed.\n- a bullet\n") == []


def test_hunk_before_any_file_header_is_an_error() -> None:
    with pytest.raises(EditError, match="start each file with '--- a/path' and '\\+\\+\\+ b/path'"):
        parse_unified_diff("@@ -1 +1 @@\n-a\n+b\n")


def test_file_patch_is_plain_data() -> None:
    [patch] = parse_unified_diff("--- /dev/null\n+++ b/a.txt\n@@ -0,0 +1 @@\n+hi\n")
    assert patch == FilePatch("a.txt", None, patch.hunks, is_delete=False, is_binary=False)


# ---------------------------------------------------------------------------------------------------
# Function replacement

MODULE = dedent(
    '''
    import functools


    def helper(x):
        return x


    class Calc:
        """A calculator."""

        @functools.cache
        @staticmethod
        def add(a, b):
            return a - b

        async def fetch(self):
            return None


    class Other:
        def fetch(self):
            return 1
    '''
)


def test_replaces_a_decorated_method_reindenting_the_new_source() -> None:
    new = "@staticmethod\ndef add(a, b):\n    return a + b\n"
    result = apply_function_replacement({"m.py": MODULE}, FunctionReplacement("m.py", "Calc.add", new))
    assert result == {
        "m.py": MODULE.replace(
            "    @functools.cache\n    @staticmethod\n    def add(a, b):\n        return a - b\n",
            "    @staticmethod\n    def add(a, b):\n        return a + b\n",
        )
    }


def test_replaces_a_module_level_function_given_with_extra_indentation() -> None:
    new = "\n        def helper(x):\n            return x * 2\n\n"
    result = apply_function_replacement({"m.py": MODULE}, FunctionReplacement("m.py", "helper", new))
    assert result["m.py"] == MODULE.replace("    return x\n", "    return x * 2\n", 1)


def test_a_bare_method_name_is_found_when_only_one_method_has_it() -> None:
    new = "def add(a, b):\n    return a + b\n"
    result = apply_function_replacement({"m.py": MODULE}, FunctionReplacement("m.py", "add", new))
    assert "    def add(a, b):\n        return a + b\n\n    async def fetch" in result["m.py"]


def test_an_ambiguous_bare_name_lists_the_candidates() -> None:
    with pytest.raises(
        EditError, match=r"`fetch` matches 2 definitions in m.py: Calc.fetch \(line 16\), Other.fetch"
    ):
        apply_function_replacement(
            {"m.py": MODULE}, FunctionReplacement("m.py", "fetch", "def fetch(self):\n    return 2\n")
        )


def test_nested_function_by_dotted_name_and_source_without_final_newline() -> None:
    files = {"n.py": "def outer():\n    def inner():\n        return 1\n\n    return inner\n"}
    edit = FunctionReplacement("n.py", "outer.inner", "def inner():\n    return 2")
    assert apply_function_replacement(files, edit) == {
        "n.py": "def outer():\n    def inner():\n        return 2\n\n    return inner\n"
    }


def test_async_method_replacement() -> None:
    new = "async def fetch(self):\n    return 42\n"
    result = apply_function_replacement({"m.py": MODULE}, FunctionReplacement("m.py", "Calc.fetch", new))
    assert "    async def fetch(self):\n        return 42\n" in result["m.py"]


def test_unknown_function_suggests_close_names() -> None:
    with pytest.raises(EditError, match=r"no function `Calc.ad` in m.py; did you mean Calc.add"):
        apply_function_replacement(
            {"m.py": MODULE}, FunctionReplacement("m.py", "Calc.ad", "def ad():\n    pass\n")
        )


@pytest.mark.parametrize(
    ("source", "reason"),
    [
        ("def add(a, b):\nreturn a + b\n", "does not parse"),
        ("def add(a, b):\n    return a + b\n\nx = 1\n", "exactly one function definition"),
    ],
)
def test_new_source_must_be_a_single_valid_def(source: str, reason: str) -> None:
    with pytest.raises(EditError, match=reason):
        apply_function_replacement({"m.py": MODULE}, FunctionReplacement("m.py", "Calc.add", source))


def test_function_replacement_in_unparsable_or_missing_file_is_an_error() -> None:
    edit = FunctionReplacement("m.py", "f", "def f():\n    pass\n")
    with pytest.raises(EditError, match=re.escape("m.py does not parse as Python")):
        apply_function_replacement({"m.py": "def f(:\n"}, edit)
    with pytest.raises(EditError, match=re.escape("m.py does not exist")):
        apply_function_replacement({}, edit)


def test_function_blocks_are_whole_defs_placed_in_the_first_file_that_defines_them() -> None:
    files = {"a.py": "def other():\n    pass\n", "b.py": MODULE, "c.py": "def add(a, b):\n    return 0\n"}
    reply = (
        "```python\ndef add(self, a, b):\n    return a + b\n```\n"  # Calc.add in b.py, found by its bare name
        "```python\nimport os\n\ndef helper():\n    pass\n```\n"  # two statements: not a whole function
        "```\ndef nowhere():\n    pass\n```\n"  # defined in no file
        "```python\ndef broken(:\n```\n"
    )
    assert parse_function_blocks(reply, files) == [
        FunctionReplacement("b.py", "add", "def add(self, a, b):\n    return a + b\n")
    ]


def test_a_function_name_that_is_ambiguous_in_the_first_file_is_an_error_not_another_files() -> None:
    files = {
        "a.py": "class A:\n    def run(self):\n        pass\n\n\nclass B:\n    def run(self):\n        pass\n",
        "b.py": "def run():\n    pass\n",
    }
    with pytest.raises(EditError, match=r"matches 2 definitions in a\.py"):
        parse_function_blocks("```python\ndef run(self):\n    return 1\n```\n", files)


def test_the_unified_diff_matches_only_the_changed_region_and_applies():
    """`unified_diff` trims the shared start and end before matching: its hunks still apply, and a
    one-token edit in a long module gives difflib's own diff."""
    import difflib
    import random

    from ralph.domain.candidate import _trimmed_diff

    big = [f"line {i}\n" for i in range(3000)]
    edited = [*big[:1500], "changed\n", *big[1501:]]
    assert list(_trimmed_diff(big, edited, "a", "b")) == list(difflib.unified_diff(big, edited, "a", "b"))
    rng = random.Random(7)
    for _ in range(2000):
        before = [f"l{rng.randint(0, 4)}\n" for _ in range(rng.randint(0, 25))]
        after = list(before)
        for _ in range(rng.randint(0, 4)):
            at = rng.randint(0, len(after))
            if rng.random() < 0.5:
                after.insert(at, f"x{rng.randint(0, 4)}\n")
            elif after:
                del after[min(at, len(after) - 1)]
        assert _apply(before, list(_trimmed_diff(before, after, "a", "b"))) == after


def _apply(before: list[str], diff: list[str]) -> list[str]:
    out, i = [], 0
    for line in diff[2:]:
        if line.startswith("@@"):
            old = line.split()[1][1:].split(",")
            start = int(old[0]) - (0 if len(old) > 1 and old[1] == "0" else 1)
            out += before[i:start]
            i = start
        elif line[0] == "+":
            out.append(line[1:])
        else:
            assert before[i] == line[1:]
            out += [line[1:]] if line[0] == " " else []
            i += 1
    return out + before[i:]


def test_shared_ends_are_the_lines_both_sides_share_at_the_start_then_the_end():
    """Against the line-by-line reading, on sides that share everything, nothing, or a middle."""

    def read_line_by_line(before: list[str], after: list[str]) -> tuple[int, int]:
        limit, head, tail = min(len(before), len(after)), 0, 0
        while head < limit and before[head] == after[head]:
            head += 1
        while tail < limit - head and before[-1 - tail] == after[-1 - tail]:
            tail += 1
        return head, tail

    rng = random.Random(3)
    for _ in range(2000):
        before = [rng.choice("abc") for _ in range(rng.randrange(8))]
        after = list(before)
        for _edit in range(rng.randrange(3)):
            at = rng.randrange(len(after) + 1)
            after[at : at + rng.randrange(3)] = [rng.choice("abcd") for _ in range(rng.randrange(3))]
        assert shared_ends(before, after) == read_line_by_line(before, after), (before, after)
