"""`ralph bench drafter`: a drafter measured as its user needs it, or the diffusion sampler's settings
compared on one model.

`--drafter SPEC` (`bench_drafts`): any drafter of three kinds (ralph's sampler on a masked-diffusion
LM, DiffusionGemma's own generation, a served or hosted litellm model: `ralph.bench.draft_sources`)
drafts fixes for a fixed set of one-bug tasks (`ralph.bench.bug_tasks`), each task asked with 1, 2 and
4 requests at once, after one untimed warm-up draft. Per draft: the time to its first valid edit, to
its first stable edit (`ralph.bench.timing`), to the complete draft, the tokens generated, and whether
its edit makes the task's check pass. Per concurrency level: pass rate, valid rate, the p50 of those
times, latency p50 and p95, and tokens per second.

`--model PATH_OR_ID` (`bench_drafter`): every setting decodes the same small prompt set, one prompt at a time, at a fixed answer length (no early
stop at end-of-text, so every setting decodes the same number of tokens), after one untimed warm-up
pass. The figures per setting: forward passes (NFE), tokens decoded, tokens per forward pass and tokens
per second, measured in the same run on the same device.
"""

from __future__ import annotations

import functools
import tempfile
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ralph.bench.bug_tasks import MODULE, TASKS, BugTask, draft_context, passes, write_project
from ralph.bench.draft_sources import Draft, DraftSource, draft_source
from ralph.bench.timing import DraftResult, first_stable_s, first_valid_s, level_summary
from ralph.domain.errors import RalphError
from ralph.domain.protocols import DraftContext
from ralph.edits import Format, changes_from_reply, read_for_edit

if TYPE_CHECKING:
    import torch

    from ralph.drafters.diffusion import DiffusionLM
    from ralph.drafters.sampler import SamplerSettings

PROMPTS = (
    "Write a Python function `fib(n)` that returns the n-th Fibonacci number iteratively.",
    "This function should return the mean of a list but fails on [2, 4]:\n\n"
    "def mean(xs):\n    return sum(xs) / len(xs) - 1\n\nGive the fixed function.",
    "Write a Python function `is_palindrome(s)` that ignores case and non-letters.",
)
BENCH_SETTINGS = (
    "low-confidence",
    "low-confidence-x4",
    "entropy",
    "margin",
    "threshold-0.9",
    "threshold-0.7",
    "threshold-0.9-cached",
)


CONCURRENCY = (1, 2, 4)
Edit = tuple[tuple[str, str | None], ...]  # (path, new text or None for a deletion) per changed file


def bench_drafts(
    spec: str | DraftSource,
    *,
    models: dict[str, dict[str, Any]] | None = None,
    sampler: dict[str, Any] | None = None,
    tasks: Sequence[BugTask] | None = None,
    concurrency: Sequence[int] = CONCURRENCY,
    progress: Callable[[str], None] | None = None,
) -> dict[str, object]:
    """The drafter `spec` (built with the per-model `models` settings and the diffusion `sampler`'s,
    as `ralph fix` builds it; or a source already made) on the one-bug `tasks`, each asked with every number of requests at
    once in `concurrency`: `drafter`, `tasks`, `drafts`, `pass_rate` and `valid_rate` over all drafts,
    `levels` (one `timing.level_summary` per concurrency level) and `results` (one per draft)."""
    tasks = list(tasks or TASKS)
    if not tasks or not concurrency or min(concurrency) < 1:
        raise RalphError("bench drafter needs at least one task and concurrency levels of 1 or more")
    source = draft_source(spec, models=models, sampler=sampler) if isinstance(spec, str) else spec
    checked: dict[tuple[str, Edit], bool] = {}  # a check per task and edit: drafts often agree
    with tempfile.TemporaryDirectory(prefix="ralph-bench-drafter-") as tmp:
        contexts = [draft_context(t, write_project(t, Path(tmp) / t.name)) for t in tasks]
        source.drafts(contexts[0], 1)  # warm-up: the first request pays for lazy initialization
        levels, results = [], []
        for requests in concurrency:
            level: list[DraftResult] = []
            seconds = 0.0
            for task, context in zip(tasks, contexts, strict=True):
                began = time.perf_counter()
                drafts = source.drafts(context, requests)
                seconds += time.perf_counter() - began
                level += [judge(task, context, d, requests, source.formats, checked) for d in drafts]
            levels.append(level_summary(level, seconds))
            results += level
            if progress is not None:
                progress(f"{requests} at once: {levels[-1]}")
    count = len(results)
    return {
        "drafter": source.name,
        "tasks": len(tasks),
        "drafts": count,
        "pass_rate": round(sum(r.passed for r in results) / count, 3),
        "valid_rate": round(sum(r.valid for r in results) / count, 3),
        "levels": levels,
        "results": [asdict(r) for r in results],
    }


def judge(
    task: BugTask,
    context: DraftContext,
    draft: Draft,
    requests: int,
    formats: tuple[Format, ...],
    checked: dict[tuple[str, Edit], bool],
) -> DraftResult:
    """One draft's figures: its edit at every step, and whether the complete draft's edit passes the
    task's check (cached in `checked` per task and edit)."""
    parse = functools.lru_cache(maxsize=None)(functools.partial(parsed_edit, context, formats))
    edits = [(seconds, parse(text)) for seconds, text in draft.steps]
    final = edits[-1][1] if edits else None
    points: list[tuple[float, Hashable | None]] = list(edits)
    passed = False
    if final is not None:
        key = (task.name, final)
        if key not in checked:
            module = dict(final).get(MODULE, task.source)
            checked[key] = module is not None and passes(task, module)
        passed = checked[key]
    return DraftResult(
        task=task.name,
        requests=requests,
        latency_s=round(draft.seconds, 4),
        tokens=draft.tokens,
        valid=final is not None,
        passed=passed,
        first_valid_s=_rounded(first_valid_s(points)),
        first_stable_s=_rounded(first_stable_s(points)),
    )


