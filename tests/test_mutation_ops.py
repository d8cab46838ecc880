"""Specification tests for the template-based repair operators in `ralph.drafters.mutation_ops`."""

from __future__ import annotations

import ast
import difflib
from collections.abc import Callable

from ralph.drafters.mutation_ops import MAX_MUTANTS_PER_LINE, Mutant, default_variants, generate_mutants

SAMPLE = '''\
"""A small module with a bit of everything."""
import math

LIMIT = 10


def score(items, weight=2):  # odd   spacing kept
    total = 0
    seen = []
    for i in range(len(items)):
        item = items[i]
        if item < LIMIT and not item in seen:
            total += item * weight
            seen.append(item)
        elif item >= LIMIT or item is None:
            total -= -1
    assert total != 0, "empty"
    best = max(items[1:i], default=0)
    return math.floor(total / (len(items) - 1)) if best else [x for x in seen if x % 2 == 0]
'''


def sources(mutants: list[Mutant]) -> list[str]:
    return [m.source for m in mutants]


def by_operator(mutants: list[Mutant], operator: str) -> list[Mutant]:
    return [m for m in mutants if m.operator == operator]


def changed_lines(before: str, after: str) -> set[int]:
    """1-based lines of `before` that differ in `after`."""
    matcher = difflib.SequenceMatcher(a=before.splitlines(True), b=after.splitlines(True), autojunk=False)
    changed: set[int] = set()
    for tag, i1, i2, _, _ in matcher.get_opcodes():
        if tag != "equal":
            changed.update(range(i1 + 1, max(i2, i1 + 1) + 1))
    return changed


def load(source: str, name: str) -> Callable[..., object]:
    namespace: dict[str, object] = {}
    exec(compile(source, "<mutant>", "exec"), namespace)
    function = namespace[name]
    assert callable(function)
    return function


def fixes(mutants: list[Mutant], name: str, check: Callable[[Callable[..., object]], bool]) -> list[Mutant]:
    """The mutants whose function `name` passes `check` (mutants that crash do not)."""
    passing = []
    for mutant in mutants:
        try:
            if check(load(mutant.source, name)):
                passing.append(mutant)
        except Exception:
            continue
    return passing


# --- byte-for-byte preservation ----------------------------------------------------------------


def test_comparison_is_flipped_preserving_the_rest_of_the_file_byte_for_byte() -> None:
    source = "x = 1   # one\n\nif  x<y :   # keep < here\n    pass\nz  =  [ 1,2 ]\n"
    flips = {m.source for m in by_operator(generate_mutants(source, [3]), "compare_flip")}
    assert flips == {
        "x = 1   # one\n\nif  x<=y :   # keep < here\n    pass\nz  =  [ 1,2 ]\n",
        "x = 1   # one\n\nif  x>y :   # keep < here\n    pass\nz  =  [ 1,2 ]\n",
    }


def test_windows_line_endings_are_kept() -> None:
    source = "a = 1\r\nif a < 2:\r\n    b = a - 1\r\n    c = 2\r\n"
    mutants = generate_mutants(source, [2, 3])
    assert "a = 1\r\nif a <= 2:\r\n    b = a - 1\r\n    c = 2\r\n" in sources(mutants)
    assert "a = 1\r\nif a < 2:\r\n    c = 2\r\n" in sources(mutants)  # deleted `b = a - 1`
    assert all(m.source.count("\r\n") >= 3 and "\n" not in m.source.replace("\r\n", "") for m in mutants)


def test_operator_token_inside_parentheses_and_comments() -> None:
    source = "total = (a  # first + x\n         ) + (  # second - y\n    b)\n"
    mutants = generate_mutants(source, [1])
    swap = by_operator(mutants, "binop_swap")
    assert [m.source for m in swap] == ["total = (a  # first + x\n         ) - (  # second - y\n    b)\n"]
    assert swap[0].line == 2  # the line of the replaced token


def test_non_ascii_line_offsets() -> None:
    source = 'área = π * r  # ü\nlabel = "日本語 😀" if count < 3 else "ß"\n'
    mutants = generate_mutants(source, [1, 2])
    assert 'área = π / r  # ü\nlabel = "日本語 😀" if count < 3 else "ß"\n' in sources(mutants)
    assert 'área = π * r  # ü\nlabel = "日本語 😀" if count <= 3 else "ß"\n' in sources(mutants)
    assert 'área = π * r  # ü\nlabel = "日本語 😀" if count < 4 else "ß"\n' in sources(mutants)
    assert 'área = π * r  # ü\nlabel = "日本語 😀" if not (count < 3) else "ß"\n' in sources(mutants)
    assert 'área = π * label  # ü\nlabel = "日本語 😀" if count < 3 else "ß"\n' in sources(mutants)


def test_words_stay_apart_when_a_literal_replaces_a_symbol() -> None:
    mutants = generate_mutants("y = x if c else-1\n", [1])
    assert "y = x if c else 0\n" in sources(mutants)
    assert "y = x if c else-2\n" in sources(mutants)


def test_expressions_inside_f_strings_are_mutated_in_place() -> None:
    mutants = generate_mutants('msg = f"{n - 1} of {total!r:>{width}}"\n', [1])
    assert 'msg = f"{n + 1} of {total!r:>{width}}"\n' in sources(mutants)
    assert 'msg = f"{n - 0} of {total!r:>{width}}"\n' in sources(mutants)


