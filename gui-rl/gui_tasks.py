"""The GUI tasks: small web sites (forms, menus, search and filter, multi-step flows, infeasible requests).

Each task is an ``EnvTask`` of setting ``gui`` whose ``data`` holds:

- ``pages``: path -> HTML of the task's site (every page has a ``<head>``; scripts call ``record(key, value)``
  to note what the user did: see gui_server.py). ``start``: the first page's path.
- ``checks``: ``[description, key, expected]``: the check passes when the recorded ``state[key] == expected``
  (``expected`` None means "never recorded", e.g. no order placed).
- ``feasible``: False for a request the site cannot satisfy; the right ending is ``infeasible``.
- ``solution``: a scripted solution, one action per message, naming nodes by role and name instead of id:
  ``["click", role, name]``, ``["type", role, name, text]``, ``["select", role, name, option]``,
  ``["press", key]``, ``["scroll", "down"]``, ``["done"]`` or ``["infeasible"]``. ``solution_messages``
  turns it into the messages a model would send, resolving names against the page as it is at each step.
- ``category``: forms, menus, search, flow, scroll or infeasible (a family's infeasible variants).

Families: signup and support forms; a document's "Actions" menu button and an editor's menubar with nested
submenus; a shop with search and filters; a checkout wizard and a table booking across pages; an inbox that
loads more messages as it is scrolled.

Tasks come in families (one page template, several variants with other data and goals); the split is fixed
per variant in the family's table, so held-out tasks are other variants of the same kinds of pages, never
the same task, and train and held-out ids are disjoint (tests check both).
"""

from __future__ import annotations

import functools
import html
import json
from collections.abc import Iterator

from slime_ext.envs.axtree import TreeLine, find_node
from slime_ext.envs.base import EnvTask

SETTING = "gui"


def page(title: str, body: str, script: str = "") -> str:
    """A complete HTML page with `title`, `body` and an optional inline `script` at the end of the body."""
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            "<style>body{font-family:sans-serif;margin:2em;max-width:40em} label{display:block;margin:.5em 0}"
            " .hidden{display:none}</style></head>"
            f"<body>{body}<script>{script}</script></body></html>")


def gui_task(task_id: str, split: str, category: str, instruction: str, pages: dict[str, str],
             checks: list[list], solution: list[list], start: str = "index.html", feasible: bool = True) -> EnvTask:
    if start not in pages:
        raise ValueError(f"task {task_id}: start page {start!r} is not one of its pages")
    if not solution or solution[-1][0] != ("done" if feasible else "infeasible"):
        raise ValueError(f"task {task_id}: its solution must end with {'done' if feasible else 'infeasible'}")
    return EnvTask(task_id, SETTING, split, instruction,
                   {"category": category, "pages": pages, "start": start, "checks": checks,
                    "feasible": feasible, "solution": solution})


def solution_messages(task: EnvTask, lines_now) -> Iterator[str]:
    """The scripted solution of `task` as model messages. `lines_now()` returns the page's current tree
    lines; names are resolved against it just before each message (a name that is not on the page is a
    ValueError naming it)."""
    for step in task.data["solution"]:
        verb, *rest = step
        if verb in ("click", "type", "select"):
            role, name, *arg = rest
            lines: list[TreeLine] = lines_now()
            node = find_node(lines, role, name)
            if node is None:
                shown = "\n".join(line.render() for line in lines)
                raise ValueError(f"task {task.id}: no {role} {name!r} on the page for step {step}; the page:\n{shown}")
            yield f"{verb} [{node}]" + (f" {json.dumps(arg[0])}" if arg else "")
        else:
            yield " ".join([verb, *rest])


def _variant(task_id: str, split: str, category: str, instruction: str, pages: dict[str, str], checks: list[list],
             solution: list[list], start: str = "index.html") -> EnvTask:
    """A task of a family: an infeasible one (its solution ends with ``infeasible``) is of category infeasible."""
    feasible = solution[-1][0] != "infeasible"
    return gui_task(task_id, split, category if feasible else "infeasible", instruction, pages, checks, solution,
                    start=start, feasible=feasible)


# ----------------------------------------------------------------------------- forms
PLANS = ("Basic", "Pro", "Team")
_SIGNUP = """
<h1>Create your account</h1>
<form id="f">
  <label>Full name <input name="name" autocomplete="off"></label>
  <label>Email <input name="email" type="email" autocomplete="off"></label>
  <label>Plan <select name="plan">{options}</select></label>
  <label><input type="checkbox" name="terms"> I accept the terms</label>
  <button type="submit">Create account</button>
</form>
<p id="msg" role="status"></p>"""
_SIGNUP_JS = """
document.getElementById('f').addEventListener('submit', e => {
  e.preventDefault();
  const f = e.target;
  if (!f.terms.checked) { document.getElementById('msg').textContent = 'Please accept the terms.'; return; }
  record('account', {name: f.name.value.trim(), email: f.email.value.trim(), plan: f.plan.value});
  f.classList.add('hidden');
  document.getElementById('msg').textContent = 'Welcome, ' + f.name.value.trim() + '! Your account is ready.';
});"""


