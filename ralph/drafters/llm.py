"""Drafts with any model litellm reaches: hosted APIs, OpenAI-compatible servers, fill-in-the-middle models.

A chat model is shown the rendered draft context and answers with SEARCH/REPLACE blocks (or a unified
diff). A fill-in-the-middle (FIM) model is given the code before and after the body of the most
suspicious function and writes a new body. Each completion becomes one Candidate; a reply that cannot
be applied becomes a Candidate whose `error` is written for the model, so the loop records it and the
next draft shows the model what went wrong.

Model strings are litellm's: `anthropic/...`, `openai/...`, `ollama/...`, `openai/<name>` plus
`api_base` for an OpenAI-compatible server (vLLM, SGLang), `inception/mercury-2` (chat) and
`text-completion-inception/mercury-edit-2` (FIM, which litellm sends to Inception's
`/v1/fim/completions`). Keys come from the provider's usual environment variable (OPENAI_API_KEY,
ANTHROPIC_API_KEY, INCEPTION_API_KEY, ...) or from the variable named by `api_key_env`; they never
reach candidates, traces or error messages (see ralph.redact).

litellm is imported on first use: importing it takes seconds and runs without a model never need it.
"""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import io
import os
import random
import re
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from ralph.context import localize, render, trim_message
from ralph.domain.candidate import Candidate, FileChange, is_protected
from ralph.domain.errors import RalphError
from ralph.domain.protocols import DraftContext
from ralph.domain.pyast import parse
from ralph.edits import (
    FORMATS,
    EditError,
    Format,
    changes_from_reply,
    function_blocks,
    functions,
    read_for_edit,
    search_replace,
)
from ralph.redact import redact

# The edit formats a chat model is asked for: SEARCH/REPLACE blocks (any change, any file), or the
# whole corrected function in one fence (what small models manage: SmolLM2-135M answered the long
# SEARCH/REPLACE prompt with empty fences, and a short function prompt with the function).
PROMPTS = ("search-replace", "function")

REPEATED = (
    "every draft repeated an edit that was already rejected; propose a different fix, guided by why "
    "the earlier attempts were rejected"
)

# Status codes worth a retry besides 5xx: timeouts, conflicts, rate limits, 529 (Anthropic overloaded).
_TRANSIENT_STATUS = frozenset({408, 409, 425, 429, 529})
_MAX_BACKOFF_S = 30.0
_MAX_RETRY_AFTER_S = 60.0
# What litellm puts before the provider's message: "litellm.AuthenticationError: AuthenticationError:
# OpenAIException - Incorrect API key provided: ..."
_EXCEPTION_PREFIX_RE = re.compile(r"^(?:(?:litellm\.)?\w*(?:Error|Exception|Timeout)\s*[:-]\s*)+")
_REPLY_META_CHARS = 4000
_MAX_REPLY = 4096  # tokens a reply may take when max_tokens is not configured
_DETAIL_CHARS = 300
_DESCRIPTION_CHARS = 120
# The key vLLM and SGLang document for servers started without one; the OpenAI client refuses no key.
_NO_KEY = "EMPTY"
# A fence's line, and a def's name (once its bracket came), in a streamed reply (`_code_ended`).
_FENCE_RE = re.compile(r"^```", re.M)
_DEF_RE = re.compile(r"^[ \t]*(?:async[ \t]+)?def[ \t]+(\w+)[ \t]*\(", re.M)


@functools.cache
def _litellm() -> Any:
    """litellm, imported on first use and never allowed to fetch its price list from the network."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    # Through importlib so mypy does not type-check all of litellm, which ships its own types.
    litellm: Any = importlib.import_module("litellm")
    # Otherwise litellm prints a "Give Feedback / Get Help" banner on the user's terminal with each error.
    litellm.suppress_debug_info = True
    return litellm


@dataclass(frozen=True)
class _Completion:
    """One choice of a model's answer."""

    text: str
    finish_reason: str | None
    latency_ms: float  # of the call that produced it
    answered_early: bool = False  # the stream was closed at its first complete function
    completion_tokens: int | None = None  # of the call that produced it (all its choices)