def _rounded(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds, 4)


def parsed_edit(context: DraftContext, formats: tuple[Format, ...], text: str) -> Edit | None:
    """The edit a draft's text makes to the task's project, as (path, new text) per changed file;
    None when it parses into no edit that applies (as the drafter itself would read it)."""
    changes, error = changes_from_reply(
        text,
        functools.partial(read_for_edit, context.project),
        formats=formats,
        protected=context.protected,
        suspicious=[path for path, _ in context.suspicious],
    )
    if error is not None or not changes:
        return None
    return tuple((change.path, change.after) for change in changes)


LEVEL_COLUMNS = (
    ("requests", "requests at once"),
    ("drafts", "drafts"),
    ("pass_rate", "pass rate"),
    ("valid_rate", "valid edits"),
    ("first_valid_s_p50", "first valid edit p50 (s)"),
    ("first_stable_s_p50", "first stable edit p50 (s)"),
    ("latency_s_p50", "latency p50 (s)"),
    ("latency_s_p95", "latency p95 (s)"),
    ("tokens_per_s", "tokens/s"),
)


def level_rows(levels: Sequence[dict[str, object]]) -> list[list[str]]:
    """The levels' figures as table cells, in `LEVEL_COLUMNS` order (— for none)."""
    return [
        ["—" if level.get(key) is None else str(level[key]) for key, _ in LEVEL_COLUMNS] for level in levels
    ]


def markdown_table(levels: Sequence[dict[str, object]]) -> str:
    """The levels' figures as a Markdown table, for docs."""
    header = [title for _, title in LEVEL_COLUMNS]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in level_rows(levels)]
    return "\n".join(lines)


def bench_drafter(
    model: str,
    *,
    settings: Sequence[str | SamplerSettings] | None = None,
    prompts: Sequence[str] | None = None,
    device: str | None = None,
    answer_tokens: int = 64,
) -> list[dict[str, object]]:
    """One dict per sampler setting: `setting`, `nfe`, `tokens`, `tokens_per_nfe`, `tokens_per_s`, and
    the setting's parameters, `seconds`, `prefix_cache` (whether a cache was used), `prompts`, `model`,
    `device` and `sample` (the start of the first prompt's answer)."""
    from ralph.drafters.diffusion import INSTALL_HINT, load_diffusion_model

    try:
        import torch

        from ralph.drafters.sampler import SETTINGS, answer_batch
    except ImportError:
        raise RalphError(INSTALL_HINT) from None
    resolved = [_setting(s, SETTINGS) for s in settings or BENCH_SETTINGS]
    prompts = list(prompts or PROMPTS)
    if not prompts or answer_tokens < 1:
        raise RalphError("bench drafter needs at least one prompt and a positive answer length")
    lm = load_diffusion_model(model, device=device)
    batches = [
        answer_batch(lm.chat_prompt(p), answer_tokens, 1, mask_id=lm.mask_id).to(lm.device) for p in prompts
    ]
    lm(batches[0])  # warm-up: the first pass pays for lazy initialization (CUDA kernels, allocator)
    return [
        _bench_setting(s, lm, batches, torch.Generator(device=lm.device).manual_seed(0), answer_tokens, model)
        for s in resolved
    ]


def _bench_setting(
    setting: SamplerSettings,
    lm: DiffusionLM,
    batches: list[torch.Tensor],
    generator: torch.Generator,
    answer_tokens: int,
    model: str,
) -> dict[str, object]:
    """Decode every prompt with `setting` and return its row of figures (see `bench_drafter`)."""
    from ralph.drafters.sampler import decode

    nfe = tokens = 0
    seconds = 0.0
    cached = False
    sample = ""
    for batch in batches:
        result = decode(batch, lm, mask_id=lm.mask_id, settings=setting, shift=lm.shift, generator=generator)
        nfe += result.stats.nfe
        tokens += result.stats.tokens
        seconds += result.stats.seconds
        cached = cached or result.stats.prefix_cache
        if not sample:
            answer = result.ids[0, batch.shape[1] - answer_tokens :].tolist()
            sample = lm.text(answer)[:160]
    return {
        "setting": setting.name,
        "confidence": setting.confidence,
        "tokens_per_step": setting.tokens_per_step,
        "threshold": setting.threshold,
        "temperature": setting.temperature,
        "block_length": setting.block_length,
        "prefix_cache": cached,
        "prompts": len(batches),
        "nfe": nfe,
        "tokens": tokens,
        "seconds": round(seconds, 4),
        "tokens_per_nfe": round(tokens / nfe, 3) if nfe else 0.0,
        "tokens_per_s": round(tokens / seconds, 1) if seconds > 0 else 0.0,
        "model": model,
        "device": str(lm.device),
        "sample": sample,
    }


def _setting(setting: str | SamplerSettings, known: dict[str, SamplerSettings]) -> SamplerSettings:
    if not isinstance(setting, str):
        return setting
    if setting not in known:
        raise RalphError(f"unknown sampler setting {setting!r}; known: {', '.join(known)}")
    return known[setting]
