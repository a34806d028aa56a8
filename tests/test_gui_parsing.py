"""The GUI setting's pure parts: the accessibility tree as text, its diff, action parsing and the reward rules."""

from __future__ import annotations

import pytest
from gui import Action, check_state, outcome_checks, parse_actions, reward_of

from slime_ext.envs.axtree import NodeIds, find_node, render_tree, tree_diff, tree_text


def ax(node_id, role, name="", children=(), backend=None, ignored=False, value=None, **props):
    """A CDP AXNode as Accessibility.getFullAXTree returns it."""
    node = {"nodeId": str(node_id), "ignored": ignored, "role": {"type": "role", "value": role},
            "childIds": [str(c) for c in children], "backendDOMNodeId": node_id if backend is None else backend,
            "properties": [{"name": k, "value": {"type": "boolean", "value": v}} for k, v in props.items()]}
    if name:
        node["name"] = {"type": "computedString", "value": name}
    if value is not None:
        node["value"] = {"type": "string", "value": value}
    return node


def signup_nodes(plan="Basic", checked=False, name_value=None):
    """The tree Chromium gives a small sign-up form (shape copied from a real getFullAXTree)."""
    return [
        ax(2, "RootWebArea", "Sign up", [7], focusable=True, focused=True, url="http://127.0.0.1:1/e/ab12/index.html"),
        ax(7, "none", "", [9], ignored=True),
        ax(9, "generic", "", [10, 3]),
        ax(10, "heading", "Create your account", [27], level=1),
        ax(27, "StaticText", "Create your account", [-5]),
        ax(-5, "InlineTextBox", "Create your account", backend=None),
        ax(3, "form", "", [11, 5, 13, 25]),
        ax(11, "LabelText", "", [28, 4]),
        ax(28, "StaticText", "Full name ", []),
        ax(4, "textbox", "Full name", [12] if name_value else [], value=name_value or "", focusable=True),
        ax(12, "StaticText", name_value or "", []),
        ax(5, "combobox", "Plan", [15], value=plan, expanded=False),
        ax(15, "MenuListPopup", "", [19, 22]),
        ax(19, "option", "Basic", selected=plan == "Basic"),
        ax(22, "option", "Pro", selected=plan == "Pro"),
        ax(13, "checkbox", "I accept the terms", checked="true" if checked else "false"),
        ax(25, "button", "Create account", [29]),
        ax(29, "StaticText", "Create account", []),
    ]


def test_tree_is_compact_text_with_ids_in_page_order():
    lines = render_tree(signup_nodes(), NodeIds(), base_url="http://127.0.0.1:1/e/ab12/")
    assert tree_text(lines).splitlines() == [
        '[1] page "Sign up" url=/index.html',
        '  [2] heading "Create your account"',
        "  [3] form",
        '    [4] textbox "Full name"',
        '    [5] combobox "Plan" value="Basic" collapsed',
        '      [6] option "Basic" selected',
        '      [7] option "Pro"',
        '    [8] checkbox "I accept the terms" not checked',
        '    [9] button "Create account"',
    ]


def test_ids_are_stable_across_renders_and_new_nodes_get_new_ids():
    ids = NodeIds()
    before = render_tree(signup_nodes(), ids)
    extra = signup_nodes(checked=True)
    extra[6]["childIds"].append("40")
    extra.append(ax(40, "StaticText", "Please accept the terms."))
    after = render_tree(extra, ids)
    assert [line.id for line in after[:-1]] == [line.id for line in before]  # the same nodes, the same ids
    assert after[7].text.startswith('checkbox "I accept the terms" checked')
    assert after[-1].text == 'text "Please accept the terms."' and after[-1].id == 10
    assert ids.backend_of(after[-1].id) == 40 and ids.backend_of(99) is None


def test_value_text_and_label_text_are_not_repeated():
    lines = render_tree(signup_nodes(name_value="Ada Lovelace"), NodeIds())
    texts = [line.text for line in lines]
    assert 'textbox "Full name" value="Ada Lovelace"' in texts
    assert not any(t.startswith("text ") for t in texts)  # neither the label's nor the value's text node