def _signup(task_id: str, split: str, name: str, email: str, plan: str) -> EnvTask:
    options = "".join(f"<option>{p}</option>" for p in PLANS)
    pages = {"index.html": page("Sign up", _SIGNUP.format(options=options), _SIGNUP_JS)}
    if plan not in PLANS:
        return gui_task(task_id, split, "infeasible",
                        f"Sign up as {name} ({email}) on the {plan} plan.", pages,
                        [["no account was created", "account", None]],
                        [["type", "textbox", "Full name", name], ["infeasible", f"there is no {plan} plan"]],
                        feasible=False)
    return gui_task(
        task_id, split, "forms", f"Sign up as {name} with the email {email} on the {plan} plan.", pages,
        [["an account was created for the right person",
          "account", {"name": name, "email": email, "plan": plan}]],
        [["type", "textbox", "Full name", name], ["type", "textbox", "Email", email],
         ["select", "combobox", "Plan", plan], ["click", "checkbox", "I accept the terms"],
         ["click", "button", "Create account"], ["done"]])


_SUPPORT = """
<h1>Contact support</h1>
<form id="f">
  <label>Your email <input name="email" type="email" autocomplete="off"></label>
  <fieldset aria-label="Topic">
    <label><input type="radio" name="topic" value="Billing"> Billing</label>
    <label><input type="radio" name="topic" value="Technical problem"> Technical problem</label>
    <label><input type="radio" name="topic" value="Account"> Account</label>
    <label><input type="radio" name="topic" value="Other"> Other</label>
  </fieldset>
  <label>Message <textarea name="message" rows="4"></textarea></label>
  <label><input type="checkbox" name="urgent"> This is urgent</label>
  <button type="submit">Send message</button>
</form>
<p id="msg" role="status"></p>"""
_SUPPORT_JS = """
document.getElementById('f').addEventListener('submit', e => {
  e.preventDefault();
  const f = e.target, msg = document.getElementById('msg');
  if (!f.email.value.trim() || !f.topic.value) { msg.textContent = 'Please give your email and a topic.'; return; }
  record('ticket_email', f.email.value.trim()); record('ticket_topic', f.topic.value);
  record('ticket_message', f.message.value.trim()); record('ticket_urgent', f.urgent.checked);
  f.classList.add('hidden');
  msg.textContent = 'Thanks! We received your message about ' + f.topic.value + '.';
});"""


def _support(task_id: str, split: str, email: str, topic: str, message: str, urgent: bool) -> EnvTask:
    """A support form with radio buttons, a textarea and a checkbox; each field is checked on its own."""
    pages = {"index.html": page("Contact support", _SUPPORT, _SUPPORT_JS)}
    how = "Mark it as urgent." if urgent else "It is not urgent."
    return _variant(
        task_id, split, "forms",
        f'Send a support message from {email} on the topic "{topic}" saying: "{message}" {how}', pages,
        [["the message came from the right email", "ticket_email", email],
         ["the right topic was chosen", "ticket_topic", topic],
         ["the message text is right", "ticket_message", message],
         ["the urgency is right", "ticket_urgent", urgent]],
        [["type", "textbox", "Your email", email], ["click", "radio", topic], ["type", "textbox", "Message", message],
         *([["click", "checkbox", "This is urgent"]] if urgent else []), ["click", "button", "Send message"], ["done"]])


def _forms() -> list[EnvTask]:
    return [
        _signup("gui-signup-ada", "train", "Ada Lovelace", "ada@example.org", "Pro"),
        _signup("gui-signup-alan", "train", "Alan Turing", "alan@example.org", "Team"),
        _signup("gui-signup-grace", "heldout", "Grace Hopper", "grace@example.org", "Basic"),
        _signup("gui-signup-enterprise", "train", "Edsger Dijkstra", "ed@example.org", "Enterprise"),
        _support("gui-support-refund", "train", "bob@example.org", "Billing",
                 "I was charged twice for order 5521.", True),
        _support("gui-support-login", "train", "mia@example.org", "Technical problem",
                 "The login page shows a blank screen.", False),
        _support("gui-support-address", "heldout", "raj@example.org", "Account",
                 "Please change my address to 4 Oak Road.", False),
    ]


