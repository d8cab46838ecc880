"""Configuration: [tool.ralph] or ralph.toml, flags on top, RALPH_NO_SANDBOX from the environment."""

from __future__ import annotations

import pytest

from ralph.config import load_config
from ralph.domain.errors import RalphError

PYPROJECT = """
[tool.ralph]
deep = "openai/coder"
k = 2
checks = ["ruff check ."]
[tool.ralph.models."openai/coder"]
api_base = "http://127.0.0.1:30000/v1"
[tool.ralph.sampler]
sampler = "threshold-0.7"
"""


def test_pyproject_settings_with_flags_on_top(tmp_path, monkeypatch):
    monkeypatch.delenv("RALPH_NO_SANDBOX", raising=False)
    (tmp_path / "pyproject.toml").write_text(PYPROJECT)
    config = load_config(tmp_path, {"k": 5, "drafter": None})
    assert config.deep == "openai/coder" and config.k == 5 and config.drafter == "auto"
    assert config.models["openai/coder"].api_base == "http://127.0.0.1:30000/v1"
    assert config.sampler == {"sampler": "threshold-0.7"}
    assert config.checks == ["ruff check ."] and config.sandbox is True


def test_ralph_toml_and_the_no_sandbox_variable(tmp_path, monkeypatch):
    (tmp_path / "ralph.toml").write_text('router = "cascade"\ncandidates = 8\n')
    monkeypatch.setenv("RALPH_NO_SANDBOX", "1")
    config = load_config(tmp_path, {})
    assert (config.router, config.candidates, config.sandbox) == ("cascade", 8, False)


def test_on_gate_failure_is_rollback_unless_the_config_or_the_flag_says_todo(tmp_path):
    assert load_config(tmp_path, {}).on_gate_failure == "rollback"
    (tmp_path / "ralph.toml").write_text('on_gate_failure = "todo"\n')
    assert load_config(tmp_path, {}).on_gate_failure == "todo"
    assert load_config(tmp_path, {"on_gate_failure": "rollback"}).on_gate_failure == "rollback"
    (tmp_path / "ralph.toml").write_text('on-gate-failure = "later"\n')
    with pytest.raises(RalphError, match="on_gate_failure: Input should be 'rollback' or 'todo'"):
        load_config(tmp_path, {})
