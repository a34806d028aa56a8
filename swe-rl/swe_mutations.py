"""Mutation sites of the SWE setting's repositories, and applying one by its exact text span (pure: no I/O).

A site (``Mutation``) replaces ``source[start:end]`` of one module outside ``tests/`` by another token or
expression, so the rest of the file keeps its formatting and the diff is one line. ``find_mutations``
enumerates the sites of a module with ``ast``; kinds (``MUTATION_KINDS``):

- ``compare``: ``<`` <-> ``<=``, ``>`` <-> ``>=``, ``==`` <-> ``!=`` (each operator of a comparison chain);
- ``arith``: ``+`` <-> ``-``, ``*`` <-> ``//``, ``/`` -> ``*``, also as augmented assignments (``+=`` ...);
- ``constant``: an integer literal n -> n + 1 and n -> n - 1 (not bools, not elements of tuple / list / set /
  dict literals, which are data rather than logic);
- ``boolop``: ``and`` <-> ``or`` (each operator of a chain);
- ``negate_if``: ``if COND:`` -> ``if not (COND):`` (also ``elif``);
- ``return_none``: ``return NAME`` -> ``return None``.

Nodes inside f-strings are skipped (their positions are unreliable before Python 3.12).

Invariants: ``repo_mutations(repo)`` is a fixed order (by file path, then position) and its indices are the
site indices of task ids (``swe-<repo>-<index>``), so any change to the rules or to a repository changes
``repo_digest(repo)``, which the stored task table (``swe_repos.TABLE``) must match. ``apply_mutation`` refuses
a span that no longer reads the site's old text.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import hashlib
import json
import re

import swe_repos

TESTS_DIR = "tests/"
MUTATION_KINDS = ("compare", "arith", "constant", "boolop", "negate_if", "return_none")
_OP_TOKENS = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!=",
              ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.FloorDiv: "//", ast.Div: "/", ast.And: "and",
              ast.Or: "or"}
SWAPS = {"<": "<=", "<=": "<", ">": ">=", ">=": ">", "==": "!=", "!=": "==", "+": "-", "-": "+", "*": "//",
         "//": "*", "/": "*", "and": "or", "or": "and"}


@dataclasses.dataclass(frozen=True)
class Mutation:
    """Replace ``source[start:end]`` (which reads `old`; character offsets, `line` 1-based) of file `path` by `new`."""

    path: str
    kind: str
    start: int
    end: int
    line: int
    old: str
    new: str

    def describe(self) -> str:
        return f"{self.path}:{self.line}: {self.kind}: {self.old!r} -> {self.new!r}"

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def apply_mutation(source: str, m: Mutation) -> str:
    """`source` with `m` applied; ValueError when the span does not read `m.old` (the source changed)."""
    if source[m.start:m.end] != m.old:
        raise ValueError(f"{m.path}: expected {m.old!r} at offset {m.start}, found {source[m.start:m.end]!r}")
    return source[:m.start] + m.new + source[m.end:]


def find_mutations(path: str, source: str) -> list[Mutation]:
    """Every mutation site of one module, sorted by position (see the module docstring for the kinds)."""
    tree = ast.parse(source)
    lines = re.findall(r"[^\n]*\n|[^\n]+$", source)  # as ast counts lines (splitlines also splits at \f ...)
    line_starts = [0]
    for line in lines:
        line_starts.append(line_starts[-1] + len(line))

    def offset(lineno: int, byte_col: int) -> int:  # ast columns count UTF-8 bytes
        return line_starts[lineno - 1] + len(lines[lineno - 1].encode()[:byte_col].decode(errors="replace"))

    def start(node: ast.AST) -> int:
        return offset(node.lineno, node.col_offset)

    def end(node: ast.AST) -> int:
        return offset(node.end_lineno, node.end_col_offset)

    skip: set[int] = set()  # ids of nodes inside f-strings or directly inside collection literals
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            skip.update(id(n) for n in ast.walk(node))
        elif isinstance(node, (ast.Tuple, ast.List, ast.Set, ast.Dict)):
            skip.update(id(n) for n in ast.iter_child_nodes(node))

    sites: list[Mutation] = []

    def site(kind: str, lo: int, hi: int, new: str, lineno: int) -> None:
        sites.append(Mutation(path, kind, lo, hi, lineno, source[lo:hi], new))

    def operator(kind: str, left: ast.AST, right: ast.AST, token: str, suffix: str = "") -> None:
        """The operator `token` between two nodes: the gap may hold only it, whitespace and parentheses."""
        lo, hi = end(left), start(right)
        m = re.fullmatch(r"([\s()\\]*)" + re.escape(token + suffix) + r"[\s()\\]*", source[lo:hi])
        if m:
            a = lo + len(m.group(1))
            site(kind, a, a + len(token + suffix), SWAPS[token] + suffix, source.count("\n", 0, a) + 1)

    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Compare):
            for left, op, right in zip([node.left, *node.comparators], node.ops, node.comparators):
                if type(op) in _OP_TOKENS:
                    operator("compare", left, right, _OP_TOKENS[type(op)])
        elif isinstance(node, ast.BinOp) and type(node.op) in _OP_TOKENS:
            operator("arith", node.left, node.right, _OP_TOKENS[type(node.op)])
        elif isinstance(node, ast.AugAssign) and type(node.op) in _OP_TOKENS:
            operator("arith", node.target, node.value, _OP_TOKENS[type(node.op)], "=")
        elif isinstance(node, ast.BoolOp):
            for left, right in zip(node.values, node.values[1:]):
                operator("boolop", left, right, _OP_TOKENS[type(node.op)])
        elif isinstance(node, ast.Constant) and type(node.value) is int:
            for new in (node.value + 1, node.value - 1):
                site("constant", start(node), end(node), str(new), node.lineno)
        elif isinstance(node, ast.If):
            lo, hi = start(node.test), end(node.test)
            site("negate_if", lo, hi, f"not ({source[lo:hi]})", node.test.lineno)
        elif isinstance(node, ast.Return) and isinstance(node.value, ast.Name):
            site("return_none", start(node.value), end(node.value), "None", node.lineno)
    return sorted(sites, key=lambda m: (m.start, m.end, m.kind, m.new))


def source_files(files: dict[str, str]) -> list[str]:
    """The Python files of a repository outside tests/, sorted."""
    return sorted(p for p in files if p.endswith(".py") and not p.startswith(TESTS_DIR))


@functools.cache
def repo_mutations(repo: str) -> tuple[Mutation, ...]:
    """Every mutation site of a repository, in a fixed order: by file path, then position. Indices are task ids."""
    files = swe_repos.REPOS[repo]
    return tuple(m for path in source_files(files) for m in find_mutations(path, files[path]))


def mutated_files(repo: str, m: Mutation) -> dict[str, str]:
    files = dict(swe_repos.REPOS[repo])
    files[m.path] = apply_mutation(files[m.path], m)
    return files


def repo_digest(repo: str) -> str:
    """Digest of a repository's files and mutation sites: the generated table is valid only for this value."""
    payload = json.dumps([sorted(swe_repos.REPOS[repo].items()), [m.to_dict() for m in repo_mutations(repo)]])
    return hashlib.sha256(payload.encode()).hexdigest()[:16]