# ----------------------------------------------------------------------------- menus
_DOC = """
<h1 id="title">Project Apollo</h1>
<p>Last edited 2 days ago by you.</p>
<button id="mb" aria-haspopup="menu" aria-expanded="false" aria-controls="m">
  <span aria-hidden="true">&#8942;</span> Actions</button>
<div role="menu" id="m" aria-label="Actions" hidden>
  <div role="menuitem" tabindex="-1" data-panel="rename">Rename</div>
  <div role="menuitem" tabindex="-1" data-panel="share">Share</div>
  <div role="menuitem" tabindex="-1" data-panel="notify">Notification settings</div>
  <div role="menuitem" tabindex="-1" data-panel="export">Export as PDF</div>
</div>
<section id="rename" aria-label="Rename document" hidden>
  <label>New name <input name="title" autocomplete="off"></label> <button data-save="rename">Save name</button>
</section>
<section id="share" aria-label="Share document" hidden>
  <label>Email address <input name="email" type="email" autocomplete="off"></label>
  <label>Permission <select name="permission">
    <option>Viewer</option><option>Commenter</option><option>Editor</option></select></label>
  <button data-save="share">Send invite</button>
</section>
<section id="notify" aria-label="Notification settings" hidden>
  <label><input type="checkbox" name="comments" checked> Email me about comments</label>
  <label><input type="checkbox" name="edits" checked> Email me about edits</label>
  <label><input type="checkbox" name="weekly"> Weekly summary</label>
  <button data-save="notify">Save settings</button>
</section>
<p id="msg" role="status"></p>"""
_DOC_JS = """
const mb = document.getElementById('mb'), menu = document.getElementById('m'), msg = document.getElementById('msg');
const $ = (s) => document.querySelector(s);
mb.addEventListener('click', () => {
  const open = menu.hidden; menu.hidden = !open; mb.setAttribute('aria-expanded', String(open));
});
menu.querySelectorAll('[role=menuitem]').forEach(item => item.addEventListener('click', () => {
  menu.hidden = true; mb.setAttribute('aria-expanded', 'false');
  document.querySelectorAll('section').forEach(s => s.hidden = true);
  if (item.dataset.panel === 'export') { record('exported', true); msg.textContent = 'Exported as PDF.'; return; }
  document.getElementById(item.dataset.panel).hidden = false; msg.textContent = '';
}));
const save = {
  rename() {
    const t = $('[name=title]').value.trim(); record('title', t);
    document.getElementById('title').textContent = t; return 'Renamed.';
  },
  share() {
    const e = $('[name=email]').value.trim(); record('shared_with', e);
    record('permission', $('[name=permission]').value); return 'Invite sent to ' + e + '.';
  },
  notify() {
    for (const k of ['comments', 'edits', 'weekly']) record('notify_' + k, $('[name=' + k + ']').checked);
    return 'Settings saved.';
  },
};
document.querySelectorAll('[data-save]').forEach(b => b.addEventListener('click', () => {
  msg.textContent = save[b.dataset.save](); b.closest('section').hidden = true;
}));"""


def _docmenu(task_id: str, split: str, instruction: str, checks: list[list], solution: list[list]) -> EnvTask:
    """A document page whose "Actions" menu button opens menu items that show a panel to fill and save."""
    return _variant(task_id, split, "menus", instruction, {"index.html": page("Project Apollo", _DOC, _DOC_JS)},
                    [*checks, ["nothing was exported", "exported", None]],
                    [["click", "button", "Actions"], *solution, ["done"]])


_EDITOR = """
<h1>Notes editor</h1>
<div role="menubar" aria-label="Main menu">
  <div role="menuitem" tabindex="0" aria-haspopup="menu" aria-expanded="false" data-open="file">File</div>
  <div role="menuitem" tabindex="-1" aria-haspopup="menu" aria-expanded="false" data-open="view">View</div>
  <div role="menuitem" tabindex="-1" aria-haspopup="menu" aria-expanded="false" data-open="help">Help</div>
</div>
<div role="menu" id="file" aria-label="File" hidden>
  <div role="menuitem" tabindex="-1" data-act="new">New note</div>
  <div role="menuitem" tabindex="-1" data-act="export">Export as PDF</div>
</div>
<div role="menu" id="view" aria-label="View" hidden>
  <div role="menuitem" tabindex="-1" aria-haspopup="menu" aria-expanded="false" data-open="theme">Theme</div>
  <div role="menuitem" tabindex="-1" aria-haspopup="menu" aria-expanded="false" data-open="font">Font size</div>
  <div role="menuitemcheckbox" tabindex="-1" aria-checked="true" data-key="line_numbers">Show line numbers</div>
</div>
<div role="menu" id="theme" aria-label="Theme" hidden>
  <div role="menuitemradio" tabindex="-1" aria-checked="true" data-key="theme">Light</div>
  <div role="menuitemradio" tabindex="-1" aria-checked="false" data-key="theme">Dark</div>
  <div role="menuitemradio" tabindex="-1" aria-checked="false" data-key="theme">High contrast</div>
</div>
<div role="menu" id="font" aria-label="Font size" hidden>
  <div role="menuitemradio" tabindex="-1" aria-checked="false" data-key="font_size">Small</div>
  <div role="menuitemradio" tabindex="-1" aria-checked="true" data-key="font_size">Medium</div>
  <div role="menuitemradio" tabindex="-1" aria-checked="false" data-key="font_size">Large</div>
</div>
<div role="menu" id="help" aria-label="Help" hidden>
  <div role="menuitem" tabindex="-1" data-act="about">About</div>
</div>
<p id="msg" role="status">Theme: Light. Font size: Medium. Line numbers: shown.</p>
<textarea aria-label="Note" rows="4">Buy milk</textarea>"""
_EDITOR_JS = """
const msg = document.getElementById('msg'), parents = {theme: 'view', font: 'view'};
const closeAll = () => { document.querySelectorAll('[role=menu]').forEach(m => m.hidden = true);
  document.querySelectorAll('[aria-expanded]').forEach(i => i.setAttribute('aria-expanded', 'false')); };
const summary = () => {
  const on = (k) => document.querySelector('[data-key=' + k + '][aria-checked=true]');
  msg.textContent = 'Theme: ' + on('theme').textContent + '. Font size: ' + on('font_size').textContent +
    '. Line numbers: ' + (on('line_numbers') ? 'shown' : 'hidden') + '.';
};
document.querySelectorAll('[data-open]').forEach(item => item.addEventListener('click', () => {
  const menu = document.getElementById(item.dataset.open), open = menu.hidden;
  document.querySelectorAll('[role=menu]').forEach(m => { if (m.id !== parents[item.dataset.open]) m.hidden = true; });
  menu.hidden = !open; item.setAttribute('aria-expanded', String(open));
}));
document.querySelectorAll('[data-key]').forEach(item => item.addEventListener('click', () => {
  const key = item.dataset.key;
  if (item.getAttribute('role') === 'menuitemradio') {
    document.querySelectorAll('[data-key=' + key + ']')
      .forEach(i => i.setAttribute('aria-checked', String(i === item)));
    record(key, item.textContent.trim());
  } else {
    const on = item.getAttribute('aria-checked') !== 'true';
    item.setAttribute('aria-checked', String(on)); record(key, on);
  }
  closeAll(); summary();
}));
document.querySelectorAll('[data-act]').forEach(item => item.addEventListener('click', () => {
  closeAll(); if (item.dataset.act === 'export') record('exported', true);
  msg.textContent = {new: 'New note created.', export: 'Exported as PDF.', about: 'Notes editor 1.0'}[item.dataset.act];
}));"""


