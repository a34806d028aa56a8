"""The SWE setting's action format: one command per message, SEARCH/REPLACE edits, diffs, paths (pure: no I/O).

A command is the first fenced code block of a message whose first line starts with a command word
(``COMMANDS``); the rest of that line is its argument and only ``edit`` uses the block's later lines:

- ``cat PATH``: the file with line numbers; ``ls [PATH]``: files under PATH (default: the whole repository);
  ``grep PATTERN``: lines matching a Python regular expression in every file, as ``path:line: text``;
- ``edit PATH`` followed by one or more ``<<<<<<< SEARCH`` / ``=======`` / ``>>>>>>> REPLACE`` blocks: each
  SEARCH text must match whole lines of the file exactly once (after the earlier blocks were applied), or
  nothing is written and the observation says why (``EditError``). Only existing files can be edited;
- ``test``: runs the suite; ``diff``: unified diff against the start of the episode; ``submit``: ends it.

Invariants: ``parse_command`` never raises (a message without a command yields ``None`` and the error
observation); ``apply_edit`` either applies every block or raises ``EditError`` and changes nothing;
``normalize_path`` never returns a path that leaves the workspace root.
"""

from __future__ import annotations

import dataclasses
import difflib
import posixpath
import re

COMMANDS = ("cat", "ls", "grep", "edit", "test", "diff", "submit")
FORMAT_HELP = ("No command found in your message. Reply with exactly one command in a fenced code block, e.g.\n"
               "```\ncat PATH\n```\nCommands: cat PATH, ls [PATH], grep PATTERN, edit PATH (with SEARCH/REPLACE "
               "blocks), test, diff, submit.")
EDIT_FORMAT = ("edit PATH\n<<<<<<< SEARCH\nexact lines to find (whole lines, once in the file)\n=======\n"
               "the lines to put in their place\n>>>>>>> REPLACE")
_FENCE_OPEN = re.compile(r"^[ \t]{0,3}```[ \t]*([\w+.-]*)[ \t]*$")
_FENCE_CLOSE = re.compile(r"^[ \t]{0,3}```[ \t]*$")
_SEARCH, _DIVIDER, _REPLACE = (re.compile(p) for p in (r"^<{5,9} ?SEARCH\s*$", r"^={5,9}\s*$",
                                                        r"^>{5,9} ?REPLACE\s*$"))


@dataclasses.dataclass(frozen=True)
class Command:
    """name: one of COMMANDS; arg: the rest of the command's line; body: the block's later lines (edit's blocks)."""

    name: str
    arg: str
    body: str


def parse_command(text: str) -> tuple[Command | None, str]:
    """(the first fenced block whose first line starts with a command word, a note or error). With no command the
    second item is the error observation."""
    lines = text.splitlines()
    blocks: list[list[str]] = []
    i = 0
    while i < len(lines):
        if not _FENCE_OPEN.match(lines[i]):
            i += 1
            continue
        j = i + 1
        while j < len(lines) and not _FENCE_CLOSE.match(lines[j]):
            j += 1
        blocks.append(lines[i + 1:j])
        i = j + 1
    for n, block in enumerate(blocks):
        body = list(block)
        while body and not body[0].strip():
            body.pop(0)
        words = body[0].split(None, 1) if body else []
        if words and words[0] in COMMANDS:
            rest = "\n".join(body[1:])
            note = ""
            if len(blocks) > 1:
                note = f"note: your message had {len(blocks)} code blocks; only block {n + 1} was used."
            if words[0] != "edit" and rest.strip():
                note = (note + "\n" if note else "") + f"note: only the first line of the block was used ({words[0]})."
            return Command(words[0], words[1].strip() if len(words) > 1 else "", rest), note
    if blocks:
        return None, (f"No known command in your code block. The first line of the block must be one of: "
                      f"{', '.join(COMMANDS)}.\n{FORMAT_HELP}")
    return None, FORMAT_HELP


class EditError(ValueError):
    """An edit that cannot be applied; the message is the observation."""