@dataclass(frozen=True)
class _Call:
    """One API call: its completions and what it cost."""

    completions: tuple[_Completion, ...]
    tokens: int | None
    cost_usd: float | None
    latency_ms: float


@dataclass(frozen=True)
class _Hole:
    """The lines of one file a FIM model rewrites, and the prompt prefix it is shown before them."""

    path: str
    text: str  # the whole file, as the workspace reads it
    head: str  # the file before the hole
    tail: str  # the file after the hole
    prompt: str  # `head` with a comment naming the failure just before the function
    label: str


class LLMDrafter:
    """A drafter backed by any litellm model; one completion per candidate. It is `remote`: the loop
    asks for its candidates one request each, all at once, and verifies each as it arrives (a local
    server may ignore `n`, and the first answer need not wait for the last)."""

    remote = True

    def __init__(
        self,
        model: str,
        *,
        api_base: str | None = None,
        api_key_env: str | None = None,
        timeout_s: float = 120,
        retries: int = 3,
        temperature: float = 0.2,
        max_tokens: int | None = None,
        fim: bool | None = None,
        prompt: str = "auto",
        backoff_s: float = 1.0,
        stream: bool | None = None,
    ) -> None:
        """`fim=None` picks fill-in-the-middle for `text-completion-*` models, chat otherwise.
        `backoff_s` is the first retry's delay; each further retry doubles it. `stream` reads chat
        replies as they are written and, for the function prompt, hangs up at the first complete
        function (None: on for the function prompt)."""
        if not model.strip():
            raise RalphError("the model name is empty; give a litellm model such as openai/gpt-4o-mini")
        self.model = model
        self.name = f"llm:{model}"
        self.api_base = api_base or None
        self.api_key_env = api_key_env or None
        self.timeout_s = float(timeout_s)
        self.retries = int(retries)
        self.temperature = float(temperature)
        # None: sized to the code in question for each request; a number: used as given.
        self.max_tokens = int(max_tokens) if max_tokens is not None else None
        self.fim = model.startswith("text-completion-") if fim is None else bool(fim)
        if prompt not in (*PROMPTS, "auto"):
            raise RalphError(f"{self.name}: prompt must be auto, {', '.join(PROMPTS)}, not {prompt!r}")
        # auto: the function prompt for a model served on this machine (a small local model answers
        # it with an edit far more often: docs/measurements.md), else SEARCH/REPLACE.
        self.prompt = prompt if prompt != "auto" else ("function" if self._is_local() else "search-replace")
        self.backoff_s = float(backoff_s)
        self.stream = (self.prompt == "function" and not self.fim) if stream is None else bool(stream)
        if self.timeout_s <= 0 or self.retries < 0 or (self.max_tokens or 1) < 1 or self.backoff_s < 0:
            raise RalphError(
                f"{self.name}: timeout_s and max_tokens must be positive, retries and backoff_s not negative"
            )
        self._api_key()  # a missing api_key_env variable is a configuration error: say so before the run
        self._check_provider_key()
        self._batches: bool | None = None  # whether the provider takes `n`; asked of litellm on first use
        self._lock = threading.Lock()  # (the loop asks from several threads at once)
        self._state_id: int | None = None
        self._proposed: set[str] = set()  # fingerprints proposed for that state
        self._heat = 0.0  # added to the temperature while the model repeats itself

    def draft(
        self, context: DraftContext, n: int, *, on_text: Callable[[str], None] | None = None
    ) -> list[Candidate]:
        """Up to `n` candidates from `n` completions, without duplicates or edits already rejected.
        `on_text` is handed a reply's text so far at each chunk of a streamed reply, else once with
        the whole reply (how a draft grows, for `ralph bench drafter`).

        Raises RalphError when the model cannot be reached (after retries) or refuses the request.
        """
        if n < 1:
            return []
        with self._lock:
            self._enter(context.state_id)
        if self.fim:
            hole = _fim_hole(context)
            if hole is None:
                return []  # nothing suspicious to rewrite, so a FIM model has nothing to try
            calls = self._sample({"prompt": hole.prompt, "suffix": hole.tail}, n, on_text=on_text)
            drafts = [self._fill(hole, c) for call in calls for c in call.completions]
        else:
            messages = _function_messages(context) if self.prompt == "function" else None
            request = {"messages": messages or _messages(context), "max_tokens": self._reply_budget(context)}
            answered = functools.partial(_answered, context) if messages is not None else None
            calls = self._sample(request, n, answered=answered, on_text=on_text)
            asked: Format = "function" if messages is not None else "search-replace"
            drafts = [self._edit(context, c, asked) for call in calls for c in call.completions]
        self._warm_up_if_repeating(context.state_id, drafts)
        kept = _distinct(drafts, context.rejected)
        if not kept:  # say so to the model, and keep what the calls cost on the books
            kept = [Candidate(self.name, "a repeated edit", (), error=REPEATED, meta=drafts[0].meta)]
        return _share(kept, calls)

    def _warm_up_if_repeating(self, state_id: int, drafts: list[Candidate]) -> None:
        """A model that proposes an edit it already proposed for this state is asked again with a
        higher temperature (up to 1.0); a new state starts from the configured one."""
        with self._lock:
            self._enter(state_id)
            for draft in drafts:
                if draft.changes and draft.fingerprint in self._proposed:
                    self._heat = min(self._heat + 0.3, max(0.0, 1.0 - self.temperature))
                self._proposed.add(draft.fingerprint)

    def _reply_budget(self, context: DraftContext) -> int:
        """`max_tokens` as configured, else sized to the edit: a few times the code the prompt shows
        (about 3.5 characters a token), at least 256, at most 4096. A slow local model asked for
        4096 tokens ran every request into its timeout."""
        if self.max_tokens is not None:
            return self.max_tokens
        shown = sum(len(s.text) for s in localize(context.project, context.suspicious))
        return _MAX_REPLY if not shown else max(256, min(_MAX_REPLY, int(3 * shown / 3.5) + 200))

    def _enter(self, state_id: int) -> None:
        if state_id != self._state_id:
            self._state_id, self._proposed, self._heat = state_id, set(), 0.0

    @property
    def priced(self) -> bool:
        """Whether litellm knows this model's price (a local or unlisted model's cost is unknown)."""
        try:
            prompt, completion = _litellm().cost_per_token(
                model=self.model, prompt_tokens=1000, completion_tokens=1000
            )
        except Exception:  # litellm raises for a model it has no price for
            return False
        return bool(prompt or completion)

    @property
    def sampling_temperature(self) -> float:
        return self.temperature + self._heat

    # --- calls -------------------------------------------------------------------------------------

    def _sample(
        self,
        request: dict[str, Any],
        n: int,
        *,
        answered: Callable[[str], bool] | None = None,
        on_text: Callable[[str], None] | None = None,
    ) -> list[_Call]:
        """Calls until `n` completions came back: one call with `n` where the provider takes it (a
        streamed call asks for one)."""
        calls: list[_Call] = []
        got = 0
        while got < n:
            batch = self._takes_n() and not (self.stream and not self.fim)
            calls.append(self._call(request, n - got if batch else 1, answered=answered, on_text=on_text))
            # An OpenAI-compatible server may ignore `n` and answer once; the next call asks for the rest.
            got += len(calls[-1].completions)
        return calls

    def _takes_n(self) -> bool:
        if self._batches is None:
            litellm = _litellm()
            try:
                model, provider, _, _ = litellm.get_llm_provider(self.model, api_base=self.api_base)
                params = litellm.get_supported_openai_params(model=model, custom_llm_provider=provider)
            except Exception as exc:  # litellm raises assorted types for a model it cannot route
                raise RalphError(f"{self.name}: litellm cannot use this model: {self._detail(exc)}") from None
            self._batches = "n" in (params or ())
        return self._batches

    def _call(
        self,
        request: dict[str, Any],
        k: int,
        *,
        answered: Callable[[str], bool] | None = None,
        on_text: Callable[[str], None] | None = None,
    ) -> _Call:
        """One request for `k` completions, retried with exponential backoff on transient errors.
        Streamed, with `answered`: read until what came so far is an answer. `on_text`: see `draft`."""
        litellm = _litellm()
        kwargs: dict[str, Any] = {
            **request,
            "model": self.model,
            "temperature": self.sampling_temperature,
            "max_tokens": self.max_tokens or _MAX_REPLY,
            **request,
            "timeout": self.timeout_s,
            "max_retries": 0,  # the OpenAI client's own retries would hide failures from the backoff below
            "drop_params": True,  # e.g. Inception's FIM endpoint takes no temperature
        }
        if k > 1:
            kwargs["n"] = k
        if self.api_base:
            kwargs["api_base"] = self.api_base
        if key := self._api_key():
            kwargs["api_key"] = key
        started = time.perf_counter()
        early = False
        if self.stream and not self.fim:
            read = functools.partial(self._streamed, answered, on_text)
            response, early = self._with_retries(read, kwargs)
        else:
            response = self._with_retries(litellm.text_completion if self.fim else litellm.completion, kwargs)
        latency_ms = (time.perf_counter() - started) * 1000
        usage = getattr(response, "usage", None)
        completion_tokens = getattr(usage, "completion_tokens", None) if usage else None
        completions = tuple(
            _Completion(
                _choice_text(choice),
                getattr(choice, "finish_reason", None),
                latency_ms,
                early,
                completion_tokens if isinstance(completion_tokens, int) else None,
            )
            for choice in getattr(response, "choices", None) or ()
        )
        if on_text is not None and not (self.stream and not self.fim):
            for completion in completions:  # the whole reply at once: a draft that did not grow
                on_text(completion.text)
        tokens = (usage.prompt_tokens or 0) + (usage.completion_tokens or 0) if usage else None
        return _Call(
            # An answer without choices still counts (and costs): asking again for it could loop forever.
            completions or (_Completion("", None, latency_ms),),
            tokens,
            _cost(litellm, response, self.model),
            latency_ms,
        )

    def _streamed(
        self,
        answered: Callable[[str], bool] | None,
        on_text: Callable[[str], None] | None,
        **kwargs: Any,
    ) -> tuple[Any, bool]:
        """One chat completion read as it streams: the response rebuilt from its chunks (usage counted
        when the server sends none), and whether it was cut once `answered` said the text so far is
        an answer (functions that change the suspicious files, then prose or the function again: the
        whole answer to the function prompt). What a small model writes after it is not waited for,
        and hanging up tells the server to stop generating. A stream still going at
        `timeout_s` is cut there (finish reason "timeout")."""
        litellm = _litellm()
        stream = litellm.completion(**kwargs, stream=True, stream_options={"include_usage": True})
        chunks: list[Any] = []
        text, early, late = "", False, False
        deadline = time.monotonic() + self.timeout_s
        try:
            for chunk in stream:
                chunks.append(chunk)
                delta = _delta_text(chunk)
                text += delta
                if on_text is not None and delta:
                    on_text(text)
                if answered is not None and any(c in delta for c in "`\n(") and answered(text):
                    early = True
                    break
                if time.monotonic() > deadline:
                    late = True
                    break
        finally:
            if callable(close := getattr(stream, "close", None)):
                close()
        if not chunks:
            return None, False
        response = litellm.stream_chunk_builder(chunks, messages=kwargs.get("messages"))
        if late and response is not None and response.choices:
            response.choices[0].finish_reason = "timeout"
        return response, early

    def _with_retries(self, send: Any, kwargs: dict[str, Any]) -> Any:
        for attempt in range(self.retries + 1):
            try:
                return send(**kwargs)
            except Exception as exc:  # litellm maps every provider failure onto its own exception types
                failure = exc
            if not _is_transient(failure) or attempt == self.retries:
                break
            if self._is_local() and isinstance(failure, _litellm().Timeout):
                break  # a local server is busy with the request that timed out: asking again queues behind it
            time.sleep(self._delay(attempt, failure))
        # Raised outside the handler so the provider's exception, whose text may hold the key, is not chained.
        raise self._error(failure, attempt + 1)

    def _delay(self, attempt: int, exc: Exception) -> float:
        delay = min(self.backoff_s * 2**attempt, _MAX_BACKOFF_S) * random.uniform(0.5, 1.0)
        retry_after = _retry_after(exc)
        return delay if retry_after is None else max(delay, min(retry_after, _MAX_RETRY_AFTER_S))

    def _error(self, exc: Exception, attempts: int) -> RalphError:
        """A one-line, key-free RalphError for a call that failed for good."""
        litellm = _litellm()
        detail = self._detail(exc)
        status = getattr(exc, "status_code", None)
        if _is_transient(exc):
            tries = f"{attempts} attempts" if attempts > 1 else "1 attempt"
            return RalphError(f"{self.name}: no answer after {tries}: {detail}")
        auth = isinstance(exc, litellm.AuthenticationError | litellm.PermissionDeniedError)
        if auth or status in (401, 403):
            return RalphError(f"{self.name}: authentication failed ({self._key_hint()}): {detail}")
        if isinstance(exc, litellm.NotFoundError) or status == 404:
            return RalphError(
                f"{self.name}: model or endpoint not found (check the model name and api_base): {detail}"
            )
        return RalphError(f"{self.name}: the model API refused the request: {detail}")

    def _detail(self, exc: Exception) -> str:
        """The first line of an exception's text, without litellm's prefixes and with secrets masked."""
        text = redact(str(exc) or type(exc).__name__, [self._api_key()])
        line = next((line.strip() for line in text.splitlines() if line.strip()), type(exc).__name__)
        line = _EXCEPTION_PREFIX_RE.sub("", line) or line
        return line if len(line) <= _DETAIL_CHARS else line[: _DETAIL_CHARS - 3] + "..."

    def _key_hint(self) -> str:
        if self.api_key_env:
            return f"check ${self.api_key_env}"
        try:
            missing = _litellm().validate_environment(self.model).get("missing_keys") or []
        except Exception:  # only a hint: litellm may not know what this provider needs
            missing = []
        return "set " + ", ".join(f"${name}" for name in missing) if missing else "check the API key"

    def _check_provider_key(self) -> None:
        """A model litellm cannot route, or a hosted one whose provider's key variable is not set: a
        configuration error at once (litellm would say "missing credentials" on every attempt,
        retried like a network error)."""
        litellm = _litellm()
        try:
            litellm.get_llm_provider(self.model, api_base=self.api_base)
        except Exception as exc:  # litellm raises assorted types for a model it cannot route
            raise RalphError(f"{self.name}: litellm cannot use this model: {self._detail(exc)}") from None
        if self.api_key_env or self.api_base or _local_base():
            return
        try:
            missing = litellm.validate_environment(self.model).get("missing_keys") or []
        except Exception:  # litellm may not know what this provider needs: the first call will say
            return
        if missing:
            names = " or ".join(f"${name}" for name in missing)
            raise RalphError(
                f"{self.name}: {names} is not set; export it, or name the variable (api_key_env) or a "
                f'server (api_base) under [tool.ralph.models."{self.model}"]'
            )

    def _is_local(self) -> bool:
        """Whether the model is served on this machine (a loopback api_base)."""
        openai = self.model.split("/", 1)[0] in ("openai", "text-completion-openai")
        base = self.api_base or (_local_base() if openai else None) or ""
        host = urllib.parse.urlparse(base).hostname or ""
        return host in ("localhost", "127.0.0.1", "::1") or host.startswith("127.")

    def _api_key(self) -> str | None:
        """The key to send, when litellm's own lookup of the provider's variable is not enough."""
        if self.api_key_env:
            key = os.environ.get(self.api_key_env)
            if not key:
                raise RalphError(f"{self.name}: ${self.api_key_env} is not set")
            return key
        local = self.api_base or _local_base()
        if self.model.split("/", 1)[0] in ("openai", "text-completion-openai") and local:
            return None if os.environ.get("OPENAI_API_KEY") else _NO_KEY
        return None

    # --- completions to candidates -------------------------------------------------------------------

    def _meta(self, completion: _Completion) -> dict[str, object]:
        reply = completion.text
        if len(reply) > _REPLY_META_CHARS:
            reply = reply[:_REPLY_META_CHARS] + "\n[...]"
        return {
            "model": self.model,
            "mode": "fim" if self.fim else "chat",
            "finish_reason": "answered" if completion.answered_early else completion.finish_reason,
            "latency_ms": round(completion.latency_ms, 1),
            "completion_tokens": completion.completion_tokens,
            "reply": redact(reply, [self._api_key()]),
        }

    def _edit(self, context: DraftContext, completion: _Completion, asked: Format) -> Candidate:
        """The candidate a chat reply proposes, or one whose error tells the model what to fix (in the
        edit format its prompt `asked` for)."""
        meta = self._meta(completion)
        summary = _summary(completion.text)
        changes, error = _changes(context, completion.text, asked=asked)
        if error is not None:
            if completion.finish_reason == "length":
                error += "\n(The reply was cut off at the token limit: send shorter edits.)"
            elif completion.finish_reason == "timeout":
                error += "\n(The reply was cut off at the time limit: send shorter edits.)"
            return Candidate(self.name, summary or "an edit that did not apply", (), error=error, meta=meta)
        description = summary or "edit " + ", ".join(change.path for change in changes)
        return Candidate(self.name, description, changes, meta=meta)

    def _fill(self, hole: _Hole, completion: _Completion) -> Candidate:
        """The candidate a FIM completion makes: the hole's lines replaced by the completion."""
        meta = self._meta(completion)
        description = f"rewrite {hole.label}"
        if not completion.text.strip():
            return Candidate(self.name, description, (), error="the completion was empty", meta=meta)
        # Trailing blank lines would pile up against the blank lines that already follow the hole.
        after = hole.head + _without_echo(completion.text, hole).rstrip() + "\n" + hole.tail
        if after == hole.text:
            error = "the completion reproduces the current code unchanged"
            return Candidate(self.name, description, (), error=error, meta=meta)
        return Candidate(self.name, description, (FileChange(hole.path, hole.text, after),), meta=meta)