def _editor(task_id: str, split: str, instruction: str, checks: list[list], solution: list[list]) -> EnvTask:
    """A menubar with nested submenus (View > Theme > Dark) of radio and checkbox menu items."""
    return _variant(task_id, split, "menus", instruction, {"index.html": page("Notes editor", _EDITOR, _EDITOR_JS)},
                    [*checks, ["nothing was exported", "exported", None]], solution)


def _menus() -> list[EnvTask]:
    view = ["click", "menuitem", "View"]
    return [
        _docmenu("gui-docmenu-notify", "train",
                 "In the document's Actions menu, open the notification settings: stop the emails about comments, "
                 "turn on the weekly summary, and save.",
                 [["no comment emails", "notify_comments", False], ["edit emails kept", "notify_edits", True],
                  ["weekly summary on", "notify_weekly", True]],
                 [["click", "menuitem", "Notification settings"], ["click", "checkbox", "Email me about comments"],
                  ["click", "checkbox", "Weekly summary"], ["click", "button", "Save settings"]]),
        _docmenu("gui-docmenu-share", "train", "Share this document with bob@example.org as an Editor.",
                 [["shared with the right person", "shared_with", "bob@example.org"],
                  ["with the right permission", "permission", "Editor"]],
                 [["click", "menuitem", "Share"], ["type", "textbox", "Email address", "bob@example.org"],
                  ["select", "combobox", "Permission", "Editor"], ["click", "button", "Send invite"]]),
        _docmenu("gui-docmenu-rename", "heldout", 'Rename this document to "Apollo launch plan".',
                 [["the document has the new name", "title", "Apollo launch plan"],
                  ["it was not shared", "shared_with", None]],
                 [["click", "menuitem", "Rename"], ["type", "textbox", "New name", "Apollo launch plan"],
                  ["click", "button", "Save name"]]),
        _editor("gui-editor-dark", "train", "Switch the notes editor to the dark theme.",
                [["the theme is Dark", "theme", "Dark"], ["the font size was left alone", "font_size", None]],
                [view, ["click", "menuitem", "Theme"], ["click", "menuitemradio", "Dark"], ["done"]]),
        _editor("gui-editor-large", "train",
                "In the notes editor, set the font size to Large and hide the line numbers.",
                [["the font size is Large", "font_size", "Large"], ["line numbers are hidden", "line_numbers", False],
                 ["the theme was left alone", "theme", None]],
                [view, ["click", "menuitem", "Font size"], ["click", "menuitemradio", "Large"], view,
                 ["click", "menuitemcheckbox", "Show line numbers"], ["done"]]),
        _editor("gui-editor-contrast", "heldout",
                "Make the notes editor use the high contrast theme with a small font.",
                [["the theme is High contrast", "theme", "High contrast"],
                 ["the font size is Small", "font_size", "Small"],
                 ["line numbers were left alone", "line_numbers", None]],
                [view, ["click", "menuitem", "Theme"], ["click", "menuitemradio", "High contrast"], view,
                 ["click", "menuitem", "Font size"], ["click", "menuitemradio", "Small"], ["done"]]),
        _editor("gui-editor-sepia", "heldout", "Switch the notes editor to the sepia theme.",
                [["the theme was not changed", "theme", None]],
                [view, ["click", "menuitem", "Theme"], ["infeasible", "there is no sepia theme"]]),
    ]


