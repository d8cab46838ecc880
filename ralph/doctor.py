"""`ralph doctor`: what is configured and what is available, without revealing a secret."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from ralph.config import RunConfig

KEY_VARIABLES = (
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "INCEPTION_API_KEY",
    "GEMINI_API_KEY",
    "OPENROUTER_API_KEY",
    "HF_TOKEN",
)


def _version(dist: str) -> str | None:
    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def _gpu() -> str:
    if importlib.util.find_spec("torch") is None:
        return "torch not installed (pip install 'ralph-loop[diffusion]')"
    import torch

    if torch.cuda.is_available():
        return f"CUDA: {torch.cuda.get_device_name(0)} (torch {torch.__version__})"
    return f"no GPU (torch {torch.__version__}, CPU)"


def _module_in(python: str, module: str) -> bool:
    probe = [
        python,
        "-c",
        f"import importlib.util, sys; sys.exit(importlib.util.find_spec({module!r}) is None)",
    ]
    return subprocess.run(probe, capture_output=True, check=False).returncode == 0


def diagnose(project: Path, config: RunConfig) -> dict[str, Any]:
    """Facts about this machine and project; keys are reported as present or absent, never shown."""
    from ralph.validators.mypy import mypy_configured
    from ralph.validators.toolchain import find_python, ruff_bin

    python = find_python(project, project, config.python)
    models = {
        name: {"api_base": s.api_base, "api_key_env": s.api_key_env, "timeout_s": s.timeout_s}
        for name, s in config.models.items()
    }
    return {
        "ralph": _version("ralph-loop"),
        "python": sys.version.split()[0],
        "project_python": python,
        "drafter": config.drafter,
        "deep": config.deep,
        "router": config.router,
        "models": models,
        "sampler": config.sampler,
        "gpu": _gpu(),
        "transformers": _version("transformers"),
        "litellm": _version("litellm"),
        "keys": {name: "set" if os.environ.get(name) else "not set" for name in KEY_VARIABLES},
        "validators": {
            "git": shutil.which("git") is not None,
            "ruff": Path(ruff_bin()).exists(),
            "pytest": _module_in(python, "pytest"),
            "mypy": _module_in(python, "mypy"),
            "mypy_configured": mypy_configured(project),
            "coverage": _module_in(python, "coverage"),
        },
        "sandbox": _sandbox_facts(),
    } | _resolved(config)


def _sandbox_facts() -> dict[str, Any]:
    """Whether candidates can be sandboxed here, as whom, and why not when they cannot."""
    from ralph.sandboxes.bwrap import available, sandbox_ids

    why = available() if shutil.which("bwrap") is not None else None
    ids = sandbox_ids()
    return {
        "bubblewrap": shutil.which("bwrap") is not None,
        "usable": shutil.which("bwrap") is not None and why is None,
        **({"why_not": why} if why else {}),
        "runs_as": f"uid {ids[0]}, gid {ids[1]} (no capabilities)" if ids else "this user (no capabilities)",
    }


def _resolved(config: RunConfig) -> dict[str, Any]:
    """What `--drafter auto` (the default) is here, and why."""
    if config.drafter != "auto":
        return {"drafter_resolves_to": config.drafter}
    if config.deep:
        why = "the offline mutation drafter as the fast one, escalating to the deep model"
    else:
        why = "the offline mutation drafter: no model is configured (--drafter PROVIDER/MODEL or --deep gives one)"
    return {"drafter_resolves_to": "mutation", "drafter_why": why}


def problems(facts: dict[str, Any]) -> list[tuple[str, str]]:
    """What stops or weakens a run here, each with the command that fixes it."""
    python, checks = facts["project_python"], facts["validators"]
    found = []
    if not facts["sandbox"]["bubblewrap"]:
        found.append(
            ("bubblewrap is missing: candidate code cannot be sandboxed", "sudo apt-get install bubblewrap")
        )
    elif why := facts["sandbox"].get("why_not"):
        found.append(
            (f"the sandbox cannot run: {why}", "pip install pyseccomp; sudo apt-get install libseccomp2")
        )
    if not checks["git"]:
        found.append(("git is missing", "sudo apt-get install git"))
    if not checks["pytest"]:
        found.append(
            (f"pytest is not importable by {python}", f"{python} -m pip install pytest  (or pass --python)")
        )
    if not checks["ruff"]:
        found.append(("ruff is missing", "pip install ruff"))
    if checks["mypy_configured"] and not checks["mypy"]:
        found.append((f"mypy is configured but not importable by {python}", f"{python} -m pip install mypy"))
    if not checks["coverage"]:
        found.append(
            (
                f"coverage is not importable by {python} (slower test selection)",
                f"{python} -m pip install coverage",
            )
        )
    return found


def rows(facts: dict[str, Any]) -> list[tuple[str, str]]:
    """The facts as (name, readable value) rows: no dicts or JSON in a cell."""
    out = []
    for key, value in facts.items():
        if isinstance(value, dict):
            text = ", ".join(f"{k}: {_word(v)}" for k, v in value.items()) if value else "none"
        else:
            text = _word(value)
        out.append((key, text))
    return out


def _word(value: object) -> str:
    if value is True:
        return "yes"
    if value is False:
        return "no"
    if value is None:
        return "—"
    if isinstance(value, dict):
        return "; ".join(f"{k}={_word(v)}" for k, v in value.items() if v is not None) or "defaults"
    return str(value)
