"""/healthz and /metrics reflect what the server did."""

import json
import re
import urllib.request


def get(url):
    with urllib.request.urlopen(url, timeout=30) as r:
        return r.headers, r.read().decode()


def chat(srv):
    return srv.chat([{"role": "user", "content": "hi"}], max_tokens=3)


def metric(text, name):
    m = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


def test_healthz_and_metrics_count_requests_and_turns(tiny_server):
    _, before_h = get(tiny_server.base + "/healthz")
    before = json.loads(before_h)
    _, before_m = get(tiny_server.base + "/metrics")
    chat(tiny_server)
    chat(tiny_server)
    after = json.loads(get(tiny_server.base + "/healthz")[1])
    assert after["status"] == "ok" and after["model"] == "tiny" and after["policy_version"] == 0
    assert after["turns"] == before["turns"] + 2 and after["sessions"] == before["sessions"] + 2
    assert after["requests_in_flight"] == 0
    headers, text = get(tiny_server.base + "/metrics")
    assert headers["Content-Type"].startswith("text/plain; version=0.0.4")
    assert "# TYPE openclaw_requests_total counter" in text and "# TYPE openclaw_policy_version gauge" in text
    name = 'openclaw_requests_total{stream="false"}'
    assert metric(text, name) == metric(before_m, name) + 2
    assert metric(text, 'openclaw_generated_tokens_total') == metric(before_m, 'openclaw_generated_tokens_total') + 6
