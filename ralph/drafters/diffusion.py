"""The diffusion drafter: candidate edits from a locally hosted masked-diffusion language model.

`--drafter diffusion:MODEL` loads MODEL (a Hugging Face id or a local directory) with torch and
transformers, on CUDA in bfloat16 when there is a GPU, else on the CPU in float32. Presets cover LLaDA,
Dream, Dream-Coder and DiffuCoder; any transformers masked LM whose tokenizer has a mask token (BERT,
ModernBERT, ...) works too. Only `model(input_ids).logits` is ever called: the models' own generation
code does not run under transformers 5, and the sampling is ralph's (`ralph.drafters.sampler`).
DiffusionGemma checkpoints are the exception: they draft through transformers' own generation
(`ralph.drafters.diffusion_gemma`).

Two ways to draft, for each state of the code:

- infill: for the functions around the most suspicious lines, mask a suspicious line (then the whole
  function body) and decode it from the code on both sides, at a few lengths around the original's, all
  lengths in one batch;
- chat (instruction-tuned models, i.e. tokenizers with a chat template): the rendered draft context and
  an instruction to answer with SEARCH/REPLACE blocks; the answer is decoded in blocks, left to right,
  and parsed with `ralph.edits` (an unusable answer becomes a candidate with `error` set).

torch and transformers are an optional extra, imported only when a model is loaded.
"""

from __future__ import annotations

import ast
import functools
import inspect
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ralph.context import Snippet, localize, render
from ralph.domain.candidate import Candidate, FileChange, is_protected
from ralph.domain.errors import RalphError
from ralph.domain.protocols import DraftContext
from ralph.domain.pyast import parse
from ralph.drafters.queue import CandidateQueue
from ralph.edits import changes_from_reply, read_for_edit, search_replace
from ralph.sandboxes.workspace import read_text_beneath

if TYPE_CHECKING:
    import torch

    from ralph.drafters.diffusion_gemma import DiffusionGemmaDrafter
    from ralph.drafters.sampler import DecodeStats, SamplerSettings, TailFn

INSTALL_HINT = "the diffusion drafter needs `pip install 'ralph-loop[diffusion]'`"
MAX_BODY_LINES = 20  # longer function bodies are not infilled whole: too many tokens to guess at once


@dataclass(frozen=True)
class Preset:
    """How to load and drive one family of models."""

    name: str
    mask_id: int | None  # None: the tokenizer's mask token
    shift: bool  # logits at position i predict token i + 1 (models initialized from an AR model)
    trust_remote_code: bool = False
    auto_class: str = "AutoModel"
    stop_tokens: tuple[str, ...] = ()  # end an answer; the first present one also pads and fills
    # Native transformers models take a 2D attention mask for padded rows. The presets' remote code is
    # only ever called as model(input_ids), so their padded rows are filled with end-of-text instead,
    # which is what their instruction data pads answers with.
    padding_mask: bool = True
    # The model drafts through its own `generate` (ralph.drafters.diffusion_gemma), not ralph's sampler.
    own_generation: bool = False


_LLADA = Preset(
    "llada",
    126336,
    shift=False,
    trust_remote_code=True,
    stop_tokens=("<|endoftext|>", "<|eot_id|>"),
    padding_mask=False,
)
_DREAM = Preset(
    "dream",
    151666,
    shift=True,
    trust_remote_code=True,
    stop_tokens=("<|endoftext|>", "<|im_end|>"),
    padding_mask=False,
)

PRESETS: dict[str, Preset] = {
    "GSAI-ML/LLaDA-8B-Instruct": _LLADA,
    "Dream-org/Dream-v0-Instruct-7B": _DREAM,
    "Dream-org/Dream-Coder-v0-Instruct-7B": replace(_DREAM, name="dream-coder"),
    "apple/DiffuCoder-7B-cpGRPO": replace(_DREAM, name="diffucoder"),
}
_DIFFUSION_GEMMA = Preset(
    "diffusion-gemma",
    None,
    shift=False,
    auto_class="DiffusionGemmaForBlockDiffusion",
    own_generation=True,
)
# Local copies are recognized by the model_type of their config.json (DiffuCoder's is Dream's), or by
# their architecture.
_MODEL_TYPES = {"llada": _LLADA, "dream": _DREAM, "diffusion_gemma": _DIFFUSION_GEMMA}
_ARCHITECTURES = {"DiffusionGemmaForBlockDiffusion": _DIFFUSION_GEMMA}


