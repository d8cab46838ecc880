"""What `ralph bench drafter --drafter SPEC` asks for drafts: each kind of drafter behind one small
interface that returns every draft as it grew.

- ralph's sampler on a masked-diffusion LM (`diffusion:MODEL`, LLaDA, Dream, any masked LM): the
  requests asked at once are rows of one batch, as the drafter decodes its chat samples; the draft's
  text is read after every sampler step (still-masked positions left out);
- DiffusionGemma through transformers' own generation (`diffusion:MODEL` on such a checkpoint): rows
  of one `generate` batch; the text after every denoising step is the committed canvases and the
  current draft canvas (its argmax, what `generate` streams);
- a litellm model (`openai/NAME` with an `api_base`, hosted APIs): one request per draft, all sent at
  once from threads, as the loop asks a remote drafter; the text at every streamed chunk (once, at
  the end, for a reply that is not streamed).

Every source asks the drafter's own prompt of the task (its chat prompt, its function or
SEARCH/REPLACE prompt) and parses drafts in the formats the drafter itself accepts.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

from ralph.domain.errors import RalphError
from ralph.domain.protocols import DraftContext
from ralph.edits import FORMATS, Format

if TYPE_CHECKING:
    import torch

    from ralph.drafters.diffusion import DiffusionDrafter
    from ralph.drafters.diffusion_gemma import DiffusionGemmaDrafter
    from ralph.drafters.llm import LLMDrafter

Step = tuple[float, str]  # (seconds since the request was sent, the draft's text so far)


@dataclass(frozen=True)
class Draft:
    """One request's draft: its text after each step (the last is the complete draft), the time to
    the complete draft, and the tokens the model generated for it."""

    steps: tuple[Step, ...]
    seconds: float
    tokens: int


class DraftSource(Protocol):
    """A drafter as the bench asks it: `requests` drafts for one context, asked at once."""

    name: str
    formats: tuple[Format, ...]  # the edit formats the drafter accepts in a draft

    def drafts(self, context: DraftContext, requests: int) -> list[Draft]: ...


def answer_text(codec: Any, ids: Sequence[int], stop_ids: Sequence[int], skip: int | None = None) -> str:
    """The text of answer ids up to the first stop token, without the `skip` id (a mask)."""
    end = next((i for i, token in enumerate(ids) if token in stop_ids), len(ids))
    return str(codec.text([token for token in ids[:end] if token != skip]))


class _Steps:
    """Answer ids [rows, n] recorded after each step, with their time since `began`."""

    def __init__(self) -> None:
        self.began = time.perf_counter()
        self.seen: list[tuple[float, torch.Tensor]] = []

    def __call__(self, ids: torch.Tensor) -> None:
        # Only a copy is taken while the model runs: texts are made afterwards, off the clock.
        self.seen.append((time.perf_counter() - self.began, ids.detach().to("cpu", copy=True)))

    def texts(self, row: int, text: Any) -> tuple[Step, ...]:
        return tuple((seconds, text(ids[row].tolist())) for seconds, ids in self.seen)


class SamplerSource:
    """ralph's sampler on a masked-diffusion LM: `requests` rows of one chat batch (the first greedy,
    the others sampled, as the drafter's first round)."""

    formats: tuple[Format, ...] = ("search-replace",)

    def __init__(self, drafter: DiffusionDrafter) -> None:
        self.drafter = drafter
        self.name = drafter.name

    def drafts(self, context: DraftContext, requests: int) -> list[Draft]:
        lm = self.drafter.lm
        steps = _Steps()
        decodes = self.drafter.answers(context, greedy=True, rows=requests, on_step=steps)
        seconds = time.perf_counter() - steps.began
        if decodes is None:
            raise RalphError(f"{self.name}: the task's prompt does not fit the model's context")

        def text(ids: list[int]) -> str:
            return answer_text(lm, ids, lm.stop_ids, skip=lm.mask_id)

        return [
            Draft((*steps.texts(row, text), (seconds, final)), seconds, tokens)
            for row, (final, tokens) in enumerate(decodes.rows)
        ]


class GemmaSource:
    """DiffusionGemma's own generation: `requests` rows of one `generate` batch."""

    formats: tuple[Format, ...] = ("search-replace",)

    def __init__(self, drafter: DiffusionGemmaDrafter) -> None:
        self.drafter = drafter
        self.name = drafter.name
        self._calls = 0

    def drafts(self, context: DraftContext, requests: int) -> list[Draft]:
        from ralph.drafters.diffusion import chat_prompt_within

        lm, options = self.drafter.lm, self.drafter.options
        steps = _Steps()
        prompt = chat_prompt_within(lm, context, lm.room(options.answer_tokens))
        if prompt is None:
            raise RalphError(f"{self.name}: the task's prompt does not fit the model's context")
        self._calls += 1
        generation = lm.generate(
            prompt, requests, options.answer_tokens, seed=options.seed + self._calls, observe=steps
        )
        seconds = time.perf_counter() - steps.began

        def text(ids: list[int]) -> str:
            return answer_text(lm, ids, lm.stop_ids)

        return [
            Draft((*steps.texts(row, text), (seconds, answer.text)), seconds, answer.tokens)
            for row, answer in enumerate(generation.answers)
        ]


class ServedSource:
    """A litellm model: one request per draft, `requests` of them in flight at once."""

    formats: tuple[Format, ...] = FORMATS  # a reply is read in any format, whatever was asked

    def __init__(self, drafter: LLMDrafter) -> None:
        self.drafter = drafter
        self.name = drafter.name
        # A state of its own for every request: the drafter warms its temperature up when a model
        # repeats an edit for one state, which would make later requests unlike the first.
        self._states = itertools.count(1_000_000)

    def drafts(self, context: DraftContext, requests: int) -> list[Draft]:
        contexts = [replace(context, state_id=next(self._states)) for _ in range(requests)]
        with ThreadPoolExecutor(requests) as pool:
            return list(pool.map(self._draft, contexts))

    def _draft(self, context: DraftContext) -> Draft:
        steps: list[Step] = []
        began = time.perf_counter()
        candidates = self.drafter.draft(
            context, 1, on_text=lambda text: steps.append((time.perf_counter() - began, text))
        )
        seconds = time.perf_counter() - began
        tokens = candidates[0].meta.get("completion_tokens") if candidates else None
        return Draft(tuple(steps), seconds, tokens if isinstance(tokens, int) else 0)


def draft_source(
    spec: str, *, models: dict[str, dict[str, Any]] | None = None, sampler: dict[str, Any] | None = None
) -> DraftSource:
    """The source for `--drafter SPEC`, built as `ralph fix` builds the drafter (per-model settings
    and the sampler's); RalphError for a drafter that is none of the three kinds."""
    from ralph.drafters import create_drafter
    from ralph.drafters.diffusion import DiffusionDrafter
    from ralph.drafters.diffusion_gemma import DiffusionGemmaDrafter
    from ralph.drafters.llm import LLMDrafter

    drafter, _ = create_drafter(spec, models=models, sampler=sampler)
    if isinstance(drafter, DiffusionGemmaDrafter):
        return GemmaSource(drafter)
    if isinstance(drafter, DiffusionDrafter):
        return SamplerSource(drafter)
    if isinstance(drafter, LLMDrafter):
        return ServedSource(drafter)
    raise RalphError(
        f"bench drafter --drafter {spec}: measures diffusion:MODEL and litellm models (e.g. openai/NAME "
        "with --api-base), not this drafter"
    )