def test_statements_in_nested_blocks_elifs_and_decorated_functions_are_mutated() -> None:
    source = (
        "class C:\n"
        "    @staticmethod\n"
        "    @cache(size=8)\n"
        "    def f(x):\n"
        "        if x > 1:\n"
        "            return 1\n"
        "        elif x == 0:\n"
        "            return -x\n"
        "        return 2\n"
    )
    mutants = generate_mutants(source, [3, 7, 8])
    assert source.replace("size=8", "size=9") in sources(mutants)
    assert source.replace("elif x == 0", "elif x != 0") in sources(mutants)
    assert source.replace("elif x == 0", "elif not (x == 0)") in sources(mutants)
    assert source.replace("return -x", "return x") in sources(mutants)


# --- scope of the edits ------------------------------------------------------------------------


def test_mutants_only_at_requested_lines() -> None:
    for line in (7, 12, 13, 16, 18, 19):
        mutants = generate_mutants(SAMPLE, [line])
        assert mutants, line
        for mutant in mutants:
            assert mutant.line == line
            assert changed_lines(SAMPLE, mutant.source) == {line}, mutant.description


def test_every_mutant_parses_and_differs() -> None:
    lines = list(range(1, SAMPLE.count("\n") + 2))
    mutants = generate_mutants(SAMPLE, lines)
    assert len(mutants) > 100
    assert len(set(sources(mutants))) == len(mutants)
    for mutant in mutants:
        assert mutant.source != SAMPLE
        ast.parse(mutant.source)
        assert mutant.description.startswith(f"line {mutant.line}: ")


def test_ordering_follows_line_rank_then_cost() -> None:
    mutants = generate_mutants(SAMPLE, [15, 12])
    lines = [m.line for m in mutants]
    assert lines == sorted(lines, key=[15, 12].index)
    for line in (15, 12):
        group = [m for m in mutants if m.line == line]
        assert [m.cost for m in group] == sorted(m.cost for m in group)
    assert mutants[0].cost == 1


def test_cost_ranks_simple_operators_first() -> None:
    mutants = generate_mutants(SAMPLE, [12])
    cost = {m.operator: m.cost for m in mutants}
    assert cost["compare_flip"] == cost["boolop_swap"] == cost["remove_not"] == 1
    assert cost["negate_condition"] == 2
    assert cost["var_substitute"] == cost["swap_operands"] == 3


def test_mutants_per_line_are_capped() -> None:
    source = "x = " + " + ".join(f"v{i} * {i}" for i in range(200)) + "\n"
    mutants = generate_mutants(source, [1])
    assert len(mutants) == MAX_MUTANTS_PER_LINE


def test_syntax_error_yields_nothing() -> None:
    assert generate_mutants("def f(:\n    return 1\n", [1, 2]) == []
    assert generate_mutants("x = 1\n", []) == []
    assert generate_mutants("x = 1\n", [99]) == []


def test_annotations_are_left_alone() -> None:
    source = "def f(x: list[int] = 3) -> dict[str, int]:\n    return x\n"
    mutants = generate_mutants(source, [1])
    assert {m.source.splitlines()[0] for m in mutants} == {
        "def f(x: list[int] = 4) -> dict[str, int]:",
        "def f(x: list[int] = 2) -> dict[str, int]:",
        "def f(x: list[int] = 5) -> dict[str, int]:",
        "def f(x: list[int] = 1) -> dict[str, int]:",
        "def f(x: list[int] = None) -> dict[str, int]:",  # (the default, not its annotation)
    }


# --- individual operators ----------------------------------------------------------------------


def test_arithmetic_and_bitwise_operators_swap_within_families() -> None:
    cases = {
        "a + b": {"a - b"},
        "a * b": {"a / b", "a // b"},
        "a // b": {"a / b", "a * b"},
        "a % b": {"a // b"},
        "a ** b": {"a * b"},
        "a & b": {"a | b"},
        "a << b": {"a >> b"},
    }
    for expression, expected in cases.items():
        mutants = by_operator(generate_mutants(f"r = {expression}\n", [1]), "binop_swap")
        assert {m.source for m in mutants} == {f"r = {e}\n" for e in expected}


def test_augmented_assignment_operator_swaps() -> None:
    mutants = by_operator(
        generate_mutants("def f(t, x):\n    t += x\n    t *= x\n", [2, 3]), "augassign_swap"
    )
    assert [m.description for m in mutants] == [
        "line 2: `+=` -> `-=`",
        "line 3: `*=` -> `/=`",
        "line 3: `*=` -> `//=`",
    ]


def test_each_operator_of_a_chained_comparison_flips() -> None:
    flips = sources(by_operator(generate_mutants("ok = 0 <= i < n\n", [1]), "compare_flip"))
    assert flips == ["ok = 0 < i < n\n", "ok = 0 >= i < n\n", "ok = 0 <= i <= n\n", "ok = 0 <= i > n\n"]


def test_identity_and_membership_comparisons_flip() -> None:
    source = "a = x is None\nb = x is not None\nc = k in d\nd2 = k not in d\n"
    flips = [
        m.source.splitlines()[m.line - 1]
        for m in by_operator(generate_mutants(source, [1, 2, 3, 4]), "compare_flip")
    ]
    assert flips == ["a = x is not None", "b = x is None", "c = k not in d", "d2 = k in d"]