@dataclass(frozen=True)
class DiffusionOptions:
    """What `create_diffusion_drafter(spec, **options)` accepts; every field has a default."""

    device: str | None = None  # "cuda", "cpu", ...; default: CUDA when available
    sampler: str | SamplerSettings = "threshold-0.9"  # a name in sampler.SETTINGS, or settings
    mode: Literal["auto", "infill", "chat"] = "auto"  # auto: infill, then chat when there's a template
    answer_tokens: int = 256  # chat answer length (masks), decoded in the sampler's blocks
    chat_samples: int = 4  # answers per chat round, one batch: the first greedy, the others sampled
    chat_rounds: int = 1
    chat_temperature: float = 0.7
    spread: int = 2  # infill lengths: the original's token count +- spread steps
    snippets: int = 3  # suspicious functions to infill
    max_context: int = 4096  # tokens, further capped by the model's own limit
    syntax_filter: bool = True  # drop infills that break a Python file that parsed before
    seed: int = 0
    # Overrides of the preset (or of what a model's config implies), for checkpoints no preset knows.
    mask_id: int | None = None
    shift: bool | None = None
    trust_remote_code: bool | None = None

    def __post_init__(self) -> None:
        if self.mode not in ("auto", "infill", "chat"):
            raise RalphError(f"diffusion drafter mode {self.mode!r}: use auto, infill or chat")
        counts = {"answer_tokens": self.answer_tokens, "chat_samples": self.chat_samples}
        counts |= {"snippets": self.snippets, "max_context": self.max_context}
        for name, value in counts.items():
            if value < 1:
                raise RalphError(f"diffusion drafter option {name} must be at least 1, not {value}")
        if self.spread < 0 or self.chat_rounds < 0 or self.chat_temperature < 0:
            raise RalphError(
                "diffusion drafter options spread, chat_rounds and chat_temperature can't be negative"
            )


def create_diffusion_drafter(spec: str, **options: Any) -> DiffusionDrafter | DiffusionGemmaDrafter:
    """The drafter for `diffusion:MODEL`; `options` are the fields of `DiffusionOptions`. A DiffusionGemma
    checkpoint gets the drafter that runs its own generation."""
    model = spec.removeprefix("diffusion:")
    if not spec.startswith("diffusion:") or not model.strip():
        raise RalphError("--drafter diffusion:MODEL needs a model: a Hugging Face id or a local directory")
    known = {f.name for f in fields(DiffusionOptions)}
    unknown = sorted(set(options) - known)
    if unknown:
        raise RalphError(
            f"unknown diffusion drafter option {', '.join(unknown)}; known: {', '.join(sorted(known))}"
        )
    opts = DiffusionOptions(**options)
    loaded = load_checkpoint(
        model,
        device=opts.device,
        mask_id=opts.mask_id,
        shift=opts.shift,
        trust_remote_code=opts.trust_remote_code,
        max_context=opts.max_context,
    )
    if loaded.preset.own_generation:
        from ralph.drafters.diffusion_gemma import DiffusionGemmaDrafter, DiffusionGemmaLM

        return DiffusionGemmaDrafter(DiffusionGemmaLM(loaded), opts)
    return DiffusionDrafter(DiffusionLM.of(loaded), opts)


# ---------------------------------------------------------------------------------------------------
# Loading


@dataclass(frozen=True)
class Checkpoint:
    """A loaded model, its tokenizer and preset, before a drafter wraps them."""

    name: str  # as the user gave it
    preset: Preset
    model: Any
    tokenizer: Any
    device: torch.device
    max_context: int  # tokens: the option, capped by the model's own limit


