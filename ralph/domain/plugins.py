"""Loading a user's own drafter or routing policy from `package.module:Class`."""

from __future__ import annotations

import importlib

from ralph.domain.errors import RalphError


def instantiate(spec: str, flag: str) -> object:
    """An instance of the class `spec` names (`module:Class`), or a one-line error naming `flag`."""
    module_name, _, attr = spec.partition(":")
    try:
        return getattr(importlib.import_module(module_name), attr)()
    except (ImportError, AttributeError, TypeError) as exc:
        raise RalphError(f"{flag} {spec}: cannot load it ({exc})") from None
