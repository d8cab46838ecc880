"""Loading a user's own drafter, routing policy or sandbox from `package.module:Class`."""

from __future__ import annotations

import importlib
import inspect
from typing import Any

from ralph.domain.errors import RalphError


def load(spec: str, flag: str) -> Any:
    """What `spec` (`module:Class`) names, or a one-line error naming `flag`."""
    module_name, _, attr = spec.partition(":")
    try:
        return getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError, ValueError) as exc:
        raise RalphError(f"{flag} {spec}: cannot load it ({exc})") from None


def instantiate(spec: str, flag: str, *args: Any, **kwargs: Any) -> object:
    """An instance of the class `spec` names (`module:Class`), called with `args` and `kwargs`, or a
    one-line error naming `flag`."""
    factory = load(spec, flag)
    try:
        return factory(*args, **kwargs)
    except TypeError as exc:
        raise RalphError(f"{flag} {spec}: cannot load it ({exc})") from None


def protocol_members(protocol: type) -> frozenset[str]:
    """The public names a Protocol declares: its attributes and its methods."""
    declared = {**vars(protocol), **vars(protocol).get("__annotations__", {})}
    return frozenset(name for name in declared if not name.startswith("_"))


def protocol_methods(protocol: type) -> frozenset[str]:
    """The methods among them (what a class must define, where attributes may be set on its instances)."""
    return frozenset(
        name for name in protocol_members(protocol) if inspect.isfunction(vars(protocol).get(name))
    )


def missing_members(obj: object, protocol: type, among: frozenset[str] | None = None) -> list[str]:
    """What `obj` lacks of `protocol`'s members (or of those `among` them), sorted: a plugin is
    checked once, when loaded."""
    return sorted((protocol_members(protocol) if among is None else among) - set(dir(obj)))
