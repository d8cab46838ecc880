"""DiffusionGemma through `--drafter diffusion:MODEL`: a tiny randomly initialized checkpoint built from
its config, saved with a tokenizer and a generation config the way a downloaded one is, drafting through
transformers' own generation in the real `ralph fix`. A random model fixes nothing: these tests assert
the plumbing (recognition, candidates drafted, steps and tokens per step counted, a clean end)."""

from __future__ import annotations

import json
import string
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

import tokenizers
import torch
import transformers

from ralph.bench.bug_tasks import TASKS, draft_context, write_project
from ralph.bench.draft_sources import GemmaSource, draft_source
from ralph.bench.drafter import bench_drafts
from ralph.domain.candidate import PROTECTED_TESTS
from ralph.domain.errors import RalphError
from ralph.domain.protocols import DraftContext
from ralph.drafters.diffusion import create_diffusion_drafter, preset_for
from ralph.drafters.diffusion_gemma import DiffusionGemmaDrafter
from ralph.trace import read_trace
from tests.conftest import run_ralph

pytestmark = pytest.mark.skipif(
    not hasattr(transformers, "DiffusionGemmaForBlockDiffusion"),
    reason="this transformers has no DiffusionGemma (5.24 and later)",
)

SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>"]
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<start_of_turn>{{ m.role }}\n{{ m.content }}<end_of_turn>\n"
    "{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)
CANVAS = 16
STEPS = 4  # denoising steps a canvas at most (the random model never stops earlier)
BUGGY = "def add(a, b):\n    return a - b\n"
TEST = "from calc import add\n\n\ndef test_add():\n    assert add(1, 2) == 3\n"


def gemma_like_tokenizer() -> Any:
    """A character-level tokenizer built offline, with Gemma's special tokens at Gemma's ids and a
    chat template in Gemma's turn format."""
    vocab = {token: i for i, token in enumerate([*SPECIALS, *string.printable])}
    model = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="<unk>"))
    model.pre_tokenizer = tokenizers.pre_tokenizers.Split("", "isolated")
    model.decoder = tokenizers.decoders.Fuse()
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=model,
        pad_token="<pad>",
        eos_token="<eos>",
        bos_token="<bos>",
        unk_token="<unk>",
        additional_special_tokens=SPECIALS[4:],
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


