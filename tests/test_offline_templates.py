"""The offline drafter on small projects with the one-line bugs it used to stall on: each reaches
green with the real loop, real pytest and the sandbox."""

from __future__ import annotations

import json

import pytest

from ralph.config import RunConfig
from ralph.session import fix
from ralph.trace import read_trace
from ralph.view import QuietView

BUGS = {
    "wrong_default": {
        "paging.py": (
            "def page(items, number: int = 0, size: int = 2):\n"
            '    """Page `number` of `items`, counting from 1."""\n'
            "    start = (number - 1) * size\n"
            "    return items[start : start + size]\n"
        ),
        "tests/test_paging.py": (
            "from paging import page\n\n\n"
            "def test_the_first_page_by_default():\n    assert page([1, 2, 3]) == [1, 2]\n\n\n"
            "def test_the_second_page():\n    assert page([1, 2, 3], 2) == [3]\n"
        ),
    },
    "wrong_key": {
        "settings.py": (
            "DEFAULTS = {'port': 8080, 'timeout': 30}\n\n\n"
            "def timeout(overrides):\n    merged = {**DEFAULTS, **overrides}\n    return merged['port']\n"
        ),
        "tests/test_settings.py": (
            "from settings import timeout\n\n\n"
            "def test_the_default_timeout():\n    assert timeout({}) == 30\n\n\n"
            "def test_an_override():\n    assert timeout({'timeout': 5}) == 5\n"
        ),
    },
    "missing_return": {
        "stats.py": (
            "def running_total(xs):\n    totals = []\n    acc = 0\n"
            "    for x in xs:\n        acc += x\n        totals.append(acc)\n"
        ),
        "tests/test_stats.py": (
            "from stats import running_total\n\n\n"
            "def test_running_total():\n    assert running_total([1, 2, 3]) == [1, 3, 6]\n"
        ),
    },
    "range_start": {
        "pairs.py": (
            "def neighbours(xs):\n"
            "    return [(xs[i - 1], xs[i]) for i in range(1, len(xs))]\n\n\n"
            "def total(xs):\n    return sum(xs[i] for i in range(1, len(xs)))\n"
        ),
        "tests/test_pairs.py": (
            "from pairs import neighbours, total\n\n\n"
            "def test_neighbours():\n    assert neighbours([1, 2, 3]) == [(1, 2), (2, 3)]\n\n\n"
            "def test_total():\n    assert total([1, 2, 3]) == 6\n"
        ),
    },
    "return_in_loop": {
        "scan.py": (
            "def positives(xs):\n    found = []\n    for x in xs:\n        if x > 0:\n"
            "            found.append(x)\n        return found\n"
        ),
        "tests/test_scan.py": (
            "from scan import positives\n\n\n"
            "def test_positives():\n    assert positives([-1, 2, 3]) == [2, 3]\n"
        ),
    },
    "key_only_the_test_knows": {
        "record.py": (
            "def parse(line):\n    key, _, value = line.partition('=')\n"
            "    return {'nme': key.strip(), 'value': value.strip()}\n"
        ),
        "tests/test_record.py": (
            "from record import parse\n\n\n"
            "def test_parse():\n    assert parse('a = 1') == {'name': 'a', 'value': '1'}\n"
        ),
    },
    "missing_guard": {
        "average.py": (
            "def average(xs):\n"
            '    """The mean of xs; 0 for no values."""\n'
            "    return sum(xs) / len(xs)\n\n\n"
            "def spread(xs):\n    if not xs:\n        return 0\n    return max(xs) - min(xs)\n"
        ),
        "tests/test_average.py": (
            "from average import average\n\n\n"
            "def test_average():\n    assert average([1, 2, 3]) == 2\n\n\n"
            "def test_no_values():\n    assert average([]) == 0\n"
        ),
    },
    "float_default_on_a_line_of_its_own": {
        "scaling.py": (
            "def scale(\n"
            "    values: list[float],\n"
            "    factor: float = 1.0,\n"
            "    offset: float = 0.0,\n"
            ") -> list[float]:\n"
            '    """Each value times `factor` (doubled unless told otherwise), plus `offset`."""\n'
            "    return [v * factor + offset for v in values]\n"
        ),
        "tests/test_scaling.py": (
            "from scaling import scale\n\n\n"
            "def test_doubles_by_default():\n    assert scale([1.0, 2.5]) == [2.0, 5.0]\n\n\n"
            "def test_an_explicit_factor():\n    assert scale([1.0], 3.0, 1.0) == [4.0]\n"
        ),
    },
    "operand_of_the_wrong_range": {
        "ranges.py": (
            "def rescale(value, old_min, old_max, new_min, new_max):\n"
            '    """`value` from [old_min, old_max] mapped linearly onto [new_min, new_max]."""\n'
            "    ratio = (value - old_min) / (old_max - old_min)\n"
            "    return new_min + ratio * (new_max - old_min)\n"
        ),
        "tests/test_ranges.py": (
            "from ranges import rescale\n\n\n"
            "def test_rescale():\n    assert rescale(5, 0, 10, 100, 200) == 150\n\n\n"
            "def test_the_ends():\n"
            "    assert rescale(0, 0, 10, 1, 3) == 1\n    assert rescale(10, 0, 10, 1, 3) == 3\n"
        ),
    },
    "the_same_slip_in_two_functions": {
        "cipher.py": "\n\n".join(
            f"def caesar_{name}(text: str, shift: int) -> str:\n"
            "    out = []\n"
            "    for c in text:\n"
            "        if c.isalpha():\n"
            "            base = ord('a') if c.islower() else ord('A')\n"
            f"            out.append(chr((ord(c) - base {sign} shift) % 25 + base))\n"
            "        else:\n"
            "            out.append(c)\n"
            "    return ''.join(out)\n"
            for name, sign in (("encode", "+"), ("decode", "-"))
        ),
        "tests/test_cipher.py": (
            "from cipher import caesar_decode, caesar_encode\n\n\n"
            "def test_round_trip():\n"
            "    for word in ('hello', 'Zebra', 'xyz'):\n"
            "        assert caesar_decode(caesar_encode(word, 3), 3) == word\n"
        ),
    },
    "an_equality_meant_an_ordering": {
        "ledger.py": (
            "def goes_negative(operations):\n"
            '    """Whether the balance, starting at 0, ever falls below 0."""\n'
            "    balance = 0\n"
            "    for op in operations:\n"
            "        balance += op\n"
            "        if balance == 0:\n"
            "            return True\n"
            "    return False\n"
        ),
        "tests/test_ledger.py": (
            "from ledger import goes_negative\n\n\n"
            "def test_an_overdraft():\n    assert goes_negative([1, -4, 5])\n\n\n"
            "def test_an_overdraft_by_one():\n    assert goes_negative([1, -2])\n\n\n"
            "def test_a_balance_that_stays_positive():\n    assert not goes_negative([1, 2])\n\n\n"
            "def test_a_balance_that_touches_zero():\n    assert not goes_negative([1, -1, 2])\n"
        ),
    },
    "the_same_number_wrong_twice_in_a_function": {
        "primes.py": (
            "def is_prime(n):\n"
            "    if n < 1:\n"
            "        return False\n"
            "    for k in range(1, n):\n"
            "        if n % k == 0:\n"
            "            return False\n"
            "    return True\n"
        ),
        "tests/test_primes.py": (
            "from primes import is_prime\n\n\n"
            "def test_primes():\n"
            "    assert [n for n in range(1, 12) if is_prime(n)] == [2, 3, 5, 7, 11]\n"
        ),
    },
    "both_answers_in_the_wrong_case": {
        "answer.py": ("def answer(ok):\n    return 'yes' if ok else 'no'\n"),
        "tests/test_answer.py": (
            "from answer import answer\n\n\n"
            "def test_answers():\n    assert (answer(True), answer(False)) == ('Yes', 'No')\n"
        ),
    },
    "a_count_between_bounds_one_short": {
        "average.py": (
            "def mean_of_range(lo, hi):\n"
            '    """The mean of the integers lo..hi, both included."""\n'
            "    total = sum(range(lo, hi + 1))\n"
            "    return total / (hi - lo)\n"
        ),
        "tests/test_average.py": (
            "from average import mean_of_range\n\n\n"
            "def test_one_to_three():\n    assert mean_of_range(1, 3) == 2\n\n\n"
            "def test_two_to_six():\n    assert mean_of_range(2, 6) == 4\n"
        ),
    },
    "a_square_written_as_a_double": {
        "squares.py": (
            "def sum_of_squares(xs):\n"
            "    total = 0\n"
            "    for x in xs:\n"
            "        total += x * 2\n"
            "    return total\n"
        ),
        "tests/test_squares.py": (
            "from squares import sum_of_squares\n\n\n"
            "def test_squares():\n    assert sum_of_squares([1, 3]) == 10\n\n\n"
            "def test_none():\n    assert sum_of_squares([]) == 0\n"
        ),
    },
    "a_keyword_only_truth_value_default_below_its_def": {
        "report.py": (
            "def render(\n"
            "    rows,\n"
            "    *,\n"
            "    header: bool = False,\n"
            "):\n"
            '    lines = [", ".join(row) for row in rows]\n'
            '    return ["name, value", *lines] if header else lines\n'
        ),
        "tests/test_report.py": (
            "from report import render\n\n\n"
            "def test_a_header_by_default():\n"
            "    assert render([('a', '1')]) == ['name, value', 'a, 1']\n"
            "    assert render([('a', '1')], header=False) == ['a, 1']\n"
        ),
    },
    "letters_missing_their_capitals": {
        "vowels.py": (
            'def count_vowels(text):\n    vowels = "aeiou"\n    return sum(1 for c in text if c in vowels)\n'
        ),
        "tests/test_vowels.py": (
            "from vowels import count_vowels\n\n\n"
            "def test_count_vowels():\n"
            "    assert [count_vowels(w) for w in ('abc', 'ACEDY', 'Alone')] == [1, 2, 3]\n"
        ),
    },
}


