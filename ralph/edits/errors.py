"""What every edit meets, whatever its format: `EditError`, whose message is written for the model."""

from __future__ import annotations

from collections.abc import Mapping


class EditError(ValueError):
    """An edit that cannot be applied; str(e) is written for the model and says how to fix it.

    When only some SEARCH/REPLACE blocks failed, `partial` holds the new contents produced by the ones
    that applied, so a caller can keep them (the message tells the model not to resend them).
    `other_format` says that the change may go through in another edit format (a whole function that
    cannot be located by name, say): the caller names the one the model was asked for.
    """

    def __init__(
        self, message: str, *, partial: Mapping[str, str] | None = None, other_format: bool = False
    ) -> None:
        super().__init__(message)
        self.partial: dict[str, str] | None = dict(partial) if partial is not None else None
        self.other_format = other_format