def _without_echo(text: str, hole: _Hole) -> str:
    """A FIM completion without the prompt's prefix or suffix that some servers echo around it
    (`transformers serve` appends the suffix: the diff repeated everything after the hole)."""
    tail, head = hole.tail.strip(), hole.prompt.rstrip()
    if tail and text.rstrip().endswith(tail):
        text = text.rstrip()[: -len(tail)]
    if head and text.startswith(head):
        text = text[len(head) :]
    return text


def create_llm_drafter(model: str, **options: Any) -> LLMDrafter:
    """An LLMDrafter for `model`; `options` are LLMDrafter's keyword arguments (from flags or config).

    Unknown options and values of the wrong type are a RalphError naming them.
    """
    known = [name for name in inspect.signature(LLMDrafter).parameters if name != "model"]
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise RalphError(f"{model}: unknown option {', '.join(unknown)}; known: {', '.join(known)}")
    try:
        return LLMDrafter(model, **options)
    except (TypeError, ValueError) as exc:
        raise RalphError(f"{model}: bad option value ({exc})") from None


# ---------------------------------------------------------------------------------------------------
# Helpers


def _messages(context: DraftContext) -> list[dict[str, str]]:
    prompt = render(context)
    if context.attempts:
        prompt += "\n\n" + search_replace.REPAIR_PROMPT
    return [{"role": "system", "content": search_replace.SYSTEM_PROMPT}, {"role": "user", "content": prompt}]


