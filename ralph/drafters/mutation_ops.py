"""Template-based program repair: single-edit mutants at suspicious lines.

Given Python source and a ranked list of suspicious lines, `generate_mutants` proposes small,
classic repair templates (operator swaps, off-by-one changes, negated conditions, variable
substitutions, ...) in the spirit of GenProg, PyGGI and TBar.  Every edit replaces only the exact
text span of the affected token or node, located through `ast` positions, so the rest of the
file -- comments, formatting and all other lines -- is preserved byte for byte.  One template
makes the same edit at every site of a shape the module repeats (`everywhere`: `% 25` -> `% 26` in
both of a pair of functions), as one mutant; another makes one change twice in a function (`n < 1`
and `range(1, n)` both meant 2, `'yes'`/`'no'` both meant capitalised: a `twin`).  Every mutant
parses, differs from the original, and no two mutants share the same text.
"""

from __future__ import annotations

import ast
import bisect
import builtins
import contextlib
import functools
import itertools
import math
import re
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from ralph.domain.pyast import literal_eval, parse, parse_expression

__all__ = [
    "COSTS",
    "MAX_MUTANTS_PER_LINE",
    "MAX_SUBSTITUTIONS_PER_NAME",
    "Mutant",
    "combine",
    "default_variants",
    "generate_mutants",
]

MAX_MUTANTS_PER_LINE = 60
MAX_SUBSTITUTIONS_PER_NAME = 6
# The same edit at every site of a shape (`everywhere`): a shape at more sites than this is too
# common to be one slip repeated; at most so many such edits a call, names at most so many a site.
MAX_SITES = 8
MAX_EVERYWHERE = 12
MAX_EVERYWHERE_NAMES = 3


@dataclass(frozen=True)
class Mutant:
    """One candidate single edit of a source file."""

    line: int  # 1-based line of the edit (start line of the replaced span)
    operator: str  # stable short name of the mutation operator, e.g. "compare_flip"
    description: str  # human readable, e.g. "line 12: `<` -> `<=`"
    original: str = field(repr=False)  # the file it edits (shared by its mutants, not copied)
    cost: int = 0  # simplicity rank: lower = simpler / more likely to be the fix
    span: tuple[int, int] = (0, 0)  # the characters of the original it replaces
    text: str = ""  # and what it puts there
    at: int = 0  # the line of those asked for it was made for (its own line, or its node's first)

    @property
    def source(self) -> str:
        """The whole mutated file text (made when asked: a few thousand mutants of a large file
        held as copies were hundreds of megabytes)."""
        start, end = self.span
        return self.original[:start] + self.text + self.original[end:]


def generate_mutants(source: str, lines: Sequence[int], expected: Sequence[str] = ()) -> list[Mutant]:
    """Mutants at the given lines, ordered by (position of the line in `lines`, cost, column).
    `expected`: strings the failing tests compared with (their messages), tried for a string
    constant before the module's own.

    `lines` is ranked by suspiciousness, most suspicious first.  An edit belongs to a line when
    the replaced span starts on it or the mutated node starts on it.  At most
    `MAX_MUTANTS_PER_LINE` mutants are produced per line; a mutant reachable from several lines
    is reported once, under the best ranked one.  A `source` that does not parse yields `[]`.
    """
    tree = _parse(source)
    if tree is None:
        return []
    ranked = list(dict.fromkeys(lines))
    wanted = set(ranked)
    collector = _Collector(source, tree, ranked, tuple(expected))
    edits_by_line: dict[int, list[_Edit]] = {line: [] for line in ranked}
    for edit in collector.collect():
        for line in {edit.line, edit.anchor} & wanted:
            edits_by_line[line].append(edit)

    seen = {hash(source)}  # (hashes: the mutated texts are not kept)
    mutants: list[Mutant] = []
    for line in ranked:
        produced = 0
        for edit in sorted(edits_by_line[line], key=lambda e: (e.cost, e.line, e.col, e.seq)):
            if produced >= MAX_MUTANTS_PER_LINE:
                break
            replacement = _padded(source, edit)
            mutated = hash(source[: edit.start] + replacement + source[edit.end :])
            if mutated in seen:
                continue
            seen.add(mutated)
            if not _still_parses(source, edit, replacement):
                continue
            mutants.append(
                Mutant(
                    line=edit.line,
                    operator=edit.operator,
                    description=f"line {edit.line}: {edit.description}",
                    original=source,
                    cost=edit.cost,
                    span=(edit.start, edit.end),
                    text=replacement,
                    at=line,
                )
            )
            produced += 1
    return mutants + _twins(source, tree, mutants, seen)


# One slip made twice in a function (`n < 1` and `range(1, n)` both meant 2; `" "` returned twice
# where `""` was meant; `'yes'`/`'no'` meant capitalised; two statements too many, one after the
# other): two single edits of the same kind as one mutant, at most so many a call.
MAX_TWINS = 24
MAX_TWIN_GROUP = 6  # edits of one kind in one function paired, at most
_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef)
_TWIN_KINDS = (
    "const_off_by_one",
    "string_variant",
    "expected_string",  # (a variant the failing test also named)
    "delete_statement",
)
_STRING_CHANGES: tuple[tuple[str, Callable[[str], str]], ...] = (
    ("capitalised", str.capitalize),
    ("lower case", str.lower),
    ("upper case", str.upper),
    ("stripped", str.strip),
    ("emptied", lambda _: ""),
)


def _twins(source: str, tree: ast.Module, mutants: list[Mutant], seen: set[int]) -> list[Mutant]:
    """Pairs of `mutants` that make the same change (one number made the same other one, a string
    changed the same way, adjacent statements deleted) at two places of one function, as one mutant
    each: the very same edit twice first, then the best ranked pairs (`mutants` is in rank order)."""
    functions = sorted(
        ((node.lineno, node.end_lineno or node.lineno) for node in ast.walk(tree) if isinstance(node, _DEFS)),
        key=lambda span: span[1] - span[0],
    )
    groups: dict[tuple[object, ...], list[Mutant]] = {}
    for mutant in mutants:
        kind = _twin_kind(mutant)
        home = next((f for f in functions if f[0] <= mutant.line <= f[1]), None)
        if kind is not None and home is not None:
            group = groups.setdefault((home, *kind), [])
            if len(group) < MAX_TWIN_GROUP:
                group.append(mutant)
    pairs = [
        (a, b) if a.span < b.span else (b, a)
        for group in groups.values()
        for a, b in itertools.combinations(group, 2)
    ]
    order = {id(mutant): i for i, mutant in enumerate(mutants)}
    twins: list[Mutant] = []

    def likely(pair: tuple[Mutant, Mutant]) -> tuple[bool, int]:
        """The very same edit twice first; better ranked lines first."""
        a, b = pair
        return not _same_edit(a, b), order[id(a)] + order[id(b)]

    for first, second in sorted(pairs, key=likely):
        if len(twins) >= MAX_TWINS:
            break
        if first.operator == "delete_statement" and first.span[1] != second.span[0]:
            continue  # deletions: of neighbours only
        both = combine(source, first, second)
        if both is None or hash(both) in seen:
            continue
        seen.add(hash(both))
        (start, middle), (after, end) = first.span, second.span
        best = min(first, second, key=lambda mutant: order[id(mutant)])
        twins.append(
            Mutant(
                line=first.line,
                operator="twin",
                description=f"{first.description} and {second.description}",
                original=source,
                cost=COSTS["twin"],
                span=(start, end),
                text=first.text + source[middle:after] + second.text,
                at=best.at,
            )
        )
    return twins


def _same_edit(a: Mutant, b: Mutant) -> bool:
    return a.text == b.text and a.original[slice(*a.span)] == b.original[slice(*b.span)]


def _twin_kind(mutant: Mutant) -> tuple[object, ...] | None:
    """What a single edit changes, for finding the same change elsewhere (None: not twinned)."""
    if mutant.operator not in _TWIN_KINDS:
        return None
    if mutant.operator == "delete_statement":
        return ("delete",)
    old = mutant.original[mutant.span[0] : mutant.span[1]]
    if mutant.operator in ("string_variant", "expected_string"):
        try:
            before, after = literal_eval(old.strip()), literal_eval(mutant.text.strip())
        except (ValueError, SyntaxError):
            return None
        name = next((n for n, change in _STRING_CHANGES if change(before) == after), None)
        return None if name is None else ("string", name)
    before_n, after_n = _int_literal_value(old.strip()), _int_literal_value(mutant.text.strip())
    return None if before_n is None or after_n is None else ("number", before_n, after_n)


def combine(source: str, first: Mutant, second: Mutant) -> str | None:
    """`source` with both mutants' edits, when they touch apart and the result parses; else None."""
    (a, b), (c, d) = sorted([first.span, second.span])
    if b > c or first.span == second.span:
        return None
    texts = dict([(first.span, first.text), (second.span, second.text)])
    both = source[:a] + texts[(a, b)] + source[b:c] + texts[(c, d)] + source[d:]
    return both if _parse(both) is not None else None


# Operator costs: lower means simpler, tried first.
COSTS = {
    "binop_swap": 1,
    "augassign_swap": 1,
    "compare_flip": 1,
    "boolop_swap": 1,
    "const_off_by_one": 1,
    "remove_not": 1,
    "bool_const_flip": 1,
    "negate_condition": 2,
    "slice_off_by_one": 2,
    "index_off_by_one": 2,
    "call_swap": 2,
    "swap_args": 3,
    "swap_operands": 3,
    "unary_remove": 3,
    "var_substitute": 3,
    "operand_substitute": 2,
    "delete_statement": 4,
    "drop_arg": 1,
    "default_swap": 2,
    "add_return": 2,
    "string_swap": 3,
    "drop_operand": 3,
    "binop_swap_far": 3,
    "compare_far": 3,
    "augassign_to_assign": 2,
    "string_variant": 3,
    "swap_elements": 3,
    "const_off_by_two": 3,
    "wrap_abs": 4,
    "toggle_reverse": 3,
    "flip_returns": 3,
    "swap_receiver": 3,
    "move_out": 3,
    "move_in": 3,
    "insert_guard": 3,
    "expected_string": 2,
    "everywhere": 3,
    "span_off_by_one": 3,
    "twin": 3,
}

