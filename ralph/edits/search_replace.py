"""SEARCH/REPLACE blocks: the prompt text that asks a model for them, and their pure parser and
applier. A block names its file on the line before it, then the exact lines to find and the lines to
put in their place; an empty SEARCH creates a file. Matching degrades from exact to
whitespace-tolerant to elision-aware ("..." lines), but a block only applies where it matches once."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ralph.edits.errors import EditError
from ralph.edits.matching import (
    NoUniqueMatch,
    did_you_mean,
    from_lf,
    join_lines,
    line_list,
    locate,
    matches,
    plural,
    split_lines,
    to_lf,
)
from ralph.edits.paths import check_text_size, missing_file, validate_edit_path

BLOCK_FORMAT = "path/to/file.py\n```python\n<<<<<<< SEARCH\nexact existing lines\n=======\nnew lines\n>>>>>>> REPLACE\n```"

# The chat drafter's system prompt: what a model is told to answer with.
SYSTEM_PROMPT = """\
You are an expert software engineer. You fix the bug that makes the failing checks fail, with the \
smallest correct change to the code under test.

Answer with one line that says what the fix is, then one SEARCH/REPLACE block per change:

path/to/file.py
```python
<<<<<<< SEARCH
the exact lines to change, copied from the current file
=======
the lines to put in their place
>>>>>>> REPLACE
```

Rules:
- Put the file's path, relative to the project root, alone on the line before each block's fence.
- SEARCH must be a copy of lines of the current file, without the line numbers shown in the prompt, \
and long enough to match exactly one place.
- Change only what the fix needs; do not reformat, rename or reorder other code.
- Never edit test files: fix the code they test.
- To create a new file, leave SEARCH empty.
"""

# Appended to the chat drafter's prompt once attempts were rejected.
REPAIR_PROMPT = """\
# Build on the latest attempt
The last attempt listed above is the most recent one; its change has been undone, so the code shown \
above is the current code. Repair that attempt rather than starting over: keep what it got right, fix \
what its rejection says, and do not send it again unchanged. Write SEARCH sections against the current \
code."""

# The diffusion drafter's answer format, after the rendered context (short: its context is small).
CHAT_INSTRUCTION = """\
# Answer format
Fix the code so that the failing checks pass. Answer only with SEARCH/REPLACE blocks, one per change:
the file path on its own line, then

<<<<<<< SEARCH
exact existing lines
=======
new lines
>>>>>>> REPLACE"""


@dataclass(frozen=True)
class SearchReplace:
    """Replace the lines `search` by `replace` in `path`; an empty `search` creates the file."""

    path: str
    search: str
    replace: str


_HEAD_RE = re.compile(r"^<{5,9} ?SEARCH\s*$", re.IGNORECASE)
_DIVIDER_RE = re.compile(r"^={5,9}\s*$")
_UPDATE_RE = re.compile(r"^>{5,9} ?REPLACE\s*$", re.IGNORECASE)
_FENCE_RE = re.compile(r"^\s*(?:`{3,}|~{3,})\S*\s*$")
_PATH_RE = re.compile(r"[\w.\-+@~,=/\\]+")
_PATH_DECORATION_RE = re.compile(r"^(?:#+\s+|[-*]\s+|\d+\.\s+)?(?:(?:file(?:name)?|path)\s*:\s*)?", re.I)
_BARE_FILENAMES = frozenset(
    {"Makefile", "Dockerfile", "Gemfile", "Rakefile", "Procfile", "Jenkinsfile", "LICENSE"}
)
_ELISION_RE = re.compile(r"^(?:\.\.\.|…)(?:\s.*)?$")


def _as_path(line: str) -> str | None:
    """The path a line names when it looks like a bare file name: `calc.py`, **src/a.py**:, # a.py."""
    name = _PATH_DECORATION_RE.sub("", line.strip(), count=1)
    name = name.strip("*`'\"").rstrip(":").strip("*`'\"")
    if not _PATH_RE.fullmatch(name) or name.endswith("."):
        return None
    return name if "/" in name or "." in name or name in _BARE_FILENAMES else None


def _block_text(lines: list[str]) -> str:
    return "".join(line + "\n" for line in lines)