def _function_messages(context: DraftContext) -> list[dict[str, str]] | None:
    """The short prompt: the first failure and the function it points at, and the corrected function
    asked for in one fence (replaced by name: `parse_function_blocks`). None when no function is
    suspected (the SEARCH/REPLACE prompt is used then)."""
    snippets = localize(context.project, context.suspicious, limit=1)
    if not snippets:
        return None
    snippet = snippets[0]
    parts = []
    if context.failing_tests:
        test = context.failing_tests[0]
        parts.append(f"The test {test.nodeid} fails:\n```\n{trim_message(test.message, 600)}\n```")
    parts.append(f"This is the code in {snippet.path}:\n```python\n{snippet.text}\n```")
    if context.attempts:
        parts.append(
            f"This attempt was rejected ({context.attempts[-1][1][:200]}):\n```diff\n{context.attempts[-1][0][:800]}\n```"
        )
    parts.append(functions.INSTRUCTION)
    return [
        {"role": "system", "content": functions.SYSTEM_PROMPT},
        {"role": "user", "content": "\n\n".join(parts)},
    ]


def _delta_text(chunk: Any) -> str:
    """The text a stream chunk adds (its first choice's delta)."""
    choices = getattr(chunk, "choices", None) or ()
    delta = getattr(choices[0], "delta", None) if choices else None
    text = getattr(delta, "content", None)
    return text if isinstance(text, str) else ""