# The template that must make the fix, where the bug was found unfixed before that template was made.
FIXED_BY = {
    "float_default_on_a_line_of_its_own": "default_swap",
    "operand_of_the_wrong_range": "operand_substitute",
    "the_same_slip_in_two_functions": "everywhere",
    "the_same_number_wrong_twice_in_a_function": "twin",
    "both_answers_in_the_wrong_case": "twin",
    "a_count_between_bounds_one_short": "span_off_by_one",
    "a_square_written_as_a_double": "binop_swap_far",
    "letters_missing_their_capitals": "string_variant",
    "a_keyword_only_truth_value_default_below_its_def": "default_swap",
}
# Where the fix takes that template after a simpler partial one (`== 0` -> `== -1` fixes two of the
# three failing tests, then `== -1` -> `<= -1`, the same as `< 0` on integers).
FIXED_WITH = {"an_equality_meant_an_ordering": "compare_far"}


@pytest.mark.slow
@pytest.mark.parametrize("bug", sorted(BUGS))
def test_the_offline_drafter_fixes(bug, make_repo):
    repo = make_repo(BUGS[bug])
    # The default budget (20 iterations of 4 candidates), as a new user runs it.
    outcome = fix(repo, RunConfig(drafter="mutation"), view=QuietView(notices=False))
    assert outcome.result.outcome == "goal", bug
    if bug in FIXED_BY:
        assert _accepted_operators(outcome.trace) == [FIXED_BY[bug]]
    if bug in FIXED_WITH:
        assert FIXED_WITH[bug] in _accepted_operators(outcome.trace)