# ----------------------------------------------------------------------------- search
PRODUCTS = [  # name, category, price, in stock
    ("Blue Mug", "Mugs", 12, True), ("Sand Mug", "Mugs", 9, False), ("Red Mug", "Mugs", 11, True),
    ("Tall Mug", "Mugs", 14, True), ("Tiny Mug", "Mugs", 7, False), ("Stone Mug", "Mugs", 10, True),
    ("Glass Mug", "Mugs", 16, True), ("Steel Kettle", "Kettles", 39, True),
    ("Retro Kettle", "Kettles", 45, False), ("Glass Kettle", "Kettles", 52, True),
    ("Travel Kettle", "Kettles", 29, False), ("Smart Kettle", "Kettles", 79, True),
    ("Walnut Desk Lamp", "Lamps", 48, True), ("Arc Floor Lamp", "Lamps", 120, True), ("Clip Lamp", "Lamps", 22, True),
    ("Paper Lamp", "Lamps", 35, False), ("Brass Lamp", "Lamps", 140, False), ("Green Teapot", "Teapots", 24, True),
    ("Cast Iron Teapot", "Teapots", 58, False), ("Glass Teapot", "Teapots", 31, True),
    ("Clay Teapot", "Teapots", 19, False),
]
_SHOP = """
<h1>Kitchen &amp; Home shop</h1>
<label>Search products <input type="search" id="q" autocomplete="off"></label>
<label>Category <select id="cat">
  <option>All</option><option>Mugs</option><option>Kettles</option><option>Lamps</option><option>Teapots</option>
</select></label>
<label><input type="checkbox" id="stock"> In stock only</label>
<p id="count"></p>
<div id="results"></div>
<p id="cart" role="status">Cart: empty</p>"""
_SHOP_JS = """
const PER_PAGE = 5, $ = (id) => document.getElementById(id);
const cart = [];
function show() {
  const q = $('q').value.trim().toLowerCase(), cat = $('cat').value, stock = $('stock').checked;
  const hits = PRODUCTS.filter(p => p.name.toLowerCase().includes(q) && (cat === 'All' || p.category === cat)
                                 && (!stock || p.inStock)).sort((a, b) => a.name.localeCompare(b.name));
  $('count').textContent = !hits.length ? 'No results'
    : 'Showing ' + Math.min(hits.length, PER_PAGE) + ' of ' + hits.length + ' results';
  $('results').replaceChildren(...hits.slice(0, PER_PAGE).map(p => {
    const row = document.createElement('div'), text = document.createElement('span');
    const b = document.createElement('button');
    text.textContent = p.name + ', $' + p.price + ', ' + (p.inStock ? 'in stock' : 'out of stock') + ' ';
    b.innerHTML = '<span aria-hidden="true">Add to cart</span>';
    b.setAttribute('aria-label', 'Add ' + p.name + ' to cart'); b.disabled = !p.inStock;
    b.addEventListener('click', () => { cart.push(p.name); record('cart', cart);
      $('cart').textContent = 'Cart: ' + cart.length + (cart.length === 1 ? ' item' : ' items') +
        ' (' + cart.join(', ') + ')';
    });
    row.append(text, b); return row;
  }));
}
// only on a real change: a re-render when the searchbox loses focus would swallow the click that blurred it
let shownFor = null;
const update = () => {
  const key = [$('q').value, $('cat').value, $('stock').checked].join('|');
  if (key !== shownFor) { shownFor = key; show(); }
};
for (const id of ['q', 'cat', 'stock']) for (const e of ['input', 'change']) $(id).addEventListener(e, update);
update();"""


def _shop(task_id: str, split: str, instruction: str, cart: list[str] | None, solution: list[list]) -> EnvTask:
    """A product list with a searchbox, a category filter and an in-stock filter; only 5 results are shown."""
    data = [{"name": n, "category": c, "price": p, "inStock": s} for n, c, p, s in PRODUCTS]
    pages = {"index.html": page("Shop", _SHOP, f"const PRODUCTS = {json.dumps(data)};" + _SHOP_JS)}
    return _variant(task_id, split, "search", instruction, pages,
                    [[("the cart holds exactly the right items" if cart else "nothing was added to the cart"),
                      "cart", cart]],
                    solution)


