"""Mask secrets in text before it reaches a trace, a log, a candidate or an error message.

Provider libraries echo what they were given: an "Incorrect API key provided: sk-..." error, a request
dump with its Authorization header. Everything ralph shows or records from them goes through `redact`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping

MASK = "[REDACTED]"

# Values shorter than this are left alone: masking "1" or "true" would garble text and hide nothing.
MIN_SECRET_CHARS = 8

# Whole `_`-separated words, so OPENAI_API_KEY, HF_TOKEN and AWS_SECRET_ACCESS_KEY match but
# TOKENIZERS_PARALLELISM, KEYBOARD and SSH_AUTH_SOCK do not.
_SECRET_NAME_RE = re.compile(
    r"(?:^|_)(?:API_?KEY|KEY|TOKEN|SECRET|PASSWORD|PASSWD|AUTHORIZATION|CREDENTIALS?)(?:_|$)",
    re.IGNORECASE,
)

_TOKEN_CHARS = r"[A-Za-z0-9._~+/=\-]"
# Secrets recognisable by shape alone, wherever they come from.
_KEY_SHAPES = re.compile(
    "|".join(
        (
            r"\bsk-[A-Za-z0-9_\-]{8,}",  # OpenAI (sk-, sk-proj-) and Anthropic (sk-ant-) keys
            r"\bAKIA[0-9A-Z]{16}\b",  # AWS access key ids
            r"\b(?:ghp|gho|ghs|ghu|ghr)_[A-Za-z0-9]{20,}",  # GitHub tokens
            r"\bgithub_pat_[A-Za-z0-9_]{20,}",
            r"\bhf_[A-Za-z0-9]{20,}",  # Hugging Face tokens
            r"\bxox[abprs]-[A-Za-z0-9\-]{10,}",  # Slack tokens
            r"\bAIza[0-9A-Za-z_\-]{30,}",  # Google API keys
        )
    )
)
# A credential after the word that introduces it: headers, JSON or Python dicts, key=value pairs.
_SCHEME_RE = re.compile(rf"\b(Bearer|Basic|Token)(\s+){_TOKEN_CHARS}{{4,}}", re.IGNORECASE)
_LABELLED_RE = re.compile(
    r"""(["']?(?:authorization|x-api-key|api[-_]?key|access[-_]?token|secret|password)["']?\s*[:=]\s*["']?)"""
    rf"(?!(?:Bearer|Basic|Token)\s){_TOKEN_CHARS}{{4,}}",
    re.IGNORECASE,
)


def is_secret_name(name: str) -> bool:
    """Whether an environment variable's name says it holds a secret (`*_API_KEY`, `*_TOKEN`, ...)."""
    return bool(_SECRET_NAME_RE.search(name))


def secret_values(environ: Mapping[str, str] | None = None) -> list[str]:
    """The values of the secret-named variables in `environ` (default: os.environ) worth masking."""
    env = os.environ if environ is None else environ
    return [value for name, value in env.items() if is_secret_name(name) and len(value) >= MIN_SECRET_CHARS]


def redact(
    text: str, secrets: Iterable[str | None] | None = None, *, environ: Mapping[str, str] | None = None
) -> str:
    """`text` with secrets replaced by [REDACTED].

    Masks the given `secrets`, the values of secret-named environment variables (`environ`, default
    os.environ), known key shapes (`sk-...`, `sk-ant-...`, GitHub, Hugging Face, AWS, Google, Slack) and
    whatever follows `Bearer`, `Authorization:`, `x-api-key:`, `api_key=` and similar labels.
    """
    values = {s for s in secrets or () if s and len(s) >= MIN_SECRET_CHARS}
    values.update(secret_values(environ))
    # Longest first, so a key that contains another one is masked whole.
    for value in sorted(values, key=len, reverse=True):
        text = text.replace(value, MASK)
    text = _KEY_SHAPES.sub(MASK, text)
    text = _SCHEME_RE.sub(lambda m: f"{m[1]}{m[2]}{MASK}", text)
    return _LABELLED_RE.sub(lambda m: f"{m[1]}{MASK}", text)
