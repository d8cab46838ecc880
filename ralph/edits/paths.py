"""Where an edit may write, and how much: path validation, size limits, and reading a project file
for an edit (through no symlink, never outside the project). Every format's paths pass through here."""

from __future__ import annotations

import difflib
import os
import re
import stat
from collections.abc import Iterable
from pathlib import Path

from ralph.domain.errors import UnsafePath
from ralph.edits.errors import EditError
from ralph.sandboxes.workspace import open_dir, read_text_beneath, safe_parts

MAX_EDIT_BYTES = 1_048_576
_MAX_TEXT_BYTES = 4 * MAX_EDIT_BYTES
_DRIVE_RE = re.compile(r"^[A-Za-z]:")


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


def check_text_size(text: str) -> None:
    # A UTF-8 encoding is never shorter than the text, so the length test avoids encoding huge inputs.
    if len(text) > _MAX_TEXT_BYTES or len(text.encode("utf-8", "surrogatepass")) > _MAX_TEXT_BYTES:
        raise EditError(
            f"edit text too large (over {_MAX_TEXT_BYTES} bytes); send smaller edits that change only "
            "the lines that need to change"
        )


def missing_file(path: str, known: Iterable[str]) -> str:
    close = difflib.get_close_matches(path, list(known), n=3)
    hint = f" (did you mean {', '.join(close)}?)" if close else ""
    return f"{path} does not exist{hint}"