class TextCodec:
    """The tokenizer side of a loaded model: text to token ids and back, and chat prompts."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        cls, bos, sep = tokenizer.cls_token_id, tokenizer.bos_token_id, tokenizer.sep_token_id
        # Text is framed like the model's training text: [CLS] ... [SEP] for BERT-style models, a
        # beginning-of-text token where the tokenizer has one. That also keeps position 0 unmasked,
        # which a shifted model cannot score.
        self.begin: list[int] = [cls] if cls is not None else [bos] if bos is not None else []
        self.end: list[int] = [sep] if cls is not None and sep is not None else []

    @property
    def can_chat(self) -> bool:
        """Whether the tokenizer has a chat template (an instruction-tuned model)."""
        return bool(getattr(self.tokenizer, "chat_template", None))

    def encode(self, text: str) -> list[int]:
        """Token ids of `text`, without special tokens added."""
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def text(self, ids: Sequence[int]) -> str:
        """The text of token ids, special tokens dropped."""
        return str(
            self.tokenizer.decode(list(ids), skip_special_tokens=True, clean_up_tokenization_spaces=False)
        )

    def chat_prompt(self, message: str) -> list[int]:
        """Token ids of a user turn asking `message`, up to where the answer starts."""
        if not self.can_chat:
            return [*self.begin, *self.encode(message + "\n\n")]
        text = self.tokenizer.apply_chat_template(
            [{"role": "user", "content": message}], tokenize=False, add_generation_prompt=True
        )
        return self.encode(str(text))


class DiffusionLM(TextCodec):
    """A loaded model and its tokenizer: a `sampler.LogitsFn`, with a prefix cache where the model has one.

    The prefix cache is used when the model's forward takes a transformers `Cache` (`cache` or
    `past_key_values`) and returns one that can be cropped; otherwise `prefill` returns no tail
    function and the sampler runs full passes. That is checked on the model's actual output, not
    assumed: it holds for native transformers decoders (tested: cached passes reproduce full ones);
    LLaDA's remote code refuses a cache (its forward asserts `not use_cache`), so it runs without;
    whether Dream's remote code returns a usable cache under a given transformers version could not
    be checked offline.
    """

    def __init__(
        self, name: str, model: Any, tokenizer: Any, preset: Preset, *, device: torch.device, max_context: int
    ) -> None:
        super().__init__(tokenizer)
        self.name = name
        self.model = model
        self.preset = preset
        self.device = device
        self.max_context = max_context
        self.shift = preset.shift
        mask_id = preset.mask_id if preset.mask_id is not None else tokenizer.mask_token_id
        if mask_id is None:
            raise RalphError(f"{name}: the tokenizer has no mask token; pass the mask_id option")
        self.mask_id: int = mask_id
        vocab = _vocab_size(model)
        if vocab is not None and not 0 <= mask_id < vocab:
            raise RalphError(f"{name}: mask id {mask_id} is outside the model's {vocab}-token vocabulary")
        parameters = inspect.signature(model.forward).parameters
        self._cache_kwarg = _cache_kwarg(parameters)
        # A full pass asks for no cache where the forward can be told: transformers' decoders build
        # one by default, keys and values of every layer that the pass then throws away.
        self._no_cache: dict[str, bool] = {"use_cache": False} if "use_cache" in parameters else {}
        vocabulary = tokenizer.get_vocab()
        named = [vocabulary.get(token) for token in preset.stop_tokens]
        self.stop_ids: list[int] = _unique([*named, tokenizer.eos_token_id, *self.end])
        self.pad_id: int = self._pad_id()

    @classmethod
    def of(cls, checkpoint: Checkpoint) -> DiffusionLM:
        """The loaded checkpoint as a `sampler.LogitsFn`."""
        c = checkpoint
        return cls(c.name, c.model, c.tokenizer, c.preset, device=c.device, max_context=c.max_context)

    def _pad_id(self) -> int:
        if not self.preset.padding_mask and self.stop_ids:
            return self.stop_ids[0]
        for candidate in (self.tokenizer.pad_token_id, self.tokenizer.eos_token_id):
            if candidate is not None:
                return int(candidate)
        return 0  # padded positions are masked out of attention, so any id does

    def __call__(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Logits [B, L, V] for input ids [B, L]."""
        import torch

        with torch.no_grad():
            return self.model(input_ids, **self._no_cache, **_mask_kwargs(attention_mask)).logits

    def prefill(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None, keep: int
    ) -> tuple[torch.Tensor, TailFn | None]:
        """Full logits, and a function scoring positions `keep`.. from the first `keep` positions' cache."""
        import torch

        if self._cache_kwarg is None or keep == 0:
            return self(input_ids, attention_mask), None
        try:
            with torch.no_grad():
                out = self.model(input_ids, use_cache=True, **_mask_kwargs(attention_mask))
        except (AssertionError, NotImplementedError, TypeError, ValueError):
            # A forward that takes `use_cache` and refuses it: LLaDA's remote code asserts
            # `not use_cache` ("The kvcache is not supported for MDM"). Full passes from now on.
            self._cache_kwarg = None
            return self(input_ids, attention_mask), None
        cache = _output_cache(out)
        if cache is None or not (hasattr(cache, "crop") and hasattr(cache, "get_seq_length")):
            return out.logits, None
        kwarg = self._cache_kwarg

        def tail(ids: torch.Tensor) -> torch.Tensor:
            # Each pass appends the tail's keys and values; cut back to the prefix first. A negative
            # crop removes that many positions in both transformers 4 and 5.
            extra = cache.get_seq_length() - keep
            if extra > 0:
                cache.crop(-extra)
            with torch.no_grad():
                return self.model(
                    ids, use_cache=True, **{kwarg: cache}, **_mask_kwargs(attention_mask)
                ).logits

        return out.logits, tail