def _accepted_operators(trace) -> list[str]:
    return [
        c["meta"]["operator"]
        for r in read_trace(trace)
        if r["type"] == "iteration"
        for c in r["candidates"]
        if c["verdict"] == "accepted"
    ]


COUNTDOWN = {
    "countdown.py": "def steps(n):\n    count = 0\n    while n > 0:\n        n += 1\n        count += 1\n    return count\n",
    "tests/test_countdown.py": (
        "from countdown import steps\n\n\ndef test_steps():\n    assert steps(3) == 3\n\n\n"
        "def test_none():\n    assert steps(0) == 0\n"
    ),
}


def _replayed(repo, tmp_path, texts: tuple[str, ...], **settings: object) -> tuple[dict, dict]:
    """Replay `texts` as countdown.py one candidate an iteration until green; the first candidate's
    record and its targeted tests stage."""
    edits = tmp_path / "edits.jsonl"
    edits.write_text("".join(json.dumps({"files": {"countdown.py": t}}) + "\n" for t in texts))
    config = RunConfig(drafter=f"replay:{edits}", candidates=1, max_iterations=3, **settings)  # type: ignore[arg-type]
    outcome = fix(repo, config, view=QuietView(notices=False))
    assert outcome.result.outcome == "goal"
    first = next(r for r in read_trace(outcome.trace) if r["type"] == "iteration")["candidates"][0]
    [tests] = [s for s in first["stages"] if s["stage"] == "tests"]
    return first, tests


