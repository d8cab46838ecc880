"""The replay drafter turns recorded edits, in any of the edit formats, into candidates."""

from __future__ import annotations

import json

from ralph.domain.protocols import DraftContext
from ralph.drafters.replay import ReplayDrafter


def context(project) -> DraftContext:
    return DraftContext("", project, 0, (), (), (), ())


def test_each_record_format_becomes_a_candidate_in_order(tmp_path):
    (tmp_path / "m.py").write_text("def f(x):\n    return x - 1\n")
    records = [
        {
            "description": "sr",
            "edits": [{"path": "m.py", "search": "    return x - 1\n", "replace": "    return x + 1\n"}],
        },
        {
            "search_replace": "m.py\n<<<<<<< SEARCH\n    return x - 1\n=======\n    return x + 2\n>>>>>>> REPLACE\n"
        },
        {
            "diff": "--- a/m.py\n+++ b/m.py\n@@ -1,2 +1,2 @@\n def f(x):\n-    return x - 1\n+    return x * 1\n"
        },
        {"files": {"new.py": "N = 1\n"}},
    ]
    replay = tmp_path / "r.jsonl"
    replay.write_text("".join(json.dumps(r) + "\n" for r in records))
    drafter = ReplayDrafter(replay)
    first = drafter.draft(context(tmp_path), 3)
    assert [c.changes[0].after for c in first] == [
        "def f(x):\n    return x + 1\n",
        "def f(x):\n    return x + 2\n",
        "def f(x):\n    return x * 1\n",
    ]
    assert first[0].description == "sr"
    (last,) = drafter.draft(context(tmp_path), 3)
    assert last.changes[0].before is None and last.changes[0].path == "new.py"
    assert drafter.draft(context(tmp_path), 3) == []


def test_an_edit_that_does_not_apply_is_a_candidate_with_an_error_for_the_model(tmp_path):
    (tmp_path / "m.py").write_text("x = 1\n")
    replay = tmp_path / "r.jsonl"
    replay.write_text(json.dumps({"edits": [{"path": "m.py", "search": "y = 2", "replace": "y = 3"}]}) + "\n")
    (candidate,) = ReplayDrafter(replay).draft(context(tmp_path), 1)
    assert candidate.changes == ()
    assert candidate.error and "m.py" in candidate.error
