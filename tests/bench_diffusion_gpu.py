"""ralph's diffusion sampler on full-size, randomly initialized LLaDA- and Dream-shaped models: forward
latency, memory and tokens/s, with and without the prefix cache, against the same weights decoded
autoregressively. No weights are needed, so it runs wherever torch and transformers do; the figures
mean something on a GPU (bf16, CUDA), where the README records them.

    python -m tests.bench_diffusion_gpu OUT [--tiny] [--shapes llada-8b,dream-7b]

Each shape is built from its published dimensions (LLaDA-8B: the Llama architecture at LLaDA's sizes;
Dream-7B: Qwen2.5-7B's) with bidirectional attention (transformers' `is_causal=False`; checked on the
built model and reported), random weights, wrapped in ralph's own `DiffusionLM` with the family's
preset, and decoded by `ralph.drafters.sampler.decode`, the drafter's own path. Random weights are
never confident, so a threshold setting would commit one token a pass, the same as low-confidence:
the settings measured are one and four tokens a pass, each with and without the prefix cache.
`--tiny` builds two-layer models of the same families, for a CPU check of the script itself (a test
runs it). Writes OUT/diffusion_gpu.json and OUT/diffusion_gpu.md.
"""

from __future__ import annotations

import argparse
import inspect
import json
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
import transformers

from ralph.drafters.diffusion import PRESETS, DiffusionLM, Preset, _cache_kwarg, _output_cache
from ralph.drafters.sampler import SamplerSettings, answer_batch, decode


@dataclass(frozen=True)
class Lengths:
    prompt: int
    answer: int  # decoded in blocks of 32, the sampler's default
    long_prompt: int


FULL = Lengths(prompt=512, answer=128, long_prompt=2048)
TINY = Lengths(prompt=48, answer=32, long_prompt=96)
ROWS = (1, 4)  # one request; the drafter's four chat samples as one batch
SETTINGS = (
    SamplerSettings("1 token/pass"),
    SamplerSettings("1 token/pass, cached", prefix_cache=True),
    SamplerSettings("4 tokens/pass", tokens_per_step=4),
    SamplerSettings("4 tokens/pass, cached", tokens_per_step=4, prefix_cache=True),
)


# Two layers of each family, for a CPU check of the script.
TINY_SIZE = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4)


@dataclass(frozen=True)
class Shape:
    """A model family at its published size: its transformers config class and what sets it apart."""

    name: str
    preset: Preset
    architecture: str  # a transformers config class
    size: dict[str, int]  # hidden and intermediate sizes, layers, attention heads
    vocab_size: int
    key_value_heads: int
    rope_theta: float
    rms_norm_eps: float
    max_positions: int

    def config(self, tiny: bool) -> Any:
        """The transformers config, full size or `tiny`."""
        return getattr(transformers, self.architecture)(
            vocab_size=512 if tiny else self.vocab_size,
            num_key_value_heads=min(self.key_value_heads, 2) if tiny else self.key_value_heads,
            max_position_embeddings=self.max_positions,
            rope_theta=self.rope_theta,
            rms_norm_eps=self.rms_norm_eps,
            tie_word_embeddings=False,
            **(TINY_SIZE if tiny else self.size),
        )


LLADA_8B = dict(hidden_size=4096, intermediate_size=12288, num_hidden_layers=32, num_attention_heads=32)
QWEN25_7B = dict(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28)
SHAPES = {
    "llada-8b": Shape(
        "llada-8b", PRESETS["GSAI-ML/LLaDA-8B-Instruct"], "LlamaConfig", LLADA_8B, 126464, 32, 5e5, 1e-5, 4096
    ),
    "dream-7b": Shape(
        "dream-7b",
        PRESETS["Dream-org/Dream-v0-Instruct-7B"],
        "Qwen2Config",
        QWEN25_7B,
        152064,
        4,
        1e6,
        1e-6,
        32768,
    ),
}


class NoTokenizer:
    """What `DiffusionLM` reads of a tokenizer, for a model that only ever sees token ids here."""

    cls_token_id = sep_token_id = mask_token_id = None
    bos_token_id, eos_token_id, pad_token_id = 1, 2, 0
    chat_template = None

    def get_vocab(self) -> dict[str, int]:
        return {}


