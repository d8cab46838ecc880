"""Parse and apply the edits that drafters propose as text.

Three formats: SEARCH/REPLACE blocks, unified diffs and whole-function replacements. Parsing is a pure
function of the reply text and applying a pure function of the current file contents. Matching degrades
from exact to whitespace-tolerant (and, for SEARCH/REPLACE, elision-aware), but an edit is only ever
applied where it matches exactly one place. Every `EditError` message is written for the model: it
says what went wrong and how to fix the edit.
"""

from __future__ import annotations

import ast
import difflib
import os
import re
import stat
import textwrap
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import unidiff
from unidiff.errors import UnidiffParseError

from ralph.domain.errors import UnsafePath
from ralph.sandboxes.workspace import open_dir, read_text_beneath, safe_parts

MAX_EDIT_BYTES = 1_048_576
_MAX_TEXT_BYTES = 4 * MAX_EDIT_BYTES

_BLOCK_FORMAT = "path/to/file.py\n```python\n<<<<<<< SEARCH\nexact existing lines\n=======\nnew lines\n>>>>>>> REPLACE\n```"


class EditError(ValueError):
    """An edit that cannot be applied; str(e) is written for the model and says how to fix it.

    When only some SEARCH/REPLACE blocks failed, `partial` holds the new contents produced by the ones
    that applied, so a caller can keep them (the message tells the model not to resend them).
    """

    def __init__(self, message: str, *, partial: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.partial: dict[str, str] | None = dict(partial) if partial is not None else None


@dataclass(frozen=True)
class SearchReplace:
    """Replace the lines `search` by `replace` in `path`; an empty `search` creates the file."""

    path: str
    search: str
    replace: str


_Tag = Literal[" ", "-", "+"]
_TAGS: dict[str, _Tag] = {" ": " ", "-": "-", "+": "+"}


@dataclass(frozen=True)
class Hunk:
    """One `@@` hunk: (tag, line) pairs, tag in " -+"; a line lacks its newline at end of file."""

    old_start: int | None  # line number from the @@ header, only a hint; None for a bare "@@"
    lines: tuple[tuple[_Tag, str], ...]


@dataclass(frozen=True)
class FilePatch:
    """The changes a unified diff makes to one file."""

    path: str  # target path (new path for renames), POSIX relative; the deleted path for deletions
    old_path: str | None  # None for a new file
    hunks: tuple[Hunk, ...]
    is_delete: bool
    is_binary: bool  # only ever true for deletions: other binary changes are rejected when parsing


@dataclass(frozen=True)
class FunctionReplacement:
    """Replace the whole definition of function `name` ("func" or "Class.method") in `path`."""

    path: str
    name: str
    source: str  # the full new def, decorators allowed, any indentation


# ---------------------------------------------------------------------------------------------------
# Paths


_DRIVE_RE = re.compile(r"^[A-Za-z]:")


def read_for_edit(project: Path, path: str) -> str | None:
    """The text of a project file an edit touches (None: no such file), read through no symlink and
    never outside the project; EditError, written for the model, for a file an edit may not use."""
    rel = validate_edit_path(path)
    try:
        parts = safe_parts(rel)
        with open_dir(project, parts[:-1]) as dir_fd:
            info = os.stat(parts[-1], dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    except (OSError, UnsafePath):
        info = None
    if info is None or stat.S_ISLNK(info.st_mode):
        raise EditError(f"{path} is a symbolic link or lies outside the project; edit a regular file in it")
    if stat.S_ISDIR(info.st_mode):
        raise EditError(f"{path} is a directory; give the path of a file")
    # As the workspace reads it (universal newlines), so FileChange.before matches what it compares.
    text = read_text_beneath(project, rel)
    if text is None:
        raise EditError(f"{path} is not UTF-8 text; only text files can be edited")
    return text


def validate_edit_path(path: str, *, max_bytes: int | None = None, content: str | None = None) -> str:
    """Return `path` as a normalized POSIX path relative to the project, or raise EditError.

    Rejects empty paths, control characters, absolute paths, paths whose `..` components leave the
    project, and anything inside a `.git` directory. Backslashes count as separators. With `content`,
    also rejects contents over `max_bytes` (default MAX_EDIT_BYTES) once UTF-8 encoded.
    """
    if not path.strip():
        raise EditError("empty file path; give the path of the file relative to the project root")
    if any(ord(char) < 32 for char in path):
        raise EditError(f"file path {path!r} contains a control character (NUL or newline); fix the path")
    posix = path.replace("\\", "/")
    if posix.startswith("/") or _DRIVE_RE.match(posix):
        raise EditError(f"file path {path!r} is absolute; use a path relative to the project root")
    parts: list[str] = []
    for part in posix.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if not parts:
                raise EditError(
                    f"file path {path!r} points outside the project; use a path inside the project root"
                )
            parts.pop()
            continue
        # Case-insensitive file systems (and Windows, which drops trailing dots and spaces) open `.git`
        # for these spellings too.
        if part.rstrip(". ").lower() == ".git":
            raise EditError(f"file path {path!r} is inside .git; edits must not touch git's internals")
        parts.append(part)
    if not parts:
        raise EditError(f"file path {path!r} names the project directory, not a file")
    normalized = "/".join(parts)
    if content is not None:
        limit = MAX_EDIT_BYTES if max_bytes is None else max_bytes
        size = len(content.encode("utf-8", "surrogatepass"))
        if size > limit:
            raise EditError(
                f"{normalized} would be {size} bytes, over the {limit}-byte limit for an edited file; "
                "keep large generated or data files out of edits"
            )
    return normalized


def _check_text_size(text: str) -> None:
    # A UTF-8 encoding is never shorter than the text, so the length test avoids encoding huge inputs.
    if len(text) > _MAX_TEXT_BYTES or len(text.encode("utf-8", "surrogatepass")) > _MAX_TEXT_BYTES:
        raise EditError(
            f"edit text too large (over {_MAX_TEXT_BYTES} bytes); send smaller edits that change only "
            "the lines that need to change"
        )


def _missing_file(path: str, known: Iterable[str]) -> str:
    close = difflib.get_close_matches(path, list(known), n=3)
    hint = f" (did you mean {', '.join(close)}?)" if close else ""
    return f"{path} does not exist{hint}"


# ---------------------------------------------------------------------------------------------------
# Lines and matching


def _split(text: str) -> list[str]:
    """Lines with their "\\n"; unlike str.splitlines, only "\\n" ends a line, as for Python and git."""
    lines = [line + "\n" for line in text.split("\n")]
    lines[-1] = lines[-1][:-1]
    if not lines[-1]:
        lines.pop()
    return lines


def _join(lines: Sequence[str]) -> str:
    """Concatenate lines, adding the newline a line lacks when it no longer ends the file."""
    last = len(lines) - 1
    return "".join(line if i == last or line.endswith("\n") else line + "\n" for i, line in enumerate(lines))


def _to_lf(text: str) -> tuple[str, bool]:
    """The text with "\\n" newlines, and whether it used CRLF throughout (to restore it afterwards)."""
    if "\r\n" in text and text.count("\r\n") == text.count("\n"):
        return text.replace("\r\n", "\n"), True
    return text, False


def _from_lf(text: str, crlf: bool) -> str:
    return text.replace("\n", "\r\n") if crlf else text


@dataclass(frozen=True)
class _Indent:
    """How a whitespace-tolerant match is indented: the file has `add` more, or `remove` less."""

    add: str = ""
    remove: str = ""

    def fix(self, line: str) -> str:
        """Indent a replacement line the way the matched file lines are indented."""
        if not line.strip():
            return line
        if self.add:
            return self.add + line
        if self.remove:
            return line[len(self.remove) :] if line.startswith(self.remove) else line.lstrip(" \t")
        return line


_SAME_INDENT = _Indent()


def _leading(line: str) -> str:
    return line[: len(line) - len(line.lstrip(" \t"))]


def _loose_indent(lines: Sequence[str], start: int, pattern: Sequence[str]) -> _Indent | None:
    """How `pattern` is indented if it matches at `start` up to indentation and trailing whitespace."""
    indent: _Indent | None = None
    for offset, want in enumerate(pattern):
        have, want = lines[start + offset].rstrip(), want.rstrip()
        if not have or not want:
            if have or want:
                return None
            continue
        have_indent, want_indent = _leading(have), _leading(want)
        if have[len(have_indent) :] != want[len(want_indent) :]:
            return None
        if indent is None:
            if have_indent.endswith(want_indent):
                indent = _Indent(add=have_indent[: len(have_indent) - len(want_indent)])
            elif want_indent.endswith(have_indent):
                indent = _Indent(remove=want_indent[: len(want_indent) - len(have_indent)])
            else:
                return None
        if indent.add + want_indent != indent.remove + have_indent:
            return None
    return indent or _SAME_INDENT


def _matches(lines: Sequence[str], pattern: Sequence[str], lo: int, loose: bool) -> list[tuple[int, _Indent]]:
    """Every start index >= lo where `pattern` matches, exactly or (loose) whitespace-tolerantly."""
    starts = range(lo, len(lines) - len(pattern) + 1)
    if loose:
        found = ((start, _loose_indent(lines, start, pattern)) for start in starts)
        return [(start, indent) for start, indent in found if indent is not None]
    keys = [line.removesuffix("\n") for line in pattern]
    have = [line.removesuffix("\n") for line in lines]
    return [
        (start, _SAME_INDENT)
        for start in starts
        if have[start] == keys[0] and have[start : start + len(keys)] == keys
    ]


class _NoUniqueMatch(Exception):
    """The pattern matched zero or several places; `starts` lists the several (0-based)."""

    def __init__(self, starts: list[int]) -> None:
        super().__init__(starts)
        self.starts = starts


def _locate(
    lines: Sequence[str], pattern: Sequence[str], *, lo: int = 0, hint: int | None = None
) -> tuple[int, _Indent]:
    """The one place `pattern` matches: exactly, else whitespace-tolerantly.

    Among several matches, the one starting exactly at `hint` wins: a diff tool's line numbers are right,
    and a model's wrong ones are unlikely to land exactly on one of the candidates.
    """
    for loose in (False, True):
        found = _matches(lines, pattern, lo, loose)
        if len(found) == 1:
            return found[0]
        for start, indent in found:
            if start == hint:
                return start, indent
        if found:
            raise _NoUniqueMatch([start for start, _ in found])
    raise _NoUniqueMatch([])


_FULL_SCAN_LINES = 20_000  # window lines `_closest` compares one by one before it needs anchors
_CHAR_COMPARE_LINES = 40  # longer patterns are compared line by line: by character is quadratic


def _closest(lines: Sequence[str], pattern: Sequence[str]) -> tuple[int, int] | None:
    """The span of `lines` most similar to `pattern`, if any is reasonably similar."""
    if not lines or not pattern:
        return None
    size = min(len(pattern), len(lines))
    last = len(lines) - size
    wanted = [line.strip() for line in pattern]
    starts: Iterable[int] = range(last + 1)
    if (last + 1) * size > _FULL_SCAN_LINES:
        # Comparing every window of a big file takes seconds, so only windows that line up with a line
        # the pattern has verbatim are compared.
        offsets: dict[str, list[int]] = {}
        for offset, text in enumerate(wanted):
            if text:
                offsets.setdefault(text, []).append(offset)
        hits: Counter[int] = Counter()
        for index, line in enumerate(lines):
            for offset in offsets.get(line.strip(), ()):
                hits[min(max(index - offset, 0), last)] += 1
        starts = [start for start, _ in hits.most_common(50)]

    def comparable(texts: list[str]) -> Sequence[str]:
        return texts if size > _CHAR_COMPARE_LINES else "\n".join(texts)

    matcher = difflib.SequenceMatcher(autojunk=False)
    matcher.set_seq2(comparable(wanted))
    best_ratio, best_start = 0.6, None
    for start in starts:
        matcher.set_seq1(comparable([line.strip() for line in lines[start : start + size]]))
        if matcher.real_quick_ratio() > best_ratio and matcher.quick_ratio() > best_ratio:
            ratio = matcher.ratio()
            if ratio > best_ratio:
                best_ratio, best_start = ratio, start
    return None if best_start is None else (best_start, best_start + size)


def _did_you_mean(lines: Sequence[str], pattern: Sequence[str]) -> str:
    span = _closest(lines, pattern)
    if span is None:
        return "\nNo similar lines were found; re-read the file and copy the lines exactly."
    start, end = span
    shown = _join(lines[start : min(end, start + 50)]).rstrip("\n")
    return f"\nDid you mean these lines ({start + 1}-{end})?\n```\n{shown}\n```"


def _line_list(starts: list[int]) -> str:
    listed = ", ".join(str(start + 1) for start in starts[:5])
    return listed + (", ..." if len(starts) > 5 else "")


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


# ---------------------------------------------------------------------------------------------------
# SEARCH/REPLACE blocks


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
    _check_text_size(text)
    lines = text.replace("\r\n", "\n").split("\n")
    edits: list[SearchReplace] = []
    previous_end = -1
    i = 0
    while i < len(lines):
        if _UPDATE_RE.match(lines[i]):
            raise EditError(
                f"found {lines[i].strip()!r} without a <<<<<<< SEARCH line before it. "
                f"Write each block as:\n{_BLOCK_FORMAT}"
            )
        if not _HEAD_RE.match(lines[i]):
            i += 1
            continue
        number = len(edits) + 1
        path = _path_before(lines, i, previous_end, edits)
        if path is None:
            raise EditError(
                f"SEARCH block {number} has no file path: put the path alone on the line before the "
                f"opening fence (or before <<<<<<< SEARCH). Write each block as:\n{_BLOCK_FORMAT}"
            )
        try:
            path = validate_edit_path(path)
        except EditError as err:
            raise EditError(f"SEARCH block {number}: {err}") from None
        where = f"SEARCH block {number} for {path}"
        divider = _next_marker(lines, i + 1, _DIVIDER_RE, (_HEAD_RE, _UPDATE_RE))
        if divider is None:
            raise EditError(
                f"{where} has no ======= line ending its SEARCH section. Write each block as:\n{_BLOCK_FORMAT}"
            )
        end = _next_marker(lines, divider + 1, _UPDATE_RE, (_HEAD_RE, _DIVIDER_RE))
        if end is None:
            raise EditError(
                f"{where} does not end with a >>>>>>> REPLACE line (or has a second =======). "
                f"Write each block as:\n{_BLOCK_FORMAT}"
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
            state[path], crlf[path] = _to_lf(files[path])
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
                f"{where}: {_missing_file(path, files)}. To create a new file, leave the SEARCH section empty."
            )
            continue
        lines = _split(current)
        try:
            state[path] = _join(_replace_block(lines, _split(search), _split(replace)))
        except _NoUniqueMatch as err:
            failures.append(_describe_block_failure(where, path, lines, _split(search), _split(replace), err))
            continue
        except _ElisionError as err:
            failures.append(f"{where} {err}")
            continue
        touched[path] = None
    result = {path: _from_lf(state[path], crlf[path]) for path in touched}
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
            f"\n\n{_plural(applied, 'other block')} applied fine; don't resend {them}, only fixed "
            "versions of the failed blocks."
        )
    return message


def _replace_block(lines: list[str], search: list[str], replace: list[str]) -> list[str]:
    try:
        start, indent = _locate(lines, search)
    except _NoUniqueMatch as err:
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
            start, indent = _locate(out, find, lo=cursor)
        except _NoUniqueMatch as err:
            count = len(err.starts)
            advice = "include more lines in it" if count else "copy those lines exactly"
            raise _ElisionError(
                f"matched 0 times as a whole; reading its '...' lines as elided code, the part starting "
                f"{find[0].rstrip()!r} matched {_plural(count, 'time')} (it must match once): {advice}."
            ) from None
        new = [indent.fix(line) for line in put]
        out[start : start + len(find)] = new
        cursor = start + len(new)
    return out


def _describe_block_failure(
    where: str, path: str, lines: list[str], search: list[str], replace: list[str], err: _NoUniqueMatch
) -> str:
    if err.starts:
        return (
            f"{where} matched {len(err.starts)} times (at lines {_line_list(err.starts)}); include more "
            "surrounding lines in SEARCH to make it unique."
        )
    message = (
        f"{where} matched 0 times; SEARCH must be a copy of existing lines (indentation and trailing "
        f"whitespace may differ).{_did_you_mean(lines, search)}"
    )
    if any(line.strip() for line in replace) and _matches(lines, replace, 0, loose=True):
        message += (
            f"\nThe REPLACE lines are already in {path}; if this change is already made, drop this block."
        )
    return message


# ---------------------------------------------------------------------------------------------------
# Unified diffs


_HUNK_HEADER_RE = re.compile(r"^@@ -(\d+)(?:,\d+)? \+(\d+)(?:,\d+)? @@(.*)$")
_INDEX_RE = re.compile(r"^index [0-9a-f]+\.\.[0-9a-f]+")
_HEADER_PREFIXES = (
    "diff --git ",
    "new file mode ",
    "deleted file mode ",
    "old mode ",
    "new mode ",
    "similarity index ",
    "dissimilarity index ",
    "rename from ",
    "rename to ",
    "--- ",
    "+++ ",
    "Binary files ",
    "GIT binary patch",
)
_DEV_NULL = "/dev/null"


# A git header giving a path the symlink (120000) or submodule (160000) mode.
_LINK_MODE = re.compile(r"^(?:new file|deleted file|new|old) mode 1[26]0000\s*$", re.MULTILINE)


def parse_unified_diff(text: str) -> list[FilePatch]:
    """The per-file patches of a unified diff in a model's reply (git-style a/ b/ prefixes stripped).

    Chatter and fences around and between file sections are dropped, and every hunk is recounted
    before unidiff parses it, so the wrong line counts models tend to write do not matter. Raises
    EditError for binary changes (other than deletions), copies, and diffs that still do not parse.
    """
    _check_text_size(text)
    if _LINK_MODE.search(text):
        raise EditError(
            "symlinks and submodules cannot be created or changed by an edit; edit regular files only"
        )
    canonical, hints = _canonical_diff(text.replace("\r\n", "\n").split("\n"))
    if not canonical:
        return []
    try:
        patch_set = unidiff.PatchSet(canonical)
    except UnidiffParseError as err:
        raise EditError(
            f"the diff could not be parsed ({err}); start each file with '--- a/path' and '+++ b/path' "
            "lines, followed by its @@ hunks"
        ) from None
    hint_iter = iter(hints)
    return [_file_patch(patched, hint_iter) for patched in patch_set]


def _canonical_diff(lines: list[str]) -> tuple[str, list[int | None]]:
    """Header and hunk lines only, with recounted @@ headers; plus each hunk's line-number hint."""
    out: list[str] = []
    hints: list[int | None] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("@@"):
            body, i = _hunk_body(lines, i + 1)
            old = sum(1 for row in body if row[:1] in ("", " ", "-"))
            new = sum(1 for row in body if row[:1] in ("", " ", "+"))
            if not old and not new:
                continue
            header = _HUNK_HEADER_RE.match(line)
            hint = int(header[1]) if header else None
            start = hint if hint is not None else int(old > 0)
            new_start = int(header[2]) if header else int(new > 0)
            section = header[3] if header else ""
            out.append(f"@@ -{start},{old} +{new_start},{new} @@{section}\n")
            out.extend((row or " ") + "\n" for row in body)
            hints.append(hint)
            continue
        if line.startswith("copy from "):
            raise EditError(
                "the diff copies a file, which is not supported; create the new file with its full contents"
            )
        if line.startswith(_HEADER_PREFIXES) or _INDEX_RE.match(line):
            out.append(line + "\n")
        i += 1
    return "".join(out), hints


def _hunk_body(lines: list[str], i: int) -> tuple[list[str], int]:
    """The body of the hunk starting at line i, judged by line prefixes instead of the header's counts."""
    body: list[str] = []
    while i < len(lines):
        line = lines[i]
        if line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            break
        # Models drop the space of blank context lines, so an empty line is context.
        if not line or line[0] in " +-" or line.startswith("\\ "):
            body.append(line)
            i += 1
        else:
            break
    # Blank lines at the end separate the hunk from what follows more often than they are context.
    while body and not body[-1]:
        body.pop()
    return body, i


def _file_patch(patched: unidiff.PatchedFile, hints: Iterator[int | None]) -> FilePatch:
    source, target = patched.source_file, patched.target_file
    if source == _DEV_NULL and target == _DEV_NULL:
        raise EditError("the diff has a file with /dev/null on both the --- and +++ lines; name the file")
    git_style = (source == _DEV_NULL or source.startswith("a/")) and (
        target == _DEV_NULL or target.startswith("b/")
    )
    old = None if source == _DEV_NULL else validate_edit_path(source[2:] if git_style else source)
    new = None if target == _DEV_NULL else validate_edit_path(target[2:] if git_style else target)
    if patched.is_binary_file and new is not None:
        raise EditError(
            f"{new}: binary changes are not supported; only text files can be edited (deleting is fine)"
        )
    hunks = tuple(_hunk(hunk, next(hints)) for hunk in patched)
    path = new if new is not None else old
    assert path is not None  # both /dev/null was rejected above
    return FilePatch(
        path=path, old_path=old, hunks=hunks, is_delete=new is None, is_binary=patched.is_binary_file
    )


def _hunk(hunk: unidiff.Hunk, hint: int | None) -> Hunk:
    lines: list[tuple[_Tag, str]] = []
    for line in hunk:
        if line.line_type == "\\" and lines:
            lines[-1] = (lines[-1][0], lines[-1][1].removesuffix("\n"))
        elif line.line_type in _TAGS:
            lines.append((_TAGS[line.line_type], line.value))
    return Hunk(old_start=hint, lines=tuple(lines))


def apply_unified_diff(files: Mapping[str, str], patches: Sequence[FilePatch]) -> dict[str, str | None]:
    """Apply the patches and return the new contents of every touched path (None: deleted).

    Each hunk is placed where its context and removed lines match exactly one place, exactly or else
    whitespace-tolerantly; its line number only settles a tie when it points exactly at one of the
    candidates. All failures are reported together and nothing is applied then.
    """
    state: dict[str, str | None] = {}
    failures: list[str] = []

    def current(path: str) -> str | None:
        return state[path] if path in state else files.get(path)

    for patch in patches:
        path = validate_edit_path(patch.path)
        old = None if patch.old_path is None else validate_edit_path(patch.old_path)
        if patch.is_delete:
            # A binary file's contents may be absent from `files`; deleting it needs none.
            if current(path) is None and not patch.is_binary:
                failures.append(f"the diff deletes {_missing_file(path, files)}")
            else:
                state[path] = None
            continue
        if old is None:
            existing = current(path)
            if existing is not None and existing.strip():
                failures.append(
                    f"the diff creates {path} (from /dev/null), but it already exists; diff against its "
                    "current contents instead"
                )
                continue
            state[path] = _join([text for hunk in patch.hunks for tag, text in hunk.lines if tag != "-"])
            continue
        source = current(old)
        if source is None:
            failures.append(
                f"the diff changes {_missing_file(old, files)}; use --- /dev/null to create a file"
            )
            continue
        if old != path and current(path) is not None:
            failures.append(f"the diff renames {old} to {path}, but {path} already exists")
            continue
        text, crlf = _to_lf(source)
        lines, errors = _apply_hunks(path, _split(text), patch.hunks)
        if errors:
            failures.extend(errors)
            continue
        if old != path:
            state[old] = None
        state[path] = _from_lf(_join(lines), crlf)
    if failures:
        raise EditError(
            "\n\n".join(failures) + "\n\nNothing from this diff was applied; resend the whole diff with "
            "these problems fixed."
        )
    for path, content in state.items():
        if content is not None:
            validate_edit_path(path, content=content)
    return state


def _apply_hunks(path: str, lines: list[str], hunks: Sequence[Hunk]) -> tuple[list[str], list[str]]:
    """The lines after applying every hunk that can be placed, and a message per hunk that cannot."""
    out = list(lines)
    shift = 0  # how far earlier hunks moved the lines later hunks' line numbers refer to
    errors: list[str] = []
    for number, hunk in enumerate(hunks, 1):
        label = f"hunk {number} of {len(hunks)} for {path}" if len(hunks) > 1 else f"the hunk for {path}"
        old = [text for tag, text in hunk.lines if tag != "+"]
        if not old:
            added = [text for tag, text in hunk.lines if tag == "+"]
            if hunk.old_start is None and out:
                errors.append(
                    f"{label} has no context or '-' lines, so nothing says where it goes; include a few "
                    "unchanged lines around the change"
                )
                continue
            at = 0 if hunk.old_start is None else hunk.old_start + shift
            if at > len(out):
                errors.append(
                    f"{label} inserts after line {hunk.old_start}, but {path} has only {len(out)} lines"
                )
                continue
            out[at:at] = added
            shift += len(added)
            continue
        hint = None if hunk.old_start is None else hunk.old_start - 1 + shift
        try:
            start, indent = _locate(out, old, hint=hint)
        except _NoUniqueMatch as err:
            errors.append(_describe_hunk_failure(label, out, old, err))
            continue
        new: list[str] = []
        at = start
        for tag, text in hunk.lines:
            if tag == "+":
                new.append(indent.fix(text))
                continue
            if tag == " ":
                new.append(out[at])  # the file's own line: it may differ from the hunk's in whitespace
            at += 1
        out[start : start + len(old)] = new
        shift += len(new) - len(old)
    return out, errors


def _describe_hunk_failure(label: str, lines: list[str], old: list[str], err: _NoUniqueMatch) -> str:
    if err.starts:
        return (
            f"{label} matched {len(err.starts)} places (lines {_line_list(err.starts)}); add more unchanged "
            "context lines so it matches exactly one place"
        )
    return (
        f"{label} (starting {old[0].rstrip()!r}) matched 0 times: its context (' ') and removed ('-') "
        f"lines must be a copy of lines in the current file.{_did_you_mean(lines, old)}"
    )


# ---------------------------------------------------------------------------------------------------
# Whole-function replacement


_Def = ast.FunctionDef | ast.AsyncFunctionDef


_CODE_BLOCK_RE = re.compile(r"^```[ \t]*(?:python|py|python3)?[ \t]*\n(.*?)^```", re.M | re.S)


def function_blocks(text: str) -> list[tuple[str, str]]:
    """(name, source) of each closed fenced code block in `text` that parses as exactly one top-level
    `def` (decorators allowed), in order. Pure: what `parse_function_blocks` places, and what a
    streamed reply is read for (its first such block is the whole answer to the function prompt)."""
    found = []
    for match in _CODE_BLOCK_RE.finditer(text):
        source = match.group(1)
        try:
            body = ast.parse(source).body
        except SyntaxError:
            continue
        if len(body) == 1 and isinstance(body[0], ast.FunctionDef | ast.AsyncFunctionDef):
            found.append((body[0].name, source))
    return found


def parse_function_blocks(text: str, files: Mapping[str, str]) -> list[FunctionReplacement]:
    """Whole corrected functions in a reply (`function_blocks`), each placed in the first of `files`
    (most suspicious first) that defines a function of that name (an EditError when that file has
    several). What small models answer with when asked for a fix."""
    found: list[FunctionReplacement] = []
    for name, source in function_blocks(text):
        for path, content in files.items():
            try:
                _find_def(ast.parse(content), name, path)
            except SyntaxError:
                continue
            except EditError as err:
                if str(err).startswith(f"no function `{name}`"):
                    continue
                raise  # several definitions of that name here: never another file's by default
            found.append(FunctionReplacement(path, name, source))
            break
    return found


def apply_function_replacement(files: Mapping[str, str], edit: FunctionReplacement) -> dict[str, str]:
    """Replace the definition of `edit.name` (decorators included) by `edit.source`, re-indented.

    The function is found with `ast`: "name" is a module-level function, "Class.method" a method and
    "outer.inner" a nested function; a bare name also finds a method when exactly one has that name.
    """
    path = validate_edit_path(edit.path)
    if path not in files:
        raise EditError(f"{_missing_file(path, files)}; can't replace `{edit.name}` in it")
    text, crlf = _to_lf(files[path])
    try:
        tree = ast.parse(text)
    except SyntaxError as err:
        raise EditError(
            f"{path} does not parse as Python (line {err.lineno}: {err.msg}), so `{edit.name}` can't be "
            "located; use a SEARCH/REPLACE edit instead"
        ) from None
    node = _find_def(tree, edit.name, path)
    lines = _split(text)
    start = min([node.lineno, *(decorator.lineno for decorator in node.decorator_list)]) - 1
    end = node.end_lineno or node.lineno
    indent = _leading(lines[start])
    def_line = lines[node.lineno - 1].encode()
    tail = lines[end - 1].encode()[node.end_col_offset or 0 :].decode().strip()
    if def_line[: node.col_offset].strip() or (tail and not tail.startswith("#")):
        raise EditError(
            f"`{edit.name}` in {path} shares a line with other code; use a SEARCH/REPLACE edit instead"
        )
    replacement = [indent + line if line.strip() else "\n" for line in _new_def_lines(edit)]
    result = _join(lines[:start] + replacement + lines[end:])
    try:
        ast.parse(result)
    except SyntaxError as err:
        raise EditError(
            f"replacing `{edit.name}` would leave {path} unparsable (line {err.lineno}: {err.msg}); "
            "check the new source's indentation and brackets"
        ) from None
    result = _from_lf(result, crlf)
    validate_edit_path(path, content=result)
    return {path: result}


def _find_def(tree: ast.Module, name: str, path: str) -> _Def:
    defs: list[tuple[str, _Def]] = []

    def visit(nodes: Iterable[ast.AST], prefix: str) -> None:
        for node in nodes:
            if isinstance(node, _Def):
                defs.append((prefix + node.name, node))
                visit(node.body, f"{prefix}{node.name}.")
            elif isinstance(node, ast.ClassDef):
                visit(node.body, f"{prefix}{node.name}.")
            else:
                visit(ast.iter_child_nodes(node), prefix)

    visit(tree.body, "")
    found = [(qualname, node) for qualname, node in defs if qualname == name]
    if not found and "." not in name:
        found = [(qualname, node) for qualname, node in defs if qualname.rsplit(".", 1)[-1] == name]
    if len(found) == 1:
        return found[0][1]
    if found:
        places = ", ".join(f"{qualname} (line {node.lineno})" for qualname, node in found)
        raise EditError(
            f"`{name}` matches {len(found)} definitions in {path}: {places}; give the full name "
            "(Class.method) of one, or use a SEARCH/REPLACE edit"
        )
    close = difflib.get_close_matches(name, [qualname for qualname, _ in defs], n=5)
    hint = (
        f"; did you mean {', '.join(close)}?" if close else "; check the name, or use a SEARCH/REPLACE edit"
    )
    raise EditError(f"no function `{name}` in {path}{hint}")


def _new_def_lines(edit: FunctionReplacement) -> list[str]:
    """The new source's lines, dedented and without surrounding blank lines; it must be one def."""
    lines = _split(textwrap.dedent(edit.source.replace("\r\n", "\n")))
    while lines and not lines[0].strip():
        lines.pop(0)
    while lines and not lines[-1].strip():
        lines.pop()
    if lines:
        lines[-1] = lines[-1].removesuffix("\n") + "\n"
    try:
        module = ast.parse("".join(lines))
    except SyntaxError as err:
        raise EditError(
            f"the new source for `{edit.name}` does not parse (line {err.lineno}: {err.msg}); send the "
            "complete def, decorators included"
        ) from None
    if len(module.body) != 1 or not isinstance(module.body[0], _Def):
        raise EditError(
            f"the new source for `{edit.name}` must be exactly one function definition (decorators "
            "allowed); put other changes in a separate edit"
        )
    return lines
