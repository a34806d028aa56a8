"""What README.md, docs/ and instructions/ say that the code can check, checked (issue 32: a new user's first hour
is spent believing them).

- **Links**: every relative Markdown link (and every path of a ``.md`` file written in a code span) resolves to a
  file of this repository, and a ``#anchor`` to a heading of that file by GitHub's slug rules; in the documents
  and in every Markdown file they link to.
- **Defaults**: wherever a document states the default of a flag (``--lr``) or of a setting key (``group_size``),
  it is the default the code declares: ``setting(...)`` in ``slime_ext/config.py`` and
  ``slime_ext/learning/settings.py`` for ``serve``, the argparse default for the other subcommands (the
  subcommand the text names, else ``serve``). Claims are read from tables with a ``default`` column (the first
  column's flags paired in order with the default cell's values, split at ``/`` or ``,``) and from the phrasings
  of ``CLAIM_PATTERNS``. The rule for what is not read: a sentence that holds a flag and the word "default(s)"
  must have that word read by a pattern, unless the default is someone's (``upstream's default``, ``its
  defaults``), part of the flag's own name (``sampling defaults``), or an adjective (``the default model``).
  Anything else fails as *unreadable*: rephrase it, or teach the reader the phrasing.
- **--help**: each subcommand's help states no default (its trailing ``[...]``) other than the code's; every flag
  used with a subcommand (``openclaw-rl env train --lr``, ``make serve ARGS=...``, a ``serve --model`` span) is
  one of that subcommand's; every flag README.md names is one of some subcommand's, and those of its flag tables
  are ``serve``'s.
- **Numbers**: the context length a document gives a built-in model is the model's; an OpenClaw provider sample's
  ``contextWindow`` is one OpenClaw accepts, and the document says what the default model really has; a text
  that says a long prompt gets a 400 names ``--context-overflow`` (the default trims and answers).
- **The README links every instructions/ guide.**

``python tests/test_claims.py`` prints every claim read and whether it holds.
"""

from __future__ import annotations

import argparse
import enum
import functools
import math
import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

ROOT = Path(__file__).resolve().parents[1]


def doc_files() -> list[Path]:
    """The documents a user reads: the README, docs/ and instructions/."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "instructions").glob("*.md"))]


def rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


# ---------------------------------------------------------------- reading Markdown

FENCE = re.compile(r"^\s*(```|~~~)")
SPAN = re.compile(r"(`+)(.+?)\1")
TABLE_RULE = re.compile(r"\|?[\s:|-]+\|?")


@dataclass
class Block:
    """A paragraph, list item or table cell of prose: its text (lines joined by spaces), where each line starts,
    and for a table cell its whole row (``context``)."""

    path: Path
    text: str
    starts: list[tuple[int, int]]  # (offset in text, line number)
    context: str = ""

    def where(self, offset: int) -> str:
        return f"{rel(self.path)}:{max(n for at, n in self.starts if at <= offset)}"


def prose_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, line) of every line outside fenced code blocks."""
    fence = None
    for n, line in enumerate(path.read_text().splitlines(), 1):
        m = FENCE.match(line)
        if m and (fence is None or m.group(1) == fence):
            fence = m.group(1) if fence is None else None
        elif fence is None:
            yield n, line


def fenced_blocks(path: Path) -> Iterator[tuple[int, str, str]]:
    """(first line number, info string, text) of every fenced code block."""
    fence, info, start, body = None, "", 0, []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        m = FENCE.match(line)
        if m and fence is None:
            fence, info, start, body = m.group(1), line.strip()[3:].strip(), n + 1, []
        elif m and m.group(1) == fence:
            yield start, info, "\n".join(body)
            fence = None
        elif fence is not None:
            body.append(line)


def table_cells(line: str) -> list[str]:
    """The cells of a table row (``\\|`` in a cell is a literal bar)."""
    row = line.strip()
    row = row[1:] if row.startswith("|") else row
    row = row[:-1] if row.endswith("|") and not row.endswith("\\|") else row
    return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", row)]


def blocks(path: Path) -> Iterator[Block]:
    """Paragraphs and list items (lines joined), and each table cell, outside code blocks; not headings."""
    para: list[tuple[int, str]] = []

    def flush() -> Iterator[Block]:
        if para:
            text, starts = "", []
            for n, line in para:
                starts.append((len(text), n))
                text += line.strip() + " "
            yield Block(path, text.rstrip(), starts)
            para.clear()

    for n, line in prose_lines(path):
        stripped = line.strip()
        if not stripped or stripped.startswith(("#", "|")):
            yield from flush()
            if stripped.startswith("|") and not TABLE_RULE.fullmatch(stripped):
                for cell in table_cells(stripped):
                    yield Block(path, cell, [(0, n)], context=stripped)
            continue
        if re.match(r"([-*+]|\d+\.)\s", stripped):  # a list item starts a block of its own
            yield from flush()
        para.append((n, line))
    yield from flush()


