"""The diffusion drafter on tiny randomly initialized models saved to disk and loaded the way users load
theirs, and on oracle models that know the fix, to check the candidates it turns samples into."""

from __future__ import annotations

import json
import string
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

import tokenizers
import torch
import transformers

from ralph.bench.bug_tasks import TASKS
from ralph.bench.draft_sources import SamplerSource
from ralph.bench.drafter import bench_drafter, bench_drafts
from ralph.domain.candidate import PROTECTED_TESTS, Candidate
from ralph.domain.errors import RalphError
from ralph.domain.protocols import DraftContext, Drafter
from ralph.drafters.diffusion import (
    DiffusionDrafter,
    DiffusionLM,
    DiffusionOptions,
    Preset,
    create_diffusion_drafter,
    split_span,
)
from ralph.drafters.sampler import SamplerSettings, decode

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
BUGGY = "def add(a, b):\n    return a - b\n\n\ndef double(x):\n    return x * 2\n"
FIXED = BUGGY.replace("a - b", "a + b")
TEST = "from calc import add\n\n\ndef test_add():\n    assert add(1, 2) == 3\n"


def char_tokenizer() -> Any:
    """A character-level tokenizer built offline, with BERT's special tokens."""
    vocab = {token: i for i, token in enumerate([*SPECIALS, *string.printable])}
    model = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    model.pre_tokenizer = tokenizers.pre_tokenizers.Split("", "isolated")
    model.decoder = tokenizers.decoders.Fuse()
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=model,
        unk_token="[UNK]",
        pad_token="[PAD]",
        mask_token="[MASK]",
        cls_token="[CLS]",
        sep_token="[SEP]",
    )


@pytest.fixture(scope="module", autouse=True)
def one_thread() -> Iterator[None]:
    """Tiny models run several times faster on one thread than on two contending CPU cores."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return char_tokenizer()


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory: pytest.TempPathFactory, tokenizer: Any) -> Path:
    return save_tiny_bert(tmp_path_factory.mktemp("tiny-bert"), tokenizer)


def save_tiny_bert(path: Path, tokenizer: Any) -> Path:
    """A tiny bidirectional masked LM (the BERT architecture), saved like a downloaded model."""
    config = transformers.BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=512,
    )
    torch.manual_seed(0)
    transformers.BertForMaskedLM(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def causal_dir(tmp_path_factory: pytest.TempPathFactory, tokenizer: Any) -> Path:
    """A tiny model with an AR model's layout (logits at i predict i + 1) and a KV cache."""
    path = tmp_path_factory.mktemp("tiny-causal")
    config = transformers.Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        intermediate_size=64,
        max_position_embeddings=512,
    )
    torch.manual_seed(0)
    transformers.Qwen2ForCausalLM(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def bert_drafter(bert_dir: Path) -> DiffusionDrafter:
    return create_diffusion_drafter(f"diffusion:{bert_dir}", syntax_filter=False)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "tests").mkdir()
    (tmp_path / "calc.py").write_text(BUGGY)
    (tmp_path / "tests" / "test_calc.py").write_text(TEST)
    return tmp_path


def context_for(
    project: Path,
    *,
    suspicious: Sequence[tuple[str, int]] = (("calc.py", 2),),
    rejected: frozenset[str] = frozenset(),
    state_id: int = 1,
) -> DraftContext:
    return DraftContext(
        task="",
        project=project,
        state_id=state_id,
        failing_tests=(),
        diagnostics=(),
        failing_checks=("pytest",),
        suspicious=tuple(suspicious),
        rejected=frozenset(rejected),
        protected=PROTECTED_TESTS,
    )


Target = Callable[[int], list[int]]  # the token ids an oracle is sure of, for a sequence length


class OracleModel:
    """A stand-in for a model's forward: at position i it is sure of `target(length)[i]`."""

    def __init__(self, vocab: int, target: Target) -> None:
        self.vocab = vocab
        self.target = target
        self.widths: list[int] = []

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> SimpleNamespace:
        batch, width = input_ids.shape
        self.widths.append(width)
        logits = torch.zeros(batch, width, self.vocab)
        for i, token in enumerate(self.target(width)[:width]):
            logits[:, i, token] = 20.0
        return SimpleNamespace(logits=logits)

    __call__ = forward