def build(shape: Shape, device: torch.device, tiny: bool) -> tuple[DiffusionLM, float]:
    """The random-weight model as ralph's `DiffusionLM`, and the seconds it took to build."""
    config = shape.config(tiny)
    config.is_causal = False  # bidirectional, as LLaDA and Dream attend
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    began = time.perf_counter()
    torch.manual_seed(0)
    with device:
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=dtype).eval()
    for module in model.modules():
        if hasattr(module, "is_causal"):
            module.is_causal = False
    _sync(device)
    took = time.perf_counter() - began
    preset = shape.preset if not tiny else replace(shape.preset, mask_id=config.vocab_size - 1)
    lm = DiffusionLM(shape.name, model, NoTokenizer(), preset, device=device, max_context=4096)
    return lm, took


def bidirectional(lm: DiffusionLM) -> bool:
    """Whether the first position's logits see a change at the last position."""
    ids = torch.full((1, 16), 3, dtype=torch.long, device=lm.device)
    changed = ids.clone()
    changed[0, -1] = 4
    return not torch.equal(lm(ids)[0, 0], lm(changed)[0, 0])


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed_ms(device: torch.device, run: Callable[[], object], repeat: int, warmup: int = 2) -> float:
    """The median wall time of `run` in milliseconds, the device synchronized around each call."""
    for _ in range(warmup):
        run()
    times = []
    for _ in range(repeat):
        _sync(device)
        began = time.perf_counter()
        run()
        _sync(device)
        times.append((time.perf_counter() - began) * 1000)
    return statistics.median(times)


def _prompt(lm: DiffusionLM, tokens: int) -> list[int]:
    generator = torch.Generator().manual_seed(1)
    high = min(lm.mask_id, 30000)
    return [lm.begin[0], *torch.randint(5, high, (tokens - 1,), generator=generator).tolist()]


def gpu_busy_ms(device: torch.device, run: Callable[[], object], repeat: int = 3) -> float | None:
    """The GPU's kernel time for one call of `run` (the profiler's device time, summed), in ms: what a
    pass would take if launching its kernels from Python cost nothing. None off CUDA."""
    if device.type != "cuda":
        return None
    from torch.profiler import ProfilerActivity, profile

    run()
    try:
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(repeat):
                run()
            _sync(device)
        total_us = sum(getattr(e, "self_device_time_total", None) or 0 for e in prof.key_averages())
    except RuntimeError:  # a profiler that cannot attach: no figure rather than no run
        return None
    return round(total_us / 1000 / repeat, 2) if total_us else None


@dataclass(frozen=True)
class Passes:
    sequence: int
    rows: int
    cached_positions: int
    full: Callable[[], object]
    cached: Callable[[], object] | None  # None when the model returns no reusable cache


def _passes(lm: DiffusionLM, lengths: Lengths) -> Iterator[Passes]:
    """For each sequence length and row count: a full pass, and a cached pass over the answer (the
    prefix's keys and values reused, as the first block of a cached decode runs it)."""
    for prompt_tokens in (lengths.prompt, lengths.long_prompt):
        prompt = _prompt(lm, prompt_tokens)
        for rows in ROWS:
            x = answer_batch(prompt, lengths.answer, rows, mask_id=lm.mask_id).to(lm.device)
            keep = prompt_tokens - 1 if lm.shift else prompt_tokens
            _, tail = lm.prefill(x, None, keep)
            cached = (lambda x=x, tail=tail, keep=keep: tail(x[:, keep:])) if tail else None
            yield Passes(x.shape[1], rows, x.shape[1] - keep, lambda x=x: lm(x), cached)


def forwards(lm: DiffusionLM, repeat: int, lengths: Lengths) -> list[dict[str, object]]:
    """The wall time of each full and cached pass of `_passes`."""
    rows_out: list[dict[str, object]] = []
    for p in _passes(lm, lengths):
        cached = timed_ms(lm.device, p.cached, repeat) if p.cached else None
        rows_out.append(
            {
                "sequence": p.sequence,
                "rows": p.rows,
                "full_pass_ms": round(timed_ms(lm.device, p.full, repeat), 2),
                "cached_pass_ms": None if cached is None else round(cached, 2),
                "cached_positions": p.cached_positions,
            }
        )
    return rows_out