def _search() -> list[EnvTask]:
    def add(name: str) -> list:
        return ["click", "button", f"Add {name} to cart"]
    return [
        _shop("gui-shop-mug", "train", "Add the cheapest mug that is in stock to the cart.", ["Stone Mug"],
              [["select", "combobox", "Category", "Mugs"], ["click", "checkbox", "In stock only"], add("Stone Mug"),
               ["done"]]),
        _shop("gui-shop-lamp", "train", "Add the most expensive lamp that is in stock to the cart.",
              ["Arc Floor Lamp"],
              [["select", "combobox", "Category", "Lamps"], ["click", "checkbox", "In stock only"],
               add("Arc Floor Lamp"), ["done"]]),
        _shop("gui-shop-two", "train", "Add the Glass Teapot and the Walnut Desk Lamp to the cart, one of each.",
              ["Glass Teapot", "Walnut Desk Lamp"],
              [["type", "searchbox", "Search products", "Glass Teapot"], add("Glass Teapot"),
               ["type", "searchbox", "Search products", "Walnut"], add("Walnut Desk Lamp"), ["done"]]),
        _shop("gui-shop-kettle", "heldout", "Add the cheapest kettle that is in stock to the cart.", ["Steel Kettle"],
              [["select", "combobox", "Category", "Kettles"], ["click", "checkbox", "In stock only"],
               add("Steel Kettle"), ["done"]]),
        _shop("gui-shop-purple", "train", "Add a purple mug to the cart.", None,
              [["type", "searchbox", "Search products", "purple"], ["infeasible", "the shop has no purple mug"]]),
    ]


# ----------------------------------------------------------------------------- flow
# Hidden form fields carry what earlier steps chose (from the query string) to the next page.
_CARRY_JS = """
const params = new URLSearchParams(location.search);
document.querySelectorAll('form').forEach(f => params.forEach((v, k) => {
  if (f.elements.namedItem(k)) return;  // (not f.elements[k]: elements.item is a method)
  const i = document.createElement('input'); i.type = 'hidden'; i.name = k; i.value = v; f.append(i);
}));"""
_CART = """
<h1>Your cart</h1>
<p>{item}, ${price} each</p>
<form method="get" action="address.html">
  <input type="hidden" name="item" value="{item}">
  <label>Quantity <input type="number" name="qty" value="1" min="1" max="9"></label>
  <button type="submit">Proceed to checkout</button>
</form>"""
_ADDRESS = """
<h1>Checkout: delivery address</h1>
<form method="get" action="shipping.html">
  <label>Full name <input name="name" required autocomplete="off"></label>
  <label>Address <input name="address" required autocomplete="off"></label>
  <button type="submit">Continue to shipping</button>
</form>"""
_SHIPPING = """
<h1>Checkout: shipping method</h1>
<p>Standard is free (5 to 7 days), Express costs $9 (2 days), Overnight costs $25.</p>
<form method="get" action="review.html">
  <fieldset aria-label="Shipping method">
    <label><input type="radio" name="shipping" value="Standard" checked> Standard</label>
    <label><input type="radio" name="shipping" value="Express"> Express</label>
    <label><input type="radio" name="shipping" value="Overnight"> Overnight</label>
  </fieldset>
  <button type="submit">Continue to review</button>
</form>"""
_REVIEW = """
<h1>Checkout: review your order</h1>
<p id="summary"></p>
<button id="place">Place order</button>
<p id="msg" role="status"></p>"""
_REVIEW_JS = """
const q = new URLSearchParams(location.search), o = Object.fromEntries(q);
document.getElementById('summary').textContent = o.qty + ' x ' + o.item + ' to ' + o.name + ', ' + o.address +
  ', ' + o.shipping + ' shipping.';
document.getElementById('place').addEventListener('click', e => {
  record('order', {item: o.item, qty: parseInt(o.qty, 10)});
  record('ship_to', {name: (o.name || '').trim(), address: (o.address || '').trim()});
  record('shipping', o.shipping);
  e.target.hidden = true; document.getElementById('msg').textContent = 'Thank you! Your order is placed.';
});"""


def _checkout(task_id: str, split: str, item: str, qty: int, shipping: str, name: str, address: str) -> EnvTask:
    """A four-page checkout (cart, address, shipping method, review) carried along in query strings."""
    price = next(p for n, _, p, _ in PRODUCTS if n == item)
    pages = {"cart.html": page("Cart", _CART.format(item=item, price=price)),
             "address.html": page("Delivery address", _ADDRESS, _CARRY_JS),
             "shipping.html": page("Shipping method", _SHIPPING, _CARRY_JS),
             "review.html": page("Review order", _REVIEW, _REVIEW_JS)}
    instruction = (f"Buy {qty} x {item} (it is in your cart) and have it sent by {shipping} shipping to {name}, "
                   f"{address}.")
    solution = [*([["type", "spinbutton", "Quantity", str(qty)]] if qty != 1 else []),
                ["click", "button", "Proceed to checkout"], ["type", "textbox", "Full name", name],
                ["type", "textbox", "Address", address], ["click", "button", "Continue to shipping"]]
    if shipping not in ("Standard", "Express", "Overnight"):
        return _variant(task_id, split, "flow", instruction, pages, [["no order was placed", "order", None]],
                        [*solution, ["infeasible", f"{shipping} shipping is not offered"]], start="cart.html")
    return _variant(
        task_id, split, "flow", instruction, pages,
        [["the right item and quantity were ordered", "order", {"item": item, "qty": qty}],
         ["it goes to the right address", "ship_to", {"name": name, "address": address}],
         ["with the right shipping method", "shipping", shipping]],
        [*solution, *([["click", "radio", shipping]] if shipping != "Standard" else []),
         ["click", "button", "Continue to review"], ["click", "button", "Place order"], ["done"]],
        start="cart.html")