def parse_search_replace(text: str) -> list[SearchReplace]:
    """The SEARCH/REPLACE blocks in a model's reply, in order.

    Each block's path is the last non-blank, non-fence line before its `<<<<<<< SEARCH` marker; a block
    that directly follows another (only blank and fence lines between) reuses its path. Chatter between
    blocks is ignored. Raises EditError for blocks without a path, a `=======` or a `>>>>>>> REPLACE`.
    """
    check_text_size(text)
    lines = text.replace("\r\n", "\n").split("\n")
    edits: list[SearchReplace] = []
    previous_end = -1
    i = 0
    while i < len(lines):
        if _UPDATE_RE.match(lines[i]):
            raise EditError(
                f"found {lines[i].strip()!r} without a <<<<<<< SEARCH line before it. "
                f"Write each block as:\n{BLOCK_FORMAT}"
            )
        if not _HEAD_RE.match(lines[i]):
            i += 1
            continue
        number = len(edits) + 1
        path = _path_before(lines, i, previous_end, edits)
        if path is None:
            raise EditError(
                f"SEARCH block {number} has no file path: put the path alone on the line before the "
                f"opening fence (or before <<<<<<< SEARCH). Write each block as:\n{BLOCK_FORMAT}"
            )
        try:
            path = validate_edit_path(path)
        except EditError as err:
            raise EditError(f"SEARCH block {number}: {err}") from None
        where = f"SEARCH block {number} for {path}"
        divider = _next_marker(lines, i + 1, _DIVIDER_RE, (_HEAD_RE, _UPDATE_RE))
        if divider is None:
            raise EditError(
                f"{where} has no ======= line ending its SEARCH section. Write each block as:\n{BLOCK_FORMAT}"
            )
        end = _next_marker(lines, divider + 1, _UPDATE_RE, (_HEAD_RE, _DIVIDER_RE))
        if end is None:
            raise EditError(
                f"{where} does not end with a >>>>>>> REPLACE line (or has a second =======). "
                f"Write each block as:\n{BLOCK_FORMAT}"
            )
        edits.append(
            SearchReplace(path, _block_text(lines[i + 1 : divider]), _block_text(lines[divider + 1 : end]))
        )
        previous_end = end
        i = end + 1
    return edits


def _path_before(lines: list[str], head: int, previous_end: int, edits: list[SearchReplace]) -> str | None:
    k = head - 1
    while k > previous_end and (not lines[k].strip() or _FENCE_RE.match(lines[k])):
        k -= 1
    if k < 0:
        return None
    if k == previous_end:
        return edits[-1].path
    return _as_path(lines[k])


def _next_marker(
    lines: list[str], start: int, wanted: re.Pattern[str], bad: tuple[re.Pattern[str], ...]
) -> int | None:
    for k in range(start, len(lines)):
        if wanted.match(lines[k]):
            return k
        if any(pattern.match(lines[k]) for pattern in bad):
            return None
    return None


class _ElisionError(Exception):
    """An elided SEARCH block that cannot be applied; the message continues "SEARCH block N for X"."""


def apply_search_replace(files: Mapping[str, str], edits: Sequence[SearchReplace]) -> dict[str, str]:
    """Apply the blocks in order and return the new contents of every file they touched.

    `files` maps normalized POSIX paths to current contents. A SEARCH text must match exactly one place:
    exactly, else ignoring trailing whitespace and a uniform indentation difference (the replacement is
    re-indented to match), else with its "..." lines read as elided code. An empty SEARCH creates a file
    that does not exist yet. Blocks that fail are reported together in one EditError whose `partial`
    holds the result of the blocks that applied.
    """
    state: dict[str, str] = {}  # LF contents of the files seen so far
    crlf: dict[str, bool] = {}
    touched: dict[str, None] = {}  # ordered set
    failures: list[str] = []
    for number, edit in enumerate(edits, 1):
        try:
            path = validate_edit_path(edit.path)
        except EditError as err:
            raise EditError(f"SEARCH block {number}: {err}") from None
        where = f"SEARCH block {number} for {path}"
        search = edit.search.replace("\r\n", "\n")
        replace = edit.replace.replace("\r\n", "\n")
        if path not in state and path in files:
            state[path], crlf[path] = to_lf(files[path])
        current = state.get(path)
        if not search.strip():
            # An existing empty file is as good as a missing one; anything else would be overwritten.
            if current is not None and current.strip():
                failures.append(
                    f"{where} has an empty SEARCH section, which creates a new file, but {path} already "
                    "exists. To change it, put the exact lines to replace in the SEARCH section."
                )
                continue
            state[path] = replace
            crlf.setdefault(path, False)
            touched[path] = None
            continue
        if current is None:
            failures.append(
                f"{where}: {missing_file(path, files)}. To create a new file, leave the SEARCH section empty."
            )
            continue
        lines = split_lines(current)
        try:
            state[path] = join_lines(_replace_block(lines, split_lines(search), split_lines(replace)))
        except NoUniqueMatch as err:
            failures.append(
                _describe_block_failure(where, path, lines, split_lines(search), split_lines(replace), err)
            )
            continue
        except _ElisionError as err:
            failures.append(f"{where} {err}")
            continue
        touched[path] = None
    result = {path: from_lf(state[path], crlf[path]) for path in touched}
    for path, content in result.items():
        validate_edit_path(path, content=content)
    if failures:
        applied = len(edits) - len(failures)
        raise EditError(_failures_message(failures, applied), partial=result if applied else None)
    return result