def _choice_text(choice: Any) -> str:
    """The text of a chat choice (`message.content`) or a text-completion choice (`text`)."""
    message = getattr(choice, "message", None)
    text = getattr(message, "content", None) if message is not None else getattr(choice, "text", None)
    return text if isinstance(text, str) else ""


def _cost(litellm: Any, response: Any, model: str) -> float | None:
    try:
        cost = litellm.completion_cost(completion_response=response, model=model)
    except Exception:  # no price for local and unlisted models: an unknown cost, not an error
        return None
    return float(cost) if cost is not None else None


def _local_base() -> str | None:
    """An OpenAI-compatible server named in the environment."""
    return os.environ.get("OPENAI_BASE_URL") or os.environ.get("OPENAI_API_BASE") or None


def _is_transient(exc: Exception) -> bool:
    """Whether a failure may go away on retry: rate limits, timeouts, connection and server errors."""
    litellm = _litellm()
    transient = (
        litellm.RateLimitError,
        litellm.Timeout,
        litellm.APIConnectionError,
        litellm.InternalServerError,
        litellm.ServiceUnavailableError,
        litellm.BadGatewayError,
    )
    if isinstance(exc, transient):
        return True
    status = getattr(exc, "status_code", None)
    return isinstance(status, int) and (status in _TRANSIENT_STATUS or status >= 500)