def test_boolean_operators_and_constants_flip() -> None:
    mutants = generate_mutants("ok = a and b and flag is True\n", [1])
    assert "ok = a or b and flag is True\n" in sources(mutants)
    assert "ok = a and b or flag is True\n" in sources(mutants)
    assert "ok = a or b or flag is True\n" in sources(mutants)
    assert "ok = a and b and flag is False\n" in sources(mutants)


def test_conditions_are_negated_and_nots_removed() -> None:
    source = "while ready:\n    assert a == b\n    y = [v for v in vs if v > 0]\n    z = not (p or q)\n"
    mutants = generate_mutants(source, [1, 2, 3, 4])
    lines = {
        m.source.splitlines()[m.line - 1] for m in mutants if m.operator in ("negate_condition", "remove_not")
    }
    assert lines == {
        "while not ready:",
        "    assert not (a == b)",
        "    y = [v for v in vs if not (v > 0)]",
        "    z = (p or q)",
    }


def test_integer_literals_move_by_one() -> None:
    mutants = by_operator(generate_mutants("a = xs[0] + ys[-1] + 0x0f\n", [1]), "const_off_by_one")
    assert sources(mutants) == [
        "a = xs[1] + ys[-1] + 0x0f\n",
        "a = xs[-1] + ys[-1] + 0x0f\n",
        "a = xs[0] + ys[0] + 0x0f\n",
        "a = xs[0] + ys[-2] + 0x0f\n",
        "a = xs[0] + ys[-1] + 0x10\n",
        "a = xs[0] + ys[-1] + 0xe\n",
    ]


def test_off_by_one_in_range_bound() -> None:
    mutants = generate_mutants("for i in range(start, len(xs)):\n    pass\n", [1])
    lines = {m.source.splitlines()[0] for m in by_operator(mutants, "index_off_by_one")}
    assert lines == {
        "for i in range(start + 1, len(xs)):",
        "for i in range(start - 1, len(xs)):",
        "for i in range(start, len(xs) + 1):",
        "for i in range(start, len(xs) - 1):",
    }


def test_slice_bounds_move_by_one_or_disappear() -> None:
    mutants = by_operator(generate_mutants("tail = xs[k:n << 1]\n", [1]), "slice_off_by_one")
    assert set(sources(mutants)) == {
        "tail = xs[k + 1:n << 1]\n",
        "tail = xs[k - 1:n << 1]\n",
        "tail = xs[:n << 1]\n",
        "tail = xs[k:(n << 1) + 1]\n",
        "tail = xs[k:(n << 1) - 1]\n",
        "tail = xs[k:]\n",
    }


def test_index_moves_by_one() -> None:
    mutants = by_operator(generate_mutants("v = xs[i]\n", [1]), "index_off_by_one")
    assert sources(mutants) == ["v = xs[i + 1]\n", "v = xs[i - 1]\n"]


def test_positional_arguments_and_operands_swap() -> None:
    mutants = generate_mutants("r = f(a, (b), c) - g(x)\nq = n < m\n", [1, 2])
    assert sources(by_operator(mutants, "swap_args")) == [
        "r = f(b, (a), c) - g(x)\nq = n < m\n",  # parentheses stay where they were
        "r = f(a, (c), b) - g(x)\nq = n < m\n",
    ]
    assert "r = g(x) - f(a, (b), c)\nq = n < m\n" in sources(by_operator(mutants, "swap_operands"))
    assert "r = f(a, (b), c) - g(x)\nq = m < n\n" in sources(by_operator(mutants, "swap_operands"))


def test_swapped_operands_keep_their_precedence() -> None:
    mutants = by_operator(generate_mutants("r = a ** (b - c)\n", [1]), "swap_operands")
    assert sources(mutants)[0] == "r = (b - c) ** (a)\n"
    assert eval(sources(mutants)[0][4:], {"a": 2, "b": 5, "c": 3}) == 4


def test_commonly_confused_calls_swap() -> None:
    source = "m = min(xs)\nu = s.upper()\nf = math.floor(x)\nok = name.startswith('_')\n"
    mutants = by_operator(generate_mutants(source, [1, 2, 3, 4]), "call_swap")
    assert [m.source.splitlines()[m.line - 1] for m in mutants] == [
        "m = max(xs)",
        "u = s.lower()",
        "u = s.swapcase()",
        "f = math.ceil(x)",
        "ok = name.endswith('_')",
    ]


def test_unary_minus_is_removed() -> None:
    mutants = by_operator(generate_mutants("y = -x + -(a)\n", [1]), "unary_remove")
    assert sources(mutants) == ["y = x + -(a)\n", "y = -x + (a)\n"]


def test_simple_statements_are_deleted_only_from_blocks_with_company() -> None:
    source = "def f(x):\n    x += 1  # bump\n    return x\n\n\ndef g(x):\n    x += 1\n"
    deletions = by_operator(generate_mutants(source, [2, 7]), "delete_statement")
    assert sources(deletions) == ["def f(x):\n    return x\n\n\ndef g(x):\n    x += 1\n"]