def gpu_times(lm: DiffusionLM, lengths: Lengths) -> list[dict[str, float | None]]:
    """The GPU's kernel time of each pass of `_passes`. Run after every wall-time figure: once the
    profiler has attached, kernel launches may cost more for the rest of the process."""
    return [
        {
            "full_pass_gpu_ms": gpu_busy_ms(lm.device, p.full),
            "cached_pass_gpu_ms": gpu_busy_ms(lm.device, p.cached) if p.cached else None,
        }
        for p in _passes(lm, lengths)
    ]


def decodes(lm: DiffusionLM, lengths: Lengths, weights_bytes: int) -> list[dict[str, object]]:
    """One decode of the answer's masks after the prompt, per setting and row count."""
    prompt = _prompt(lm, lengths.prompt)
    out: list[dict[str, object]] = []
    for settings in SETTINGS:
        for rows in ROWS:
            x = answer_batch(prompt, lengths.answer, rows, mask_id=lm.mask_id).to(lm.device)
            generator = torch.Generator(device=lm.device).manual_seed(0)
            _peak_reset(lm.device)
            result = decode(x, lm, mask_id=lm.mask_id, settings=settings, shift=lm.shift, generator=generator)
            stats = result.stats
            out.append(
                {
                    "setting": settings.name,
                    "rows": rows,
                    "nfe": stats.nfe,
                    "tokens": stats.tokens,
                    "seconds": round(stats.seconds, 3),
                    "ms_per_pass": round(stats.seconds / stats.nfe * 1000, 2) if stats.nfe else None,
                    "tokens_per_s": round(stats.tokens_per_s, 1),
                    "prefix_cache_used": stats.prefix_cache,
                    "peak_gib_over_weights": _peak_over(lm.device, weights_bytes),
                }
            )
    return out


def autoregressive(lm: DiffusionLM, lengths: Lengths, weights_bytes: int) -> list[dict[str, object]]:
    """The same weights with causal attention, greedy, one token a pass with a KV cache: the
    autoregressive reference for the same answer length after the same prompt."""
    model = lm.model
    model.config.is_causal = True
    for module in model.modules():
        if hasattr(module, "is_causal"):
            module.is_causal = True
    prompt = _prompt(lm, lengths.prompt)
    answer = lengths.answer
    out: list[dict[str, object]] = []
    try:
        for rows in ROWS:
            x = torch.tensor([prompt] * rows, device=lm.device)
            run_once(model, x, 8)  # warm-up
            _peak_reset(lm.device)
            _sync(lm.device)
            began = time.perf_counter()
            run_once(model, x, answer)
            _sync(lm.device)
            seconds = time.perf_counter() - began
            out.append(
                {
                    "setting": "autoregressive, KV cache",
                    "rows": rows,
                    "nfe": answer,
                    "tokens": answer * rows,
                    "seconds": round(seconds, 3),
                    "ms_per_pass": round(seconds / answer * 1000, 2),
                    "tokens_per_s": round(answer * rows / seconds, 1),
                    "prefix_cache_used": True,
                    "peak_gib_over_weights": _peak_over(lm.device, weights_bytes),
                }
            )
    finally:
        model.config.is_causal = False
        for module in model.modules():
            if hasattr(module, "is_causal"):
                module.is_causal = False
    return out


def run_once(model: Any, x: torch.Tensor, new_tokens: int) -> None:
    """Greedy decoding of `new_tokens` tokens after `x`, the prompt prefilled once."""
    kwarg = _cache_kwarg(inspect.signature(model.forward).parameters) or "past_key_values"
    with torch.no_grad():
        out = model(x, use_cache=True)
        cache = _output_cache(out)
        for _ in range(new_tokens - 1):
            token = out.logits[:, -1:].argmax(-1)
            out = model(token, use_cache=True, **{kwarg: cache})


