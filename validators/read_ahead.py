"""What verification reads of the accepted state's source files, learnt before a candidate edits them.

Every candidate's policy check and test selection read facts of the file it edits as the accepted
state has it (the rules and constructs the file has anywhere, its outline): computed once per text
and kept, but on the first candidate of each file they were most of its host-side time (pyasn1's
mutants, one file after another: 5 ms at the median, 45 ms the most). A thread learns them for the
project's source files once the baseline is measured, and for the files of each accepted edit,
while the drafter works; a candidate that comes first just computes what it needs itself.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from pathlib import Path

from ralph.sandboxes.workspace import as_text
from ralph.validators import policy, selection


def start(texts: Callable[[], Iterable[str]]) -> threading.Thread:
    """Learn, in a thread of its own, what verification reads of each text `texts()` gives."""
    thread = threading.Thread(target=_learn, args=(texts,), name="ralph-read-ahead", daemon=True)
    thread.start()
    return thread


def project_texts(project: Path, is_test_file: Callable[[str], bool]) -> Iterable[str]:
    """The project's source files (not its tests), as a candidate's edit sees them, at most as many
    as the facts are kept of."""
    sources = selection.project_sources(project, skip=_NOT_SOURCES, limit=policy.READ_AHEAD)
    for path, text in sources.items():
        if not is_test_file(path) and (seen := as_text(text.encode())) is not None:
            yield seen


# An environment or a build left inside the project (not hidden): no candidate's files.
_NOT_SOURCES = ("venv", "env", "site-packages", "build", "dist", "node_modules")


def _learn(texts: Callable[[], Iterable[str]]) -> None:
    try:
        for text in texts():
            if len(text) <= policy.MAX_READ:  # (a generated table is no candidate's to edit)
                policy.read_ahead(text)
                selection.read_ahead(text)
    except Exception:  # (a cache filled ahead: what fails here is computed when needed, or reported then)
        return
