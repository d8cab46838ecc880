"""DiffusionGemma as a drafter: transformers' own block-diffusion generation, asked in chat form.

DiffusionGemma (`DiffusionGemmaForBlockDiffusion`, transformers 5.24 and later) is no masked LM: an
encoder reads the prompt into a KV cache, and a decoder denoises canvases of `canvas_length` tokens
after it, one canvas at a time, each starting from uniformly random tokens (there is no mask token).
Its `generate` does the rest: the entropy-bound sampler, the temperature schedule, adaptive stopping
and end-of-text, as the checkpoint's generation_config.json sets them. ralph's sampler and its
settings do not apply.

That generation only ever continues a prompt, and nothing after the canvas informs it, so there is no
infill from both sides of a span: the drafter asks in chat form for SEARCH/REPLACE blocks, several
answers in one batch, each sampled (the model always samples; the seed makes a run repeatable).

Denoising steps are counted by a streamer: `generate` hands it the draft canvas once per step of the
batch. The model's own tokens-per-forward figure of each answer comes back with the output.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ralph.domain.candidate import Candidate
from ralph.domain.errors import RalphError
from ralph.domain.protocols import DraftContext
from ralph.drafters.diffusion import (
    Checkpoint,
    DiffusionOptions,
    TextCodec,
    chat_prompt_within,
    edits_from_answer,
    stats_meta,
)
from ralph.drafters.queue import CandidateQueue

if TYPE_CHECKING:
    import torch

    from ralph.drafters.sampler import DecodeStats

SETTING = "entropy-bound"  # the sampler `generate` always runs (EntropyBoundSampler)


@dataclass(frozen=True)
class Answer:
    """One row of a generate call: its text up to end-of-text, the tokens the model generated for it
    (end-of-text included), and the model's own tokens per decoder forward pass for that row."""

    text: str
    tokens: int
    tokens_per_forward: float


@dataclass(frozen=True)
class Generation:
    """The rows of one generate call and its cost over the whole batch."""

    answers: list[Answer]
    stats: DecodeStats
    canvases: int  # blocks of `canvas_length` tokens denoised


class StepCounter:
    """A `generate` streamer that counts the denoising steps (one draft per step for the whole batch)
    and the canvases committed (the prompt, put first, is not one). With `observe`, it also hands it
    the generated ids so far [B, n] after every step: the committed canvases, then the current draft
    (the argmax canvas `generate` streams), for `ralph bench drafter`."""

    def __init__(self, observe: Callable[[torch.Tensor], None] | None = None) -> None:
        self.steps = 0
        self.puts = 0
        self.observe = observe
        self._committed: torch.Tensor | None = None

    def put(self, value: Any) -> None:
        self.puts += 1
        if self.observe is not None and self.puts > 1:  # the first put is the prompt
            import torch

            done = self._committed
            self._committed = value if done is None else torch.cat([done, value], dim=-1)

    def put_draft(self, value: Any, **kwargs: Any) -> None:
        self.steps += 1
        if self.observe is not None:
            import torch

            done = self._committed
            self.observe(value if done is None else torch.cat([done, value], dim=-1))

    def end(self) -> None:
        pass

    @property
    def canvases(self) -> int:
        return max(0, self.puts - 1)