TIMES = {"Fri 14 June": ["18:00", "19:30", "21:00"], "Sat 15 June": ["12:30", "19:30", "20:15"],
         "Sun 16 June": ["12:00", "13:30"]}
_BOOK = """
<h1>Book a table at Luna</h1>
<form method="get" action="times.html">
  <label>Date <select name="date">{dates}</select></label>
  <label>Party size <select name="party">{sizes}</select></label>
  <button type="submit">Find a table</button>
</form>"""
_TIMES = """
<h1>Choose a time</h1>
<p id="when"></p>
<form method="get" action="details.html">
  <fieldset id="times" aria-label="Available times"></fieldset>
  <button type="submit">Continue</button>
</form>"""
_TIMES_JS = """
const when = new URLSearchParams(location.search);
document.getElementById('when').textContent = 'Tables for ' + when.get('party') + ' on ' + when.get('date') + ':';
for (const t of TIMES[when.get('date')] || []) {
  const l = document.createElement('label'), r = document.createElement('input');
  r.type = 'radio'; r.name = 'time'; r.value = t; l.append(r, ' ' + t);
  document.getElementById('times').append(l);
}"""
_DETAILS = """
<h1>Your details</h1>
<p id="when"></p>
<label>Name for the booking <input id="name" autocomplete="off"></label>
<button id="confirm">Confirm booking</button>
<p id="msg" role="status"></p>"""
_DETAILS_JS = """
const b = Object.fromEntries(new URLSearchParams(location.search));
document.getElementById('when').textContent = 'A table for ' + b.party + ' on ' + b.date + ' at ' + b.time + '.';
document.getElementById('confirm').addEventListener('click', e => {
  const name = document.getElementById('name').value.trim();
  if (!name) { document.getElementById('msg').textContent = 'Please give a name.'; return; }
  record('booking', {date: b.date, time: b.time}); record('party', parseInt(b.party, 10)); record('guest', name);
  e.target.hidden = true; document.getElementById('msg').textContent = 'Booked! See you soon, ' + name + '.';
});"""


def _booking(task_id: str, split: str, date: str, time: str, party: int, name: str) -> EnvTask:
    """A three-page table booking: date and party size, then a time offered that day, then a name."""
    form = _BOOK.format(dates="".join(f"<option>{d}</option>" for d in TIMES),
                        sizes="".join(f"<option>{n}</option>" for n in range(1, 7)))
    pages = {"index.html": page("Book a table", form),
             "times.html": page("Choose a time", _TIMES,
                                f"const TIMES = {json.dumps(TIMES)};" + _CARRY_JS + _TIMES_JS),
             "details.html": page("Your details", _DETAILS, _DETAILS_JS)}
    instruction = f"Book a table for {party} at Luna on {date} at {time}, in the name of {name}."
    solution = [["select", "combobox", "Date", date], ["select", "combobox", "Party size", str(party)],
                ["click", "button", "Find a table"]]
    if time not in TIMES[date]:
        return _variant(task_id, split, "flow", instruction, pages, [["no table was booked", "booking", None]],
                        [*solution, ["infeasible", f"no table at {time} on {date}"]])
    return _variant(task_id, split, "flow", instruction, pages,
                    [["the right day and time", "booking", {"date": date, "time": time}],
                     ["the right party size", "party", party], ["in the right name", "guest", name]],
                    [*solution, ["click", "radio", time], ["click", "button", "Continue"],
                     ["type", "textbox", "Name for the booking", name], ["click", "button", "Confirm booking"],
                     ["done"]])


def _flow() -> list[EnvTask]:
    return [
        _checkout("gui-checkout-ada", "train", "Blue Mug", 2, "Express", "Ada Lovelace", "12 Elm Street, Springfield"),
        _checkout("gui-checkout-alan", "train", "Walnut Desk Lamp", 1, "Overnight", "Alan Turing",
                  "3 Bletchley Road, Milton"),
        _checkout("gui-checkout-grace", "heldout", "Green Teapot", 3, "Standard", "Grace Hopper",
                  "9 Harbor Lane, Arlington"),
        _checkout("gui-checkout-drone", "train", "Red Mug", 1, "drone", "Ken Thompson", "5 Unix Way, Murray Hill"),
        _booking("gui-booking-sat", "train", "Sat 15 June", "19:30", 4, "Lin"),
        _booking("gui-booking-fri", "train", "Fri 14 June", "18:00", 2, "Moss"),
        _booking("gui-booking-sunday", "heldout", "Sun 16 June", "20:00", 3, "Okafor"),
    ]


