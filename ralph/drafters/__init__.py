"""Drafter registry: built-in names, `replay:FILE`, `diffusion:MODEL`, any litellm model string
(anything with a `/`), or a dotted path `package.module:Class`.

Drafters implement ralph.domain's `Drafter`. They may import ralph.domain, sandboxes (safe reads),
validators (a tool's path) and ralph's edits and context; never the loop, the session or the CLI."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ralph.domain.errors import RalphError
from ralph.domain.plugins import instantiate
from ralph.domain.protocols import Drafter

BUILTIN = ("auto", "mutation", "replay:FILE", "diffusion:MODEL", "PROVIDER/MODEL (litellm)")


def create_drafter(
    spec: str, *, models: dict[str, dict[str, Any]] | None = None, sampler: dict[str, Any] | None = None
) -> tuple[Drafter, str | None]:
    """The drafter for `spec`, and a one-line notice when `auto` had to fall back.

    `models` holds per-model settings (api_base, timeouts) for litellm drafters; `sampler` the
    diffusion sampler's settings."""
    from ralph.drafters.mutation import MutationDrafter

    if spec == "auto":
        return MutationDrafter(), "no model configured: using the offline mutation drafter"
    if spec == "mutation":
        return MutationDrafter(), None
    if spec.startswith("replay:"):
        from ralph.drafters.replay import ReplayDrafter

        return ReplayDrafter(Path(spec.removeprefix("replay:"))), None
    if spec.startswith("diffusion:"):
        from ralph.drafters.diffusion import create_diffusion_drafter

        return create_diffusion_drafter(spec, **(sampler or {})), None
    if "/" in spec:  # a litellm model string; ollama tags have both "/" and ":"
        from ralph.drafters.llm import create_llm_drafter

        options = {k: v for k, v in ((models or {}).get(spec) or {}).items() if v is not None}
        return create_llm_drafter(spec, **options), None
    if ":" in spec:
        drafter = instantiate(spec, "--drafter")
        if not isinstance(drafter, Drafter):
            raise RalphError(f"--drafter {spec}: not a Drafter (needs `name` and `draft(context, n)`)")
        return drafter, None
    raise RalphError(f"unknown drafter {spec!r}; available: {', '.join(BUILTIN)}, or module:Class")