def parse_edit_blocks(body: str) -> list[tuple[str, str]]:
    """The (search, replace) pairs of an edit's body; EditError for a malformed body."""
    pairs: list[tuple[str, str]] = []
    state, search, replace = "outside", [], []
    for line in body.split("\n"):
        if state == "outside":
            if _SEARCH.match(line):
                state, search, replace = "search", [], []
            elif line.strip():
                raise EditError(f"edit: unexpected line {line!r} outside a SEARCH/REPLACE block. Format:\n{EDIT_FORMAT}")
        elif state == "search":
            if _DIVIDER.match(line):
                state = "replace"
            else:
                search.append(line)
        elif _REPLACE.match(line):
            if not search:
                raise EditError("edit: a SEARCH part is empty; it must hold the exact lines to replace.")
            pairs.append(("\n".join(search), "\n".join(replace)))
            state = "outside"
        else:
            replace.append(line)
    if state != "outside":
        missing = "=======" if state == "search" else ">>>>>>> REPLACE"
        raise EditError(f"edit: a block is not closed (no {missing!r} line). Format:\n{EDIT_FORMAT}")
    if not pairs:
        raise EditError(f"edit: no SEARCH/REPLACE block found. Format:\n{EDIT_FORMAT}")
    return pairs


def apply_edit(text: str, pairs: list[tuple[str, str]], path: str = "the file") -> tuple[str, list[str]]:
    """`text` with each (search, replace) applied in turn to whole lines; (new text, one summary per block).
    EditError when a SEARCH text does not match exactly once."""
    lines = text.split("\n")
    summary = []
    for n, (search, replace) in enumerate(pairs, 1):
        want = search.split("\n")
        hits = [i for i in range(len(lines) - len(want) + 1) if lines[i:i + len(want)] == want]
        if len(hits) != 1:
            if hits:
                raise EditError(f"edit: the SEARCH text of block {n} occurs {len(hits)} times in {path} (lines "
                                f"{', '.join(str(h + 1) for h in hits)}); include more lines to make it unique. "
                                f"Nothing was changed.")
            loose = [i for i in range(len(lines) - len(want) + 1)
                     if [x.strip() for x in lines[i:i + len(want)]] == [x.strip() for x in want]]
            hint = (f" Ignoring indentation it matches at line {loose[0] + 1}: copy the whitespace exactly."
                    if loose else f" Use `cat {path}` to see the current text.")
            raise EditError(f"edit: the SEARCH text of block {n} was not found in {path} (it must match whole "
                            f"lines exactly).{hint} Nothing was changed.")
        i = hits[0]
        new = replace.split("\n") if replace else []
        lines[i:i + len(want)] = new
        summary.append(f"block {n}: lines {i + 1}-{i + len(want)} replaced by {len(new)} line(s)")
    return "\n".join(lines), summary


def unified_diff(before: dict[str, str], after: dict[str, str | None]) -> str:
    """Unified diff of the files of `before` against `after` (None: the file is gone); "" when nothing changed."""
    chunks = []
    for path in sorted(before):
        new = after.get(path)
        chunks += difflib.unified_diff(before[path].splitlines(keepends=True),
                                       (new or "").splitlines(keepends=True),
                                       f"a/{path}", f"b/{path}" if new is not None else "/dev/null")
    return "".join(c if c.endswith("\n") else c + "\n\\ No newline at end of file\n" for c in chunks)


def normalize_path(arg: str) -> str:
    """A workspace-relative path from the agent's PATH ("" for the root); ValueError if it leaves the workspace."""
    arg = arg.strip().strip("'\"")
    for prefix in ("/workspace/", "./"):
        if arg.startswith(prefix):
            arg = arg[len(prefix):]
    if arg in ("", ".", "/workspace"):
        return ""
    path = posixpath.normpath(arg)
    if path.startswith("/") or path == ".." or path.startswith("../"):
        raise ValueError(f"{arg!r} is outside the repository; paths are relative to its root")
    return path

