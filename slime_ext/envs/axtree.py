"""The accessibility tree as compact text with stable node ids, and the change between two trees (pure).

``render_tree(nodes, ids)`` turns CDP's ``Accessibility.getFullAXTree`` nodes into ``TreeLine``s, one per
node worth showing, indented by depth:

    [1] page "Sign up" url=/signup.html
      [2] heading "Create your account"
      [3] textbox "Email" value="ada@example.org" focused
      [4] combobox "Plan" value="Basic"
        [5] option "Basic" selected
        [6] option "Pro"
      [7] checkbox "I accept the terms" not checked
      [8] button "Create account"
      [9] text "Fields marked * are required"

- Ignored nodes, and nodes of a purely structural role (generic, none, LabelText, list markers, the popup
  of a drop-down list...) without a name, are not shown; their children take their place.
- Text is shown once: a text node whose content is already part of its parent's name is left out.
- Ids are ``NodeIds``: a small number per DOM node (its ``backendDOMNodeId``), given in order of first
  appearance and kept for the whole episode, so ``[8]`` names the same button before and after an action
  and a diff can match nodes by id. Nodes without a DOM node (none are shown today) get no id.

``tree_diff(before, after)`` lists what an action changed: ``+`` added lines, ``-`` removed ones and ``~``
changed ones (same id, new text), in page order, cut to a maximum with a count of the rest.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable

MAX_NAME_CHARS = 100
# roles that only structure the page: shown only when they have a name of their own
STRUCTURAL = {"generic", "none", "LabelText", "ListMarker", "MenuListPopup", "group", "Section", "paragraph",
              "div", "presentation", "Pre", "LineBreak", "Abbr", "Ruby", "time", "emphasis", "strong",
              "mark", "subscript", "superscript", "insertion", "deletion", "code", "contentinfo", "banner",
              "blockquote", "Canvas", "FigureCaption", "figure", "DescriptionListDetail", "DescriptionListTerm"}
DROPPED = {"InlineTextBox"}  # with their children
RENAMED = {"RootWebArea": "page", "StaticText": "text", "WebArea": "page"}
# boolean-ish properties worth a word: property -> (word when true, word when false or None for nothing)
STATES = {"focused": ("focused", None), "disabled": ("disabled", None), "required": ("required", None),
          "readonly": ("readonly", None), "selected": ("selected", None), "invalid": ("invalid", None),
          "expanded": ("expanded", "collapsed")}
CHECKED = {"true": "checked", "false": "not checked", "mixed": "partly checked"}
TOGGLES = {"checkbox", "radio", "switch", "menuitemcheckbox", "menuitemradio"}


@dataclasses.dataclass(frozen=True)
class TreeLine:
    """One shown node: its episode-stable id, its depth, and its text without id or indent."""

    id: int
    depth: int
    text: str

    def render(self) -> str:
        return f"{'  ' * self.depth}[{self.id}] {self.text}"


class NodeIds:
    """Stable small ids for DOM nodes: the first node seen gets 1, the next 2, ...; a node keeps its id."""

    def __init__(self) -> None:
        self._ids: dict[int, int] = {}
        self._backend: dict[int, int] = {}

    def id_of(self, backend_id: int) -> int:
        if backend_id not in self._ids:
            self._ids[backend_id] = len(self._ids) + 1
            self._backend[self._ids[backend_id]] = backend_id
        return self._ids[backend_id]

    def backend_of(self, node_id: int) -> int | None:
        """The DOM node behind a shown id, or None for an id never shown."""
        return self._backend.get(node_id)


def _value(field: dict | None) -> str:
    if not field:
        return ""
    v = field.get("value")
    return "" if v is None else str(v)


def _quote(text: str) -> str:
    text = " ".join(text.split())
    if len(text) > MAX_NAME_CHARS:
        text = text[:MAX_NAME_CHARS - 3] + "..."
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _props(node: dict) -> dict[str, str]:
    return {p["name"]: _value(p.get("value")) for p in node.get("properties", [])}


def describe(node: dict, base_url: str = "") -> str:
    """One node's text: role, quoted name, value, states (see the module docstring). A page's url is shown
    relative to `base_url` when it starts with it, else without its scheme and host."""
    raw_role = _value(node.get("role"))
    role = RENAMED.get(raw_role, raw_role)
    name = _value(node.get("name"))
    parts = [role]
    if name:
        parts.append(_quote(name))
    props = _props(node)
    value = _value(node.get("value"))
    if value and value != name:
        parts.append(f"value={_quote(value)}")
    if raw_role in ("RootWebArea", "WebArea") and props.get("url"):
        url = props["url"]
        url = "/" + url[len(base_url):].lstrip("/") if base_url and url.startswith(base_url) else \
            (re.sub(r"^[a-z]+://[^/]*", "", url) or "/")
        parts.append(f"url={url}")
    if role in TOGGLES or "checked" in props:
        word = CHECKED.get(props.get("checked", "false"))
        if word:
            parts.append(word)
    if role == "option" and props.get("selected") == "false":
        props.pop("selected")
    for prop, (yes, no) in STATES.items():
        if prop not in props or (prop == "focused" and raw_role in ("RootWebArea", "WebArea")):
            continue
        word = yes if props[prop] in ("true", "True") else no
        if word:
            parts.append(word)
    return " ".join(parts)


def render_tree(nodes: list[dict], ids: NodeIds, base_url: str = "") -> list[TreeLine]:
    """The shown lines of a CDP AX tree (root first in `nodes`), depth-first in page order; page urls are
    shown relative to `base_url`."""
    if not nodes:
        return []
    by_id = {n["nodeId"]: n for n in nodes}
    lines: list[TreeLine] = []

    def squeeze(text: str) -> str:
        return " ".join(text.split())

    def visit(node: dict, depth: int, said: str) -> None:
        """`said`: the text the shown ancestor and the siblings already show (names and values)."""
        role = _value(node.get("role"))
        if role in DROPPED:
            return
        name = _value(node.get("name"))
        shown = not node.get("ignored") and not (role in STRUCTURAL and not name)
        if role == "StaticText" and (not name.strip() or squeeze(name) in said):
            shown = False
        if shown and node.get("backendDOMNodeId") is not None:
            lines.append(TreeLine(ids.id_of(node["backendDOMNodeId"]), depth, describe(node, base_url)))
            depth, said = depth + 1, squeeze(f"{name}\n{_value(node.get('value'))}")
        children = [by_id[c] for c in node.get("childIds", []) if c in by_id]
        # a label's text next to the control it names (LabelText > text + textbox) is said by the control
        siblings = "\n".join(squeeze(_value(c.get("name"))) for c in children
                             if _value(c.get("role")) != "StaticText" and not c.get("ignored"))
        for child in children:
            visit(child, depth, f"{said}\n{siblings}")

    visit(nodes[0], 0, "")
    return lines


def tree_text(lines: Iterable[TreeLine], max_lines: int | None = None) -> str:
    """The tree as the agent sees it; past `max_lines`, a note of how many lines were left out."""
    lines = list(lines)
    shown = lines if max_lines is None else lines[:max_lines]
    out = "\n".join(line.render() for line in shown)
    if len(shown) < len(lines):
        out += f"\n[... {len(lines) - len(shown)} more nodes not shown]"
    return out


def tree_diff(before: list[TreeLine], after: list[TreeLine], max_lines: int = 30) -> list[str]:
    """What changed from `before` to `after`: ``+ [id] text`` added, ``~ [id] text (was: old)`` changed,
    then ``- [id] text`` removed; at most `max_lines` lines, then ``... and N more changes``."""
    old = {line.id: line.text for line in before}
    new_ids = {line.id for line in after}
    changes = []
    for line in after:
        if line.id not in old:
            changes.append(f"+ [{line.id}] {line.text}")
        elif old[line.id] != line.text:
            changes.append(f"~ [{line.id}] {line.text} (was: {old[line.id]})")
    changes += [f"- [{line.id}] {line.text}" for line in before if line.id not in new_ids]
    if len(changes) > max_lines:
        changes = changes[:max_lines] + [f"... and {len(changes) - max_lines} more changes"]
    return changes


def find_node(lines: Iterable[TreeLine], role: str, name: str) -> int | None:
    """The id of the first shown node with this role (as shown: "page", "text", ...) whose name is `name`
    (case-insensitive, spaces squeezed), or None."""
    want = _quote(name).lower()
    for line in lines:
        head, _, rest = line.text.partition(" ")
        if head == role and (rest.lower() == want or rest.lower().startswith(want + " ")):
            return line.id
    return None