def oracle_lm(tokenizer: Any, target: Target, max_context: int = 4096) -> DiffusionLM:
    model = OracleModel(len(tokenizer), target)
    preset = Preset("oracle", None, shift=False)
    return DiffusionLM(
        "oracle", model, tokenizer, preset, device=torch.device("cpu"), max_context=max_context
    )


def answering(tokenizer: Any, reply: str, answer_tokens: int, max_context: int = 4096) -> DiffusionLM:
    """An oracle chat model: whatever the prompt, its answer is `reply`, then [SEP] (end of text)."""
    answer = tokenizer.encode(reply, add_special_tokens=False)
    answer += [tokenizer.sep_token_id] * (answer_tokens - len(answer))
    return oracle_lm(tokenizer, lambda width: [0] * (width - answer_tokens) + answer, max_context)


@pytest.mark.slow
def test_a_saved_masked_lm_loads_through_the_diffusion_spec(
    bert_drafter: DiffusionDrafter, bert_dir: Path
) -> None:
    assert isinstance(bert_drafter, Drafter)
    assert bert_drafter.name == f"diffusion:{bert_dir}"
    lm = bert_drafter.lm
    assert lm.preset.name == "masked-lm"
    assert lm.mask_id == lm.tokenizer.mask_token_id
    assert not lm.shift
    assert lm.device.type == "cpu"
    assert lm.max_context == 512  # the model's own limit is below the default


@pytest.mark.slow
def test_drafter_returns_well_formed_infill_candidates(bert_drafter: DiffusionDrafter, project: Path) -> None:
    candidates = bert_drafter.draft(context_for(project), 3)
    assert 1 <= len(candidates) <= 3
    for candidate in candidates:
        assert candidate.drafter == bert_drafter.name and candidate.error is None
        (change,) = candidate.changes
        assert change.path == "calc.py"
        assert change.before == BUGGY and change.after != BUGGY
        assert change.after is not None and change.after.startswith("def add(a, b):\n")
        assert candidate.draft_ms > 0 and candidate.tokens
        assert candidate.meta["mode"] == "infill" and candidate.meta["setting"] == "threshold-0.9"
        assert isinstance(candidate.meta["nfe"], int) and candidate.meta["nfe"] >= 1
        assert {"tokens_per_nfe", "tokens_per_s", "batch_tokens"} <= set(candidate.meta)
    assert len({c.fingerprint for c in candidates}) == len(candidates)


def test_drafter_has_nothing_new_for_a_state_it_has_exhausted(
    bert_drafter: DiffusionDrafter, project: Path
) -> None:
    context = context_for(project, state_id=7)
    first = bert_drafter.draft(context, 100)
    assert first
    assert bert_drafter.draft(context, 100) == []


def test_drafter_never_edits_protected_paths(bert_drafter: DiffusionDrafter, project: Path) -> None:
    context = context_for(project, suspicious=[("tests/test_calc.py", 5)], state_id=8)
    assert bert_drafter.draft(context, 10) == []


def test_infill_proposes_the_fix_a_model_predicts_and_drops_what_does_not_parse(
    tokenizer: Any, project: Path
) -> None:
    fixed = [tokenizer.cls_token_id, *tokenizer.encode(FIXED, add_special_tokens=False)]
    drafter = DiffusionDrafter(oracle_lm(tokenizer, lambda width: fixed), DiffusionOptions(mode="infill"))
    candidates = drafter.draft(context_for(project), 10)
    assert candidates[0].changes[0].after == FIXED
    assert candidates[0].description == "calc.py:2 infilled (16 tokens)"
    assert all(compile(c.changes[0].after or "", "calc.py", "exec") for c in candidates)


def test_rejected_candidates_are_not_proposed_again(tokenizer: Any, project: Path) -> None:
    fixed = [tokenizer.cls_token_id, *tokenizer.encode(FIXED, add_special_tokens=False)]
    options = DiffusionOptions(mode="infill")
    first = DiffusionDrafter(oracle_lm(tokenizer, lambda width: fixed), options).draft(
        context_for(project), 1
    )
    rejected = frozenset({first[0].fingerprint})
    again = DiffusionDrafter(oracle_lm(tokenizer, lambda width: fixed), options)
    assert all(
        c.fingerprint not in rejected for c in again.draft(context_for(project, rejected=rejected), 10)
    )