def tables(path: Path) -> Iterator[tuple[list[str], list[tuple[int, list[str]]]]]:
    """(header cells, [(line number, cells)]) of every table."""
    rows: list[tuple[int, str]] = []
    for n, line in [*prose_lines(path), (0, "")]:
        if line.strip().startswith("|"):
            rows.append((n, line))
            continue
        if len(rows) >= 2 and TABLE_RULE.fullmatch(rows[1][1].strip()):
            yield table_cells(rows[0][1]), [(k, table_cells(r)) for k, r in rows[2:]]
        rows = []


def split_top(text: str, sep: str) -> list[str]:
    """``text`` split at ``sep`` outside parentheses, brackets and code spans."""
    parts, depth, code, start, i = [], 0, False, 0, 0
    while i < len(text):
        ch = text[i]
        if ch == "`":
            code = not code
        elif not code and ch in "([":
            depth += 1
        elif not code and ch in ")]":
            depth -= 1
        elif not code and depth == 0 and text.startswith(sep, i):
            parts.append(text[start:i])
            start = i = i + len(sep)
            continue
        i += 1
    return [p.strip() for p in [*parts, text[start:]]]


# ---------------------------------------------------------------- links and anchors


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: its text without markup, lower case, only letters, digits, ``_``, ``-`` and
    spaces kept, spaces made hyphens (a repeated heading gets ``-1``, ``-2``: ``anchors``)."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").replace("*", "")
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


@functools.cache
def anchors(path: Path) -> frozenset[str]:
    """Every anchor of a Markdown file: its headings' slugs and any explicit ``id=`` / ``name=``."""
    seen: dict[str, int] = {}
    out = set()
    for _, line in prose_lines(path):
        m = re.match(r"\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            base = slug(m.group(1))
            out.add(base if base not in seen else f"{base}-{seen[base]}")
            seen[base] = seen.get(base, 0) + 1
        out |= set(re.findall(r"""(?:id|name)=["']([^"']+)["']""", line))
    return frozenset(out)


LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+[\"'][^)]*[\"'])?\s*\)")
REF_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)")
EXTERNAL = re.compile(r"[a-zA-Z][a-zA-Z0-9+.-]*:|//")  # http:, mailto:, ...: not ours to check