def test_var_substitution_uses_same_scope_names() -> None:
    source = (
        "GLOBAL = 1\n"
        "\n"
        "def other(unrelated):\n"
        "    hidden = unrelated\n"
        "    return hidden\n"
        "\n"
        "def f(a, b):\n"
        "    c = a + 1\n"
        "    d = [k for k in range(3)]\n"
        "    return c * b\n"
    )
    mutants = generate_mutants(source, [10])
    replaced = [m.description for m in by_operator(mutants, "var_substitute")]
    # `f`'s names only (not `GLOBAL`, `k`, `hidden`); `c` and `b` are operands, so the substitutes
    # `operand_substitute` takes (all but the other operand) are made under its name.
    operands = [m.description for m in by_operator(mutants, "operand_substitute")]
    assert replaced == ["line 10: `c` -> `b`", "line 10: `b` -> `c`"]
    assert operands == [
        "line 10: `c` -> `d`",  # bound nearest to the use first
        "line 10: `c` -> `a`",
        "line 10: `b` -> `d`",
        "line 10: `b` -> `a`",
    ]
    module_level = by_operator(generate_mutants(source, [4]), "var_substitute")
    assert [m.description for m in module_level] == ["line 4: `unrelated` -> `hidden`"]


def test_a_variable_is_replaced_by_others_of_its_type_first_and_never_by_one_of_another() -> None:
    source = (
        "def f(items: list[int], limit: int, label):\n"
        "    total = 0\n"
        "    name = 'x'\n"
        "    for i in range(limit):\n"
        "        total += i\n"
        "    count = len(items)\n"
        "    return total\n"
    )
    replaced = [m.description for m in by_operator(generate_mutants(source, [7]), "var_substitute")]
    # ints first (nearest binding first), then the name of unknown type; not the list, not the str.
    assert replaced == [
        "line 7: `total` -> `count`",
        "line 7: `total` -> `i`",
        "line 7: `total` -> `limit`",
        "line 7: `total` -> `label`",
    ]


def test_a_substitution_is_kept_whenever_the_types_may_agree() -> None:
    """Numbers are one kind, abstract and project types are unknown, and a name also bound by a
    comprehension, `except ... as` or the like is of unknown type: none of these is dropped."""
    cases = [
        ("def f(xs):\n    total = 0.0\n    count = 0\n    return count / count\n", 4, "`count` -> `total`"),
        ("def f(xs):\n    found = False\n    n = 0\n    return n\n", 4, "`n` -> `found`"),
        ("def f(items: Sequence[int]):\n    seen = []\n    return items\n", 3, "`items` -> `seen`"),
        (
            "def f(limit: float, xs):\n    total = 0\n    for x in xs:\n        total += x\n    return total\n",
            5,
            "`total` -> `limit`",
        ),
        (
            "def f(words: list[str], w: int):\n    sep = '-'\n    return [w + w for w in words]\n",
            3,
            "`w` -> `sep`",
        ),
        (
            "def f(msg):\n    e = 0\n    try:\n        pass\n    except Exception as e:\n        pass\n    return str(msg)\n",
            7,
            "`msg` -> `e`",
        ),
    ]
    for source, line, wanted in cases:
        mutants = generate_mutants(source, [line])
        replaced = [m.description for m in mutants if m.operator in ("var_substitute", "operand_substitute")]
        assert f"line {line}: {wanted}" in replaced, (source, replaced)


def test_an_operand_becomes_another_operand_of_its_function_a_namesake_first() -> None:
    source = (
        "def rescale(value, old_min, old_max, new_min, new_max, label):\n"
        "    ratio = (value - old_min) / (old_max - old_min)\n"
        "    print(label)\n"
        "    return new_min + ratio * (new_max - old_min)\n"
    )
    found = _described(source, [4], "operand_substitute")
    # A word shared (`min`, `old`), then used nearest; never the other operand (`new_max - new_max`)
    # nor a name the function uses in no operation (`label`).
    assert [d for d in found if d.startswith("line 4: `old_min`")] == [
        "line 4: `old_min` -> `new_min`",
        "line 4: `old_min` -> `old_max`",
        "line 4: `old_min` -> `ratio`",
        "line 4: `old_min` -> `value`",
    ]
    [fixed] = [m for m in generate_mutants(source, [4]) if m.description == "line 4: `old_min` -> `new_min`"]
    assert fixed.source == source.replace("(new_max - old_min)", "(new_max - new_min)")
    # A parameter read nowhere is a candidate too (`high`); one read elsewhere only is not (`name`).
    compared = "def within(x, low, high, name):\n    print(name)\n    return low <= x and x <= low\n"
    assert _described(compared, [3], "operand_substitute") == [
        "line 3: `low` -> `high`",
        "line 3: `x` -> `high`",
        "line 3: `x` -> `high`",
        "line 3: `low` -> `high`",
    ]
    assert _described("a = 1\nb = 2\nc = a + b\n", [3], "operand_substitute") == []  # (a function's)


def test_var_substitution_is_bounded_per_name() -> None:
    source = "def f(" + ", ".join(f"p{i}" for i in range(20)) + "):\n    return p0\n"
    assert len(by_operator(generate_mutants(source, [2]), "var_substitute")) == 6


# --- it can actually repair --------------------------------------------------------------------


def test_repairs_a_wrong_denominator() -> None:
    source = "def mean(xs):\n    return sum(xs) / (len(xs) - 1)\n"
    repaired = fixes(
        generate_mutants(source, [2]), "mean", lambda mean: mean([1, 2, 3]) == 2 and mean([4]) == 4
    )
    # The simplest fix first; dropping the term or `// 1` are the same program, tried later.
    assert [m.source for m in repaired] == [
        "def mean(xs):\n    return sum(xs) / (len(xs) - 0)\n",
        "def mean(xs):\n    return sum(xs) / (len(xs))\n",
        "def mean(xs):\n    return sum(xs) / (len(xs) // 1)\n",
    ]