def test_long_and_quoted_names_are_escaped_and_cut():
    nodes = [ax(1, "RootWebArea", "T", [2, 3]), ax(2, "link", 'say "hi"\nnow'), ax(3, "text", "x" * 300)]
    lines = render_tree(nodes, NodeIds())
    assert lines[1].text == 'link "say \\"hi\\" now"'
    assert len(lines[2].text) < 120 and lines[2].text.endswith('..."')


def test_diff_lists_added_changed_and_removed_nodes():
    ids = NodeIds()
    before = render_tree(signup_nodes(), ids)
    after = render_tree(signup_nodes(plan="Pro", checked=True), ids)
    assert tree_diff(before, after) == [
        '~ [5] combobox "Plan" value="Pro" collapsed (was: combobox "Plan" value="Basic" collapsed)',
        '~ [6] option "Basic" (was: option "Basic" selected)',
        '~ [7] option "Pro" selected (was: option "Pro")',
        '~ [8] checkbox "I accept the terms" checked (was: checkbox "I accept the terms" not checked)',
    ]
    assert tree_diff(before, before) == []
    gone = tree_diff(before, before[:2])
    assert gone[0] == "- [3] form" and len(gone) == len(before) - 2
    assert tree_diff(before, before[:1], max_lines=3)[-1] == f"... and {len(before) - 1 - 3} more changes"


def test_tree_text_says_how_many_lines_it_left_out():
    lines = render_tree(signup_nodes(), NodeIds())
    text = tree_text(lines, max_lines=3)
    assert text.splitlines()[-1] == f"[... {len(lines) - 3} more nodes not shown]"


def test_find_node_by_role_and_exact_name():
    lines = render_tree(signup_nodes(), NodeIds())
    assert find_node(lines, "button", "Create account") == 9
    assert find_node(lines, "combobox", "plan") == 5  # case-insensitive
    assert find_node(lines, "button", "Create") is None  # a prefix is not the name
    assert find_node(lines, "textbox", "Plan") is None


@pytest.mark.parametrize("message, expected", [
    ("click [12]", [Action("click", 12)]),
    ("I will submit.\nclick 12\n", [Action("click", 12)]),
    ('type [4] "Ada \\"the\\" Lovelace"', [Action("type", 4, 'Ada "the" Lovelace')]),
    ("type [4] plain words here", [Action("type", 4, "plain words here")]),
    ("SELECT [5] 'Pro'", [Action("select", 5, "Pro")]),
    ("```\ntype [4] \"Ada\"\nclick [9]\n```", [Action("type", 4, "Ada"), Action("click", 9)]),
    ("- press Enter\n2. scroll Down", [Action("press", text="Enter"), Action("scroll", text="down")]),
    ("Action: done", [Action("done")]),
    ("infeasible: there is no such plan", [Action("infeasible")]),
    ("Let me click the button and type my name.", []),
    ("click the Save button", []),
    ("", []),
])
def test_parse_actions(message, expected):
    assert parse_actions(message) == expected


def test_checks_compare_recorded_state_exactly():
    checks = [["account made", "account", {"name": "Ada", "plan": "Pro"}], ["no order", "order", None]]
    got = check_state({"account": {"name": "Ada", "plan": "Pro"}}, checks)
    assert [c.passed for c in got] == [True, True]
    got = check_state({"account": {"name": "Ada", "plan": "Basic"}, "order": 1}, checks)
    assert [c.passed for c in got] == [False, False]
    assert '"Basic"' in got[0].detail and '"Pro"' in got[0].detail


@pytest.mark.parametrize("feasible, passed, ending, reward", [
    (True, [True, True], "done", 1.0),
    (True, [True, True], None, 1 / 3),       # cut short with the work done: never the top reward
    (True, [True, False], "done", 1 / 3),
    (True, [False, False], "done", -1 / 3),
    (True, [True, True], "infeasible", -1.0),  # giving up on a feasible task
    (False, [True], "infeasible", 1.0),
    (False, [True], None, -1.0),             # truncated on an infeasible task: never +1 (the original's bug)
    (False, [True], "done", -1.0),
    (False, [False], "infeasible", -1.0),    # declared infeasible after changing something
])
def test_reward_rules(feasible, passed, ending, reward):
    from slime_ext.envs.checks import CheckResult

    checks = outcome_checks([CheckResult(f"c{i}", p, "") for i, p in enumerate(passed)], feasible, ending)
    assert reward_of(checks, feasible, ending) == pytest.approx(reward)