def _retry_after(exc: Exception) -> float | None:
    """The seconds a rate-limited provider asked to wait (its Retry-After header), if it said."""
    headers = getattr(exc, "litellm_response_headers", None)
    if headers is None:
        headers = getattr(getattr(exc, "response", None), "headers", None)
    try:
        return float(headers.get("retry-after")) if headers is not None else None
    except (AttributeError, TypeError, ValueError):
        return None


def _distinct(drafts: list[Candidate], rejected: frozenset[str]) -> list[Candidate]:
    """The drafts without repeats and without edits rejected earlier in the run.

    Error candidates all share the fingerprint of an empty edit, so they are told apart by their error.
    """
    seen: set[str] = set()
    kept: list[Candidate] = []
    for draft in drafts:
        key = "error:" + draft.error if draft.error is not None else draft.fingerprint
        if key in seen or (draft.error is None and key in rejected):
            continue
        seen.add(key)
        kept.append(draft)
    return kept


def _share(candidates: list[Candidate], calls: list[_Call]) -> list[Candidate]:
    """The candidates with the calls' time, tokens and cost shared out: their sums are the true totals."""
    count = len(candidates)
    draft_ms = sum(call.latency_ms for call in calls) / count
    known_tokens = [call.tokens for call in calls if call.tokens is not None]
    known_costs = [call.cost_usd for call in calls if call.cost_usd is not None]
    quotient, remainder = divmod(sum(known_tokens), count)
    cost = sum(known_costs) / count if known_costs else None
    return [
        replace(
            candidate,
            draft_ms=draft_ms,
            tokens=quotient + (i < remainder) if known_tokens else None,
            cost_usd=cost,
        )
        for i, candidate in enumerate(candidates)
    ]