def test_repairs_a_boundary_comparison() -> None:
    source = "def is_non_positive(n):\n    if n < 0:\n        return True\n    return False\n"
    repaired = fixes(
        generate_mutants(source, [2, 3, 4]),
        "is_non_positive",
        lambda f: (f(-1), f(0), f(1)) == (True, True, False),
    )
    assert "def is_non_positive(n):\n    if n <= 0:\n        return True\n    return False\n" in sources(
        repaired
    )
    assert repaired[0].operator == "compare_flip"


def test_repairs_an_exclusive_range() -> None:
    source = "def triangle(n):\n    s = 0\n    for i in range(n):\n        s += i\n    return s\n"
    repaired = fixes(generate_mutants(source, [4, 3]), "triangle", lambda f: (f(1), f(3), f(4)) == (1, 6, 10))
    assert "    for i in range(n + 1):\n" in repaired[0].source


def test_repairs_a_confused_builtin_and_a_wrong_variable() -> None:
    source = "def largest_gap(xs, ys):\n    top = min(xs)\n    return top - ys[0]\n"
    mutants = generate_mutants(source, [2, 3])
    repaired = fixes(mutants, "largest_gap", lambda f: f([1, 5], [2]) == 3 and f([7, 2], [7]) == 0)
    assert "    top = max(xs)\n" in repaired[0].source
    wrong_var = "def pick(xs, i, j):\n    return xs[i]\n"
    repaired = fixes(
        generate_mutants(wrong_var, [2]),
        "pick",
        lambda f: (f("abc", 0, 2), f("abc", 2, 0), f("abc", 1, 1)) == ("c", "a", "b"),
    )
    assert sources(repaired) == ["def pick(xs, i, j):\n    return xs[j]\n"]


def _described(source: str, lines: list[int], operator: str) -> list[str]:
    return [m.description for m in generate_mutants(source, lines) if m.operator == operator]


def test_a_parameter_default_is_swapped_for_what_it_may_have_meant():
    source = "def page(items, number: int = 0, sep=None):\n    return items[number]\n"
    assert _described(source, [1], "default_swap") == [
        "line 1: default `0` -> `None`",
        "line 1: default `None` -> `0`",
        'line 1: default `None` -> `""`',
        "line 1: default `None` -> `[]`",
    ]
    assert "line 1: `0` -> `1`" in _described(source, [1], "const_off_by_one")
    # One parameter a line: the defaults are the `def` line's still.
    black = "def page(\n    items,\n    number: int = 0,\n):\n    return items[number]\n"
    assert _described(black, [1], "default_swap") == [
        "line 3: default `0` -> `1`",
        "line 3: default `0` -> `-1`",
        "line 3: default `0` -> `None`",
    ]


def test_a_default_of_every_literal_type_is_varied():
    def variants(text: str, expected: tuple[str, ...] = ()) -> list[str]:
        return default_variants(ast.parse(text, mode="eval").body, text, expected)

    assert variants("1.0") == ["2.0", "0.0", "0.5", "None"]
    assert variants("-2.5") == ["-1.5", "-3.5", "-5.0", "-1.25", "0.0", "None"]
    assert variants("-1") == ["0", "-2", "None"]  # (a UnaryOp, not a Constant)
    assert variants("0x10") == ["0x11", "0xf", "None"]
    assert variants("True") == ["False", "None"]
    assert variants("'fast'", ("slow", "fast")) == ["''", "'slow'", "None"]
    assert variants('""') == ["None"]
    assert variants("None") == ["0", '""', "[]"]
    assert variants("{}") == ["None"]
    assert variants("LIMIT") == variants("...") == variants("f(1)") == []


def test_a_default_on_a_line_of_its_own_is_varied_for_the_def_line():
    source = (
        "def scale(\n"
        "    values: list[float],\n"
        "    factor: float = 1.0,\n"
        "    *,\n"
        '    mode: str = "fast",\n'
        "    debug=False,\n"
        ") -> list[float]:\n"
        "    return [v * factor for v in values]\n"
    )
    found = _described(source, [8, 1], "default_swap")
    assert found == [
        "line 3: default `1.0` -> `2.0`",
        "line 3: default `1.0` -> `0.0`",
        "line 3: default `1.0` -> `0.5`",
        "line 3: default `1.0` -> `None`",
        'line 5: default `"fast"` -> `""`',  # keyword-only
        'line 5: default `"fast"` -> `None`',
        "line 6: default `False` -> `True`",
        "line 6: default `False` -> `None`",
    ]
    assert _described(source, [8], "default_swap") == []  # only for the `def` line
    twice = [m for m in generate_mutants(source, [8, 1]) if m.description.endswith("`2.0`")]
    assert twice[0].source == source.replace("= 1.0", "= 2.0")


