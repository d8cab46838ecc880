"""How often each repair template fixed a bug, learned from the traces of `ralph bench fix` runs
and shipped as data (`template_priors.json`, rewritten by `ralph bench priors`): the offline
drafter tries templates in order of line score x prior."""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import cache
from importlib import resources
from typing import Any

# Pseudo-tries a template's own record is blended with: a template seldom tried keeps near the
# default its cost gives, one tried often is ranked by what it did.
WEIGHT = 20.0
DATA = "template_priors.json"


def priors(counts: Mapping[str, Mapping[str, Any]], costs: Mapping[str, int]) -> dict[str, float]:
    """Each template's prior chance to fix a bug when tried: its accepts over its tries, smoothed
    towards the base rate of all templates scaled by its cost (2 / (1 + cost)); a template with no
    record (a new one) gets that default."""
    ours = [c for op, c in counts.items() if op in costs]  # (not pairs, not ruff's fixes)
    tried = sum(float(c.get("verified", 0)) for c in ours)
    fixed = sum(float(c.get("accepted", 0)) for c in ours)
    base = (fixed + 1.0) / (tried + 2.0)
    out = {}
    for operator, cost in costs.items():
        seen = counts.get(operator, {})
        default = base * 2.0 / (1.0 + cost)
        n, k = float(seen.get("verified", 0)), float(seen.get("accepted", 0))
        out[operator] = (k + WEIGHT * default) / (n + WEIGHT)
    return out


@cache
def shipped() -> dict[str, Any]:
    """The counts shipped with ralph ({} when the file is missing or unreadable)."""
    try:
        data = json.loads(resources.files("ralph.drafters").joinpath(DATA).read_text())
    except (OSError, ValueError):
        return {}
    templates = data.get("templates") if isinstance(data, dict) else None
    return templates if isinstance(templates, dict) else {}