def load_diffusion_model(
    model: str,
    *,
    device: str | None = None,
    mask_id: int | None = None,
    shift: bool | None = None,
    trust_remote_code: bool | None = None,
    max_context: int = 4096,
) -> DiffusionLM:
    """Load MODEL (a Hugging Face id or a local directory) with its preset for ralph's sampler; raises
    RalphError when the extra is missing, the model cannot be loaded, or it drafts through its own
    generation (DiffusionGemma), which the sampler does not drive."""
    loaded = load_checkpoint(
        model,
        device=device,
        mask_id=mask_id,
        shift=shift,
        trust_remote_code=trust_remote_code,
        max_context=max_context,
    )
    if loaded.preset.own_generation:
        raise RalphError(
            f"{model}: a {loaded.preset.name} model decodes with its own generation, not ralph's sampler"
        )
    return DiffusionLM.of(loaded)


def load_checkpoint(
    model: str,
    *,
    device: str | None = None,
    mask_id: int | None = None,
    shift: bool | None = None,
    trust_remote_code: bool | None = None,
    max_context: int = 4096,
) -> Checkpoint:
    """Load MODEL (a Hugging Face id or a local directory) and its tokenizer, with the preset its id or
    config.json implies; raises RalphError when the extra is missing or the model cannot be loaded. A
    local directory is loaded with local_files_only."""
    try:
        import torch
        import transformers
    except ImportError:
        raise RalphError(INSTALL_HINT) from None
    path = Path(model).expanduser()
    local = path.is_dir()
    preset = preset_for(model)
    preset = replace(
        preset,
        mask_id=preset.mask_id if mask_id is None else mask_id,
        shift=preset.shift if shift is None else shift,
        trust_remote_code=preset.trust_remote_code if trust_remote_code is None else trust_remote_code,
    )
    auto = getattr(transformers, preset.auto_class, None)
    if auto is None:
        raise RalphError(
            f"diffusion model {model}: transformers {transformers.__version__} has no {preset.auto_class}"
        )
    target = torch.device(device) if device else torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if target.type == "cuda" and not torch.cuda.is_available():
        raise RalphError(
            f"diffusion model {model}: device {device} requested, but no CUDA device is available"
        )
    dtype = torch.bfloat16 if target.type == "cuda" else torch.float32
    dtype_kwarg = "dtype" if int(transformers.__version__.split(".")[0]) >= 5 else "torch_dtype"
    source = str(path) if local else model
    common = {"trust_remote_code": preset.trust_remote_code, "local_files_only": local}
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(source, **common)
        net = auto.from_pretrained(source, **{dtype_kwarg: dtype}, **common).to(target).eval()
    except (OSError, ValueError, ImportError, RuntimeError) as exc:
        raise RalphError(f"cannot load diffusion model {model}: {_first_line(exc)}") from None
    text_config = net.config.get_text_config() if hasattr(net.config, "get_text_config") else net.config
    limit = getattr(text_config, "max_position_embeddings", None) or getattr(
        text_config, "max_sequence_length", None
    )
    context = min(max_context, int(limit)) if limit else max_context
    return Checkpoint(model, preset, net, tokenizer, target, context)


def preset_for(model: str) -> Preset:
    """The preset of MODEL: by its Hugging Face id, else by the model_type or architectures of its
    config.json (a local directory's, or fetched from the hub); RalphError when it has neither."""
    path = Path(model).expanduser()
    if path.is_dir():
        return _preset(model, _read_config(path))
    if model.startswith((".", "/", "~")) or model.count("/") > 1:
        raise RalphError(f"diffusion model {model}: no such directory")
    return _preset(model, _hub_config(model))