def test_chat_answers_with_search_replace_blocks_become_edits(tokenizer: Any, project: Path) -> None:
    reply = "calc.py\n<<<<<<< SEARCH\n    return a - b\n=======\n    return a + b\n>>>>>>> REPLACE\n"
    options = DiffusionOptions(mode="chat", answer_tokens=160, chat_samples=2)
    drafter = DiffusionDrafter(answering(tokenizer, reply, 160), options)
    candidates = drafter.draft(context_for(project), 5)
    assert len(candidates) == 1  # both samples give the same edit
    (change,) = candidates[0].changes
    assert (change.path, change.before, change.after) == ("calc.py", BUGGY, FIXED)
    # One pass a block of 32, and none for the blocks after the one where the answer ended.
    assert len(reply) < 96 and candidates[0].meta["nfe"] == 3 and candidates[0].tokens == 96
    assert candidates[0].meta["mode"] == "chat"


def test_a_chat_prompt_too_long_for_the_model_is_cut_to_fit(tokenizer: Any, project: Path) -> None:
    reply = "calc.py\n<<<<<<< SEARCH\n    return a - b\n=======\n    return a + b\n>>>>>>> REPLACE\n"
    lm = answering(tokenizer, reply, 96, max_context=560)
    options = DiffusionOptions(mode="chat", answer_tokens=96, chat_samples=1)
    (candidate,) = DiffusionDrafter(lm, options).draft(context_for(project), 5)
    assert candidate.changes[0].after == FIXED
    assert max(lm.model.widths) <= 560


@pytest.mark.parametrize(
    ("reply", "error"),
    [
        ("I am not sure what to change.", "no SEARCH/REPLACE blocks"),
        ("tests/test_calc.py\n<<<<<<< SEARCH\n    assert add(1, 2) == 3\n=======\n    pass\n>>>>>>> REPLACE\n",
         "must not be edited"),
        ("calc.py\n<<<<<<< SEARCH\n    return a * b\n=======\n    return a + b\n>>>>>>> REPLACE\n",
         "matched 0 times"),
    ],
)  # fmt: skip
def test_unusable_chat_answers_become_candidates_with_an_error(
    tokenizer: Any, project: Path, reply: str, error: str
) -> None:
    options = DiffusionOptions(mode="chat", answer_tokens=96, chat_samples=1)
    (candidate,) = DiffusionDrafter(answering(tokenizer, reply, 96), options).draft(context_for(project), 5)
    assert candidate.changes == () and candidate.error is not None and error in candidate.error


def test_a_shifted_model_loads_with_mask_id_and_shift_options(causal_dir: Path, project: Path) -> None:
    drafter = create_diffusion_drafter(f"diffusion:{causal_dir}", mask_id=4, shift=True, syntax_filter=False)
    assert drafter.lm.shift and drafter.lm.mask_id == 4 and drafter.lm.preset.name == "causal-lm"
    candidates = drafter.draft(context_for(project), 2)
    assert candidates and all(isinstance(c, Candidate) and c.changes[0].before == BUGGY for c in candidates)


def test_the_prefix_cache_reproduces_full_passes(causal_dir: Path, bert_drafter: DiffusionDrafter) -> None:
    lm = create_diffusion_drafter(f"diffusion:{causal_dir}", mask_id=4, shift=True).lm
    ids = torch.randint(5, 100, (2, 20), generator=torch.Generator().manual_seed(0))
    full, tail = lm.prefill(ids, None, 8)
    assert tail is not None
    for _ in range(2):  # the cache is cut back to the prefix before every pass
        assert torch.allclose(tail(ids[:, 8:]), full[:, 8:], atol=1e-5)
    assert bert_drafter.lm.prefill(ids, None, 8)[1] is None  # BERT has no cache: full passes