def links(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, target) of every link and image of ``path`` outside code."""
    for n, line in prose_lines(path):
        text = SPAN.sub(lambda m: " " * len(m.group(0)), line)
        yield from ((n, m.group(1)) for m in LINK.finditer(text))
        m = REF_DEF.match(text)
        if m:
            yield n, m.group(1)


def resolve(path: Path, target: str) -> tuple[Path | None, str]:
    """The file a relative link of ``path`` names (None: outside the repository) and its anchor."""
    file, _, anchor = target.partition("#")
    dest = (path.parent / file).resolve() if file else path
    return (dest if dest == ROOT or ROOT in dest.parents else None), anchor


def link_problems(path: Path) -> list[str]:
    problems = []
    for n, target in links(path):
        if EXTERNAL.match(target):
            continue
        dest, anchor = resolve(path, target)
        if dest is None or not dest.exists():
            problems.append(f"{rel(path)}:{n}: link to {target}: no such file in the repository")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            problems.append(f"{rel(path)}:{n}: link to {target}: {rel(dest)} has no heading #{anchor}")
    for n, line in prose_lines(path):  # a Markdown file's path in a code span: from the file or from the root
        for m in SPAN.finditer(line):
            name = m.group(2).strip()
            if re.fullmatch(r"(\.{1,2}/)*[\w.-]+(/[\w.-]+)+\.md", name):
                places = [(path.parent / name).resolve(), (ROOT / name).resolve()]
                if not any(p.exists() and ROOT in p.parents for p in places):
                    problems.append(f"{rel(path)}:{n}: `{name}`: no such file in the repository")
    return problems


def linked_docs() -> list[Path]:
    """The documents and every Markdown file of the repository they link to, transitively."""
    todo, seen = list(doc_files()), []
    while todo:
        path = todo.pop(0)
        if path not in seen:
            seen.append(path)
            for _, target in links(path):
                dest, _ = resolve(path, target)
                if not EXTERNAL.match(target) and dest is not None and dest.suffix == ".md" and dest.is_file():
                    todo.append(dest)
    return seen


# ---------------------------------------------------------------- the code's flags and defaults


@dataclass(frozen=True)
class Flag:
    command: str  # "serve", "env train", ...
    name: str  # --lr
    default: Any
    help: str  # as --help shows it
    type: Any = None
    choices: tuple[str, ...] = ()
    takes_value: bool = True


def subcommands(parser: argparse.ArgumentParser, path: str = "") -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from subcommands(sub, f"{path} {name}".strip())


@functools.cache
def parsers() -> dict[str, argparse.ArgumentParser]:
    """{"": the top-level parser, "serve": ..., "env train": ...}."""
    from slime_ext.cli import build_parser

    return dict(subcommands(build_parser()))


def _plain(v: Any) -> Any:
    return v.value if isinstance(v, enum.Enum) else v


@functools.cache
def flags() -> dict[str, dict[str, Flag]]:
    """{flag: {subcommand: Flag}}. ``serve``'s defaults are the declared ones (its flags default to None, so that a
    YAML file's value stands); the other subcommands', their argparse defaults. A setting key with an underscore
    (``group_size``: the YAML and Slime mapping name) stands for its ``serve`` flag."""
    from slime_ext.config import ServeConfig
    from slime_ext.settings import declared

    out: dict[str, dict[str, Flag]] = {}
    by_key = {d.key: d for d in declared(ServeConfig)}
    for command, parser in parsers().items():
        for a in parser._actions:
            if not a.option_strings or isinstance(a, argparse._HelpAction):
                continue
            d = by_key.get(a.dest) if command == "serve" else None
            default = _plain(d.default) if d is not None else a.default
            kind = (d.type if d is not None else a.type) or (bool if a.nargs == 0 else None)
            choices = tuple(str(_plain(c)) for c in (a.choices or ()))
            flag = Flag(command, a.option_strings[0], default, a.help or "", kind, choices, a.nargs != 0)
            for name in a.option_strings:
                out.setdefault(name, {})[command] = flag
    for d in declared(ServeConfig):
        if d.meta.flag != "" and "_" in d.key:
            out.setdefault(d.key, {})["serve"] = out[d.meta.flag or "--" + d.key.replace("_", "-")]["serve"]
    return out


ON, OFF = {"on", "true", "yes", "enabled"}, {"off", "false", "no", "disabled"}
NOTHING = {"none", "empty", "unset", "nothing", "off", "no"}


def numbers(text: str) -> list[float]:
    """The values a number as the docs write it may mean: ``32,768``, ``5e-4``, ``30 min`` (in seconds), ``64k``."""
    m = re.fullmatch(r"(-?\d[\d,]*(?:\.\d+)?(?:e-?\d+)?)\s*(min|s|k|ms)?", text.strip())
    if not m:
        return []
    n = float(m.group(1).replace(",", ""))
    return {"min": [n * 60], "k": [n * 1000, n * 1024], "ms": [n / 1000]}.get(m.group(2) or "", [n])


def is_sentinel(v: Any) -> bool:
    """A default that means "decided elsewhere" (0: the model's own, "", None, auto): its help says what it is."""
    return v is None or (not isinstance(v, bool) and v in (0, "", "auto")) or v == [] or v == {}


def holds(claim: str, flag: Flag, help: str | None = None) -> bool:
    """Whether ``claim`` (a value as a document writes it) is ``flag``'s default. A sentinel default may be claimed
    by what it stands for, in the words of the flag's help (``help``: that text; the flag's own by default)."""
    c = claim.strip().strip("`'\"").rstrip(".,;:").strip().strip("`")
    d = flag.default
    if isinstance(d, bool):
        ok = c.lower() in (ON if d else OFF)
    elif d is None or d == "" or d == [] or d == {}:
        ok = c.lower() in NOTHING
    elif isinstance(d, (int, float)):
        ok = any(math.isclose(n, d, rel_tol=1e-9, abs_tol=1e-12) for n in numbers(c))
    else:
        ok = c == str(d)
    if not ok and is_sentinel(d) and c:
        text = flag.help if help is None else help
        ok = re.search(r"(?<![\w.])" + re.escape(c) + r"(?![\w])", text, re.IGNORECASE) is not None
    return ok


def is_value(token: str, flag: Flag) -> bool:
    """Whether ``token`` after a flag in a code span is a value (``--lr 5e-4``) rather than a metavar (``--lr LR``,
    ``--hint-m m``, ``<path>``) or a list of choices (``system|user``)."""
    if not flag.takes_value or "|" in token or re.fullmatch(r"[A-Z][A-Z_=0-9]*|<[^>]+>|[a-zA-Z]", token):
        return False
    if flag.choices:
        return token in flag.choices
    if flag.type in (int, float):
        return bool(numbers(token))
    return True


def flag_pairs(span: str) -> list[tuple[str, str | None]]:
    """(flag, value or None) of a code span that starts with a flag (``--replay-turns 0 --replay-steps 1``,
    ``--lr LR``) or is a setting key (``group_size``); a span that starts otherwise (``serve --method none``, a
    command) names no flag here."""
    tokens = span.split()
    if not tokens:
        return []
    if len(tokens) == 1 and tokens[0] in flags() and not tokens[0].startswith("-"):
        return [(tokens[0], None)]
    if not tokens[0].startswith("--"):
        return []
    out = []
    for i, tok in enumerate(tokens):
        if not tok.startswith("--"):
            continue
        name, eq, val = tok.partition("=")
        nxt = val if eq else (tokens[i + 1] if i + 1 < len(tokens) and not tokens[i + 1].startswith("--") else None)
        if name not in flags():
            out.append((name, None))
            continue
        flag = next(iter(flags()[name].values()))
        out.append((name, nxt if nxt is not None and is_value(nxt, flag) else None))
    return out


# ---------------------------------------------------------------- reading default claims


@dataclass
class Claim:
    where: str
    flag: str
    value: str
    negated: bool = False  # `--distill topk_select` | off: the default is not this value
    command: str | None = None  # the subcommand the text names, when it names one

    def owners(self) -> list[Flag]:
        """The flags the claim is about: the subcommand's the text names, else serve's, else every subcommand's."""
        found = flags().get(self.flag, {})
        if self.command in found:
            return [found[self.command]]
        return [found["serve"]] if "serve" in found else list(found.values())

    def problem(self) -> str | None:
        wrong = [f for f in self.owners() if holds(self.value, f) == self.negated]
        if not wrong:
            return None
        f = wrong[0]
        said = f"not {self.value}" if self.negated else self.value
        return (f"{self.where}: says {self.flag} defaults to {said}, but `openclaw-rl {f.command} {f.name}` "
                f"defaults to {f.default!r} (help: {f.help!r})")


FLAG_SPAN = r"`(?P<span>[^`]+)`\**"
VALUE = r"(?P<value>`[^`]+`|\d[\d,]*\d(?:\.\d+)?(?:e-?\d+)?(?:\s*min\b)?|[^\s,;)`]+(?:\s+min\b)?)"
CHOICE_SPAN = r"`(?P<value>[^`\s]+)`"
# the phrasings a default is stated in (each names its flag span, and its value unless the span holds it)
CLAIM_PATTERNS = {
    # `--prefix-cache-tokens`, default 32,768 / (`--threads`, default all) / `--judge-votes` votes (default 3 ...)
    # / `--lr 1e-3` (the default is 5e-4)
    "flag, default V": FLAG_SPAN + r"(?:\s+\w+)?\s*[(,:]\s*(?:the\s+)?defaults?(?:\s+is|\s+to|:)?\s+" + VALUE,
    # `--teacher base` (default) / `--group-size 1`, the default / `--memory on` (the default; ... / V` by default
    "flag V (default)": FLAG_SPAN + r"(?:\s*[(,]\s*(?:the\s+)?defaults?(?=\s*[);,:.])|\s+by\s+default\b)",
    # `--unfollowed-hints`: `drop` (default) / `--distill` stays `token` by default
    "flag: V (default)": FLAG_SPAN + r"\s*(?::|\s+stays|\s+is)\s+" + CHOICE_SPAN
                         + r"\s*(?:\(\s*(?:the\s+)?default\b|,\s*the\s+default\b|\s+by\s+default\b)",
    # By default (`--context-overflow trim`) / the default `--method combine`
    "default (flag V)": r"defaults?\s*\(?\s*" + FLAG_SPAN,
    # `--step-weight W` in [0, 1] (0.5 by default / `group_size` (1 by default
    "flag (V by default)": FLAG_SPAN + r"[^()`.;]{0,20}\(\s*" + VALUE + r"\s+by\s+default\b",
    # (`--teacher`, the frozen base by default): the word before "by default"
    "flag, the ... V by default": FLAG_SPAN + r",\s+(?:the\s+)?(?:\w+\s+){0,2}(?P<value>\w+)\s+by\s+default\b",
    # at most `--max-tokens-cap` (1024)
    "flag (N)": FLAG_SPAN + r"\s*\(\s*(?P<value>\d[\d,]*(?:\.\d+)?(?:e-?\d+)?)\s*\)",
}
# `sequence_optimal` (default, as upstream) / `model`, the default: a choice of a flag the sentence names
CHOICE_DEFAULT = CHOICE_SPAN + r"\**\s*(?:\(\s*(?:the\s+)?default\b|,\s*the\s+default\b)"
# "upstream's default", "its defaults", "these defaults": a default that is someone's, not a flag's value
NOT_A_VALUE = re.compile(r"(?:\w+'s|\w+s'|\bits|\btheir|\bthese|\bthose|\bour|\bown)\s+(?:own\s+)?defaults?$",
                         re.IGNORECASE)
VERBS = {"is", "are", "was", "to", "of", "for", "value", "values", "on", "off", "none", "all", "stays", "being"}
SUBCOMMAND = re.compile(r"(?:\bopenclaw-rl\s+|`)(env\s+\w+|experiment\s+\w+|serve|records|memory|export|report|"
                        r"models)\b|\b(env\s+(?:list|play|export|eval|train|demos|sft)|experiment\s+"
                        r"(?:personalization|report))\b")


def named_command(text: str) -> str | None:
    """The subcommand a text names first (``openclaw-rl export``, ``env train``, a `serve ...` span), if any."""
    m = SUBCOMMAND.search(text)
    return re.sub(r"\s+", " ", m.group(1) or m.group(2)) if m else None


def sentences(text: str) -> Iterator[tuple[int, str]]:
    """(offset, text) of the sentences and clauses of a block (cut at '. ', ';', ': ')."""
    start = 0
    for m in re.finditer(r"\.\s+(?=[A-Z(`*])|;\s|:\s", text):
        yield start, text[start:m.end()]
        start = m.end()
    yield start, text[start:]


def prose_claims(block: Block) -> tuple[list[Claim], list[str]]:
    """The default claims of a block, and its sentences that state a flag's default in a way nothing reads."""
    claims: list[Claim] = []
    covered: list[tuple[int, int]] = []  # the stretches of text a claim was read from
    command = named_command(block.context or block.text)

    def claim(start: int, end: int, name: str, value: str) -> None:
        claims.append(Claim(block.where(start), name, value, command=command))
        covered.append((start, end))

    for pattern in CLAIM_PATTERNS.values():
        for m in re.finditer(pattern, block.text):
            word = re.search(r"\bdefaults?\b", m.group(0))
            if word and NOT_A_VALUE.search(block.text[:m.start() + word.end()]):  # upstream's defaults (`--topk 4`)
                covered.append(m.span())
                continue
            value = m.groupdict().get("value")
            for name, val in flag_pairs(m.group("span")):
                if name in flags() and (value or val) is not None:
                    claim(m.start(), m.end(), name, value if value is not None else val)
    unreadable = []
    for at, text in sentences(block.text):
        named = [f for m in SPAN.finditer(text) for f, _ in flag_pairs(m.group(2)) if f in flags()]
        for m in re.finditer(CHOICE_DEFAULT, text):  # `V` (default) of a flag the sentence names
            for name in named:
                if any(m.group("value") in f.choices for f in flags()[name].values()):
                    claim(at + m.start(), at + m.end(), name, m.group("value"))
        if not named:
            continue
        bare = SPAN.sub(lambda m: "\0" * len(m.group(0)), text)
        for w in re.finditer(r"\bdefaults?\b", bare, re.IGNORECASE):
            pos = at + w.start()
            before, after = bare[:w.end()], bare[w.end():]
            nxt = re.match(r"\s*([A-Za-z]+)", after)
            own_name = re.search(r"([A-Za-z]+)\s+defaults?$", before)
            if (any(a <= pos < b for a, b in covered) or NOT_A_VALUE.search(before)
                    or (own_name and f"--{own_name.group(1).lower()}-{w.group(0).lower()}" in named)
                    or (nxt and nxt.group(1).lower() not in VERBS and not after.startswith(":"))):
                continue
            unreadable.append(f"{block.where(pos)}: states a default in a way no pattern reads: "
                              f"{text.strip()[:200]!r}")
    return claims, unreadable


def table_claims(path: Path) -> tuple[list[Claim], list[str]]:
    """Claims of tables with a ``default`` column: the first column's flags paired in order with the default
    cell's values (``--host`` / ``--port`` | ``127.0.0.1`` / ``30000``; split at ``/`` or ``,`` outside brackets).
    A flag given with a value (``--distill topk_select``) and ``on`` / ``off`` says whether that value is the
    default."""
    claims, unreadable = [], []
    for header, rows in tables(path):
        cols = [i for i, h in enumerate(header) if h.strip().lower() == "default"]
        if not cols:
            continue
        for n, cells in rows:
            where = f"{rel(path)}:{n}"
            pairs = [p for m in SPAN.finditer(cells[0]) for p in flag_pairs(m.group(2)) if p[0] in flags()]
            pairs = [p for p in pairs if not (p[0].startswith("--no-") and ("--" + p[0][5:], None) in pairs)]
            cell = cells[cols[0]] if cols[0] < len(cells) else ""
            if not pairs or not cell:
                continue
            for sep in (" / ", ", "):
                values = split_top(cell, sep)
                if len(values) == len(pairs):
                    break
            else:
                unreadable.append(f"{where}: {len(pairs)} flags ({', '.join(p[0] for p in pairs)}) but the default "
                                  f"cell {cell!r} is not as many values split at ' / ' or ', '")
                continue
            command = named_command(" ".join(cells[1:]))
            for (name, val), said in zip(pairs, values):
                # a code span, a number, or the words before a parenthesis: `token` (...) / 0: the kind's own / none
                first = re.match(r"\s*(`[^`]+`|\d[\d,.e-]*(?:\s*min\b)?|[^(;,]+)", said)
                word = (first.group(1) if first else said).strip()
                if val is not None and word.strip("`").lower() in ON | OFF:
                    claims.append(Claim(where, name, val, negated=word.strip("`").lower() in OFF, command=command))
                else:
                    claims.append(Claim(where, name, word, command=command))
    return claims, unreadable


def yaml_claims(path: Path) -> list[Claim]:
    """``key: value  # ... default ...`` lines of YAML samples whose key is a ``serve`` setting."""
    claims = []
    for start, info, text in fenced_blocks(path):
        if info in ("yaml", "yml"):
            for i, line in enumerate(text.splitlines()):
                m = re.match(r"\s*#?\s*(\w+):\s*['\"]?([^'\"#\s]+)['\"]?\s*#.*\bdefault\b", line)
                if m and "serve" in flags().get(m.group(1), {}):
                    claims.append(Claim(f"{rel(path)}:{start + i}", m.group(1), m.group(2)))
    return claims


def all_claims() -> tuple[list[Claim], list[str]]:
    claims, unreadable = [], []
    for path in doc_files():
        c, u = table_claims(path)
        claims += c + yaml_claims(path)
        unreadable += u
        for block in blocks(path):
            c, u = prose_claims(block)
            claims += c
            unreadable += u
    return claims, unreadable


# ---------------------------------------------------------------- flags used with a subcommand


def command_uses(path: Path) -> Iterator[tuple[str, list[str], list[str]]]:
    """(where, subcommands, flags) of each command line a document writes: ``openclaw-rl <cmd> ...`` (alternatives
    as ``env list / play``), ``make serve ARGS="..."``, a setting folder's ``run_local.sh ...`` (serve), and a code
    span that starts with a subcommand (``serve --model``)."""
    texts = [(f"{rel(path)}:{n}", m.group(2)) for n, line in prose_lines(path) for m in SPAN.finditer(line)]
    texts += [(f"{rel(path)}:{start + i}", line) for start, _, body in fenced_blocks(path)
              for i, line in enumerate(re.sub(r"\\\n\s*", " ", body).splitlines())]  # continued lines joined
    top = {name for name in parsers() if name and " " not in name}
    for where, text in texts:
        text = re.sub(r"[\w./-]*\brun_local\.sh\b", lambda m: "openclaw-rl " + script_command(path, m.group(0)), text)
        text = re.sub(r"\bmake serve ARGS=", "openclaw-rl serve ", text)
        if text.split()[:1] and text.split()[0] in top and re.search(r"\s--[a-z]", text):
            text = "openclaw-rl " + text
        for m in re.finditer(r"(?<![\w-])openclaw-rl((?:\s+[^\s&;]+)*)", text):
            tokens = m.group(1).split()
            tokens = tokens[:next((k for k, t in enumerate(tokens) if t in ("|", "||")), len(tokens))]  # a pipe
            current, i = [""], 0
            while i < len(tokens):
                word = tokens[i].strip("[]\"'`")
                nxt = [f"{c} {w}".strip() for c in current for w in word.split("/") if w]  # env play/eval
                nxt = nxt if nxt and all(n in parsers() for n in nxt) else []
                if nxt:
                    current, i = nxt, i + 1
                elif word == "/" and i + 1 < len(tokens) and current[0].count(" "):
                    parent = current[0].rsplit(" ", 1)[0]
                    alt = f"{parent} {tokens[i + 1]}"
                    if alt not in parsers():
                        break
                    current, i = current + [alt], i + 2
                else:
                    break
            used = [re.sub(r"[=\[\]\"'`,)].*$", "", t.lstrip("[\"'`(")) for t in tokens[i:]]
            used = [u for u in used if re.fullmatch(r"--[a-z][\w-]*[a-z0-9]", u)]
            if current != [""] and used:
                yield where, current, used


def script_command(doc: Path, script: str) -> str:
    """The subcommand a launch script passes its extra arguments to, as the script says (``Extra arguments go to
    `openclaw-rl env train```) or runs (``openclaw-rl serve ... "$@"``)."""
    for place in ((doc.parent / script), ROOT / script, *ROOT.glob(f"*/{Path(script).name}")):
        if place.is_file():
            text = place.read_text()
            m = (re.search(r"[Ee]xtra arguments go to `openclaw-rl ([\w ]+?)`", text)
                 or re.search(r"openclaw-rl ([a-z]+(?: [a-z]+)?)\b[^\n]*\"\$@\"", text))
            if m:
                return m.group(1)
    return "?"


HELP_FLAGS = {"-h", "--help"}


def flag_use_problems() -> list[str]:
    problems = []
    for path in doc_files():
        for where, commands, used in command_uses(path):
            for command in commands:
                known = set(parsers()[command]._option_string_actions) | HELP_FLAGS
                problems += [f"{where}: `openclaw-rl {command} {u}`: {command} has no flag {u}" for u in used
                             if u not in known]
    readme = ROOT / "README.md"
    for n, line in prose_lines(readme):  # every flag the README names is some subcommand's
        for m in SPAN.finditer(line):
            for name, _ in flag_pairs(m.group(2)):
                if name.startswith("--") and name not in flags() | dict.fromkeys(HELP_FLAGS):
                    problems.append(f"README.md:{n}: {name} is no subcommand's flag")
    for header, rows in tables(readme):  # the README's flag tables are serve's
        if header and header[0].strip().lower() == "flag":
            for n, cells in rows:
                for m in SPAN.finditer(cells[0]):
                    problems += [f"README.md:{n}: {name} is not a flag of serve" for name, _ in flag_pairs(m.group(2))
                                 if name.startswith("--") and "serve" not in flags().get(name, {})]
    return problems


# ---------------------------------------------------------------- --help


def help_problems(found: dict[str, argparse.ArgumentParser] | None = None) -> list[str]:
    """A trailing ``[...]`` of a flag's help that is not the code's default: for ``serve``, the declared one; else
    the argparse default. A sentinel default (0, "", None, auto) may be shown as what it stands for, in words
    (``[the newest with weights]``), but not as another value (``[8]``). ``found``: {subcommand: parser}."""
    problems = []
    for command, parser in (parsers() if found is None else found).items():
        for a in parser._actions:
            m = re.search(r"\[([^\[\]]+)\]$", a.help or "")
            if not a.option_strings or not m:
                continue
            flag = flags().get(a.option_strings[0], {}).get(command) if command == "serve" else Flag(
                command, a.option_strings[0], a.default, a.help, a.type, tuple(map(str, a.choices or ())))
            shown, rest = m.group(1), a.help[:m.start()]
            if flag is None:
                continue
            if is_sentinel(flag.default):
                ok = holds(shown, flag, rest) or (" " in shown.strip() or not (numbers(shown) or shown in flag.choices))
            else:
                ok = holds(shown, flag, rest)
            if not ok:
                problems.append(f"openclaw-rl {command} --help: {a.option_strings[0]} shows [{shown}], but its "
                                f"default is {flag.default!r}")
    return problems


# ---------------------------------------------------------------- numbers


def gguf_context_length(path: Path) -> int:
    """``<arch>.context_length`` from a GGUF file's header (read up to that key; the tokenizer arrays after it are
    not parsed)."""
    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
    with path.open("rb") as f:
        magic, _version, _tensors, count = struct.unpack("<4sIQQ", f.read(24))
        assert magic == b"GGUF", path

        def string() -> str:
            (n,) = struct.unpack("<Q", f.read(8))
            return f.read(n).decode()

        def skip(kind: int) -> None:
            if kind == 8:
                string()
            elif kind == 9:
                item, n = struct.unpack("<IQ", f.read(12))
                for _ in range(n):
                    skip(item)
            else:
                f.read(sizes[kind])

        for _ in range(count):
            key, (kind,) = string(), struct.unpack("<I", f.read(4))
            if key.endswith(".context_length"):
                return struct.unpack({4: "<I", 5: "<i", 10: "<Q", 11: "<q"}[kind], f.read(sizes[kind]))[0]
            skip(kind)
    raise AssertionError(f"{path}: no context_length")


@functools.cache
def builtin_contexts() -> dict[str, int]:
    """The context length of each built-in model: SmolLM2's from its GGUF, tiny's from its config."""
    from slime_ext.models.builtin import SMOLLM2_GGUF, TINY_CONFIG, smollm2_gguf_dir

    return {"smollm2-135m": gguf_context_length(smollm2_gguf_dir() / SMOLLM2_GGUF),
            "tiny": TINY_CONFIG["max_position_embeddings"]}


MODEL_NAME = re.compile(r"(?P<model>SmolLM2(?:-135M)?(?:-Instruct)?|smollm2-135m|\btiny\b)`?(?:'s)?"
                        r"(?!\s*(?:tokenizer|tokens?)\b)")
CONTEXT_NUMBER = re.compile(r"(?<![\w.])(?P<n>\d[\d,]*k?)(?:-token context|\s+context\b|\s+tokens?\)|\))")


def context_problems() -> tuple[int, list[str]]:
    """The context lengths the documents give the built-in models, against the models'."""
    read, problems = 0, []
    for path in doc_files():
        for block in blocks(path):
            for m in MODEL_NAME.finditer(block.text):
                window = re.split(r"[.;]\s", block.text[m.end():m.end() + 100])[0]
                found = CONTEXT_NUMBER.search(window)
                others = MODEL_NAME.search(window[:found.start()]) if found else None
                if not found or others or re.search(r"\d", window[:found.start()]):
                    continue
                model = "tiny" if m.group("model") == "tiny" else "smollm2-135m"
                read += 1
                if builtin_contexts()[model] not in numbers(found.group("n")):
                    problems.append(f"{block.where(m.start())}: {m.group(0)} with a context of {found.group('n')}, "
                                    f"but {model}'s is {builtin_contexts()[model]}")
    return read, problems


OPENCLAW_MIN_CONTEXT = 16_000  # OpenClaw refuses a model below it: "Model context window too small (... tokens)"


def openclaw_sample_problems() -> list[str]:
    """An OpenClaw provider sample's ``contextWindow`` must be one OpenClaw accepts; where it is larger than the
    default model's context, the document must say, beside ``contextWindow``, what that model has."""
    problems = []
    smollm2 = builtin_contexts()["smollm2-135m"]
    for path in doc_files():
        windows = [(start, int(w)) for start, _, body in fenced_blocks(path)
                   for w in re.findall(r'"contextWindow":\s*(\d+)', body)]
        told = any("contextWindow" in b.context + b.text and smollm2 in [v for t in re.findall(r"\d[\d,]*", b.text)
                                                                         for v in numbers(t)] for b in blocks(path))
        for start, w in windows:
            if w < OPENCLAW_MIN_CONTEXT:
                problems.append(f"{rel(path)}:{start}: contextWindow {w}: OpenClaw refuses a model under "
                                f"{OPENCLAW_MIN_CONTEXT} tokens")
            elif w > smollm2 and not told:
                problems.append(f"{rel(path)}:{start}: contextWindow {w} while the default model has {smollm2} "
                                "tokens, and no text beside `contextWindow` says so")
    return problems


def overflow_problems() -> list[str]:
    """A text that says a long prompt gets a 400 must name ``--context-overflow``: by default it is trimmed."""
    return [f"{b.where(b.text.index('context_length_exceeded'))}: says a prompt past the context gets a 400 without "
            f"naming --context-overflow (the default, trim, cuts it and answers): {b.text[:160]!r}"
            for path in doc_files() for b in blocks(path)
            if "context_length_exceeded" in b.text and "--context-overflow" not in b.context + b.text]


# ---------------------------------------------------------------- the tests


def test_links_resolve_and_anchors_exist():
    problems = [p for path in linked_docs() for p in link_problems(path)]
    assert not problems, "\n".join(problems)


def test_the_slug_rules_are_githubs():
    assert slug("The preference memory (`--memory on`, `chat/memory.py`)") == \
        "the-preference-memory---memory-on-chatmemorypy"
    assert slug("Upstream's recipe (`--distill topk_select`, [x](y.md), opt-in)") == \
        "upstreams-recipe---distill-topk_select-x-opt-in"


def test_stated_defaults_are_the_code_defaults():
    claims, unreadable = all_claims()
    assert len(claims) >= 100, f"only {len(claims)} default claims read: the reader lost its patterns"
    problems = [p for p in (c.problem() for c in claims) if p]
    assert not problems + unreadable, "\n".join(problems + unreadable)


def test_the_reader_catches_a_wrong_default():
    flag = flags()["--lr"]["serve"]
    assert holds("5e-4", flag) and holds("`0.0005`", flag) and not holds("1e-4", flag)
    assert holds("30 min", flags()["--session-idle-timeout-s"]["serve"])
    assert holds("the model's", flags()["--context-length"]["serve"])  # 0: the model's own, as its help says
    assert not holds("8", flags()["--context-length"]["serve"])
    block = Block(ROOT / "README.md", "the step (`--lr`, default 1e-4) and `--batch-size 8` (the default)", [(0, 1)])
    claims, unreadable = prose_claims(block)
    assert [(c.flag, c.value) for c in claims] == [("--lr", "1e-4"), ("--batch-size", "8")]
    assert all(c.problem() for c in claims) and not unreadable
    _, unreadable = prose_claims(Block(ROOT / "README.md", "`--lr` is 1e-4 by default.", [(0, 1)]))
    assert unreadable


def test_help_states_the_code_defaults():
    problems = help_problems()
    assert not problems, "\n".join(problems)
    wrong = argparse.ArgumentParser()
    wrong.add_argument("--steps", type=int, default=8, help="training steps [12]")
    wrong.add_argument("--limit", type=int, help="only the first N tasks [all]")  # None: said in words
    wrong.add_argument("--max-turns", type=int, help="steps per episode [6]")  # None: a value it does not hold
    assert [p.split(":")[1].split()[0] for p in help_problems({"x": wrong})] == ["--steps", "--max-turns"]


def test_flags_used_with_a_subcommand_are_its_flags():
    uses = [u for path in doc_files() for u in command_uses(path)]
    assert len(uses) >= 10
    problems = flag_use_problems()
    assert not problems, "\n".join(problems)


def test_context_lengths_of_the_builtin_models():
    read, problems = context_problems()
    assert read >= 4, read
    problems += openclaw_sample_problems() + overflow_problems()
    assert not problems, "\n".join(problems)


# what each kind of --model value resolve_model accepts (slime_ext/models/__init__.py) is called in a help text
MODEL_KINDS = {"<directory>": "director", "<file.gguf>": ".gguf", "<org/name>": "hub id"}


def test_model_help_names_every_kind_of_model_accepted():
    import slime_ext.models as models

    accepted = re.findall(r"^  (\S+)  ", models.__doc__.split("Accepted values:")[1], re.MULTILINE)
    assert set(accepted) == set(models.BUILTIN_MODELS) | set(MODEL_KINDS), accepted  # a new kind: name its words
    problems = []
    for name, by_command in flags()["--model"].items():
        if name in ("serve",) or "built-in" in by_command.help:  # the help describes the values: all of them
            help = by_command.help
            named = ["built-in" if "built-in" in help else b for b in models.BUILTIN_MODELS if b not in help]
            problems += [f"openclaw-rl {name} --model: the help names no {kind}" for kind, word in MODEL_KINDS.items()
                         if word not in help] + [f"openclaw-rl {name} --model: the help omits {b}" for b in named
                                                 if b != "built-in"]
    assert not problems, "\n".join(problems)


def test_threads_help_says_what_serve_does():
    from slime_ext.config import ServeConfig
    from slime_ext.serve import engine_threads

    help = flags()["--threads"]["serve"].help
    assert engine_threads(ServeConfig(threads=0)) == os.cpu_count() and engine_threads(ServeConfig(threads=3)) == 3
    assert "0: one per core" in help, help  # engine_threads; learning on or off
    assert "idle priority" in help and "--trainer-share" in help, help  # the trainer beside it (engines/cores.py)


def test_the_readme_links_every_instructions_guide():
    linked = {resolve(ROOT / "README.md", t)[0] for _, t in links(ROOT / "README.md") if not EXTERNAL.match(t)}
    missing = [rel(p) for p in sorted((ROOT / "instructions").glob("*.md")) if p.resolve() not in linked]
    assert not missing, f"README.md does not link {', '.join(missing)}"


if __name__ == "__main__":
    claims, unreadable = all_claims()
    for c in claims:
        print(c.where, c.flag, repr(c.value), "(not)" if c.negated else "", c.problem() or "ok")
    print("\n".join(unreadable + [p for path in linked_docs() for p in link_problems(path)] + help_problems()
                    + flag_use_problems() + context_problems()[1] + openclaw_sample_problems() + overflow_problems()))