# What a parameter's default may have been meant to be, when it is None or an empty container
# (numbers, strings and truth values: `default_variants`).
_DEFAULT_SWAPS: dict[str, tuple[str, ...]] = {
    "None": ("0", '""', "[]"),
    "[]": ("None",),
    "{}": ("None",),
    "()": ("None",),
}
MAX_STRING_SWAPS = 5  # other string constants of the module tried for one literal

_BINOP_TOKENS: dict[type[ast.operator], str] = {
    ast.Add: "+",
    ast.Sub: "-",
    ast.Mult: "*",
    ast.Div: "/",
    ast.FloorDiv: "//",
    ast.Mod: "%",
    ast.Pow: "**",
    ast.MatMult: "@",
    ast.BitAnd: "&",
    ast.BitOr: "|",
    ast.BitXor: "^",
    ast.LShift: "<<",
    ast.RShift: ">>",
}

_BINOP_SWAPS: dict[str, tuple[str, ...]] = {
    "+": ("-",),
    "-": ("+",),
    "*": ("/", "//"),
    "/": ("//", "*"),
    "//": ("/", "*"),
    "%": ("//",),
    "**": ("*",),
    "@": ("*",),
    "&": ("|",),
    "|": ("&",),
    "^": ("|", "&"),
    "<<": (">>",),
    ">>": ("<<",),
}

_PRECEDENCE: dict[type[ast.operator], int] = {
    ast.BitOr: 1,
    ast.BitXor: 2,
    ast.BitAnd: 3,
    ast.LShift: 4,
    ast.RShift: 4,
    ast.Add: 5,
    ast.Sub: 5,
    ast.Mult: 6,
    ast.Div: 6,
    ast.FloorDiv: 6,
    ast.Mod: 6,
    ast.MatMult: 6,
    ast.Pow: 7,
}

# Rarer confusions, tried after the simple edits (`n - i == 0` meant `n % i == 0`, `x -= b` `x //= b`,
# `ceil(i)*2` `ceil(i)**2`).
_BINOP_FAR: dict[str, tuple[str, ...]] = {"-": ("%", "//"), "+": ("*",), "*": ("+", "**")}

_COMPARE_TOKENS: dict[type[ast.cmpop], str] = {
    ast.Eq: "==",
    ast.NotEq: "!=",
    ast.Lt: "<",
    ast.LtE: "<=",
    ast.Gt: ">",
    ast.GtE: ">=",
    ast.Is: "is",
    ast.IsNot: "is not",
    ast.In: "in",
    ast.NotIn: "not in",
}

_COMPARE_FLIPS: dict[str, tuple[str, ...]] = {
    "<": ("<=", ">"),
    "<=": ("<", ">="),
    ">": (">=", "<"),
    ">=": (">", "<="),
    "==": ("!=",),
    "!=": ("==",),
    "is": ("is not", "=="),
    "is not": ("is", "!="),
    "in": ("not in",),
    "not in": ("in",),
}

# Rarer confusions of an equality with an ordering, tried after the simple flips (`balance == 0` meant
# `balance < 0`: a test that only checks the boundary passes either way).
_COMPARE_FAR: dict[str, tuple[str, ...]] = {"==": ("<", ">", "<=", ">="), "!=": ("<", ">")}

# Comparisons where `a op b` and `b op a` differ (swapping them is a distinct repair).
_ORDERED_COMPARES = (ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.In, ast.NotIn)
_NON_COMMUTATIVE = (ast.Sub, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow, ast.LShift, ast.RShift, ast.MatMult)

_CONFUSED_CALLS: tuple[tuple[str, str], ...] = (
    ("min", "max"),
    ("any", "all"),
    ("floor", "ceil"),
    ("upper", "lower"),
    ("isupper", "islower"),
    ("startswith", "endswith"),
    ("append", "extend"),
    ("index", "find"),
    ("lstrip", "rstrip"),
    ("split", "rsplit"),
    ("keys", "values"),
    ("lower", "swapcase"),
    ("upper", "swapcase"),
    ("isdigit", "isalpha"),
)
_CALL_SWAPS: dict[str, tuple[str, ...]] = {}
for _a, _b in _CONFUSED_CALLS:
    _CALL_SWAPS[_a] = (*_CALL_SWAPS.get(_a, ()), _b)
    _CALL_SWAPS[_b] = (*_CALL_SWAPS.get(_b, ()), _a)

# Nodes whose text can be moved next to a binary operator without adding parentheses.
_ATOMS = (
    ast.Name,
    ast.Constant,
    ast.Attribute,
    ast.Call,
    ast.Subscript,
    ast.List,
    ast.Dict,
    ast.Set,
    ast.ListComp,
    ast.SetComp,
    ast.DictComp,
    ast.GeneratorExp,
    ast.JoinedStr,
)
_ADDITIVE_SAFE_OPS = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow, ast.MatMult)

_NESTED_SCOPES = (
    ast.FunctionDef,
    ast.AsyncFunctionDef,
    ast.Lambda,
    ast.ClassDef,
    ast.ListComp,
    ast.SetComp,
    ast.DictComp,
    ast.GeneratorExp,
)
_DELETABLE = (ast.Expr, ast.Assign, ast.AugAssign, ast.AnnAssign)
# Statements moved one level in or out of a loop or `if` body, and the blocks they move across.
_MOVABLE = (*_DELETABLE, ast.Return, ast.Raise, ast.Break, ast.Continue)
_BLOCKS = {ast.For: "for", ast.AsyncFor: "for", ast.While: "while", ast.If: "if"}
_NEVER_SUBSTITUTED = frozenset({"self", "cls"})
_BUILTIN_NAMES = frozenset(dir(builtins))

# Line breaks as the Python tokenizer counts them (form feeds and U+2028 are not line breaks).
_NEWLINE = re.compile(r"\r\n|\r|\n")
_GAP_SPACE = " \t\f\r\n"


class _BadPosition(Exception):
    """A node position does not map onto the source text as expected."""


@dataclass(frozen=True)
class _Edit:
    start: int  # absolute character offsets of the replaced span
    end: int
    text: str
    operator: str
    description: str
    line: int  # line where the replaced span starts
    col: int  # character column of the span start on `line`
    anchor: int  # start line of the mutated node
    cost: int
    seq: int  # generation order, the final tie breaker
    region: _Region | None  # smallest enclosing statement that can be re-parsed on its own
    checked: bool = False  # known to parse (an edit at several sites, each re-parsed where it is)


@dataclass(frozen=True)
class _Region:
    """Whole lines of a statement that starts its line, with everything nested in it."""

    start: int
    end: int
    indented: bool


def _pair(node: ast.AST) -> bool:
    """A tuple or list of two elements, neither starred."""
    elts = node.elts if isinstance(node, ast.Tuple | ast.List) else []
    return len(elts) == 2 and not any(isinstance(e, ast.Starred) for e in elts)


def _literal(value: str, quote: str) -> str:
    """`value` (printable) as a string literal in `quote`s."""
    return quote + value.replace("\\", "\\\\").replace(quote, "\\" + quote) + quote


def default_variants(default: ast.expr, text: str, expected: Sequence[str] = ()) -> list[str]:
    """What a parameter's default, written `text`, may have been meant to be: a number one either
    way, a float also doubled, halved or zero; a truth value flipped; a string empty or one the
    failing tests compared with (`expected`), in its own quotes; None for any of these, and for None
    or an empty container what `_DEFAULT_SWAPS` says."""
    if text in _DEFAULT_SWAPS:
        return list(_DEFAULT_SWAPS[text])
    value = default.value if isinstance(default, ast.Constant) else None
    number = _signed_number(default)
    found: list[str] = []
    if isinstance(value, bool):
        found = [str(not value)]
    elif isinstance(number, float):
        steps = (number + 1, number - 1, number * 2, number / 2, 0.0)
        found = [repr(v) for v in steps if math.isfinite(v) and v != number]
    elif isinstance(number, int):
        literal = text if isinstance(default, ast.Constant) else ""
        found = [_format_int(v, literal) for v in (number + 1, number - 1)]
    elif isinstance(value, str) and text[:1] in ("'", '"') and not text.startswith(text[0] * 3):
        found = [_literal(s, text[0]) for s in ("", *expected) if s != value and s.isprintable()]
    elif value is None or value is Ellipsis:
        return []  # (names, calls, a `...` sentinel: no literal to vary)
    return list(dict.fromkeys(f for f in [*found, "None"] if f != text))


def _signed_number(node: ast.expr) -> int | float | None:
    """The int or float a literal (`2`, `1.5`, `-1`, `+0.5`) stands for; None for anything else."""
    sign = 1
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        sign = -1 if isinstance(node.op, ast.USub) else 1
        node = node.operand
    value = node.value if isinstance(node, ast.Constant) else None
    return sign * value if isinstance(value, int | float) and not isinstance(value, bool) else None