def _peak_reset(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def _peak_over(device: torch.device, weights_bytes: int) -> float | None:
    if device.type != "cuda":
        return None
    return round((torch.cuda.max_memory_allocated(device) - weights_bytes) / 2**30, 2)


def bench_shape(shape: Shape, device: torch.device, tiny: bool) -> dict[str, object]:
    _peak_reset(device)
    before = torch.cuda.memory_allocated(device) if device.type == "cuda" else 0
    lengths = TINY if tiny else FULL
    lm, build_s = build(shape, device, tiny)
    weights = (torch.cuda.memory_allocated(device) - before) if device.type == "cuda" else 0
    params = sum(p.numel() for p in lm.model.parameters())
    lm(answer_batch(_prompt(lm, 16), 16, 1, mask_id=lm.mask_id).to(device))  # lazy initialization
    row: dict[str, object] = {
        "shape": shape.name,
        "architecture": type(lm.model).__name__,
        "parameters_b": round(params / 1e9, 3),
        "dtype": str(next(lm.model.parameters()).dtype).removeprefix("torch."),
        "weights_gib": round(weights / 2**30, 2) if weights else None,
        "build_s": round(build_s, 1),
        "bidirectional": bidirectional(lm),
        "shift": lm.shift,
        "forward": forwards(lm, 3 if tiny else 10, lengths),
        "decode": decodes(lm, lengths, before + weights) + autoregressive(lm, lengths, before + weights),
    }
    forward = row["forward"]
    assert isinstance(forward, list)
    for figures, gpu in zip(forward, gpu_times(lm, lengths), strict=True):
        figures.update(gpu)
    del lm
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return row


def markdown(report: dict[str, Any]) -> str:
    lines = [
        f"{report['device']}, torch {report['torch']}, transformers {report['transformers']}, "
        f"{report['date']}; prompt {report['prompt']} tokens, answer {report['answer']} masks in blocks of 32.",
        "",
    ]
    for shape in report["shapes"]:
        lines += [
            f"**{shape['shape']}** ({shape['architecture']}, {shape['parameters_b']} B parameters, "
            f"{shape['dtype']}, weights {shape['weights_gib']} GiB, bidirectional: {shape['bidirectional']})",
            "",
            "| sequence | rows | full pass (ms) | its GPU time (ms) | cached pass (ms) | its GPU time (ms) "
            "| positions in cached pass |",
            "|---|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {f['sequence']} | {f['rows']} | {f['full_pass_ms']} | {f['full_pass_gpu_ms'] or '—'} "
            f"| {f['cached_pass_ms'] or '—'} | {f['cached_pass_gpu_ms'] or '—'} | {f['cached_positions']} |"
            for f in shape["forward"]
        ]
        lines += [
            "",
            "| decoding | rows | passes | tokens | seconds | ms/pass | tokens/s | peak GiB over weights |",
            "|---|---|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {d['setting']} | {d['rows']} | {d['nfe']} | {d['tokens']} | {d['seconds']} "
            f"| {d['ms_per_pass']} | {d['tokens_per_s']} | {d['peak_gib_over_weights'] or '—'} |"
            for d in shape["decode"]
        ]
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("out", type=Path)
    parser.add_argument("--tiny", action="store_true", help="two-layer models, for a CPU check")
    parser.add_argument("--shapes", default=",".join(SHAPES))
    args = parser.parse_args(argv)
    names = [n for n in args.shapes.split(",") if n]
    unknown = [n for n in names if n not in SHAPES]
    if unknown:
        print(f"unknown shape {unknown[0]!r}; known: {', '.join(SHAPES)}", file=sys.stderr)
        return 2
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    report: dict[str, Any] = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "date": time.strftime("%Y-%m-%d"),
        "tiny": args.tiny,
        "prompt": (TINY if args.tiny else FULL).prompt,
        "answer": (TINY if args.tiny else FULL).answer,
        "shapes": [],
    }
    args.out.mkdir(parents=True, exist_ok=True)
    for name in names:
        try:
            report["shapes"].append(bench_shape(SHAPES[name], device, args.tiny))
        except Exception as exc:  # one shape's failure must not lose the others' figures
            report.setdefault("failed", {})[name] = f"{type(exc).__name__}: {exc}"
            print(f"{name}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        # Written after each shape, so a run stopped on its time limit keeps what it measured.
        (args.out / "diffusion_gpu.json").write_text(json.dumps(report, indent=2) + "\n")
        (args.out / "diffusion_gpu.md").write_text(markdown(report))
    print(markdown(report), flush=True)
    return 1 if report.get("failed") else 0


if __name__ == "__main__":
    raise SystemExit(main())