def _preset(model: str, config: dict[str, Any]) -> Preset:
    for hub_id, preset in PRESETS.items():
        if model.lower() == hub_id.lower():
            return preset
    model_type = str(config.get("model_type", "")).lower()
    if model_type in _MODEL_TYPES:
        return _MODEL_TYPES[model_type]
    architectures = [str(a) for a in config.get("architectures") or []]
    for architecture in architectures:
        if architecture in _ARCHITECTURES:
            return _ARCHITECTURES[architecture]
    if any(a.endswith("ForMaskedLM") for a in architectures):
        return Preset("masked-lm", None, shift=False, auto_class="AutoModelForMaskedLM")
    if any(a.endswith("ForCausalLM") for a in architectures):
        # Only meaningful for checkpoints trained for masked diffusion from an AR model that kept the
        # causal-LM class; their tokenizers seldom know the mask token, so mask_id is usually needed.
        return Preset("causal-lm", None, shift=True, auto_class="AutoModelForCausalLM")
    raise RalphError(
        f"{model}: neither a known diffusion model nor a masked LM (architectures: "
        f"{', '.join(architectures) or 'none'}); known: {', '.join(PRESETS)}"
    )


def _read_config(path: Path) -> dict[str, Any]:
    try:
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise RalphError(f"diffusion model {path}: no readable config.json ({_first_line(exc)})") from None
    if not isinstance(config, dict):
        raise RalphError(f"diffusion model {path}: config.json is not an object")
    return config


def _hub_config(model: str) -> dict[str, Any]:
    """The config of a hub model; presets need none (their id says it all)."""
    if model.lower() in (hub_id.lower() for hub_id in PRESETS):
        return {}
    try:
        from huggingface_hub import hf_hub_download

        return _read_config(Path(hf_hub_download(model, "config.json")).parent)
    except (OSError, ValueError) as exc:
        raise RalphError(f"diffusion model {model}: cannot fetch its config ({_first_line(exc)})") from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _vocab_size(model: Any) -> int | None:
    embeddings = getattr(model, "get_input_embeddings", lambda: None)()
    size = getattr(embeddings, "num_embeddings", None)
    return None if size is None else int(size)


def _cache_kwarg(parameters: Mapping[str, inspect.Parameter]) -> str | None:
    """The name under which the model's forward (its `parameters`) takes a KV cache (transformers 5
    renamed it)."""
    if "use_cache" not in parameters:
        return None
    return next((name for name in ("cache", "past_key_values") if name in parameters), None)


def _output_cache(out: Any) -> Any:
    keys = out.keys() if hasattr(out, "keys") else ()
    return next((out[key] for key in ("cache", "past_key_values") if key in keys), None)


def _mask_kwargs(attention_mask: torch.Tensor | None) -> dict[str, torch.Tensor]:
    return {} if attention_mask is None else {"attention_mask": attention_mask}


def _unique(ids: Sequence[int | None]) -> list[int]:
    return list(dict.fromkeys(int(i) for i in ids if i is not None))


# ---------------------------------------------------------------------------------------------------
# Drafting


@dataclass(frozen=True)
class Decodes:
    """Rows of one decode call turned into text: (text, tokens the model decoded) per row."""

    rows: list[tuple[str, int]]
    stats: DecodeStats