def test_a_full_pass_asks_the_model_for_no_cache(causal_dir: Path, bert_drafter: DiffusionDrafter) -> None:
    lm = create_diffusion_drafter(f"diffusion:{causal_dir}", mask_id=4, shift=True).lm
    seen: list[dict[str, Any]] = []
    hook = lm.model.register_forward_hook(
        lambda _m, _a, kw, out: seen.append({**kw, "out": out}), with_kwargs=True
    )
    try:
        ids = torch.randint(5, 100, (1, 12), generator=torch.Generator().manual_seed(0))
        lm(ids)
        lm.prefill(ids, None, 4)
    finally:
        hook.remove()
    full, cached = seen
    assert (
        full["use_cache"] is False and full["out"].past_key_values is None
    )  # nothing built to be thrown away
    assert cached["use_cache"] is True and cached["out"].past_key_values is not None
    assert bert_drafter.lm._no_cache == {}  # BERT's forward has no use_cache parameter: none is passed
    bert_drafter.lm(ids)


def test_a_model_that_refuses_a_cache_runs_full_passes(causal_dir: Path) -> None:
    """LLaDA's remote code takes `use_cache` and `past_key_values`, and asserts `not use_cache`."""
    lm = create_diffusion_drafter(f"diffusion:{causal_dir}", mask_id=4, shift=True).lm
    forward = lm.model.forward

    def refusing(*args: Any, use_cache: bool | None = None, past_key_values: Any = None, **kw: Any) -> Any:
        assert past_key_values is None and not use_cache, "The kvcache is not supported for MDM."
        return forward(*args, use_cache=use_cache, **kw)

    lm.model.forward = refusing
    ids = torch.randint(5, 100, (1, 12), generator=torch.Generator().manual_seed(0))
    logits, tail = lm.prefill(ids, None, 4)
    assert tail is None and torch.allclose(logits, lm(ids), atol=1e-5)
    assert lm.prefill(ids, None, 4)[1] is None  # not asked again
    masked = torch.cat([ids[:, :6], torch.full((1, 6), lm.mask_id)], dim=1)
    settings = SamplerSettings("cached", threshold=0.9, prefix_cache=True, block_length=3)
    done = decode(masked, lm, mask_id=lm.mask_id, settings=settings, shift=True)
    assert not (done.ids == lm.mask_id).any() and not done.stats.prefix_cache


def test_bench_reports_every_setting(bert_dir: Path) -> None:
    rows = bench_drafter(
        str(bert_dir), settings=["low-confidence", "threshold-0.7"], prompts=["def f():"], answer_tokens=8
    )
    assert [row["setting"] for row in rows] == ["low-confidence", "threshold-0.7"]
    assert rows[0]["nfe"] == 8 and rows[0]["tokens"] == 8 and rows[0]["tokens_per_nfe"] == 1.0
    for row in rows:
        assert {"nfe", "tokens", "tokens_per_nfe", "tokens_per_s", "seconds", "device"} <= set(row)


def test_bench_drafts_a_tiny_masked_lm_with_one_two_and_four_requests_at_once(bert_dir: Path) -> None:
    sampler = {"answer_tokens": 8, "sampler": "low-confidence", "max_context": 256}
    summary = bench_drafts(f"diffusion:{bert_dir}", sampler=sampler, tasks=TASKS[:2])
    assert summary["drafter"] == f"diffusion:{bert_dir}" and summary["drafts"] == 2 * (1 + 2 + 4)
    assert summary["pass_rate"] == 0.0  # a random model fixes nothing
    assert [level["drafts"] for level in summary["levels"]] == [2, 4, 8]
    for level in summary["levels"]:
        assert level["tokens"] == 8 * level["drafts"] and level["tokens_per_s"] > 0
        assert 0 < level["latency_s_p50"] <= level["latency_s_p95"]


def test_bench_times_a_diffusion_draft_from_the_step_its_edit_appears(tokenizer: Any) -> None:
    task = TASKS[0]  # add: a - b for a + b
    reply = "calc.py\n<<<<<<< SEARCH\n    return a - b\n=======\n    return a + b\n>>>>>>> REPLACE\n"
    options = DiffusionOptions(mode="chat", answer_tokens=96, sampler="low-confidence")
    source = SamplerSource(DiffusionDrafter(answering(tokenizer, reply, 96), options))
    summary = bench_drafts(source, tasks=[task], concurrency=(1, 2))
    assert summary["pass_rate"] == 1.0
    for result in summary["results"]:
        # Decoded left to right, one token a step: the edit appears once its last line is decoded, and
        # the steps after it (end-of-text) leave it as it is.
        assert 0 < result["first_valid_s"] == result["first_stable_s"] <= result["latency_s"]


