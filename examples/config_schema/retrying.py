"""Retry delays for a service, from its settings (config/settings.json)."""

import json
from pathlib import Path

CONFIG = Path(__file__).parent / "config" / "settings.json"


def load(path: Path = CONFIG) -> dict:
    """The settings file, as a dict."""
    return json.loads(path.read_text())


def delays(settings: dict) -> list[float]:
    """The wait before each retry: `retries` of them, doubling from `backoff_s`."""
    return [settings["backoff_s"] * 2**attempt for attempt in range(1, settings["retries"])]