class DiffusionDrafter:
    """Proposes infills and chat answers of a diffusion model; [] when all are spent for this state."""

    remote = False  # (the model runs here)
    priced = True  # (free)

    def __init__(self, lm: DiffusionLM, options: DiffusionOptions | None = None) -> None:
        import torch

        from ralph.drafters.sampler import SETTINGS

        self.lm = lm
        self.options = options or DiffusionOptions()
        self.name = f"diffusion:{lm.name}"
        sampler = self.options.sampler
        if isinstance(sampler, str):
            if sampler not in SETTINGS:
                raise RalphError(f"unknown sampler setting {sampler!r}; known: {', '.join(SETTINGS)}")
            sampler = SETTINGS[sampler]
        self.settings: SamplerSettings = sampler
        self._generator = torch.Generator(device=lm.device).manual_seed(self.options.seed)
        self._context: DraftContext | None = None
        self._queue = CandidateQueue(self._candidates)

    def draft(self, context: DraftContext, n: int) -> list[Candidate]:
        """Up to `n` candidates not yet proposed for this state nor rejected."""
        self._context = context  # chat rounds render the latest attempts and rejections
        return self._queue.take(context, n)

    def _candidates(self, context: DraftContext) -> Iterator[Candidate]:
        mode = self.options.mode
        if mode in ("auto", "infill"):
            yield from self._infills(context)
        if mode == "chat" or (mode == "auto" and self.lm.can_chat):
            for round_ in range(self.options.chat_rounds):
                yield from self._chat(self._context or context, greedy=round_ == 0)

    # Infill ---------------------------------------------------------------------------------------

    def _infills(self, context: DraftContext) -> Iterator[Candidate]:
        for snippet in localize(context.project, context.suspicious, limit=self.options.snippets):
            if is_protected(snippet.path, context.protected):
                continue
            source = read_text_beneath(context.project, snippet.path)
            if source is None:
                continue
            for span in infill_spans(snippet, source, context.suspicious):
                yield from self._infill(snippet.path, source, span)

    def _infill(self, path: str, source: str, span: tuple[int, int]) -> Iterator[Candidate]:
        from ralph.drafters.sampler import decode, infill_batch, infill_lengths

        lm = self.lm
        head, core, tail = split_span(source, span)
        lengths = infill_lengths(len(lm.encode(core)), self.options.spread)
        room = lm.max_context - max(lengths) - len(lm.begin) - len(lm.end)
        if room <= 0:
            return
        # The code right around the span matters most: a quarter of the room for what follows it.
        suffix = lm.encode(tail)[: room // 4]
        prefix = _last(lm.encode(head), room - len(suffix))
        ids, attention = infill_batch(
            [*lm.begin, *prefix], [*suffix, *lm.end], lengths, mask_id=lm.mask_id, pad_id=lm.pad_id
        )
        result = decode(
            ids.to(lm.device),
            lm,
            mask_id=lm.mask_id,
            settings=replace(self.settings, block_length=None),  # both sides inform the whole span
            shift=lm.shift,
            attention_mask=attention.to(lm.device) if lm.preset.padding_mask else None,
            generator=self._generator,
        )
        start = len(lm.begin) + len(prefix)
        check = self.options.syntax_filter and path.endswith(".py") and _parses(source)
        a, b = span
        where = f"{path}:{a}" if a == b else f"{path}:{a}-{b}"
        for row, n in enumerate(lengths):
            new_core = lm.text(result.ids[row, start : start + n].tolist())
            after = head + new_core + tail
            if new_core == core or (check and not _parses(after)):
                continue
            yield Candidate(
                drafter=self.name,
                description=f"{where} infilled ({n} tokens)",
                changes=(FileChange(path, source, after),),
                draft_ms=result.stats.seconds * 1000 / result.stats.rows,
                tokens=result.row_tokens(row),
                meta={"mode": "infill", "span": where, "length": n, **stats_meta(result.stats)},
            )

    # Chat -----------------------------------------------------------------------------------------

    def _chat(self, context: DraftContext, *, greedy: bool) -> Iterator[Candidate]:
        decodes = self.answers(context, greedy=greedy)
        if decodes is None:
            return
        for row, (text, tokens) in enumerate(decodes.rows):
            base = Candidate(
                drafter=self.name,
                description=f"chat answer {row + 1}",
                changes=(),
                draft_ms=decodes.stats.seconds * 1000 / decodes.stats.rows,
                tokens=tokens,
                meta={"mode": "chat", "answer": text, **stats_meta(decodes.stats)},
            )
            changes, error = edits_from_answer(context, text)
            yield replace(base, changes=changes, error=error)

    def answers(
        self,
        context: DraftContext,
        *,
        greedy: bool,
        rows: int | None = None,
        on_step: Callable[[torch.Tensor], None] | None = None,
    ) -> Decodes | None:
        """Decode a batch of chat answers to the rendered context (`rows` of them, default
        chat_samples); None when the prompt can't fit. `on_step` is handed the answer ids [rows,
        answer_tokens] after every step of the sampler (masks where nothing is decoded yet)."""
        from ralph.drafters.sampler import answer_batch, decode

        lm, options = self.lm, self.options
        prompt = chat_prompt_within(lm, context, lm.max_context - options.answer_tokens)
        if prompt is None:
            return None
        rows = rows or options.chat_samples
        watch = on_step or (lambda ids: None)
        sampled = max(self.settings.temperature, options.chat_temperature)
        temperatures = [self.settings.temperature if greedy and row == 0 else sampled for row in range(rows)]
        result = decode(
            answer_batch(prompt, options.answer_tokens, rows, mask_id=lm.mask_id).to(lm.device),
            lm,
            mask_id=lm.mask_id,
            settings=self.settings,
            shift=lm.shift,
            temperatures=temperatures,
            stop_ids=lm.stop_ids,
            generator=self._generator,
            on_step=lambda ids: watch(ids[:, len(prompt) :]),
        )
        answers = []
        for row in range(rows):
            answer = result.ids[row, len(prompt) :].tolist()
            end = next((i for i, token in enumerate(answer) if token in lm.stop_ids), len(answer))
            answers.append((lm.text(answer[:end]), result.row_tokens(row)))
        return Decodes(answers, result.stats)


def chat_prompt_within(codec: TextCodec, context: DraftContext, room: int) -> list[int] | None:
    """Token ids of the chat prompt for `context` (the rendered context and the SEARCH/REPLACE
    instruction) in at most `room` tokens, the context cut at its end when needed; None when even the
    template and the instruction do not fit."""
    body = render(context)
    prompt = codec.chat_prompt(f"{body}\n\n{search_replace.CHAT_INSTRUCTION}")
    if len(prompt) > room:
        # Cut the end of the context (tried attempts come last), keeping the template and the
        # instruction; a margin absorbs tokenization differences at the cut.
        ids = codec.encode(body)
        body = codec.text(ids[: max(0, len(ids) - (len(prompt) - room) - 16)])
        prompt = codec.chat_prompt(f"{body}\n\n{search_replace.CHAT_INSTRUCTION}")
        if len(prompt) > room:
            return None
    return prompt


def edits_from_answer(context: DraftContext, answer: str) -> tuple[tuple[FileChange, ...], str | None]:
    """The file changes a SEARCH/REPLACE answer makes to the project (`changes_from_reply`), or an
    error for the model when it has no blocks, touches a protected path, does not apply, or changes
    nothing."""
    return changes_from_reply(
        answer,
        functools.partial(read_for_edit, context.project),
        formats=("search-replace",),
        protected=context.protected,
    )


def infill_spans(
    snippet: Snippet, source: str, suspicious: Sequence[tuple[str, int]]
) -> list[tuple[int, int]]:
    """Line spans (1-based, inclusive) to infill in a snippet: its suspicious non-blank lines, most
    suspicious first, then the body of the function it is, when that body is short enough."""
    lines = source.splitlines()
    spans = [
        (line, line)
        for path, line in dict.fromkeys(suspicious)
        if path == snippet.path and snippet.start <= line <= snippet.end and lines[line - 1].strip()
    ]
    body = _function_body(source, snippet)
    if body and body not in spans and body[1] - body[0] < MAX_BODY_LINES:
        spans.append(body)
    return spans


def split_span(source: str, span: tuple[int, int]) -> tuple[str, str, str]:
    """The text before lines span[0]..span[1], those lines without their final newline, and the rest
    (that newline first): the masked core leaves the line structure around it intact."""
    lines = source.splitlines(keepends=True)
    head = "".join(lines[: span[0] - 1])
    body = "".join(lines[span[0] - 1 : span[1]])
    core = body.rstrip("\r\n")
    return head, core, body[len(core) :] + "".join(lines[span[1] :])


def _function_body(source: str, snippet: Snippet) -> tuple[int, int] | None:
    try:
        tree = parse(source)
    except (SyntaxError, ValueError):
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno:
            start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            if (start, node.end_lineno) == (snippet.start, snippet.end) and node.body[0].lineno > node.lineno:
                return node.body[0].lineno, node.end_lineno
    return None


def _parses(source: str) -> bool:
    try:
        parse(source)
    except (SyntaxError, ValueError):
        return False
    return True


def _last(ids: list[int], n: int) -> list[int]:
    return ids[max(0, len(ids) - n) :] if n > 0 else []


def stats_meta(stats: DecodeStats) -> dict[str, object]:
    """The decode call's stats for a candidate's meta; `tokens` there is the whole batch's."""
    meta = stats.as_dict()
    meta["batch_tokens"] = meta.pop("tokens")
    return meta
