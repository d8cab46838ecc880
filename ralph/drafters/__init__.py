"""Drafter registry: built-in names, `replay:FILE`, or a dotted path `package.module:Class`."""

from __future__ import annotations

import importlib
from pathlib import Path

from ralph.errors import RalphError
from ralph.protocols import Drafter

BUILTIN = ("auto", "mutation", "replay:FILE")


def create_drafter(spec: str) -> tuple[Drafter, str | None]:
    """The drafter for `spec`, and a one-line notice when `auto` had to fall back."""
    from ralph.drafters.mutation import MutationDrafter

    if spec == "auto":
        return MutationDrafter(), "no model configured: using the offline mutation drafter"
    if spec == "mutation":
        return MutationDrafter(), None
    if spec.startswith("replay:"):
        from ralph.drafters.replay import ReplayDrafter

        return ReplayDrafter(Path(spec.removeprefix("replay:"))), None
    if ":" in spec and "/" not in spec and not spec.startswith("diffusion:"):
        module_name, _, attr = spec.partition(":")
        try:
            drafter = getattr(importlib.import_module(module_name), attr)()
        except (ImportError, AttributeError, TypeError) as exc:
            raise RalphError(f"--drafter {spec}: cannot load it ({exc})") from None
        if not isinstance(drafter, Drafter):
            raise RalphError(f"--drafter {spec}: not a Drafter (needs `name` and `draft(context, n)`)")
        return drafter, None
    raise RalphError(f"unknown drafter {spec!r}; available: {', '.join(BUILTIN)}, or module:Class")