def test_a_string_constant_becomes_another_of_the_module_in_its_own_quotes():
    source = (
        "DEFAULTS = {'timeout': 3, 'port': 80}\n\n\n"
        'def timeout(config):\n    """The timeout."""\n    return config[\'port\']\n'
    )
    found = _described(source, [6], "string_swap")
    assert found[0] == "line 6: `'port'` -> `'timeout'`"
    assert not any("The timeout." in d for d in found)  # docstrings are neither changed nor used
    odd = 'RESET = "\\x1b[0m"\nTAB = "\\t"\nu = "p" f"{RESET}"\nkey = d["k"]\nNAME = "key"\n'
    swaps = [m.source for m in generate_mutants(odd, [3, 4]) if m.operator == "string_swap"]
    assert [m.splitlines()[3] for m in swaps] == ['key = d["key"]']  # neither control characters nor "p"
    assert all('u = "p" f"{RESET}"' in m for m in swaps)  # an f-string's parts are left alone


def test_a_forgotten_return_is_added_for_what_the_function_computes():
    source = "def total(xs):\n    result = 0\n    for x in xs:\n        result += x\n"
    [first, *_] = [m for m in generate_mutants(source, [4]) if m.operator == "add_return"]
    assert first.source == source + "    return result\n"
    generator = "def gen(xs):\n    for x in xs:\n        yield x\n"
    assert _described(generator, [3], "add_return") == []


def test_a_redundant_range_start_is_dropped_and_is_becomes_equality():
    assert _described("r = range(1, len(xs))\n", [1], "drop_arg") == ["line 1: drop `1` from `range`"]
    assert _described("r = range(0, n)\n", [1], "drop_arg") == []  # the same program: not a candidate


def first_fix(source: str, lines: list[int], operator: str) -> str:
    return next(m.source for m in generate_mutants(source, lines) if m.operator == operator)


def test_the_rarer_one_line_bugs_have_templates():
    assert first_fix("y = a % 1.0 + 1.0\n", [1], "drop_operand") == "y = a % 1.0\n"
    drops = [m.source for m in generate_mutants("y = 2 * (a + b)\n", [1]) if m.operator == "drop_operand"]
    assert drops == ["y = 2\n", "y = (a + b)\n", "y = 2 * (a)\n", "y = 2 * (b)\n"]
    assert "y = 2 * a + b\n" not in [m.source for m in generate_mutants("y = 2 * (a + b - c)\n", [1])]
    assert first_fix("p *= p * d\n", [1], "augassign_to_assign") == "p = p * d\n"
    assert first_fix("ok = n - i == 0\n", [1], "binop_swap_far") == "ok = n % i == 0\n"
    assert first_fix("a = w + h\n", [1], "binop_swap_far") == "a = w * h\n"
    assert first_fix("a = w * h\n", [1], "binop_swap_far") == "a = w + h\n"
    assert first_fix("ok = balance == 0\n", [1], "compare_far") == "ok = balance < 0\n"
    assert first_fix("ok = n != 0\n", [1], "compare_far") == "ok = n < 0\n"
    assert not [
        m for m in generate_mutants("ok = s == 'a' or x == None\n", [1]) if m.operator == "compare_far"
    ]
    assert first_fix("d = a - b\n", [1], "wrap_abs") == "d = abs(a - b)\n"
    assert first_fix("r = (j, i)\n", [1], "swap_elements") == "r = (i, j)\n"
    assert first_fix("ok = x in s\n", [1], "swap_operands") == "ok = s in x\n"
    assert first_fix("t = sorted(xs)\n", [1], "toggle_reverse") == "t = sorted(xs, reverse=True)\n"
    assert first_fix("a = 'yes'\n", [1], "string_variant") == "a = 'Yes'\n"
    assert first_fix("s = ' '.join(xs)\n", [1], "string_variant") == "s = ''.join(xs)\n"
    assert first_fix("x = 24\n", [1], "const_off_by_two") == "x = 26\n"
    assert (
        first_fix("ok = word.startswith(prefix)\n", [1], "swap_receiver") == "ok = prefix.startswith(word)\n"
    )
    assert first_fix("n = s.count('a')\n", [1], "swap_receiver") == "n = 'a'.count(s)\n"
    for call in ("x = os.path.join(a, b)\n", "x = self.f(a)\n", "x = str.lower(a)\n"):
        assert not [m for m in generate_mutants(call, [1]) if m.operator == "swap_receiver"]
    source = "def f(x):\n    if x:\n        return True\n    return False\n"
    flipped = "def f(x):\n    if x:\n        return False\n    return True\n"
    assert first_fix(source, [3], "flip_returns") == flipped
    source = (
        "def f(xs):\n    depth = 0\n    most = 0\n    for x in xs:\n        most -= 1\n    return depth\n"
    )
    targets = [m.source for m in generate_mutants(source, [5]) if m.operator == "var_substitute"]
    assert any("        depth -= 1\n" in m for m in targets)
    assert [m.source for m in generate_mutants("r = range(1, n)\n", [1]) if m.operator == "drop_arg"] == [
        "r = range(n)\n"
    ]
    assert "line 1: `is` -> `==`" in _described("ok = x is 1\n", [1], "compare_flip")


