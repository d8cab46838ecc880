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

Files = Callable[[], Iterable[tuple[str, str]]]


def start(files: Files, compile_ahead: Callable[[str, str], None] | None = None) -> threading.Thread:
    """Learn, in a thread of its own, what verification reads of each (path, text) `files()` gives;
    with `compile_ahead`, have it compile each too (the syntax stage's `learn`)."""
    thread = threading.Thread(
        target=_learn, args=(files, compile_ahead), name="ralph-read-ahead", daemon=True
    )
    thread.start()
    return thread


def project_texts(project: Path, is_test_file: Callable[[str], bool]) -> Iterable[tuple[str, str]]:
    """The project's source files (not its tests), as a candidate's edit sees them, at most as many
    as the facts are kept of."""
    sources = selection.project_sources(project, skip=_NOT_SOURCES, limit=policy.READ_AHEAD)
    for path, text in sources.items():
        if not is_test_file(path) and (seen := as_text(text.encode())) is not None:
            yield path, seen


def read_now(project: Path, is_test_file: Callable[[str], bool]) -> list[tuple[str, str]]:
    """`project_texts`, read now (none where they cannot be: what is learnt ahead is only a cache)."""
    try:
        return list(project_texts(project, is_test_file))
    except Exception:
        return []


# An environment or a build left inside the project (not hidden): no candidate's files.
_NOT_SOURCES = ("venv", "env", "site-packages", "build", "dist", "node_modules")


def _learn(files: Files, compile_ahead: Callable[[str, str], None] | None) -> None:
    try:
        for path, text in files():
            if len(text) <= policy.MAX_READ:  # (a generated table is no candidate's to edit)
                policy.read_ahead(text)
                selection.read_ahead(text)
                if compile_ahead is not None:
                    compile_ahead(path, text)
    except Exception:  # (a cache filled ahead: what fails here is computed when needed, or reported then)
        return