class DiffusionGemmaLM(TextCodec):
    """A loaded DiffusionGemma checkpoint: chat prompts in, sampled answers out."""

    def __init__(self, checkpoint: Checkpoint) -> None:
        super().__init__(checkpoint.tokenizer)
        self.name = checkpoint.name
        self.model = checkpoint.model
        self.preset = checkpoint.preset
        self.device = checkpoint.device
        self.max_context = checkpoint.max_context
        self.canvas_length = int(self.model.config.canvas_length)
        generation = self.model.generation_config
        # The checkpoint's own end-of-text and padding, else the tokenizer's.
        own = generation.eos_token_id
        own_ids = own if isinstance(own, list) else [own]
        self.stop_ids: list[int] = list(
            dict.fromkeys(int(i) for i in [*own_ids, self.tokenizer.eos_token_id] if i is not None)
        )
        pads = (generation.pad_token_id, self.tokenizer.pad_token_id, *self.stop_ids[:1])
        self.pad_id: int | None = next((int(p) for p in pads if p is not None), None)

    def room(self, answer_tokens: int) -> int:
        """Prompt tokens that fit before an answer of `answer_tokens` (whole canvases)."""
        canvases = -(-answer_tokens // self.canvas_length)
        return self.max_context - canvases * self.canvas_length

    def generate(
        self,
        prompt: list[int],
        rows: int,
        answer_tokens: int,
        *,
        seed: int,
        observe: Callable[[torch.Tensor], None] | None = None,
    ) -> Generation:
        """`rows` answers to one prompt, sampled in one batch by the model's own `generate`.
        `observe` is handed the generated ids so far after every denoising step (`StepCounter`)."""
        import torch

        from ralph.drafters.sampler import DecodeStats

        ids = torch.tensor([prompt] * rows, dtype=torch.long, device=self.device)
        counter = StepCounter(observe)
        devices = [self.device] if self.device.type == "cuda" else []
        began = time.perf_counter()
        # generate draws from torch's global generator: seed a fork of it, leave the caller's as it was.
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(seed)
            out = self.model.generate(
                ids,
                max_new_tokens=answer_tokens,
                eos_token_id=self.stop_ids or None,
                pad_token_id=self.pad_id,
                streamer=counter,
                return_dict_in_generate=True,
            )
        seconds = time.perf_counter() - began
        answers = [
            self._answer(out.sequences[row, len(prompt) :], out.tokens_per_forward, row)
            for row in range(rows)
        ]
        stats = DecodeStats(
            setting=SETTING,
            nfe=counter.steps,
            tokens=sum(a.tokens for a in answers),
            seconds=seconds,
            rows=rows,
            prefix_cache=True,  # the encoder's KV cache of the prompt, exact by design
        )
        return Generation(answers, stats, counter.canvases)

    def _answer(self, generated: torch.Tensor, tokens_per_forward: Any, row: int) -> Answer:
        ids = [int(i) for i in generated.tolist()]
        end = next((i for i, token in enumerate(ids) if token in self.stop_ids), None)
        rate = float(tokens_per_forward[row]) if tokens_per_forward is not None else 0.0
        if end is None:
            return Answer(self.text(ids), len(ids), rate)
        return Answer(self.text(ids[:end]), end + 1, rate)


class DiffusionGemmaDrafter:
    """Proposes SEARCH/REPLACE chat answers of a DiffusionGemma model; [] when all are spent for this
    state. Of `DiffusionOptions`, answer_tokens, chat_samples, chat_rounds, max_context, seed and device
    apply; the sampler settings, infill and chat_temperature do not (the model samples by its own
    generation config)."""

    remote = False  # (the model runs here)
    priced = True  # (free)

    def __init__(self, lm: DiffusionGemmaLM, options: DiffusionOptions | None = None) -> None:
        self.lm = lm
        self.options = options or DiffusionOptions()
        if self.options.mode == "infill":
            raise RalphError(
                f"{lm.name}: DiffusionGemma cannot infill (its generation only continues a prompt); "
                "use mode chat or auto"
            )
        self.name = f"diffusion:{lm.name}"
        self._calls = 0  # each generate call gets its own seed: later rounds sample anew
        self._context: DraftContext | None = None
        self._queue = CandidateQueue(self._candidates)

    def draft(self, context: DraftContext, n: int) -> list[Candidate]:
        """Up to `n` candidates not yet proposed for this state nor rejected."""
        self._context = context  # chat rounds render the latest attempts and rejections
        return self._queue.take(context, n)

    def _candidates(self, context: DraftContext) -> Iterator[Candidate]:
        for _ in range(self.options.chat_rounds):
            yield from self._chat(self._context or context)

    def _chat(self, context: DraftContext) -> Iterator[Candidate]:
        options = self.options
        prompt = chat_prompt_within(self.lm, context, self.lm.room(options.answer_tokens))
        if prompt is None:
            return
        result = self.lm.generate(
            prompt, options.chat_samples, options.answer_tokens, seed=options.seed + self._calls
        )
        self._calls += 1
        meta = {"mode": "chat", **stats_meta(result.stats), "canvases": result.canvases}
        for row, answer in enumerate(result.answers):
            base = Candidate(
                drafter=self.name,
                description=f"chat answer {row + 1}",
                changes=(),
                draft_ms=result.stats.seconds * 1000 / result.stats.rows,
                tokens=answer.tokens,
                meta={
                    **meta,
                    "answer": answer.text,
                    "tokens_per_forward": round(answer.tokens_per_forward, 3),
                },
            )
            changes, error = edits_from_answer(context, answer.text)
            yield replace(base, changes=changes, error=error)