@pytest.mark.slow
def test_a_candidate_whose_loop_still_never_ends_is_cut_short(make_repo, tmp_path):
    repo = make_repo(COUNTDOWN)
    still = COUNTDOWN["countdown.py"].replace("n += 1", "n += 2")
    fixed = COUNTDOWN["countdown.py"].replace("n += 1", "n -= 1")
    first, tests = _replayed(repo, tmp_path, (still, fixed), test_timeout_s=8.0)
    assert first["verdict"] == "rejected"
    # Cut at 2 s (ten times the healthy test, at least 2 s), not the project's 8 s.
    assert tests["duration_ms"] < 4000, tests


@pytest.mark.slow
def test_a_hanging_candidate_takes_no_more_than_a_fair_share_of_the_run(make_repo, tmp_path):
    """Three tests hang at the baseline and still hang with the candidate: cut at a tenth of
    --max-seconds in all (2.5 s), not at 2 s a test."""
    hanging = {
        "countdown.py": COUNTDOWN["countdown.py"],
        "tests/test_countdown.py": "from countdown import steps\n\n"
        + "".join(f"\ndef test_steps_{n}():\n    assert steps({n}) == {n}\n\n" for n in (3, 4, 5))
        + "\ndef test_none():\n    assert steps(0) == 0\n",
    }
    repo = make_repo(hanging)
    still = COUNTDOWN["countdown.py"].replace("n += 1", "n += 2")
    fixed = COUNTDOWN["countdown.py"].replace("n += 1", "n -= 1")
    first, tests = _replayed(repo, tmp_path, (still, fixed), test_timeout_s=3.0, max_seconds=25)
    assert first["verdict"] != "accepted"
    assert tests["duration_ms"] < 4500, tests  # 6 s without the fair share


@pytest.mark.slow
def test_a_bug_that_needs_two_edits_is_fixed_once_single_edits_are_spent(make_repo):
    repo = make_repo(
        {
            # (Two different slips: `1` -> `0` twice would be one candidate, a `twin`.)
            "window.py": "def window(xs):\n    start = 1\n    end = len(xs) - 2\n    return xs[start:end]\n",
            "tests/test_window.py": (
                "from window import window\n\n\ndef test_window():\n    assert window([1, 2, 3]) == [1, 2, 3]\n"
            ),
        }
    )
    outcome = fix(repo, RunConfig(drafter="mutation", max_iterations=25), view=QuietView(notices=False))
    assert outcome.result.outcome == "goal"
    assert _accepted_operators(outcome.trace) == ["pair"]


@pytest.mark.slow
def test_a_candidate_that_makes_a_quick_test_hang_is_cut_short(make_repo, tmp_path):
    """The baseline's failing test fails at once; a candidate that makes it loop forever is cut at
    ten times the slowest healthy test (at least 2 s), not at the project's 8 s."""
    wrong = COUNTDOWN["countdown.py"].replace("n += 1", "n -= 2")
    repo = make_repo({**COUNTDOWN, "countdown.py": wrong})
    endless = COUNTDOWN["countdown.py"]  # n += 1: never ends
    fixed = COUNTDOWN["countdown.py"].replace("n += 1", "n -= 1")
    first, tests = _replayed(repo, tmp_path, (endless, fixed), test_timeout_s=8.0)
    assert first["verdict"] == "rejected"
    assert tests["duration_ms"] < 4000, tests