# ----------------------------------------------------------------------------- scroll
INBOX = [  # sender, subject: 12 shown at first, 8 more each time the page is scrolled near its end
    ("Alice Chen", "Lunch on Friday?"), ("Build bot", "Nightly build passed"), ("Carlos Ruiz", "Slides for Monday"),
    ("Dana Kim", "Holiday plans"), ("Tom Reed", "Parking permit"), ("HR team", "New badge photos"),
    ("Eve Martin", "Coffee machine"), ("Frank Li", "Re: budget draft"), ("Gina Rossi", "Team photo"),
    ("Build bot", "Nightly build failed"), ("Hugo Weber", "Book club"), ("Iris Novak", "Conference tickets"),
    ("Jon Park", "Server maintenance"), ("Kara Singh", "Welcome aboard"), ("Leo Brandt", "Desk move"),
    ("Priya Nair", "Invoice 7781"), ("Quinn Adams", "Survey results"), ("Rosa Diaz", "Keys left at desk"),
    ("Sam Ito", "Re: Slides for Monday"), ("Build bot", "Disk almost full"), ("Uma Patel", "Quarterly goals"),
    ("Victor Hale", "Invoice 7790"), ("Wen Zhou", "Recipe swap"), ("Tom Reed", "Parking permit renewed"),
    ("Xavier Moss", "Old laptops"), ("Yara Haddad", "Thank you!"), ("Priya Nair", "Invoice 7781 (reminder)"),
    ("Zack Young", "See you tomorrow"),
]
_INBOX = """
<div style="position:sticky;top:0;background:#fff;padding:.5em 0">
  <h1 style="margin:0">Inbox</h1>
  <button id="archive">Archive selected</button> <span id="msg" role="status"></span>
</div>
<div id="list"></div>
<p id="end" hidden>No more messages.</p>"""
_INBOX_JS = """
const list = document.getElementById('list');
let shown = 0;
function more(n) {
  for (const [sender, subject] of MESSAGES.slice(shown, shown + n)) {
    const row = document.createElement('label'), box = document.createElement('input');
    row.style.cssText = 'display:block;height:3.5em;border-bottom:1px solid #ddd'; box.type = 'checkbox';
    box.dataset.subject = subject; row.append(box, ' ' + sender + ': ' + subject); list.append(row);
  }
  shown = Math.min(MESSAGES.length, shown + n);
  document.getElementById('end').hidden = shown < MESSAGES.length;
}
more(12);
window.addEventListener('scroll', () => {
  if (shown < MESSAGES.length && scrollY + innerHeight >= document.documentElement.scrollHeight - 120) more(8);
});
document.getElementById('archive').addEventListener('click', () => {
  const boxes = [...list.querySelectorAll('input:checked')];
  if (!boxes.length) { document.getElementById('msg').textContent = 'Nothing selected.'; return; }
  record('archived', [...(recorded('archived') || []), ...boxes.map(b => b.dataset.subject)]);
  boxes.forEach(b => b.parentElement.remove());
  document.getElementById('msg').textContent = boxes.length + ' archived.';
});"""


def _inbox(task_id: str, split: str, instruction: str, archived: list[str] | None, solution: list[list]) -> EnvTask:
    """A long inbox that loads more messages as the page is scrolled to its end; archive by checkbox."""
    messages = [list(m) for m in INBOX]
    pages = {"index.html": page("Inbox", _INBOX, f"const MESSAGES = {json.dumps(messages)};" + _INBOX_JS)}
    return _variant(task_id, split, "scroll", instruction, pages,
                    [["exactly the right messages were archived" if archived else "nothing was archived",
                      "archived", archived]], solution)


def _scroll() -> list[EnvTask]:
    down = ["scroll", "down"]
    return [
        _inbox("gui-inbox-invoice", "train",
               'Archive the message from Priya Nair about "Invoice 7781" (not the reminder).', ["Invoice 7781"],
               [down, ["click", "checkbox", "Priya Nair: Invoice 7781"], ["click", "button", "Archive selected"],
                ["done"]]),
        _inbox("gui-inbox-tom", "heldout", "Archive both messages from Tom Reed.",
               ["Parking permit", "Parking permit renewed"],
               [["click", "checkbox", "Tom Reed: Parking permit"], down, down,
                ["click", "checkbox", "Tom Reed: Parking permit renewed"], ["click", "button", "Archive selected"],
                ["done"]]),
        _inbox("gui-inbox-visa", "train", 'Archive the message from Zoe Park about "Visa renewal".', None,
               [down, down, down, ["infeasible", "there is no message from Zoe Park"]]),
    ]


@functools.lru_cache(maxsize=1)
def _tasks() -> tuple[EnvTask, ...]:
    return tuple([*_forms(), *_menus(), *_search(), *_flow(), *_scroll()])


def gui_tasks() -> list[EnvTask]:
    return list(_tasks())