def _summary(reply: str) -> str:
    """The reply's first line of prose before its first edit, as a one-line description."""
    for raw in reply.splitlines():
        line = raw.strip()
        if line.startswith(("```", "~~~", "<<<<<<<", "--- ", "diff ", "@@")):
            break
        line = line.strip("#*>`_ ").strip()
        if " " in line:  # a line without spaces is more likely a file path than a sentence
            return line if len(line) <= _DESCRIPTION_CHARS else line[: _DESCRIPTION_CHARS - 3] + "..."
    return ""


def _changes(
    context: DraftContext, reply: str, formats: tuple[Format, ...] = FORMATS, *, asked: Format | None = None
) -> tuple[tuple[FileChange, ...], str | None]:
    """The file changes a reply makes to the project (`changes_from_reply`), or an error for the model."""
    return changes_from_reply(
        reply,
        functools.partial(read_for_edit, context.project),
        formats=formats,
        asked=asked,
        protected=context.protected,
        suspicious=[path for path, _ in context.suspicious],
    )


def _answered(context: DraftContext, text: str) -> bool:
    """Whether a reply read so far holds an answer to the function prompt: fenced functions that
    change functions of the suspicious files (the test shown back, or the function as it is, is
    none: the stream goes on), and the code is over (`_code_ended`: a reply may correct several
    functions, one fence each, and is used whole)."""
    blocks = function_blocks(text)
    return (
        bool(blocks)
        and _code_ended(text, {name for name, _ in blocks})
        and _changes(context, text, ("function",))[1] is None
    )


