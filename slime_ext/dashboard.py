"""What the agent learned, shown: the server's page (``GET /ui``) and ``openclaw-rl report``'s offline file.

``collect`` gathers one run's figures from its store and run directory, for one user or for everyone: the served
version and the versions the trainer published (``checkpoints/v*/trainer_state.json``), the canary's checks and
its last refusal with the reasons (``canary.json``), judged / trained / dropped / waiting turns and why turns were
dropped, every judged turn's verdict over time per user, the users' preferences (the memory serves the standing
ones), the hints the hinted teacher does not follow yet, and the newest turns with what became of them.

``page`` is one HTML file with its script and styles inline: no build step, no CDN, nothing fetched but the
server's own ``/v1/dashboard``. Served live it asks for the figures every 2 s, with the key from ``#key=...`` in
its address (kept in the tab's session storage, never in the address afterwards), and its forget buttons call
``DELETE /v1/memory/{id}``, which deletes only the caller's own. Written by ``report`` it carries the figures in
the file and draws the same sections, without the buttons.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from slime_ext.trainers import canary, checkpoints

RECENT_TURNS = 30  # turns in the "recent turns" table
REWARD_POINTS = 2000  # the newest verdicts the reward curve draws


def collect(store, run_dir: str | Path, only_user: str | None, served_version: int | None,
            model: str = "") -> dict[str, Any]:
    """The figures of ``run_dir`` (``only_user``'s alone when given: a per-user key's view); run it off the event
    loop (it reads the store and the run directory)."""
    users = [only_user] if only_user is not None else [None if u == "-" else u for u in store.preference_users()]
    versions = _versions(run_dir)
    counts = store.counts(only_user)
    return {
        "model": model, "generated_at": time.time(), "user": only_user,
        "served_version": served_version if served_version is not None else (versions[-1]["version"] if versions else 0),
        "counts": {"judged": counts["judged_turns"], "trained": counts["trained_turns"],
                   "dropped": counts["dropped_turns"], "waiting": counts["waiting_to_train"],
                   "mean_verdict": counts["mean_verdict"], "dropped_by_reason": counts["dropped_by_reason"]},
        "versions": versions, "canary": canary.read_status(run_dir) or {},
        "rewards": store.verdicts_over_time(only_user, REWARD_POINTS),
        "preferences": [{**p, "user": u or "-"} for u in users for p in store.preferences(u)],
        "unfollowed_hints": store.teacher_check_summary(20, only_user)["hints_unfollowed_recent"],
        "recent_turns": store.recent_turns(only_user, RECENT_TURNS),
    }


def _versions(run_dir: str | Path) -> list[dict[str, Any]]:
    out = []
    for path in sorted(checkpoints.directory(run_dir).glob("v*")):
        try:
            state = checkpoints.read_state(path)
        except (OSError, ValueError):
            continue
        metrics = state.get("metrics") or {}
        out.append({"version": state.get("version", int(path.name[1:])), "saved_at": state.get("saved_at"),
                    "turns": len(state.get("turns") or []), "loss": metrics.get("loss"),
                    "reward_mean": metrics.get("reward_mean")})
    return out


def page(data: dict[str, Any] | None = None) -> str:
    """The page: live (``data`` None: it fetches ``/v1/dashboard``) or with ``data`` in it (``report``)."""
    embedded = "null" if data is None else json.dumps(data).replace("</", "<\\/")
    return PAGE.replace("__DATA__", embedded)


PAGE = r"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>openclaw-rl: what it learned</title>
<style>
body{font:14px/1.45 system-ui,sans-serif;margin:0;background:#f6f7f9;color:#1d2330}
header{background:#1d2330;color:#fff;padding:12px 20px;display:flex;gap:24px;align-items:baseline;flex-wrap:wrap}
header h1{font-size:18px;margin:0}header span{opacity:.8}
main{display:grid;grid-template-columns:repeat(auto-fit,minmax(420px,1fr));gap:14px;padding:14px}
section{background:#fff;border-radius:8px;padding:12px 16px;box-shadow:0 1px 2px #0001}
h2{font-size:15px;margin:0 0 8px}.cards{display:flex;gap:10px;flex-wrap:wrap}
.card{background:#eef1f6;border-radius:6px;padding:6px 12px;min-width:80px}.card b{display:block;font-size:20px}
table{border-collapse:collapse;width:100%}td,th{text-align:left;padding:3px 6px;border-bottom:1px solid #eee;vertical-align:top}
.good{color:#17803d}.bad{color:#b42318}.muted{color:#667}button{cursor:pointer}
#error,#notice{color:#b42318;padding:0 20px}
</style></head><body>
<header><h1>What it learned</h1><span id="model"></span><span>served version <b id="version">-</b></span>
<span id="updated" class="muted"></span></header>
<div id="error"></div><div id="notice"></div>
<main>
<section><h2>Turns</h2><div class="cards" id="counts"></div><h3>Dropped, and why</h3><ul id="dropped"></ul></section>
<section><h2>Versions and the canary</h2><div id="canary"></div><table id="versions"></table></section>
<section><h2>Reward over time, per user</h2><div id="rewards"></div></section>
<section><h2>Preferences (the memory serves the standing ones)</h2><table id="preferences"></table></section>
<section><h2>Hints the model does not follow yet</h2><ul id="unfollowed"></ul></section>
<section style="grid-column:1/-1"><h2>Recent turns</h2><table id="turns"></table></section>
</main>
<script>
const EMBEDDED = __DATA__;
const live = EMBEDDED === null;
const found = /[#&]key=([^&]+)/.exec(location.hash);
if (found) { sessionStorage.setItem("openclaw-rl-key", decodeURIComponent(found[1])); history.replaceState(null, "", location.pathname); }
const key = sessionStorage.getItem("openclaw-rl-key");
const headers = key ? {Authorization: "Bearer " + key} : {};
const esc = s => String(s ?? "").replace(/[&<>"']/g, c => ({"&":"&amp;","<":"&lt;",">":"&gt;",'"':"&quot;","'":"&#39;"}[c]));
const when = t => t ? new Date(t * 1000).toLocaleString() : "";
const $ = id => document.getElementById(id);

function rewardsSvg(rewards) {
  if (!rewards.length) return '<p class="muted">nothing judged yet</p>';
  const users = [...new Set(rewards.map(r => r.user))], colors = ["#2563eb","#d97706","#16a34a","#9333ea","#dc2626"];
  const W = 400, H = 140, t0 = rewards[0].at, t1 = Math.max(rewards[rewards.length - 1].at, t0 + 1);
  const x = t => 30 + (t - t0) / (t1 - t0) * (W - 40), y = v => 10 + (1 - v) / 2 * (H - 30);
  let out = `<svg width="${W}" height="${H}" role="img" aria-label="mean verdict over time">` +
    `<line x1="30" x2="${W-10}" y1="${y(0)}" y2="${y(0)}" stroke="#ccc"/><text x="0" y="${y(1)+4}" font-size="10">+1</text>` +
    `<text x="0" y="${y(-1)+4}" font-size="10">-1</text>`;
  users.forEach((u, i) => {
    let n = 0, sum = 0;
    const pts = rewards.filter(r => r.user === u).map(r => { n++; sum += r.verdict; return `${x(r.at).toFixed(1)},${y(sum / n).toFixed(1)}`; });
    out += `<polyline fill="none" stroke="${colors[i % 5]}" stroke-width="2" points="${pts.join(" ")}"/>` +
      `<text x="${W - 110}" y="${14 + 12 * i}" font-size="11" fill="${colors[i % 5]}">${esc(u)}: ${(sum / n).toFixed(2)} (${n})</text>`;
  });
  return out + "</svg>";
}

function render(d) {
  $("model").textContent = d.model || "";
  $("version").textContent = d.served_version;
  $("updated").textContent = (live ? "live, " : "report, ") + when(d.generated_at);
  const c = d.counts;
  $("counts").innerHTML = [["judged", c.judged], ["trained", c.trained], ["dropped", c.dropped], ["waiting", c.waiting],
    ["mean verdict", c.mean_verdict === null ? "-" : c.mean_verdict.toFixed(2)]]
    .map(([k, v]) => `<div class="card" data-count="${k}"><b>${v}</b>${k}</div>`).join("");
  $("dropped").innerHTML = Object.entries(c.dropped_by_reason).map(([r, n]) => `<li>${esc(r)}: ${n}</li>`).join("") || '<li class="muted">none</li>';
  const cn = d.canary, refusal = cn.last_refusal;
  $("canary").innerHTML = `<p>checks ${cn.checks || 0}, refused ${cn.refused || 0}` +
    (refusal ? `; last refusal: version ${refusal.version} (${esc((refusal.reasons || []).join("; "))}), ${when(refusal.at)}` : "") + "</p>";
  $("versions").innerHTML = "<tr><th>version</th><th>published</th><th>turns</th><th>mean reward</th><th>loss</th></tr>" +
    d.versions.slice().reverse().map(v => `<tr data-version="${v.version}"><td>${v.version}${v.version === d.served_version ? " (served)" : ""}</td>` +
      `<td>${when(v.saved_at)}</td><td>${v.turns}</td><td>${v.reward_mean ?? ""}</td><td>${v.loss === null || v.loss === undefined ? "" : Number(v.loss).toFixed(4)}</td></tr>`).join("");
  $("rewards").innerHTML = rewardsSvg(d.rewards);
  $("preferences").innerHTML = d.preferences.length ? "<tr><th>user</th><th>preference</th><th>teacher follows</th><th></th></tr>" +
    d.preferences.map(p => `<tr data-preference="${p.id}"><td>${esc(p.user)}</td><td>${esc(p.hint)}${p.standing ? "" : ' <span class="muted">(this turn only)</span>'}</td>` +
      `<td>${p.teacher_follows === null ? "not checked" : p.teacher_follows ? "yes" : "not yet"}</td>` +
      `<td>${live ? `<button data-forget="${p.id}" data-user="${esc(p.user)}">forget</button>` : ""}</td></tr>`).join("")
    : '<tr><td class="muted">none stated yet</td></tr>';
  $("unfollowed").innerHTML = d.unfollowed_hints.map(h => `<li>${esc(h.hint)} <span class="muted">(gap ${h.gap === null ? "-" : Number(h.gap).toFixed(2)})</span></li>`).join("") || '<li class="muted">none</li>';
  $("turns").innerHTML = "<tr><th>when</th><th>user</th><th>version</th><th>reply</th><th>verdict</th><th>what became of it</th></tr>" +
    d.recent_turns.slice().reverse().map(t => `<tr><td>${when(t.created_at)}</td><td>${esc(t.user)}</td><td>${t.policy_version}</td>` +
      `<td>${esc(t.reply)}</td><td class="${t.verdict > 0 ? "good" : t.verdict < 0 ? "bad" : ""}">${t.verdict ?? ""}</td>` +
      `<td>${t.trained_in_version !== null ? "trained in v" + t.trained_in_version : t.dropped ? "dropped: " + esc(t.dropped) :
        t.verdict !== null ? "waiting" : t.main_line ? "not judged yet" : "side turn"}${t.hint ? '<br><span class="muted">hint: ' + esc(t.hint) + "</span>" : ""}</td></tr>`).join("");
}

async function refresh() {
  try {
    const r = await fetch("/v1/dashboard", {headers});
    const body = await r.json();
    if (!r.ok) throw new Error(body.error ? body.error.message : r.statusText);
    $("error").textContent = "";
    render(body);
  } catch (e) { $("error").textContent = "could not load the figures: " + e.message + (key ? "" : " (open this page as /ui#key=YOUR_KEY)"); }
}

document.addEventListener("click", async ev => {
  const id = ev.target.dataset && ev.target.dataset.forget;
  if (!id) return;
  const user = ev.target.dataset.user, q = user === "-" ? "" : "?user=" + encodeURIComponent(user);
  const r = await fetch(`/v1/memory/${id}${q}`, {method: "DELETE", headers});
  const b = await r.json();
  $("notice").textContent = r.ok ? "" : "could not forget it: " + (b.error ? b.error.message : r.statusText);
  refresh();
});

if (live) { refresh(); setInterval(refresh, 2000); } else { render(EMBEDDED); }
</script></body></html>
"""
