"""What verification reads of the accepted state's files is learnt before a candidate edits them."""

from __future__ import annotations

from pathlib import Path

from ralph.validators import policy, read_ahead, selection
from tests.conftest import write_files


def test_the_facts_of_the_projects_sources_are_learnt_ahead_and_its_tests_are_not_read(tmp_path: Path):
    source = "import os\n\n\ndef run(cmd):\n    return os.system(cmd)\n"
    write_files(
        tmp_path,
        {
            "pkg/tool.py": source,
            "tests/test_tool.py": "def test_run():\n    pass\n",
            ".hidden/skip.py": "x = 1\n",
        },
    )
    kinds, outlines = policy._kinds.cache_info().currsize, selection._outline.cache_info().currsize
    texts = list(read_ahead.project_texts(tmp_path, lambda path: path.startswith("tests/")))
    assert texts == [source]
    read_ahead.start(lambda: texts).join(timeout=30)
    assert policy._kinds.cache_info().currsize == kinds + 1
    assert selection._outline.cache_info().currsize == outlines + 1
    hits = policy._kinds.cache_info().hits
    policy.code_findings(
        policy.FileChange("pkg/tool.py", source, source.replace("system(cmd)", "system(cmd + ' &')")), False
    )
    assert policy._kinds.cache_info().hits == hits + 1  # (the candidate found them learnt)


def test_a_text_that_fails_to_be_read_ends_the_thread_quietly():
    def texts():
        yield "def f(:\n"  # (does not parse: no facts, no error)
        raise OSError("gone")

    read_ahead.start(texts).join(timeout=30)