def test_a_statement_moves_one_level_out_of_or_into_a_loop_or_if_body():
    inside = "def total(xs):\n    acc = 0\n    for x in xs:\n        acc += x\n        return acc\n"
    [out] = [m for m in generate_mutants(inside, [5]) if m.operator == "move_out"]
    assert out.source == inside.replace("        return acc", "    return acc")
    assert out.description == "line 5: move `return acc` out of the `for` body"
    after = "def count(xs):\n    n = 0\n    for x in xs:\n        x.check()\n    n += 1\n    return n\n"
    [into] = [m for m in generate_mutants(after, [5]) if m.operator == "move_in"]
    assert into.source == after.replace("    n += 1", "        n += 1")
    # Never: the only statement of a body, a block with `else`, a loop's `break`, a multi-line one.
    lone = "for x in xs:\n    f(x)\n"
    assert _described(lone, [2], "move_out") == []
    with_else = "for x in xs:\n    f(x)\n    g(x)\nelse:\n    h()\nk()\n"
    assert _described(with_else, [3, 6], "move_out") + _described(with_else, [6], "move_in") == []
    breaking = "while True:\n    f()\n    break\n"
    assert _described(breaking, [3], "move_out") == []
    spread = "if a:\n    f()\n    g(1,\n      2)\n"
    assert _described(spread, [3], "move_out") == []


def test_a_missing_empty_input_guard_is_inserted_returning_what_the_function_returns_elsewhere():
    source = 'def mean(xs):\n    """Mean."""\n    if len(xs) > 99:\n        return 0.0\n    return sum(xs) / len(xs)\n'
    guards = [m for m in generate_mutants(source, [5, 1]) if m.operator == "insert_guard"]
    assert [m.description for m in guards] == ["line 3: add `if not xs: return 0.0`"]
    assert guards[0].source == source.replace(
        "    if len(xs) > 99:", "    if not xs:\n        return 0.0\n    if len(xs) > 99:"
    )
    bare = "def first(items):\n    return items[0]\n"
    assert _described(bare, [2, 1], "insert_guard") == ["line 2: add `if not items: return None`"]
    guarded = "def first(items):\n    if not items:\n        return None\n    return items[0]\n"
    assert _described(guarded, [4, 1], "insert_guard") == []


def test_two_edits_are_combined_only_when_they_touch_apart_and_parse():
    from ralph.drafters.mutation_ops import combine

    source = "a = 1\nb = 2\n"
    first = next(m for m in generate_mutants(source, [1]) if m.source == "a = 0\nb = 2\n")
    second = next(m for m in generate_mutants(source, [2]) if m.source == "a = 1\nb = 3\n")
    assert combine(source, first, second) == combine(source, second, first) == "a = 0\nb = 3\n"
    assert combine(source, first, first) is None
    other = next(m for m in generate_mutants(source, [1]) if m.source == "a = 2\nb = 2\n")
    assert combine(source, first, other) is None  # the same token: overlapping edits


def test_a_string_the_failing_test_compared_with_replaces_a_constant_first():
    source = "def label():\n    return 'colour'\n"
    swaps = [
        m.source
        for m in generate_mutants(source, [2], ["colour", "color"])
        if m.operator == "expected_string"
    ]
    assert swaps == ["def label():\n    return 'color'\n"]
    assert not [m for m in generate_mutants(source, [2]) if m.operator == "expected_string"]


CIPHER = (
    "def encode(text, shift):\n"
    "    return ''.join(chr((ord(c) - 97 + shift) % 25 + 97) for c in text)\n"
    "\n\n"
    "def decode(text, shift):\n"
    "    return ''.join(chr((ord(c) - 97 - shift) % 25 + 97) for c in text)\n"
    "\n\n"
    "def wrap(n):\n"
    "    return n % 7\n"
)


def test_the_same_edit_is_made_at_every_site_of_its_shape_as_one_mutant():
    everywhere = by_operator(generate_mutants(CIPHER, [2]), "everywhere")
    [both] = [m for m in everywhere if "`25` -> `26`" in m.description]
    assert both.source == CIPHER.replace("% 25", "% 26")
    assert both.description == "line 2: `25` -> `26` at every `... % 25` (lines 2, 6)"
    assert both.at == 2 and both.cost > 1
    assert "line 2: `%` -> `//` at every `... % 25` (lines 2, 6)" in [m.description for m in everywhere]
    # A shape at one site (`n % 7`), or not on a wanted line: no such mutant.
    assert by_operator(generate_mutants(CIPHER, [10]), "everywhere") == []
    assert by_operator(generate_mutants(CIPHER, [1, 5, 9]), "everywhere") == []
    hidden = CIPHER + "\n\ndef spin(n):\n    return ((n + 1) %  # a turn\n            25)\n"
    assert [m.source for m in by_operator(generate_mutants(hidden, [14]), "everywhere")] == []

    # Fixed: the two functions a round trip again, which no single edit of them makes.
    def round_trip(source: str) -> bool:
        encode, decode = load(source, "encode"), load(source, "decode")
        return all(decode(encode(word, 3), 3) == word for word in ("xyz", "abc"))

    singles = [m for m in generate_mutants(CIPHER, [2, 6]) if m.operator != "everywhere"]
    assert round_trip(both.source) and not [m for m in singles if _runs(round_trip, m.source)]


def _runs(check: Callable[[str], bool], source: str) -> bool:
    try:
        return check(source)
    except Exception:
        return False