def _failures_message(failures: list[str], applied: int) -> str:
    """The failed blocks' errors, and a note that the `applied` others need not be sent again."""
    message = "\n\n".join(failures)
    if applied:
        them = "it" if applied == 1 else "them"
        message += (
            f"\n\n{plural(applied, 'other block')} applied fine; don't resend {them}, only fixed "
            "versions of the failed blocks."
        )
    return message


def _replace_block(lines: list[str], search: list[str], replace: list[str]) -> list[str]:
    try:
        start, indent = locate(lines, search)
    except NoUniqueMatch as err:
        if err.starts or not any(_is_elision(line) for line in search):
            raise
        return _replace_elided(lines, search, replace)
    return lines[:start] + [indent.fix(line) for line in replace] + lines[start + len(search) :]


def _is_elision(line: str) -> bool:
    """Whether a line stands for omitted code: "...", "# ... existing code ...", "// ...", "/* ... */"."""
    text = line.strip()
    for opener, closer in (("#", ""), ("//", ""), ("/*", "*/"), ("<!--", "-->"), ("--", ""), (";", "")):
        if text.startswith(opener) and text.endswith(closer):
            text = text[len(opener) : len(text) - len(closer)].strip()
            break
    return bool(_ELISION_RE.match(text))


def _pieces(lines: list[str]) -> list[list[str]]:
    pieces: list[list[str]] = [[]]
    for line in lines:
        if _is_elision(line):
            pieces.append([])
        else:
            pieces[-1].append(line)
    return pieces


def _replace_elided(lines: list[str], search: list[str], replace: list[str]) -> list[str]:
    """Apply each stretch between "..." lines separately, in order, each matching one place."""
    search_pieces, replace_pieces = _pieces(search), _pieces(replace)
    if len(search_pieces) != len(replace_pieces):
        raise _ElisionError(
            "matched 0 times. Its SEARCH section has '...' lines for elided code, but REPLACE has a "
            "different number of them: put the same '...' lines at the same places in both sections, "
            "or write the code out in full."
        )
    out = list(lines)
    cursor = 0
    for number, (find, put) in enumerate(zip(search_pieces, replace_pieces, strict=True), 1):
        if not any(line.strip() for line in find):
            if any(line.strip() for line in put):
                raise _ElisionError(
                    f"adds lines next to a '...' line (part {number}) without SEARCH lines around them to "
                    "say where they go; put real lines from the file next to each '...'."
                )
            continue
        try:
            start, indent = locate(out, find, lo=cursor)
        except NoUniqueMatch as err:
            count = len(err.starts)
            advice = "include more lines in it" if count else "copy those lines exactly"
            raise _ElisionError(
                f"matched 0 times as a whole; reading its '...' lines as elided code, the part starting "
                f"{find[0].rstrip()!r} matched {plural(count, 'time')} (it must match once): {advice}."
            ) from None
        new = [indent.fix(line) for line in put]
        out[start : start + len(find)] = new
        cursor = start + len(new)
    return out


def _describe_block_failure(
    where: str, path: str, lines: list[str], search: list[str], replace: list[str], err: NoUniqueMatch
) -> str:
    if err.starts:
        return (
            f"{where} matched {len(err.starts)} times (at lines {line_list(err.starts)}); include more "
            "surrounding lines in SEARCH to make it unique."
        )
    message = (
        f"{where} matched 0 times; SEARCH must be a copy of existing lines (indentation and trailing "
        f"whitespace may differ).{did_you_mean(lines, search)}"
    )
    if any(line.strip() for line in replace) and matches(lines, replace, 0, loose=True):
        message += (
            f"\nThe REPLACE lines are already in {path}; if this change is already made, drop this block."
        )
    return message
