"""Drafter registry: built-in names, `replay:FILE`, `diffusion:MODEL`, any litellm model string
(anything with a `/`), or a dotted path `package.module:Class`.

Drafters implement ralph.domain's `Drafter`. They may import ralph.domain, sandboxes (safe reads),
validators (a tool's path) and ralph's edits and context; never the loop, the session or the CLI."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ralph.domain.errors import RalphError
from ralph.domain.plugins import instantiate, missing_members
from ralph.domain.protocols import DRAFTER_DEFAULTS, Drafter

BUILTIN = ("auto", "mutation", "replay:FILE", "diffusion:MODEL", "PROVIDER/MODEL (litellm)")


@dataclass(frozen=True)
class Settings:
    """What a drafter may be built with: per-model settings (api_base, timeouts) for litellm
    drafters, the diffusion sampler's settings."""

    models: dict[str, dict[str, Any]] = field(default_factory=dict)
    sampler: dict[str, Any] = field(default_factory=dict)


def _mutation(spec: str, settings: Settings) -> Drafter:
    from ralph.drafters.mutation import MutationDrafter

    return MutationDrafter()


def _replay(spec: str, settings: Settings) -> Drafter:
    from ralph.drafters.replay import ReplayDrafter

    return ReplayDrafter(Path(spec.removeprefix("replay:")))


def _diffusion(spec: str, settings: Settings) -> Drafter:
    from ralph.drafters.diffusion import create_diffusion_drafter

    return create_diffusion_drafter(spec, **settings.sampler)


def _litellm(spec: str, settings: Settings) -> Drafter:
    from ralph.drafters.llm import create_llm_drafter

    options = {k: v for k, v in (settings.models.get(spec) or {}).items() if v is not None}
    return create_llm_drafter(spec, **options)


def _plugin(spec: str, settings: Settings) -> Drafter:
    """The plugin's drafter, given `DRAFTER_DEFAULTS` for what it does not declare."""
    drafter = instantiate(spec, "--drafter")
    lacking = missing_members(drafter, Drafter)
    if required := [m for m in lacking if m not in DRAFTER_DEFAULTS]:
        raise RalphError(
            f"--drafter {spec}: not a Drafter (it lacks {', '.join(required)}; needs `name` and `draft(context, n)`)"
        )
    try:
        for member in lacking:
            setattr(drafter, member, DRAFTER_DEFAULTS[member])
    except (AttributeError, TypeError) as exc:
        raise RalphError(f"--drafter {spec}: declare `remote` and `priced` on it ({exc})") from None
    if not isinstance(drafter, Drafter):
        raise RalphError(
            f"--drafter {spec}: not a Drafter (it lacks {', '.join(missing_members(drafter, Drafter))})"
        )
    return drafter


Factory = Callable[[str, Settings], Drafter]

NAMED: dict[str, Factory] = {"auto": _mutation, "mutation": _mutation}
"""Drafters by their whole name."""
PREFIXED: dict[str, Factory] = {"replay:": _replay, "diffusion:": _diffusion}
"""Drafters by the prefix of their name (the rest says what they draw on)."""
NOTICES = {"auto": "no model configured: using the offline mutation drafter"}


def _factory(spec: str) -> Factory:
    """What builds the drafter `spec` names: a name, a prefix, then a litellm model (anything with a
    `/`: ollama tags have both `/` and `:`), then a plugin's `module:Class`."""
    if spec in NAMED:
        return NAMED[spec]
    for prefix, factory in PREFIXED.items():
        if spec.startswith(prefix):
            return factory
    if "/" in spec:
        return _litellm
    if ":" in spec:
        return _plugin
    raise RalphError(f"unknown drafter {spec!r}; available: {', '.join(BUILTIN)}, or module:Class")


def create_drafter(
    spec: str, *, models: dict[str, dict[str, Any]] | None = None, sampler: dict[str, Any] | None = None
) -> tuple[Drafter, str | None]:
    """The drafter for `spec`, and a one-line notice when `auto` had to fall back.

    `models` holds per-model settings (api_base, timeouts) for litellm drafters; `sampler` the
    diffusion sampler's settings."""
    drafter = _factory(spec)(spec, Settings(models or {}, sampler or {}))
    return drafter, NOTICES.get(spec)