@pytest.fixture(scope="module", autouse=True)
def one_thread() -> Iterator[None]:
    """Tiny models run several times faster on one thread than on two contending CPU cores."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def gemma_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_diffusion_gemma(tmp_path_factory.mktemp("tiny-diffusion-gemma"))


def save_tiny_diffusion_gemma(path: Path) -> Path:
    """A tiny DiffusionGemma (two layers, hidden size 32, two experts, a one-layer vision tower it
    needs to build), saved like a downloaded checkpoint."""
    tokenizer = gemma_like_tokenizer()
    text = {
        "vocab_size": 128,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "layer_types": ["sliding_attention", "full_attention"],
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "head_dim": 16,
        "global_head_dim": 16,
        "num_experts": 2,
        "top_k_experts": 1,
        "moe_intermediate_size": 32,
        "max_position_embeddings": 2048,
        "sliding_window": 64,
    }
    vision = {
        "model_type": "gemma4_vision",
        "hidden_size": 16,
        "intermediate_size": 32,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "head_dim": 8,
    }
    config = transformers.DiffusionGemmaConfig(
        text_config=text,
        vision_config=vision,
        canvas_length=CANVAS,
        boi_token_id=125,
        eoi_token_id=126,
        image_token_id=127,
    )
    torch.manual_seed(0)
    model = transformers.DiffusionGemmaForBlockDiffusion(config)
    end_of_turn = tokenizer.convert_tokens_to_ids("<end_of_turn>")
    model.generation_config = transformers.DiffusionGemmaGenerationConfig(
        max_denoising_steps=STEPS, eos_token_id=[tokenizer.eos_token_id, end_of_turn], pad_token_id=0
    )
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def context_for(project: Path, state_id: int = 1) -> DraftContext:
    return DraftContext(
        task="",
        project=project,
        state_id=state_id,
        failing_tests=(),
        diagnostics=(),
        failing_checks=("pytest",),
        suspicious=(("calc.py", 2),),
        rejected=frozenset(),
        protected=PROTECTED_TESTS,
    )


def write_config(folder: Path, config: dict[str, object]) -> str:
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    return str(folder)


def test_a_diffusion_gemma_config_takes_its_own_generation_and_llada_or_dream_do_not(tmp_path: Path) -> None:
    gemma = {"model_type": "diffusion_gemma", "architectures": ["DiffusionGemmaForBlockDiffusion"]}
    by_type = preset_for(write_config(tmp_path / "gemma", gemma))
    by_architecture = preset_for(
        write_config(tmp_path / "renamed", {"architectures": ["DiffusionGemmaForBlockDiffusion"]})
    )
    for preset in (by_type, by_architecture):
        assert preset.own_generation and preset.auto_class == "DiffusionGemmaForBlockDiffusion"
    llada = preset_for(write_config(tmp_path / "llada", {"model_type": "llada"}))
    dream = preset_for(write_config(tmp_path / "dream", {"model_type": "dream"}))
    assert (llada.name, dream.name) == ("llada", "dream")
    assert not llada.own_generation and not dream.own_generation
    assert not preset_for("Dream-org/Dream-Coder-v0-Instruct-7B").own_generation  # by its hub id


def test_a_diffusion_gemma_checkpoint_drafts_chat_answers_with_counted_steps(
    gemma_dir: Path, tmp_path: Path
) -> None:
    (tmp_path / "calc.py").write_text(BUGGY)
    drafter = create_diffusion_drafter(f"diffusion:{gemma_dir}", answer_tokens=2 * CANVAS, chat_samples=2)
    assert isinstance(drafter, DiffusionGemmaDrafter) and drafter.lm.preset.name == "diffusion-gemma"
    candidates = drafter.draft(context_for(tmp_path), 5)
    assert 1 <= len(candidates) <= 2  # two answers; unusable ones with the same error count once
    for candidate in candidates:
        meta = candidate.meta
        assert (meta["mode"], meta["setting"]) == ("chat", "entropy-bound")
        assert isinstance(meta["answer"], str)
        assert 1 <= meta["nfe"] <= 2 * STEPS and meta["canvases"] == 2
        assert meta["tokens_per_forward"] > 0 and meta["tokens_per_nfe"] > 0
        assert candidate.tokens and 0 < candidate.tokens <= 2 * CANVAS and candidate.draft_ms > 0
        assert candidate.changes or candidate.error  # a random answer is an error for the model
    assert drafter.draft(context_for(tmp_path), 5) == []  # the state's answers are spent


def test_diffusion_gemma_cannot_infill_and_is_no_model_for_the_sampler_bench(gemma_dir: Path) -> None:
    with pytest.raises(RalphError, match="cannot infill"):
        create_diffusion_drafter(f"diffusion:{gemma_dir}", mode="infill")
    from ralph.bench.drafter import bench_drafter

    with pytest.raises(RalphError, match="own generation"):
        bench_drafter(str(gemma_dir))


def test_bench_drafts_a_tiny_diffusion_gemma_step_by_step(gemma_dir: Path, tmp_path: Path) -> None:
    sampler = {"answer_tokens": CANVAS, "max_context": 512}
    source = draft_source(f"diffusion:{gemma_dir}", sampler=sampler)
    assert isinstance(source, GemmaSource)
    drafts = source.drafts(draft_context(TASKS[0], write_project(TASKS[0], tmp_path)), 2)
    for draft in drafts:
        # A text after each denoising step (the draft canvas), then the complete answer.
        assert 2 <= len(draft.steps) <= STEPS + 1 and 0 < draft.tokens <= CANVAS
        times = [seconds for seconds, _ in draft.steps]
        assert times == sorted(times) and times[-1] == draft.seconds
    summary = bench_drafts(source, tasks=TASKS[:1], concurrency=(1, 2))
    assert summary["drafts"] == 3 and summary["pass_rate"] == 0.0  # a random model fixes nothing
    for level in summary["levels"]:
        assert level["tokens_per_s"] > 0 and 0 < level["latency_s_p50"] <= level["latency_s_p95"]


@pytest.mark.slow
def test_ralph_fix_drafts_with_a_diffusion_gemma_checkpoint(make_repo: Any, gemma_dir: Path) -> None:
    pyproject = (
        '[tool.pytest.ini_options]\ntestpaths = ["tests"]\n\n'
        f"[tool.ralph.sampler]\nanswer_tokens = {2 * CANVAS}\nchat_samples = 2\nmax_context = 512\n"
    )
    repo = make_repo({"calc.py": BUGGY, "tests/test_calc.py": TEST, "pyproject.toml": pyproject})
    out = run_ralph(
        "fix", str(repo), "--drafter", f"diffusion:{gemma_dir}", "--candidates", "2",
        "--max-iterations", "2", "--max-seconds", "120", "--json", timeout=300,
    )  # fmt: skip
    assert out.returncode == 1, out.stderr  # stopped without the goal: a random model fixes nothing
    summary = json.loads(out.stdout)
    assert summary["outcome"] != "goal"
    [trace] = repo.glob(".ralph/runs/*/trace.jsonl")
    records = read_trace(trace)
    assert records[0]["type"] == "run_start" and records[-1]["type"] == "run_end"
    candidates = [c for r in records if r["type"] == "iteration" for c in r["candidates"]]
    assert candidates and all(c["drafter"] == f"diffusion:{gemma_dir}" for c in candidates)
    for candidate in candidates:
        meta = candidate["meta"]
        assert meta["mode"] == "chat" and meta["nfe"] >= 1 and meta["tokens_per_nfe"] > 0
        assert meta["tokens_per_forward"] > 0 and candidate["reason"]