@functools.lru_cache(maxsize=8)
def _module_strings(source: str) -> tuple[dict[str, int], frozenset[tuple[int, int]]]:
    """The module's short one-line printable string constants, value -> first line, leaving out
    docstrings and the parts of f-strings; and the positions (line, column) of what was left out."""
    tree = _parse(source)
    found: dict[str, int] = {}
    if tree is None:
        return found, frozenset()
    skipped = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        first = body[0] if isinstance(body, list) and body else None
        value = first.value if isinstance(first, ast.Expr) else None
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            skipped.add((value.lineno, value.col_offset))
        if isinstance(node, ast.JoinedStr):
            skipped |= {(v.lineno, v.col_offset) for v in node.values if isinstance(v, ast.Constant)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and type(node.value) is str:
            text = node.value
            if (node.lineno, node.col_offset) in skipped or not 0 < len(text) <= 40 or not text.isprintable():
                continue
            found.setdefault(text, node.lineno)
    return found, frozenset(skipped)


def _own_nodes(function: ast.FunctionDef | ast.AsyncFunctionDef | ast.If) -> Iterator[ast.AST]:
    """The nodes of `function`'s body, not those of the functions, classes and lambdas inside it."""
    stack: list[ast.AST] = list(function.body)
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda):
            stack.extend(ast.iter_child_nodes(node))


_SIZED_CALLS = frozenset({"len", "min", "max", "sum", "sorted", "next", "iter", "reversed"})


def _emptiable_uses(function: ast.FunctionDef | ast.AsyncFunctionDef) -> Iterator[ast.Name]:
    """The names `function` uses where an empty (or None, or zero) value fails or misleads: indexed,
    iterated, sized, a divisor, an attribute's object."""
    for node in _own_nodes(function):
        found: list[ast.expr] = []
        if isinstance(node, ast.Subscript | ast.Attribute):
            found = [node.value]
        elif isinstance(node, ast.For | ast.AsyncFor | ast.comprehension):
            found = [node.iter]
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div | ast.FloorDiv | ast.Mod):
            found = [node.right]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _SIZED_CALLS:
            found = list(node.args[:1])
        yield from (n for n in found if isinstance(n, ast.Name))


def _operand_pairs(node: ast.AST) -> list[tuple[ast.expr, ast.expr]]:
    """The (left, right) operands of a binary operation, or of each comparison of a chain."""
    if isinstance(node, ast.BinOp):
        return [(node.left, node.right)]
    if isinstance(node, ast.Compare):
        return list(zip([node.left, *node.comparators], node.comparators, strict=False))
    return []


# The statements around a node, innermost first, as a linked list: (statement, the ones around it).
_Chain = tuple[ast.stmt, "_Chain"] | None
# (the part an edit changes: "op", "left" or "right"; the left operand, the operator, the right one)
_Shape = tuple[str, str, str, str]


@dataclass(frozen=True)
class _Site:
    """One binary operation, or one comparison of a chain: `left op right`, in `scope`."""

    node: ast.BinOp | ast.Compare
    left: ast.expr
    op: str
    right: ast.expr
    scope: ast.AST


def _sites(node: ast.AST, scope: ast.AST) -> list[_Site]:
    if isinstance(node, ast.BinOp):
        return [_Site(node, node.left, _BINOP_TOKENS[type(node.op)], node.right, scope)]
    if isinstance(node, ast.Compare):
        ops = [_COMPARE_TOKENS[type(op)] for op in node.ops]
        return [_Site(node, a, op, b, scope) for (a, b), op in zip(_operand_pairs(node), ops, strict=True)]
    return []


def _leaf(node: ast.expr) -> str | None:
    """A name or a number operand, as it stands in a shape; None for anything else."""
    if isinstance(node, ast.Name):
        return node.id
    number = node.value if isinstance(node, ast.Constant) else None
    return repr(number) if isinstance(number, int | float) and not isinstance(number, bool) else None


def _shapes(site: _Site) -> list[_Shape]:
    """What an edit of `site` must find elsewhere to be made there too: its operator with both
    operands as they are (a name, a number, or `*` for anything else, one of them not `*`), for a
    new operator; its operator and the operand changed, for a new operand (`x % 25` -> `x % 26`)."""
    left, right = _leaf(site.left), _leaf(site.right)
    found = [("op", left or "*", site.op, right or "*")] if left or right else []
    found += [("left", left, site.op, "*")] if left else []
    found += [("right", "*", site.op, right)] if right else []
    return found


def _shape_text(shape: _Shape) -> re.Pattern[str]:
    """Where the text of a module may hold `shape`: its operand(s) next to its operator (`x < limit`,
    `% 25`); a cheap test before a walk of the module (never one with a comment in between)."""
    _, left, op, right = shape
    gap = r"[\s()\\]*"
    text = r"\s+".join(map(re.escape, op.split()))
    if left != "*":
        text = rf"{re.escape(left)}{gap}{text}"  # (`ax < ` too: a test, not a count)
    if right != "*":
        text = rf"{text}{gap}{re.escape(right)}(?![\w.])"
    return re.compile(text)


def _any_in(lines: list[int], start: int, end: int) -> bool:
    """Whether the sorted `lines` hold one from `start` to `end`."""
    index = bisect.bisect_left(lines, start)
    return index < len(lines) and lines[index] <= end


def _words(name: str) -> set[str]:
    """The words of a snake_case name (`old_min` -> {"old", "min"})."""
    return {word for word in name.lower().split("_") if word}


def _is_generator(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    return any(isinstance(n, ast.Yield | ast.YieldFrom) for n in _own_nodes(function))


_GENERIC = {"List": "list", "Dict": "dict", "Set": "set", "Tuple": "tuple", "FrozenSet": "frozenset"}
_NUMBERS = frozenset({"int", "float", "bool", "complex"})
_CONCRETE = frozenset({*_NUMBERS, "str", "bytes", "list", "dict", "set", "tuple", "frozenset"})
_LITERAL_TYPES = {
    ast.List: "list",
    ast.ListComp: "list",
    ast.Dict: "dict",
    ast.DictComp: "dict",
    ast.Set: "set",
    ast.SetComp: "set",
    ast.Tuple: "tuple",
    ast.JoinedStr: "str",
}
_CONSTRUCTORS = {
    **{name: name for name in ("int", "str", "float", "bool", "list", "dict", "set", "tuple", "bytes")},
    "len": "int",
    "sorted": "list",
}


def _annotated(annotation: ast.expr | None) -> str | None:
    """`int`, `list[int]`, `List[int]` -> the outer type's name; anything else (Optional, unions,
    strings) -> None."""
    if isinstance(annotation, ast.Subscript):
        annotation = annotation.value
    if isinstance(annotation, ast.Attribute):  # typing.List
        annotation = ast.Name(annotation.attr)
    if isinstance(annotation, ast.Name):
        return _kind(_GENERIC.get(annotation.id, annotation.id))
    return None  # (abstract types, classes of the project: anything may be passed for them)


def _kind(name: str | None) -> str | None:
    """A builtin concrete type's name as a kind (the numbers are one); None for anything else."""
    if name in _NUMBERS:
        return "number"
    return name if name in _CONCRETE else None


def _value_type(value: ast.expr) -> str | None:
    if isinstance(value, ast.Constant):
        return _kind(type(value.value).__name__)
    if type(value) in _LITERAL_TYPES:
        return _LITERAL_TYPES[type(value)]
    return _kind(_CONSTRUCTORS.get(_called(value) or "")) if isinstance(value, ast.Call) else None


def _typed_targets(node: ast.AST) -> list[tuple[ast.expr, str | None]]:
    """The targets a statement binds, with the type it gives them (`x: int`, `x = []`, `for i in
    range(n)`)."""
    if isinstance(node, ast.Assign):
        return [(target, _value_type(node.value)) for target in node.targets]
    if isinstance(node, ast.AnnAssign):
        return [(node.target, _annotated(node.annotation))]
    if isinstance(node, ast.For | ast.AsyncFor):
        return [(node.target, "number" if _called(node.iter) == "range" else None)]
    return []


def _bound_names(node: ast.AST, scope: ast.AST) -> list[str]:
    """Names `node` binds other than by assigning to a Name (imports, `except ... as`, match
    captures, defs and their parameters, global and nonlocal declarations)."""
    if isinstance(node, ast.ExceptHandler | ast.MatchAs | ast.MatchStar):
        return [node.name] if node.name else []
    if isinstance(node, ast.MatchMapping):
        return [node.rest] if node.rest else []
    if isinstance(node, ast.alias):
        return [(node.asname or node.name).split(".")[0]]
    if isinstance(node, ast.Global | ast.Nonlocal):
        return list(node.names)
    names = []
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and node is not scope:
        names.append(node.name)
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) and node is not scope:
        args = node.args
        names += [
            a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg] if a
        ]
    return names


def _called(call: ast.expr) -> str | None:
    return call.func.id if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) else None


def _parse(source: str) -> ast.Module | None:
    with warnings.catch_warnings():
        # Mutants may trigger SyntaxWarnings (e.g. `x is 1`); they are still valid programs.
        warnings.simplefilter("ignore")
        try:
            return parse(source)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return None


def _is_ident_char(char: str) -> bool:
    return char.isalnum() or char == "_"


def _padded(source: str, edit: _Edit) -> str:
    """The edit's replacement text, with a space added where it would fuse with a neighbouring word."""
    return _pad(source, edit.start, edit.end, edit.text)


def _pad(source: str, start: int, end: int, text: str) -> str:
    # `else-1` -> `else 0`, not `else0`.
    if text and start > 0 and _is_ident_char(source[start - 1]) and _is_ident_char(text[0]):
        text = " " + text
    if text and end < len(source) and _is_ident_char(text[-1]) and _is_ident_char(source[end]):
        text += " "
    return text


def _still_parses(source: str, edit: _Edit, replacement: str) -> bool:
    """Whether the mutated file parses.

    Re-parsing only the lines of the innermost statement holding the edit is equivalent and much
    cheaper on big files: the edit leaves every other line as it was, and an indented statement
    parses alone inside an `if 1:` block exactly when it parses in its own block.
    """
    region = edit.region
    if edit.checked:
        return True
    if region is None:
        return _parse(source[: edit.start] + replacement + source[edit.end :]) is not None
    snippet = source[region.start : edit.start] + replacement + source[edit.end : region.end]
    return _parse("if 1:\n" + snippet if region.indented else snippet) is not None


