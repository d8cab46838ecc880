"""tests/bench_diffusion_gpu.py, the GPU bench of the diffusion sampler, run here with --tiny: the same
code path on two-layer models of both families, so the script that produced the README's GPU figures
cannot rot between the sessions that are lent a GPU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from tests import bench_diffusion_gpu as bench  # noqa: E402


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("gpu-bench")
    try:
        assert bench.main([str(out), "--tiny"]) == 0
    finally:
        torch.set_num_threads(threads)
    assert (out / "diffusion_gpu.md").read_text().count(
        "| 1 token/pass, cached | 4 |"
    ) == 2  # one row per family
    loaded = json.loads((out / "diffusion_gpu.json").read_text())
    assert isinstance(loaded, dict)
    return loaded


@pytest.mark.slow
@pytest.mark.parametrize("name", ["llada-8b", "dream-7b"])
def test_each_family_decodes_bidirectionally_through_the_drafters_sampler(
    report: dict[str, object], name: str
) -> None:
    shapes = report["shapes"]
    assert isinstance(shapes, list)
    shape = next(s for s in shapes if s["shape"] == name)
    assert shape["bidirectional"] is True  # the first position sees the last: not a causal model
    assert shape["shift"] is (name == "dream-7b")
    answer = bench.TINY.answer
    by_setting = {(d["setting"], d["rows"]): d for d in shape["decode"]}
    for rows in bench.ROWS:
        assert by_setting[("1 token/pass", rows)]["nfe"] == answer
        assert by_setting[("4 tokens/pass", rows)]["nfe"] == answer // 4
        assert by_setting[("1 token/pass", rows)]["prefix_cache_used"] is False
        # The cached settings really ran through the model's cache, not silently without it.
        assert by_setting[("1 token/pass, cached", rows)]["prefix_cache_used"] is True
        assert by_setting[("autoregressive, KV cache", rows)]["tokens"] == answer * rows
    assert {f["rows"] for f in shape["forward"]} == set(bench.ROWS)
    assert all(f["cached_pass_ms"] is not None for f in shape["forward"])


def test_an_unknown_shape_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert bench.main([str(tmp_path), "--tiny", "--shapes", "gpt-5"]) == 2
    assert capsys.readouterr().err.strip() == "unknown shape 'gpt-5'; known: llada-8b, dream-7b"