@pytest.mark.parametrize(
    ("spec", "options", "message"),
    [
        ("diffusion:", {}, "needs a model"),
        ("diffusion:/nonexistent/model", {}, "no such directory"),
        ("diffusion:{bert}", {"temprature": 1}, "unknown diffusion drafter option temprature"),
        ("diffusion:{bert}", {"sampler": "fastest"}, "unknown sampler setting"),
        ("diffusion:{empty}", {}, "no readable config.json"),
    ],
)
def test_bad_specs_and_options_are_one_line_errors(
    bert_dir: Path, tmp_path: Path, spec: str, options: dict[str, object], message: str
) -> None:
    with pytest.raises(RalphError, match=message) as caught:
        create_diffusion_drafter(spec.format(bert=bert_dir, empty=tmp_path), **options)
    assert "\n" not in str(caught.value)


def test_a_span_is_split_keeping_the_lines_around_it_intact() -> None:
    head, core, tail = split_span(BUGGY, (2, 2))
    assert (head, core) == ("def add(a, b):\n", "    return a - b")
    assert head + core + tail == BUGGY and tail.startswith("\n\n\ndef double")


def test_without_torch_the_drafter_and_the_bench_ask_for_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # makes `import torch` fail
    with pytest.raises(RalphError, match="ralph-loop\\[diffusion\\]"):
        create_diffusion_drafter("diffusion:org/model")
    with pytest.raises(RalphError, match="ralph-loop\\[diffusion\\]"):
        bench_drafter("org/model")


def test_out_of_range_options_are_rejected_before_loading_anything() -> None:
    with pytest.raises(RalphError, match="answer_tokens must be at least 1"):
        create_diffusion_drafter("diffusion:org/model", answer_tokens=0)
    with pytest.raises(RalphError, match="mode 'fast'"):
        create_diffusion_drafter("diffusion:org/model", mode="fast")


@pytest.mark.slow
def test_bench_drafter_command_prints_one_entry_per_setting(bert_dir: Path) -> None:
    from ralph.bench.drafter import BENCH_SETTINGS
    from tests.conftest import run_ralph

    argv = ("bench", "drafter", "--model", str(bert_dir), "--device", "cpu", "--answer-tokens", "8")
    proc = run_ralph(*argv, "--json", timeout=300)
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert [row["setting"] for row in rows] == list(BENCH_SETTINGS)
    assert all({"setting", "nfe", "tokens", "tokens_per_nfe", "tokens_per_s"} <= row.keys() for row in rows)
    assert all(row["tokens"] <= 8 * row["prompts"] for row in rows)  # the answers' length was asked for
    chosen = run_ralph(*argv, "--setting", "margin", "--setting", "low-confidence-x4", "--json", timeout=300)
    assert chosen.returncode == 0, chosen.stderr
    assert [row["setting"] for row in json.loads(chosen.stdout)] == ["margin", "low-confidence-x4"]


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (
            ["--model", "{bert}", "--setting", "fastest"],
            "unknown sampler setting 'fastest'; known: low-confidence,",
        ),
        (
            ["--model", "{bert}", "--answer-tokens", "0"],
            "bench drafter needs at least one prompt and a positive",
        ),
        (["--drafter", "openai/x", "--setting", "margin"], "--setting and --answer-tokens go with --model"),
        (["--drafter", "openai/x", "--answer-tokens", "64"], "--setting and --answer-tokens go with --model"),
    ],
)
def test_bench_drafter_settings_that_cannot_be_run_are_one_line_and_exit_2(
    bert_dir: Path, flags: list[str], says: str
) -> None:
    from tests.conftest import run_ralph

    proc = run_ralph("bench", "drafter", *(f.format(bert=bert_dir) for f in flags), timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and says in proc.stderr, proc.stderr