def test_an_operator_or_a_name_changes_at_every_site_that_parses_around_it():
    source = (
        "LIMIT = 3\nMAX = 5\n\n\ndef a(i, n):\n    return i < LIMIT\n\n\n"
        "def b(i):\n    if i < LIMIT:\n        if i < LIMIT:\n            return 1\n"
        "    elif i < LIMIT:\n        return 2\n"
    )
    found = {m.description: m.source for m in generate_mutants(source, [6]) if m.operator == "everywhere"}
    lines = "(lines 6, 10, 11, 13)"
    assert found[f"line 6: `<` -> `<=` at every `i < LIMIT` {lines}"] == source.replace(
        "i < LIMIT", "i <= LIMIT"
    )
    assert found[f"line 6: `LIMIT` -> `MAX` at every `... < LIMIT` {lines}"] == source.replace(
        "< LIMIT", "< MAX"
    )
    assert not [d for d in found if "-> `i`" in d or "-> `LIMIT`" in d]  # never `i < i`
    assert not [d for d in found if "-> `n`" in d]  # (`a`'s own parameter is not visible in `b`)


def test_every_site_gets_a_name_of_its_kind_and_a_negative_power_base_keeps_its_sign():
    """`cls` is never swapped for `__all__` or a module constant at every site; the sites' own names
    come first. A number one down at the left of `**` is `(-1) ** x`, not `-(1 ** x)`."""
    source = (
        "__all__ = ['a']\n__version__ = '1'\nDEFAULT = None\n\n\n"
        "def a(cls, klass):\n    return cls is None\n\n\n"
        "def b(cls, klass):\n    return cls is None\n"
    )
    names = [m.description for m in generate_mutants(source, [7]) if m.operator == "everywhere"]
    assert [d.split("`")[3] for d in names if d.startswith("line 7: `cls` ->")] == ["klass", "DEFAULT"]
    powers = "def f(x):\n    return 0 ** x\n\n\ndef g(x):\n    return 0 ** x\n"
    made = [m.source for m in generate_mutants(powers, [2]) if "-1" in m.source]
    assert made and all("(-1) ** x" in text and "-1 **" not in text for text in made)


def test_a_shape_at_too_many_sites_and_too_many_shapes_are_bounded():
    from ralph.drafters.mutation_ops import MAX_EVERYWHERE, MAX_SITES

    many = "".join(f"def f{i}(x):\n    return x % 25\n\n\n" for i in range(MAX_SITES + 1))
    assert by_operator(generate_mutants(many, [2]), "everywhere") == []
    busy = "".join(
        f"def f{i}(x, y):\n"
        + "".join(f"    y = x % {k} + y * {k}\n" for k in range(20))
        + "    return y\n\n\n"
        for i in range(2)
    )
    lines = list(range(2, 22))
    assert len(by_operator(generate_mutants(busy, lines), "everywhere")) == MAX_EVERYWHERE


def twins(source: str, lines: list[int]) -> list[str]:
    return [m.description for m in generate_mutants(source, lines) if m.operator == "twin"]


def test_the_same_change_at_two_places_of_a_function_is_one_mutant():
    primes = "def f(n):\n    if n < 1:\n        return []\n    return list(range(1, n))\n"
    found = generate_mutants(primes, [2, 4])
    both = [m for m in found if m.operator == "twin" and "`1` -> `2` and" in m.description]
    assert [m.source for m in both] == [primes.replace("1", "2")]
    assert both[0].at == 2 and both[0].span == (primes.index("1"), primes.rindex("1") + 1)
    # A string changed alike (capitalised), once each: not with an edit of another kind.
    answer = "def f(ok):\n    return 'yes' if ok else 'no'\n"
    assert "line 2: `'yes'` -> `'Yes'` and line 2: `'no'` -> `'No'`" in twins(answer, [2])
    assert not [d for d in twins(answer, [2]) if "'Yes'" in d and "'NO'" in d]


def test_twins_stay_in_one_function_and_deletions_are_of_neighbours():
    two = "def f(n):\n    return n + 1\n\n\ndef g(n):\n    return n + 1\n"
    assert not [d for d in twins(two, [2, 6]) if "line 2" in d and "line 6" in d]
    body = "def f(xs):\n    xs = sorted(xs)\n    ys = list(xs)\n    zs = ys[::-1]\n    return zs\n"
    deletions = [d for d in twins(body, [2, 3, 4]) if "delete" in d]
    assert deletions == [
        "line 2: delete `xs = sorted(xs)` and line 3: delete `ys = list(xs)`",
        "line 3: delete `ys = list(xs)` and line 4: delete `zs = ys[::-1]`",
    ]


def test_a_difference_divided_by_may_be_one_short_and_a_double_a_square():
    assert first_fix("m = total / (hi - lo)\n", [1], "span_off_by_one") == "m = total / (hi - lo + 1)\n"
    assert not by_operator(
        generate_mutants("d = (hi - lo) * 2\nk = t / (hi - 1)\n", [1, 2]), "span_off_by_one"
    )
    assert "s += x ** 2\n" in sources(by_operator(generate_mutants("s += x * 2\n", [1]), "binop_swap_far"))


def test_a_string_missing_its_other_case_or_with_a_blank_on_the_wrong_side_and_two_terms_too_many():
    variants = sources(by_operator(generate_mutants("v = 'aeiou'\ns = ' I'\n", [1, 2]), "string_variant"))
    assert "v = 'aeiouAEIOU'\ns = ' I'\n" in variants
    assert "v = 'aeiou'\ns = 'I '\n" in variants
    assert "y = x * w * a" not in "".join(variants)
    drops = sources(by_operator(generate_mutants("y = x * w * a * b\n", [1]), "drop_operand"))
    assert "y = x * w\n" in drops and "y = x\n" not in drops
