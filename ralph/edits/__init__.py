"""Edits that drafters propose as text: one module per edit format, and one function from a reply to
file changes.

- `search_replace`: SEARCH/REPLACE blocks, the prompt text that asks for them, their parser and applier;
- `udiff`: unified diffs, their parser and applier;
- `functions`: whole-function replacement, its prompt text, parser and applier;
- `reply`: `changes_from_reply`, the one place a model's reply (any format) becomes FileChanges, with
  every path checked there;
- shared by the formats: `errors` (EditError, whose message is written for the model), `paths`
  (which paths an edit may touch, size limits, reading a file for an edit) and `matching` (lines,
  newlines, and finding the one place a pattern matches).

Parsing is a pure function of the reply text and applying a pure function of the current contents, so
both are tested with plain strings. Matching degrades from exact to whitespace-tolerant (and, for
SEARCH/REPLACE, elision-aware), but an edit only ever applies where it matches exactly one place.
"""

from ralph.edits.errors import EditError
from ralph.edits.functions import (
    FunctionReplacement,
    apply_function_replacement,
    function_blocks,
    parse_function_blocks,
)
from ralph.edits.paths import MAX_EDIT_BYTES, read_for_edit, validate_edit_path
from ralph.edits.reply import FORMATS, NOTHING_CHANGES, Format, Reply, changes_from_reply
from ralph.edits.search_replace import SearchReplace, apply_search_replace, parse_search_replace
from ralph.edits.udiff import FilePatch, Hunk, apply_unified_diff, parse_unified_diff

__all__ = [
    "FORMATS",
    "MAX_EDIT_BYTES",
    "NOTHING_CHANGES",
    "EditError",
    "FilePatch",
    "Format",
    "FunctionReplacement",
    "Hunk",
    "Reply",
    "SearchReplace",
    "apply_function_replacement",
    "apply_search_replace",
    "apply_unified_diff",
    "changes_from_reply",
    "function_blocks",
    "parse_function_blocks",
    "parse_search_replace",
    "parse_unified_diff",
    "read_for_edit",
    "validate_edit_path",
]
