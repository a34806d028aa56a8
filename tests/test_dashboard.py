"""The page that shows what the agent learned (``GET /ui``), driven in headless Chromium, and ``openclaw-rl
report``'s offline file.

A learning server of the tiny model starts on a run directory that already holds two users' judged turns and
preferences (test_memory.py's ``seed``; bob's hint is one the hinted teacher did not follow). The page, opened
as alice with her key, shows her figures only, updates without a reload when a new version is served and more
turns are judged, and its forget button deletes her preference; deleting bob's with her key is refused.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request

from conftest import require_chromium
from test_learning_e2e import wait
from test_memory import STANDING, seed

ARGS = ["--method", "binary", "--batch-size", "2", "--lora-rank", "4", "--lr", "1e-3", "--no-canary",
        "--user-key", "alice=ak", "--user-key", "bob=bk"]


def call(srv, method, path, key, body=None):
    req = urllib.request.Request(srv.base + path, method=method, data=json.dumps(body).encode() if body else None,
                                 headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def converse(srv, key, question, feedback):
    msgs = [{"role": "user", "content": question}]
    status, out = call(srv, "POST", "/v1/chat/completions", key, {"model": "m", "messages": msgs, "max_tokens": 4})
    assert status == 200, out
    msgs += [{"role": "assistant", "content": out["choices"][0]["message"]["content"]}, {"role": "user", "content": feedback}]
    assert call(srv, "POST", "/v1/chat/completions", key, {"model": "m", "messages": msgs, "max_tokens": 4})[0] == 200


def test_the_page_shows_a_users_figures_live_and_forgets_on_request(make_server, tmp_path):
    from slime_ext.envs.browser import Browser

    chromium = require_chromium()
    seed(tmp_path / "run")
    srv = make_server(run_dir=tmp_path / "run", extra=ARGS)
    with urllib.request.urlopen(srv.base + "/ui", timeout=30) as r:  # the page itself holds no figures
        html = r.read().decode()
    assert r.status == 200 and "/v1/dashboard" in html and "http" not in html.split("<script>")[1].split("fetch")[0]
    assert call(srv, "GET", "/v1/dashboard", "wrong")[0] == 401
    # the page's own origin may call its server (forget); another web origin still may not
    port = srv.base.rsplit(":", 1)[1]
    for origin, status in ((f"http://127.0.0.1:{port}", 200), ("http://evil.example", 403), (f"http://localhost:{port}", 403)):
        req = urllib.request.Request(srv.base + "/v1/memory", headers={"Authorization": "Bearer bk", "Origin": origin})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                got = r.status
        except urllib.error.HTTPError as e:
            got = e.code
        assert got == status, origin
    browser = Browser(chromium).start()
    try:
        page = browser.new_page()
        page.navigate(srv.base + "/ui#key=ak")

        def text(selector: str) -> str:
            return page.evaluate(f"(document.querySelector({json.dumps(selector)}) || {{}}).textContent || ''")

        wait(lambda: text("#version") not in ("", "-"))
        assert "ak" not in page.evaluate("location.href")  # the key left the address bar
        prefs = text("#preferences")
        assert STANDING["alice"] in prefs and STANDING["bob"] not in prefs  # alice's own only
        before_version = int(wait(lambda: text("#version") if text("#version") != "0" else None))
        before_judged = int(text('[data-count="judged"] b'))
        # more judged turns: the trainer publishes a new version, and the open page shows both
        converse(srv, "ak", "question 1", "Thanks, that's perfect!")
        converse(srv, "ak", "question 2", "No, that's wrong. Try again.")
        wait(lambda: int(text('[data-count="judged"] b')) >= before_judged + 2)
        wait(lambda: int(text("#version")) > before_version, timeout=180)
        assert f'data-version="{text("#version")}"' in page.evaluate("document.querySelector('#versions').innerHTML")
        assert "trained in v" in text("#turns") and "Thanks" not in text("#preferences")
        # forget: alice's button deletes alice's preference
        (alice_pref,) = [p for p in call(srv, "GET", "/v1/memory", "ak")[1]["data"] if p["hint"] == STANDING["alice"]]
        page.evaluate(f"document.querySelector('[data-forget=\"{alice_pref['id']}\"]').click()")
        wait(lambda: STANDING["alice"] not in text("#preferences"))
        assert STANDING["alice"] not in [p["hint"] for p in call(srv, "GET", "/v1/memory", "ak")[1]["data"]]
        # bob's, asked for from alice's page with alice's key, is refused and stays
        (bob_pref,) = [p for p in call(srv, "GET", "/v1/memory", "bk")[1]["data"] if p["hint"] == STANDING["bob"]]
        status = page.evaluate(f"fetch('/v1/memory/{bob_pref['id']}', {{method: 'DELETE', headers}}).then(r => r.status)")
        assert status == 404
        assert STANDING["bob"] in [p["hint"] for p in call(srv, "GET", "/v1/memory", "bk")[1]["data"]]
        assert page.screenshot_png()[:8] == b"\x89PNG\r\n\x1a\n"
    finally:
        browser.close()


def test_report_writes_the_same_sections_offline(tmp_path):
    seed(tmp_path / "run")
    out = tmp_path / "report.html"
    done = subprocess.run([sys.executable, "-m", "slime_ext.cli", "report", "--run-dir", str(tmp_path / "run"),
                           "--out", str(out)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    html = out.read_text()
    data = json.loads(html.split("const EMBEDDED = ", 1)[1].split(";\nconst live", 1)[0])
    assert {p["hint"] for p in data["preferences"]} >= set(STANDING.values())  # everyone's, offline
    assert [h["hint"] for h in data["unfollowed_hints"]] == [STANDING["bob"]]
    assert data["counts"]["judged"] == 4 and "fetch(" in html  # the same page, drawing the embedded figures
    missing = subprocess.run([sys.executable, "-m", "slime_ext.cli", "report", "--run-dir", str(tmp_path / "none"),
                              "--out", str(tmp_path / "x.html")], capture_output=True, text=True)
    assert missing.returncode == 2 and "holds no run" in missing.stderr