def _code_ended(text: str, given: set[str]) -> bool:
    """Whether a reply read so far is past its code: after its last closed fence comes a whole line
    of prose (not one ending in ':', which announces another block), or a fence opens on a function
    the reply already gave (the answer again, what small models write next). Blank lines, or a
    fence opening on another function, keep the stream going."""
    fences = list(_FENCE_RE.finditer(text))
    if len(fences) % 2:  # inside a fence
        again = _DEF_RE.search(text, fences[-1].end()) if len(fences) > 1 else None
        return again is not None and again.group(1) in given
    if not fences:
        return False
    after = text[fences[-1].end() :].split("\n")[1:-1]  # the whole lines after the closing fence
    return any(line.strip() and not line.rstrip().endswith(":") for line in after)


def _fim_hole(context: DraftContext) -> _Hole | None:
    """The body of the most suspicious function (docstring kept), or the suspicious lines' window."""
    suspicious = [
        (path, line) for path, line in context.suspicious if not is_protected(path, context.protected)
    ]
    snippets = localize(context.project, suspicious, limit=1)
    if not snippets:
        return None
    snippet = snippets[0]
    try:
        text = read_for_edit(context.project, snippet.path)
    except EditError:
        return None
    if text is None:
        return None
    lines = io.StringIO(text).readlines()  # split at "\n" only, as ast counts lines
    start = _body_start(text, snippet.start, snippet.end) or snippet.start
    head, tail = "".join(lines[: start - 1]), "".join(lines[snippet.end :])
    hint = _failure_hint(context, lines[snippet.start - 1]) if snippet.path.endswith(".py") else ""
    prompt = "".join(lines[: snippet.start - 1]) + hint + "".join(lines[snippet.start - 1 : start - 1])
    label = f"{snippet.path} lines {start}-{snippet.end}"
    return _Hole(snippet.path, text, head, tail, prompt, label)


def _body_start(source: str, start: int, end: int) -> int | None:
    """The first body line after the docstring of the function spanning lines start..end, when that
    body begins on a line of its own (else the whole function is rewritten)."""
    try:
        tree = parse(source)
    except (SyntaxError, ValueError):
        return None
    lines = io.StringIO(source).readlines()
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        if (min([node.lineno, *(d.lineno for d in node.decorator_list)]), node.end_lineno) != (start, end):
            continue
        head = node.body[0]
        docstring = (
            isinstance(head, ast.Expr)
            and isinstance(head.value, ast.Constant)
            and isinstance(head.value.value, str)
        )
        first = node.body[1] if docstring and len(node.body) > 1 else head
        own_line = not lines[first.lineno - 1][: first.col_offset].strip()
        return first.lineno if own_line else None
    return None


def _failure_hint(context: DraftContext, first_line: str) -> str:
    """A comment naming the first failing test and its assertion, indented like the function."""
    if not context.failing_tests:
        return ""
    test = context.failing_tests[0]
    last = next((line.strip() for line in reversed(test.message.splitlines()) if line.strip()), "")
    note = f"{test.nodeid} fails: {last}" if last else f"{test.nodeid} fails"
    indent = first_line[: len(first_line) - len(first_line.lstrip())]
    return f"{indent}# Bug: {note[:200]}\n"