def _short(text: str, limit: int = 40) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def _signed(text: str, pow_base: bool) -> str:
    """A negative number as the left operand of `**` keeps its sign inside (`(-1) ** x`)."""
    return f"({text})" if pow_base and text.startswith("-") else text


def _format_int(value: int, like: str) -> str:
    """`value` written in the base of the literal `like` (hex stays hex)."""
    prefix = like[:2].lower()
    spec = {"0x": "x", "0o": "o", "0b": "b"}.get(prefix)
    if spec is None:
        return str(value)
    sign = "-" if value < 0 else ""
    return f"{sign}{like[:2]}{format(abs(value), spec)}"


def _int_literal_value(text: str) -> int | None:
    if not text or not text[0].isdigit():
        return None
    try:
        return int(text, 0)
    except ValueError:
        return None


class _Text:
    """Maps `ast` positions (1-based line, UTF-8 byte column) to offsets into the source string."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.line_starts = [0, *(m.end() for m in _NEWLINE.finditer(source))]
        self._encoded: dict[int, bytes] = {}

    def line_end(self, lineno: int) -> int:
        """Offset just past line `lineno`, its line break included."""
        return self.line_starts[lineno] if lineno < len(self.line_starts) else len(self.source)

    def offset(self, lineno: int, byte_col: int) -> int:
        if not 1 <= lineno <= len(self.line_starts):
            raise _BadPosition(f"line {lineno}")
        start = self.line_starts[lineno - 1]
        encoded = self._encoded.get(lineno)
        if encoded is None:
            encoded = self.source[start : self.line_end(lineno)].encode("utf-8", "surrogatepass")
            self._encoded[lineno] = encoded
        if byte_col > len(encoded):
            raise _BadPosition(f"column {byte_col} on line {lineno}")
        try:
            return start + len(encoded[:byte_col].decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise _BadPosition(f"column {byte_col} splits a character on line {lineno}") from exc

    def span(self, node: ast.AST) -> tuple[int, int]:
        lineno, col = getattr(node, "lineno", None), getattr(node, "col_offset", None)
        end_lineno, end_col = getattr(node, "end_lineno", None), getattr(node, "end_col_offset", None)
        if lineno is None or col is None or end_lineno is None or end_col is None:
            raise _BadPosition(f"{type(node).__name__} has no position")
        return self.offset(lineno, col), self.offset(end_lineno, end_col)

    def text(self, node: ast.AST) -> str:
        start, end = self.span(node)
        return self.source[start:end]

    def line_col(self, offset: int) -> tuple[int, int]:
        lo, hi = 0, len(self.line_starts) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.line_starts[mid] <= offset:
                lo = mid
            else:
                hi = mid - 1
        return lo + 1, offset - self.line_starts[lo]

    def gap_tokens(self, start: int, end: int) -> list[tuple[int, int]]:
        """Spans of the operator words/symbols between two operands.

        The gap between two operands holds only the operator plus whitespace, parentheses,
        comments and backslash continuations, so a scan is enough (no string literals here).
        """
        src, tokens, i = self.source, [], start
        while i < end:
            char = src[i]
            if char in _GAP_SPACE or char in "()" or char == "\\":
                i += 1
            elif char == "#":
                while i < end and src[i] not in "\r\n":
                    i += 1
            else:
                j = i
                while j < end and src[j] not in _GAP_SPACE and src[j] not in "()#\\":
                    j += 1
                tokens.append((i, j))
                i = j
        return tokens


class _Collector:
    """Walks the tree once and proposes edits for nodes at the wanted lines."""

    def __init__(
        self, source: str, tree: ast.Module, ranked: Sequence[int], expected: tuple[str, ...] = ()
    ) -> None:
        self.text = _Text(source)
        self.expected = expected
        self.tree = tree
        self.rank = {line: i for i, line in enumerate(ranked)}
        self.wanted = set(ranked)
        self.sorted_wanted = sorted(self.wanted)
        self.seeds: list[tuple[ast.BinOp | ast.Compare, ast.AST]] = []  # operations at wanted lines
        self.edits: list[_Edit] = []
        self.skip_const: set[int] = set()  # ids of int literals already mutated as `-n`
        self.pow_bases: set[int] = set()  # ids of the left operands of `**` (`-1 ** x` is `-(1 ** x)`)
        self.call_funcs: set[int] = set()  # ids of Names called as functions
        self.bindings: dict[int, dict[str, int]] = {}  # scope id -> name -> first binding line
        self.types: dict[int, dict[str, str]] = {}  # scope id -> name -> its one known type
        self.operands: dict[int, dict[str, list[int]]] = {}  # scope id -> operand name -> its lines
        self.region: _Region | None = None  # re-parse region for the edits of the current node

    def collect(self) -> list[_Edit]:
        stack: list[tuple[ast.AST, ast.AST, _Region | None]] = [(self.tree, self.tree, None)]
        while stack:
            node, scope, region = stack.pop()
            if not self._may_hold_wanted_lines(node):
                continue  # children lie within their parent's lines, so skip the whole subtree
            if isinstance(node, ast.stmt):
                with contextlib.suppress(_BadPosition):
                    region = self._statement_region(node) or region
            # Edits made while visiting `node` (deletions of its child statements included) are
            # all contained in `region`, and deletions leave it strictly larger than the edit.
            self.region = region
            with contextlib.suppress(_BadPosition):  # skip nodes whose positions do not map cleanly
                self._mutate(node, scope)
            children = [(child, child_scope, region) for child, child_scope in self._children(node, scope)]
            stack.extend(reversed(children))
        self._everywhere()
        return self.edits

    def _statement_region(self, stmt: ast.stmt) -> _Region | None:
        """The statement's whole lines, when nothing but indentation precedes it on its first line."""
        decorators: list[ast.expr] = getattr(stmt, "decorator_list", [])
        first: ast.AST = decorators[0] if decorators else stmt
        start, _ = self.text.span(first)
        line_start = self.text.line_starts[self.text.line_col(start)[0] - 1]
        prefix = self.text.source[line_start:start]
        if prefix.strip() not in ("", "@") or "\f" in prefix or self.text.source.startswith("elif", start):
            return None  # an `elif` cannot stand alone (its `if` can); form feeds reset indentation
        end = self.text.line_end(stmt.end_lineno or stmt.lineno)
        return _Region(line_start, end, indented=prefix[:1] in (" ", "\t"))

    def _may_hold_wanted_lines(self, node: ast.AST) -> bool:
        start = getattr(node, "lineno", None)
        end = getattr(node, "end_lineno", None)
        if start is None or end is None:
            return True  # Module, comprehension, match_case, ...: no position of their own
        for decorator in getattr(node, "decorator_list", ()):
            start = min(start, decorator.lineno)  # decorators sit above the `def` line
        return self._any_wanted(start, end)

    # --- traversal -------------------------------------------------------------------------

    def _children(self, node: ast.AST, scope: ast.AST) -> Iterator[tuple[ast.AST, ast.AST]]:
        """Child nodes with their scope; annotations are skipped (mutating them changes nothing)."""
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            for default in [*node.args.defaults, *node.args.kw_defaults]:
                if default is not None:
                    yield default, scope
            if isinstance(node, ast.Lambda):
                yield node.body, node
                return
            for decorator in node.decorator_list:
                yield decorator, scope
            for stmt in node.body:
                yield stmt, node
        elif isinstance(node, ast.ClassDef):
            for child in [*node.decorator_list, *node.bases, *node.keywords]:
                yield child, scope
            for stmt in node.body:
                yield stmt, node
        elif isinstance(node, ast.AnnAssign):
            yield node.target, scope
            if node.value is not None:
                yield node.value, scope
        elif isinstance(node, ast.arguments | ast.arg) or (
            isinstance(node, ast.JoinedStr) and not self._fstring_positions_ok(node)
        ):
            return
        else:
            for child in ast.iter_child_nodes(node):
                yield child, scope

    def _fstring_positions_ok(self, node: ast.JoinedStr) -> bool:
        """Whether positions inside this f-string match its text (older parsers got some wrong)."""
        for value in node.values:
            if not isinstance(value, ast.FormattedValue):
                continue
            try:
                reparsed = _parse(f"({self.text.text(value.value)})")
            except _BadPosition:
                return False
            if reparsed is None or ast.dump(reparsed.body[0]) != ast.dump(ast.Expr(value.value)):
                return False
        return True

    def _relevant(self, node: ast.AST) -> bool:
        start = getattr(node, "lineno", None)
        end = getattr(node, "end_lineno", None)
        if start is None or end is None:
            return False
        return self._any_wanted(start, end)

    def _any_wanted(self, start: int, end: int) -> bool:
        return _any_in(self.sorted_wanted, start, end)

    # --- edit construction -------------------------------------------------------------------

    def _add(
        self,
        node: ast.AST,
        start: int,
        end: int,
        text: str,
        operator: str,
        description: str,
        at: int = 0,
        checked: bool = False,
    ) -> None:
        """An edit of `node`, anchored at its first line (or `at`), made only for wanted lines;
        `checked`: known to parse (an edit at several places, each parsed where it is)."""
        line, col = self.text.line_col(start)
        anchor = at or getattr(node, "lineno", line)
        if line not in self.wanted and anchor not in self.wanted:
            return
        self.edits.append(
            _Edit(
                start=start,
                end=end,
                text=text,
                operator=operator,
                description=description,
                line=line,
                col=col,
                anchor=anchor,
                cost=COSTS[operator],
                seq=len(self.edits),
                region=None if checked else self.region,
                checked=checked,
            )
        )

    def _replace_node(self, node: ast.AST, text: str, operator: str, description: str | None = None) -> None:
        start, end = self.text.span(node)
        old = self.text.source[start:end]
        self._add(node, start, end, text, operator, description or f"`{_short(old)}` -> `{_short(text)}`")

    def _operator_span(self, left: ast.AST, right: ast.AST, expected: str) -> tuple[int, int]:
        """Span of the operator token(s) between two operands, checked against `expected`."""
        _, gap_start = self.text.span(left)
        gap_end, _ = self.text.span(right)
        tokens = self.text.gap_tokens(gap_start, gap_end)
        words = " ".join(self.text.source[s:e] for s, e in tokens)
        if not tokens or words != expected:
            raise _BadPosition(f"expected `{expected}` between operands, found `{words}`")
        return tokens[0][0], tokens[-1][1]

    def _swap_operator(
        self, node: ast.AST, left: ast.AST, right: ast.AST, old: str, new: str, op: str
    ) -> None:
        start, end = self._operator_span(left, right, old)
        self._add(node, start, end, new, op, f"`{old}` -> `{new}`")

    def _moved(self, node: ast.AST) -> str:
        text = self.text.text(node)
        return text if isinstance(node, _ATOMS) else f"({text})"

    def _swap_nodes(
        self, parent: ast.AST, first: ast.AST, second: ast.AST, operator: str, wrap: bool
    ) -> None:
        """Exchange two sibling nodes, keeping whatever lies between them."""
        a_start, a_end = self.text.span(first)
        b_start, b_end = self.text.span(second)
        if a_end > b_start:
            return
        a_text = self._moved(first) if wrap else self.text.source[a_start:a_end]
        b_text = self._moved(second) if wrap else self.text.source[b_start:b_end]
        gap = self.text.source[a_end:b_start]
        description = f"swap `{_short(a_text, 20)}` and `{_short(b_text, 20)}`"
        self._add(parent, a_start, b_end, b_text + gap + a_text, operator, description)

    def _off_by_one(self, node: ast.expr, operator: str) -> None:
        """`e` -> `e + 1` / `e - 1` for a non-literal bound (literals get `const_off_by_one`)."""
        if isinstance(node, ast.Constant | ast.Starred | ast.Slice | ast.Tuple):
            return
        if isinstance(node, ast.UnaryOp) and isinstance(node.operand, ast.Constant):
            return
        if (
            isinstance(node, ast.BinOp)
            and isinstance(node.op, ast.Add | ast.Sub)
            and isinstance(node.right, ast.Constant)
            and type(node.right.value) is int
        ):
            return  # `n - 1` already becomes `n - 0` / `n - 2` through its literal
        text = self.text.text(node)
        safe = (
            isinstance(node, _ATOMS)
            or (isinstance(node, ast.BinOp) and isinstance(node.op, _ADDITIVE_SAFE_OPS))
            or (isinstance(node, ast.UnaryOp) and not isinstance(node.op, ast.Not))
        )
        base = text if safe else f"({text})"
        for delta in ("+ 1", "- 1"):
            self._replace_node(node, f"{base} {delta}", operator)

    def _scope_bindings(self, scope: ast.AST) -> dict[str, int]:
        cached = self.bindings.get(id(scope))
        if cached is not None:
            return cached
        names: dict[str, int] = {}

        def bind(name: str, line: int) -> None:
            if line < names.get(name, line + 1):
                names[name] = line

        body: list[ast.AST]
        if isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            args = scope.args
            for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]:
                if arg is not None:
                    bind(arg.arg, arg.lineno)
            body = [scope.body] if isinstance(scope, ast.Lambda) else list(scope.body)
        elif isinstance(scope, ast.Module | ast.ClassDef):
            body = list(scope.body)
        else:
            body = []
        stack = body
        while stack:
            node = stack.pop()
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                bind(node.id, node.lineno)
            elif isinstance(node, ast.ExceptHandler | ast.MatchAs | ast.MatchStar) and node.name:
                bind(node.name, node.lineno)
            if isinstance(node, _NESTED_SCOPES):
                continue  # names bound in nested scopes are not visible here
            stack.extend(ast.iter_child_nodes(node))
        self.bindings[id(scope)] = names
        return names

    def _scope_types(self, scope: ast.AST) -> dict[str, str]:
        """The type of each name of the function `scope` whose every binding says the same one
        (annotations, literals, builtin constructors, `for i in range(...)`; ints, floats and bools
        are one kind, `number`); a name bound any other way, here or in a nested scope (a
        comprehension's variable, `except ... as`, an import, a match capture, a nested def), is of
        unknown type and left out: only a known type keeps a substitution out."""
        cached = self.types.get(id(scope))
        if cached is not None:
            return cached
        seen: dict[str, set[str | None]] = {}
        typed: set[int] = set()  # the Name targets given a type

        def note(name: str, kind: str | None, target: ast.AST | None = None) -> None:
            seen.setdefault(name, set()).add(kind)
            if target is not None:
                typed.add(id(target))

        if not isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef):
            return {}
        args = scope.args
        for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs]:
            note(arg.arg, _annotated(arg.annotation))
        for node in _own_nodes(scope):  # (the statements that give types are never in comprehensions)
            for target, kind in _typed_targets(node):
                if isinstance(target, ast.Name):
                    note(target.id, kind, target)
            if isinstance(node, ast.AugAssign):  # `total += x` keeps the kind `total = 0` gave it
                typed.add(id(node.target))
        for node in ast.walk(scope):
            for name in _bound_names(node, scope):
                note(name, None)
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and id(node) not in typed:
                note(node.id, None)
        found = {name: next(iter(kinds)) for name, kinds in seen.items() if len(kinds) == 1}
        self.types[id(scope)] = {name: kind for name, kind in found.items() if kind is not None}
        return self.types[id(scope)]

    # --- the same edit everywhere ----------------------------------------------------------

    def _everywhere(self) -> None:
        """One edit made at every site of a shape at once, when the module has 2 to MAX_SITES of
        them and a wanted line holds one: a new operator (`<` -> `<=` at every `i < limit`), a
        number one either way (`% 25` -> `% 26` in both of a pair of functions), another name
        visible at every site; the sites at the best ranked lines first, MAX_EVERYWHERE at most."""
        seeds = [site for node, scope in self.seeds for site in _sites(node, scope)]
        keys, offsets = set(), set()
        for key in {key for site in seeds for key in _shapes(site)}:
            at = [match.start() for match in _shape_text(key).finditer(self.text.source)]
            if len(at) >= 2:  # (the common case on a large module: few, or none, and no walk)
                keys.add(key)
                offsets.update(at)
        lines = sorted({self.text.line_col(offset)[0] for offset in offsets})
        found: dict[_Shape, list[tuple[_Site, _Chain]]] = {}
        for site, chain in self._module_sites(lines):
            for key in keys.intersection(_shapes(site)):
                found.setdefault(key, []).append((site, chain))
        made: set[tuple[_Shape, str]] = set()
        for seed in sorted(seeds, key=self._seed_rank):
            for key in _shapes(seed):
                group = found.get(key, [])
                if not 2 <= len(group) <= MAX_SITES or not any(site.node is seed.node for site, _ in group):
                    continue  # (the seed itself unseen by the text test: no edit of other sites only)
                for new in self._everywhere_texts(key, seed, [site for site, _ in group]):
                    if len(made) >= MAX_EVERYWHERE:
                        return
                    if (key, new) not in made:
                        made.add((key, new))
                        with contextlib.suppress(_BadPosition):
                            self._add_everywhere(key, new, seed, group)

    def _seed_rank(self, site: _Site) -> int:
        start, end = site.node.lineno, site.node.end_lineno or site.node.lineno
        return min((self.rank[line] for line in range(start, end + 1) if line in self.rank), default=0)

    def _everywhere_texts(self, key: _Shape, seed: _Site, group: list[_Site]) -> list[str]:
        """What the part of the shape `key` names may become at every site: the operator's swaps, a
        number one either way, the names visible at every site (a namesake first)."""
        part, left, op, right = key
        if part == "op":
            swaps = _BINOP_SWAPS if isinstance(seed.node, ast.BinOp) else _COMPARE_FLIPS
            return list(swaps.get(op, ()))
        old = left if part == "left" else right
        node = seed.left if part == "left" else seed.right
        if not isinstance(node, ast.Name):
            number = _signed_number(node)
            return [] if number is None else [repr(number + 1), repr(number - 1)]
        module = set(self._scope_bindings(self.tree))
        local = [set(self._scope_bindings(s.scope)) for s in group]
        other = {_leaf(s.right if part == "left" else s.left) for s in group}  # (not `i < i`)
        names = set.intersection(*(names | module for names in local)) - {old, *other, *_NEVER_SUBSTITUTED}
        names = {name for name in names if not (name.startswith("__") and name.endswith("__"))}
        words, shared = _words(old), set.intersection(*local)
        # A namesake first, then the names every site's own function binds, then the module's; a
        # constant for a constant (`cls` -> `__version__` or `MAX` is no slip of a name).
        ranked = sorted(
            names,
            key=lambda name: (
                -len(words & _words(name)),
                name not in shared,
                name.isupper() != old.isupper(),
                name,
            ),
        )
        return ranked[:MAX_EVERYWHERE_NAMES]

    def _add_everywhere(self, key: _Shape, new: str, seed: _Site, group: list[tuple[_Site, _Chain]]) -> None:
        """The edit at every site of `group`, when every statement it touches still parses."""
        part, left, op, right = key
        parts = []
        for site, chain in group:
            if part == "op":
                start, end = self._operator_span(site.left, site.right, op)
                text = new
            else:
                node = site.left if part == "left" else site.right
                start, end = self.text.span(node)
                literal = self.text.source[start:end]
                text = _format_int(int(new), literal) if _int_literal_value(literal) is not None else new
                pow_base = (
                    part == "left" and isinstance(site.node, ast.BinOp) and isinstance(site.node.op, ast.Pow)
                )
                text = _signed(text, pow_base)
            parts.append((start, end, _pad(self.text.source, start, end, text), chain))
        parts.sort(key=lambda p: p[0])
        if any(a[1] > b[0] for a, b in itertools.pairwise(parts)) or not self._parse_parts(parts):
            return
        source, cursor, pieces = self.text.source, parts[0][0], []
        for start, end, text, _ in parts:
            pieces.append(source[cursor:start] + text)
            cursor = end
        old = right if part == "right" else left if part == "left" else op
        shape = f"{left} {op} {right}".replace("*", "...")
        lines = ", ".join(str(self.text.line_col(start)[0]) for start, *_ in parts)
        description = f"`{old}` -> `{new}` at every `{shape}` (lines {lines})"
        at = min(
            (n for n in self.rank if seed.node.lineno <= n <= (seed.node.end_lineno or 0)),
            key=self.rank.__getitem__,
            default=seed.node.lineno,
        )
        self._add(seed.node, parts[0][0], parts[-1][1], "".join(pieces), "everywhere", description, at, True)

    def _parse_parts(self, parts: list[tuple[int, int, str, _Chain]]) -> bool:
        """Whether the statements holding the parts (each the innermost one that can be re-parsed on
        its own; one holding another, the outer) parse with the parts in place."""
        regions: list[_Region] = []
        for *_, chain in parts:
            region = None
            while chain is not None and region is None:
                region = self._statement_region(chain[0])
                chain = chain[1]
            if region is None:
                return False
            regions.append(region)
        outer = [
            r for r in regions if not any(o.start <= r.start and r.end <= o.end and o != r for o in regions)
        ]
        for region in dict.fromkeys(outer):
            snippet, cursor = "", region.start
            for start, end, text, _ in parts:
                if region.start <= start and end <= region.end:
                    snippet += self.text.source[cursor:start] + text
                    cursor = end
            snippet += self.text.source[cursor : region.end]
            if _parse("if 1:\n" + snippet if region.indented else snippet) is None:
                return False
        return True

    def _module_sites(self, lines: list[int]) -> Iterator[tuple[_Site, _Chain]]:
        """The binary operations and comparisons of the module (not in annotations or f-strings)
        that start on `lines` (sorted), in their scope, with the statements around them."""
        stack: list[tuple[ast.AST, ast.AST, _Chain]] = [(self.tree, self.tree, None)]
        special = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef, ast.AnnAssign)
        while stack:
            node, scope, chain = stack.pop()
            start, end = getattr(node, "lineno", None), getattr(node, "end_lineno", None)
            if start is not None and end is not None and not _any_in(lines, start, end):
                continue  # (no such line in it)
            yield from ((site, chain) for site in _sites(node, scope))
            if isinstance(node, ast.stmt):
                chain = (node, chain)
            if isinstance(node, special):
                stack += [(child, inner, chain) for child, inner in self._children(node, scope)]
            elif not isinstance(node, ast.arguments | ast.JoinedStr):
                stack += [(child, scope, chain) for child in ast.iter_child_nodes(node)]

    # --- operators ---------------------------------------------------------------------------

    def _mutate(self, node: ast.AST, scope: ast.AST) -> None:
        for name in ("body", "orelse", "finalbody"):
            block = getattr(node, name, None)
            if isinstance(block, list) and len(block) > 1:
                for stmt in block:
                    if isinstance(stmt, _DELETABLE) and self._relevant(stmt):
                        with contextlib.suppress(_BadPosition):
                            self._delete_statement(stmt)
            if isinstance(block, list):
                self._moves(block)
        if isinstance(node, ast.comprehension):  # has no position of its own
            for condition in node.ifs:
                self._negate(condition)
        if not self._relevant(node):
            return
        if isinstance(node, ast.BinOp):
            self._binop(node)
            self._substitute_operands(node, scope)
            self.seeds.append((node, scope))
        elif isinstance(node, ast.AugAssign):
            self._augassign(node, scope)
        elif isinstance(node, ast.Compare):
            self._compare(node)
            self._substitute_operands(node, scope)
            self.seeds.append((node, scope))
        elif isinstance(node, ast.BoolOp):
            self._boolop(node)
        elif isinstance(node, ast.UnaryOp):
            self._unaryop(node)
        elif isinstance(node, ast.Constant):
            self._constant(node)
        elif isinstance(node, ast.Call):
            self._call(node)
        elif isinstance(node, ast.Subscript):
            self._subscript(node)
        elif isinstance(node, ast.Name):
            self._name(node, scope)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            self._defaults(node)
            self._add_return(node)
            self._flip_returns(node)
            self._insert_guard(node)
        elif _pair(node):  # `(j, i)` meant `(i, j)`
            assert isinstance(node, ast.Tuple | ast.List)
            self._swap_nodes(node, node.elts[0], node.elts[1], "swap_elements", wrap=False)
        if isinstance(node, ast.If | ast.While | ast.IfExp | ast.Assert):
            self._negate(node.test)

    def _binop(self, node: ast.BinOp) -> None:
        if isinstance(node.op, ast.Pow):
            self.pow_bases.add(id(node.left))
        divisor = node.right
        if (
            isinstance(node.op, ast.Div | ast.FloorDiv)
            and isinstance(divisor, ast.BinOp)
            and isinstance(divisor.op, ast.Sub)
            and not any(isinstance(n, ast.Constant) for n in (divisor.left, divisor.right))
        ):
            self._off_by_one(divisor, "span_off_by_one")  # `total / (m - n)`: m - n + 1 values
        old = _BINOP_TOKENS[type(node.op)]
        for new in _BINOP_SWAPS[old]:
            self._swap_operator(node, node.left, node.right, old, new, "binop_swap")
        for new in _BINOP_FAR.get(old, ()):
            self._swap_operator(node, node.left, node.right, old, new, "binop_swap_far")
        sliced = isinstance(node.op, ast.Add) and any(
            isinstance(n, ast.Subscript) for n in (node.left, node.right)
        )
        if isinstance(node.op, _NON_COMMUTATIVE) or sliced:  # `s[k:] + s[:k]` is not `s[:k] + s[k:]`
            self._swap_nodes(node, node.left, node.right, "swap_operands", wrap=True)
        # A term too many: `a % 1.0 + 1.0` -> `a % 1.0`, `18 * n * p` -> `18 * p` (through `18 * n`);
        # two at the end of a chain: `x * y * a * b` -> `x * y`.
        chain = (
            node.left.left
            if isinstance(node.left, ast.BinOp) and type(node.left.op) is type(node.op)
            else None
        )
        for kept in (node.left, node.right, *([chain] if chain is not None else [])):
            text = self.text.text(kept)
            binds = isinstance(kept, _ATOMS) or (
                isinstance(kept, ast.BinOp) and _PRECEDENCE[type(kept.op)] >= _PRECEDENCE[type(node.op)]
            )  # as tight as what it replaces: safe wherever that stood, without parentheses
            self._replace_node(
                node, text if binds else f"({text})", "drop_operand", f"keep only `{_short(text)}`"
            )
        if isinstance(node.op, ast.Sub):
            self._replace_node(node, f"abs({self.text.text(node)})", "wrap_abs")

    def _augassign(self, node: ast.AugAssign, scope: ast.AST) -> None:
        old = _BINOP_TOKENS[type(node.op)]
        for new in _BINOP_SWAPS[old]:
            self._swap_operator(node, node.target, node.value, f"{old}=", f"{new}=", "augassign_swap")
        for new in _BINOP_FAR.get(old, ()):
            self._swap_operator(node, node.target, node.value, f"{old}=", f"{new}=", "binop_swap_far")
        # `product *= product * d` meant `product = product * d`.
        self._swap_operator(node, node.target, node.value, f"{old}=", "=", "augassign_to_assign")
        if isinstance(node.target, ast.Name):  # `max_depth -= 1` meant `depth -= 1`
            self._substitute(node.target, scope)

    def _compare(self, node: ast.Compare) -> None:
        left: ast.expr = node.left
        for op, right in zip(node.ops, node.comparators, strict=True):
            old = _COMPARE_TOKENS[type(op)]
            singleton = any(
                isinstance(n, ast.Constant) and any(n.value is v for v in (None, True, False))
                for n in (left, right)
            )
            for new in _COMPARE_FLIPS[old]:
                if old.startswith("is") and new in ("==", "!=") and singleton:
                    continue  # `x is None` -> `x == None` changes nothing worth trying
                self._swap_operator(node, left, right, old, new, "compare_flip")
            if not singleton and not any(
                isinstance(n, ast.Constant) and isinstance(n.value, str | bytes) for n in (left, right)
            ):
                for new in _COMPARE_FAR.get(old, ()):
                    self._swap_operator(node, left, right, old, new, "compare_far")
            left = right
        if len(node.ops) == 1 and isinstance(node.ops[0], _ORDERED_COMPARES):
            self._swap_nodes(node, node.left, node.comparators[0], "swap_operands", wrap=True)

    def _boolop(self, node: ast.BoolOp) -> None:
        old, new = ("and", "or") if isinstance(node.op, ast.And) else ("or", "and")
        spans = [
            self._operator_span(left, right, old)
            for left, right in zip(node.values, node.values[1:], strict=False)
        ]
        for start, end in spans:
            self._add(node, start, end, new, "boolop_swap", f"`{old}` -> `{new}`")
        if len(spans) > 1:
            # Every operator at once, so `a and b and c` -> `a or b or c` is also on offer.
            parts, cursor = [], spans[0][0]
            for start, end in spans:
                parts.append(self.text.source[cursor:start] + new)
                cursor = end
            self._add(
                node, spans[0][0], spans[-1][1], "".join(parts), "boolop_swap", f"all `{old}` -> `{new}`"
            )

    def _unaryop(self, node: ast.UnaryOp) -> None:
        start, end = self.text.span(node)
        operand_start, _ = self.text.span(node.operand)
        source = self.text.source
        symbol = {ast.Not: "not", ast.USub: "-", ast.UAdd: "+", ast.Invert: "~"}[type(node.op)]
        if not source.startswith(symbol, start):
            raise _BadPosition(f"expected `{symbol}` at the start of a unary operation")
        # Drop the operator token and the blanks after it, keeping any parentheses of the operand.
        token_end = start + len(symbol)
        while token_end < operand_start and source[token_end] in " \t":
            token_end += 1
        if isinstance(node.op, ast.Not):
            self._add(node, start, token_end, "", "remove_not", "drop `not`")
            return
        operand = node.operand
        if isinstance(node.op, ast.USub) and isinstance(operand, ast.Constant) and type(operand.value) is int:
            literal = self.text.source[operand_start:end]
            if _int_literal_value(literal) == operand.value:
                self.skip_const.add(id(operand))
                value = -operand.value
                old = self.text.source[start:end]
                for new_value in (value + 1, value - 1):
                    new = _format_int(new_value, literal)
                    self._add(node, start, end, new, "const_off_by_one", f"`{old}` -> `{new}`")
        self._add(node, start, token_end, "", "unary_remove", f"drop unary `{symbol}`")

    def _constant(self, node: ast.Constant) -> None:
        value = node.value
        if isinstance(value, bool):
            old, new = ("True", "False") if value else ("False", "True")
            if self.text.text(node) == old:
                self._replace_node(node, new, "bool_const_flip")
        elif isinstance(value, str):
            self._string(node, value)
        elif isinstance(value, int) and id(node) not in self.skip_const:
            literal = self.text.text(node)
            if _int_literal_value(literal) != value:
                return
            base = id(node) in self.pow_bases
            for new_value in (value + 1, value - 1):
                self._replace_node(node, _signed(_format_int(new_value, literal), base), "const_off_by_one")
            for new_value in (value + 2, value - 2):
                self._replace_node(node, _signed(_format_int(new_value, literal), base), "const_off_by_two")

    def _call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Name):
            self.call_funcs.add(id(func))
            for new in _CALL_SWAPS.get(func.id, ()):
                if self.text.text(func) == func.id:
                    self._replace_node(func, new, "call_swap")
            if func.id == "range":
                for arg in node.args:
                    self._off_by_one(arg, "index_off_by_one")
                first = node.args[0] if len(node.args) == 2 else None
                if (
                    isinstance(first, ast.Constant)
                    and type(first.value) is int
                    and self.text.text(first) == "1"
                ):
                    # `range(1, n)` -> `range(n)` in place of `range(0, n)` (the same program, as it
                    # would be written); `1` -> `2` stays.
                    self.skip_const.add(id(first))
                    start, _ = self.text.span(first)
                    rest, _ = self.text.span(node.args[1])
                    self._add(node, start, rest, "", "drop_arg", "drop `1` from `range`")
                    self._replace_node(first, "2", "const_off_by_one")
        self._toggle_reverse(node)
        if isinstance(func, ast.Attribute):
            _, end = self.text.span(func)
            start = end - len(func.attr)
            if self.text.source[start:end] == func.attr:
                for new in _CALL_SWAPS.get(func.attr, ()):
                    self._add(func, start, end, new, "call_swap", f"`.{func.attr}` -> `.{new}`")
            self._swap_receiver(node, func)
        for first, second in zip(node.args, node.args[1:], strict=False):
            if not isinstance(first, ast.Starred) and not isinstance(second, ast.Starred):
                self._swap_nodes(node, first, second, "swap_args", wrap=False)

    def _subscript(self, node: ast.Subscript) -> None:
        index = node.slice
        if isinstance(index, ast.Slice):
            for bound in (index.lower, index.upper):
                if bound is not None:
                    self._off_by_one(bound, "slice_off_by_one")
                    self._replace_node(
                        bound, "", "slice_off_by_one", f"drop slice bound `{_short(self.text.text(bound))}`"
                    )
        else:
            self._off_by_one(index, "index_off_by_one")

    def _name(self, node: ast.Name, scope: ast.AST) -> None:
        if not isinstance(node.ctx, ast.Load) or id(node) in self.call_funcs:
            return
        self._substitute(node, scope)

    def _substitute(
        self, node: ast.Name, scope: ast.AST, operator: str = "var_substitute", beside: str = ""
    ) -> None:
        """The name -> another bound in its scope. `operand_substitute` (an operand of an operation
        in a function): only names the function uses as operands too, never `beside` (the other
        operand: `b - b`), those sharing a word with it first (`old_min` -> `new_min`), then those
        used nearest."""
        if node.id in _NEVER_SUBSTITUTED or self.text.text(node) != node.id:
            return
        bindings = self._scope_bindings(scope)
        if node.id in _BUILTIN_NAMES and node.id not in bindings:
            return
        line = node.lineno
        types = self._scope_types(scope)
        own = types.get(node.id)
        narrow = operator == "operand_substitute"
        operands = self._scope_operands(scope) if narrow else {}
        words = _words(node.id)
        candidates = sorted(
            (
                name
                for name in bindings
                if name != node.id
                and name not in _NEVER_SUBSTITUTED
                # Of another known type than the name's: seldom the fix (`total` for `items`).
                and not (own and types.get(name) and types[name] != own)
                and (not narrow or (name in operands and name != beside))
            ),
            # (Operands: a word shared, then used nearest;) names of the same type first, then names
            # bound before the use, closest first.
            key=lambda name: (
                -len(words & _words(name)) if narrow else 0,
                min(abs(n - line) for n in operands[name]) if narrow else 0,
                not own or types.get(name) != own,
                bindings[name] > line,
                abs(bindings[name] - line),
                bindings[name],
                name,
            ),
        )
        for name in candidates[:MAX_SUBSTITUTIONS_PER_NAME]:
            self._replace_node(node, name, operator)

    def _substitute_operands(self, node: ast.BinOp | ast.Compare, scope: ast.AST) -> None:
        """Each name operand of a function's operation -> another the function uses as an operand
        (`new_max - old_min` meant `new_max - new_min`)."""
        if not isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef):
            return
        for left, right in _operand_pairs(node):
            for name, other in ((left, right), (right, left)):
                if isinstance(name, ast.Name) and isinstance(name.ctx, ast.Load):
                    beside = other.id if isinstance(other, ast.Name) else ""
                    self._substitute(name, scope, "operand_substitute", beside)

    def _scope_operands(self, scope: ast.AST) -> dict[str, list[int]]:
        """The names the function uses as an operand (of arithmetic, a comparison, an augmented
        assignment, a sign), with the lines where: numbers, most likely, or alike at least; and
        those it binds and never reads (an unused parameter), with the line that binds them."""
        cached = self.operands.get(id(scope))
        if cached is None and isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef):
            cached, read = {}, set()
            for node in _own_nodes(scope):
                parts: list[ast.expr] = [p for pair in _operand_pairs(node) for p in pair]
                if isinstance(node, ast.AugAssign):
                    parts = [node.target, node.value]
                elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
                    parts = [node.operand]
                elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                    read.add(node.id)
                for part in parts:
                    if isinstance(part, ast.Name):
                        cached.setdefault(part.id, []).append(part.lineno)
            for name, line in self._scope_bindings(scope).items():
                if name not in read and name not in cached:
                    cached[name] = [line]
            self.operands[id(scope)] = cached
        return cached or {}

    def _string(self, node: ast.Constant, value: str) -> None:
        """A string constant -> another of the module's (`merged["port"]` meant `merged["timeout"]`),
        the nearest first, in the literal's own quotes."""
        text = self.text.text(node)
        quote = text[:1]
        if quote not in ("'", '"') or text.startswith(quote * 3):
            return
        strings, skipped = _module_strings(self.text.source)
        if (node.lineno, node.col_offset) in skipped:
            return  # a docstring, or a part of an f-string (its position is the whole f-string's)
        for other in dict.fromkeys(e for e in self.expected if e != value and e not in strings):
            self._replace_node(node, _literal(other, quote), "expected_string")
        others = sorted((s for s in strings if s != value), key=lambda s: (abs(strings[s] - node.lineno), s))
        for other in others[:MAX_STRING_SWAPS]:
            self._replace_node(node, _literal(other, quote), "string_swap")
        # The literal itself a little off: `'yes'` meant `'Yes'`, `' '` meant `''`, `"E+"` meant `"E"`.
        variants = [value.capitalize(), value.lower(), value.upper(), value.strip(), value[:-1], value[1:]]
        variants += ["" if value else " "]
        if len(value) > 1 and value.isalpha() and (value.islower() or value.isupper()):
            variants.append(value + value.swapcase())  # `"aeiou"` meant `"aeiouAEIOU"`
        core = value.strip()
        if core and core != value:  # `' I'` meant `'I '`: the blank on the other side
            lead, trail = value[: value.index(core)], value[value.index(core) + len(core) :]
            variants.append(trail + core + lead)
        for variant in dict.fromkeys(v for v in variants if v != value and v.isprintable()):
            self._replace_node(node, _literal(variant, quote), "string_variant")

    def _defaults(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        """A parameter's default, keyword-only ones too -> what it may have been meant to be
        (`default_variants`), anchored at the `def` line: a signature split over several lines has
        its defaults below it, where no coverage ranks a line."""
        for default in [*node.args.defaults, *node.args.kw_defaults]:
            if default is None:
                continue
            old = self.text.text(default)
            start, end = self.text.span(default)
            for new in default_variants(default, old, self.expected):
                self._add(node, start, end, new, "default_swap", f"default `{old}` -> `{new}`")

    def _add_return(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        """`return NAME` after the last statement of a function that falls off its end, for the names
        it assigns (the last assigned first): a forgotten `return result`."""
        last = node.body[-1]
        if isinstance(last, ast.Return | ast.Raise) or _is_generator(node):
            return
        if last.col_offset != node.body[0].col_offset or last.end_lineno is None:
            return
        assigned: dict[str, int] = {}
        loops = set()  # names bound as loop targets: rarely what a function returns
        for child in _own_nodes(node):
            if isinstance(child, ast.Name) and isinstance(child.ctx, ast.Store):
                assigned[child.id] = max(assigned.get(child.id, 0), child.lineno)
            elif isinstance(child, ast.For | ast.AsyncFor | ast.comprehension):
                loops |= {n.id for n in ast.walk(child.target) if isinstance(n, ast.Name)}
        names = sorted(assigned, key=lambda n: (n in loops, -assigned[n], n))[:3]
        line_start = self.text.line_starts[node.body[0].lineno - 1]
        indent = self.text.source[line_start : line_start + node.body[0].col_offset]
        if indent.strip():
            return
        at = self.text.line_end(last.end_lineno)
        at -= self.text.source[at - 1 : at] == "\n"  # before its line break: the edit is on that line
        for name in names:
            self._add(node, at, at, f"\n{indent}return {name}", "add_return", f"add `return {name}`")

    def _swap_receiver(self, node: ast.Call, func: ast.Attribute) -> None:
        """`a.startswith(b)` meant `b.startswith(a)`: a call's receiver and its one argument, both
        simple (a name, a constant, an attribute, a subscript), exchanged."""
        simple = ast.Name | ast.Constant | ast.Attribute | ast.Subscript
        if len(node.args) != 1 or node.keywords or not isinstance(func.value, simple):
            return
        arg = node.args[0]
        named = func.value.id if isinstance(func.value, ast.Name) else ""
        if not isinstance(arg, simple) or named in _BUILTIN_NAMES or named in _NEVER_SUBSTITUTED:
            return  # `str.lower(x)`, `self.f(x)`: the receiver is no value to exchange
        receiver, argument = self.text.text(func.value), self.text.text(arg)
        start, end = self.text.span(node)
        call = self.text.source[start:end]
        if not call.startswith(receiver) or not call.endswith(")"):
            return
        head, _, _ = call[len(receiver) :].partition("(")  # `.startswith`
        text = f"{argument}{head}({receiver})"
        self._add(
            node,
            start,
            end,
            text,
            "swap_receiver",
            f"swap `{_short(receiver, 20)}` and `{_short(argument, 20)}`",
        )

    def _toggle_reverse(self, node: ast.Call) -> None:
        """`sorted(xs)` meant `sorted(xs, reverse=True)` (and `.sort()` too), or the other way."""
        func = node.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        if name not in ("sorted", "sort") or any(k.arg is None for k in node.keywords):
            return
        reverse = next((k for k in node.keywords if k.arg == "reverse"), None)
        if reverse is not None:
            if isinstance(reverse.value, ast.Constant) and isinstance(reverse.value.value, bool):
                self._replace_node(reverse.value, str(not reverse.value.value), "toggle_reverse")
            return
        _, end = self.text.span(node)
        if self.text.source[end - 1 : end] != ")":
            return
        text = ", reverse=True" if node.args or node.keywords else "reverse=True"
        self._add(node, end - 1, end - 1, text, "toggle_reverse", "add `reverse=True`")

    def _flip_returns(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        """Every `return True` <-> `return False` of the function at once: answers the wrong way
        round (a single flip makes both answers the same)."""
        values = [
            n.value
            for n in _own_nodes(node)
            if isinstance(n, ast.Return)
            and isinstance(n.value, ast.Constant)
            and isinstance(n.value.value, bool)
        ]
        if len({v.value for v in values if isinstance(v, ast.Constant)}) < 2:
            return
        spans = sorted(self.text.span(v) for v in values)
        if any(self.text.source[a:b] not in ("True", "False") for a, b in spans):
            return
        parts, cursor = [], spans[0][0]
        for a, b in spans:
            parts.append(
                self.text.source[cursor:a] + ("False" if self.text.source[a:b] == "True" else "True")
            )
            cursor = b
        text = "".join(parts)
        self._add(node, spans[0][0], spans[-1][1], text, "flip_returns", "flip every `return True`/`False`")

    def _moves(self, block: list[ast.stmt]) -> None:
        """A statement one level out of the loop or `if` body it ends (`return total` inside the
        loop that sums), or the statement after a loop or `if` into the end of its body (`count += 1`
        left after the loop it belongs in). Only blocks without `else`, one-line statements."""
        for i, compound in enumerate(block):
            if not isinstance(compound, ast.For | ast.AsyncFor | ast.While | ast.If) or compound.orelse:
                continue
            keyword = _BLOCKS[type(compound)]
            inner = compound.body[-1]
            loop = keyword != "if"
            if len(compound.body) > 1 and not (loop and isinstance(inner, ast.Break | ast.Continue)):
                with contextlib.suppress(_BadPosition):
                    self._reindent(inner, compound, "move_out", f"out of the `{keyword}` body")
            if i + 1 < len(block):
                with contextlib.suppress(_BadPosition):
                    self._reindent(block[i + 1], inner, "move_in", f"into the `{keyword}` body")

    def _reindent(self, stmt: ast.stmt, like: ast.stmt, operator: str, where: str) -> None:
        """`stmt`, a one-line statement alone on its line, indented as `like` is."""
        if not isinstance(stmt, _MOVABLE) or stmt.end_lineno != stmt.lineno or not self._relevant(stmt):
            return
        source = self.text.source
        line_start = self.text.line_starts[stmt.lineno - 1]
        start, end = self.text.span(stmt)
        rest = source[end : self.text.line_end(stmt.lineno)].strip()
        like_start = self.text.line_starts[like.lineno - 1]
        indent, new = source[line_start:start], source[like_start : self.text.span(like)[0]]
        if indent.strip() or new.strip() or indent == new or (rest and not rest.startswith("#")):
            return
        self._add(stmt, line_start, start, new, operator, f"move `{_short(source[start:end])}` {where}")

    def _insert_guard(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        """`if not xs: return 0` before a function's first statement, for the parameters its
        suspicious lines use: the missing empty-input check. What it returns is what the function
        returns elsewhere (a literal), or what the module's other such guards return, else None."""
        body = node.body
        docstring = isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
        if (docstring and len(body) == 1) or _is_generator(node):
            return  # (an async generator cannot `return` a value)
        first = body[1] if docstring else body[0]
        args = node.args
        used = {n.id for n in _emptiable_uses(node) if n.lineno in self.wanted}
        guarded = {ast.dump(n.test) for n in _own_nodes(node) if isinstance(n, ast.If)}
        params = [
            a.arg
            for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]
            if a.arg in used and a.arg not in _NEVER_SUBSTITUTED
        ]
        params = [p for p in params if ast.dump(parse_expression(f"not {p}").body) not in guarded][:3]
        values = list(dict.fromkeys([*self._literal_returns(node), *self._module_guards]))[:3] or ["None"]
        start, _ = self.text.span(first)
        line_start = self.text.line_starts[first.lineno - 1]
        def_start = self.text.line_starts[node.lineno - 1]
        indent = self.text.source[line_start:start]
        outer = self.text.source[def_start : def_start + node.col_offset]
        if indent.strip() or not indent.startswith(outer) or len(indent) <= len(outer):
            return
        step = indent[len(outer) :]
        for param in params:
            for value in values:
                text = f"if not {param}:\n{indent}{step}return {value}\n{indent}"
                self._add(node, start, start, text, "insert_guard", f"add `if not {param}: return {value}`")

    @functools.cached_property
    def _module_guards(self) -> tuple[str, ...]:
        """What the module's `if not x: return <literal>` guards return."""
        found = []
        for node in ast.walk(self.tree):
            test = getattr(node, "test", None)
            if not isinstance(node, ast.If) or not isinstance(test, ast.UnaryOp) or node.orelse:
                continue
            if isinstance(test.op, ast.Not) and len(node.body) == 1 and isinstance(node.body[0], ast.Return):
                found += list(self._literal_returns(node))
        return tuple(found)

    def _literal_returns(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.If) -> Iterator[str]:
        """The texts of the literal values the function returns (`0`, `[]`, `None`, `""`)."""
        for child in _own_nodes(node):
            if not isinstance(child, ast.Return):
                continue
            value = child.value
            if value is None:
                yield "None"
            elif isinstance(value, ast.Constant) or (
                isinstance(value, ast.List | ast.Tuple | ast.Dict)
                and not (getattr(value, "elts", None) or getattr(value, "keys", None))
            ):
                yield self.text.text(value)

    def _negate(self, test: ast.expr) -> None:
        if not self._relevant(test):
            return
        if isinstance(test, ast.Constant) or (isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not)):
            return  # `while True` / `not x` are better served by bool_const_flip / remove_not
        text = self.text.text(test)
        simple = isinstance(test, ast.Name | ast.Attribute | ast.Call | ast.Subscript)
        self._replace_node(test, f"not {text}" if simple else f"not ({text})", "negate_condition")

    def _delete_statement(self, stmt: ast.stmt) -> None:
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
            return  # docstrings and `...` do nothing worth deleting
        if isinstance(stmt, ast.AnnAssign) and stmt.value is None:
            return
        start, end = self.text.span(stmt)
        line_start = self.text.line_starts[stmt.lineno - 1]
        line_end = self.text.line_end(stmt.end_lineno or stmt.lineno)
        source = self.text.source
        # Only statements that own their lines: no `;` neighbours (a trailing comment goes too).
        if source[line_start:start].strip():
            return
        rest = source[end:line_end].strip()
        if rest and not rest.startswith("#"):
            return
        self._add(stmt, line_start, line_end, "", "delete_statement", f"delete `{_short(source[start:end])}`")
