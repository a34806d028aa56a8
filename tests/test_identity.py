"""Who a caller is, and which model answers (issue 32, "identity surprises"), through real clients
against a ``--model tiny`` server.

- Without keys (no ``--api-key``, no ``--user-key``) the README's curl example (no token) and its
  ``openai`` SDK example (a token it must send, e.g. "anything") are one person: one user, one
  preference memory. A ``user`` field still names a user; with keys, each key stays its own user.
- ``policy`` (what the README sends) is listed by ``/v1/models`` beside the served model's name;
  any name is answered by the served model, whose real name the response reports, and a name the
  server does not list is warned about in the log once.
"""

from __future__ import annotations

import json
import time
import urllib.request

import anthropic
import pytest
from openai import OpenAI


def curl_chat(srv, messages: list[dict], **fields) -> dict:
    """What the README's curl example sends: no Authorization header."""
    body = json.dumps({"model": "policy", "messages": messages, "max_tokens": 4, **fields}).encode()
    req = urllib.request.Request(srv.url + "/chat/completions", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())


def turn(srv, request_id: str) -> tuple[str | None, dict]:
    """The recorded turn of a response id, and its session's user."""
    return next((s["user"], t) for s in srv.records()["sessions"] for t in s["turns"] if t["request_id"] == request_id)


def test_without_keys_curl_and_the_sdk_are_one_user_with_one_memory(make_server):
    srv = make_server(extra=["--memory", "on", "--batch-size", "1000"])
    sdk = OpenAI(base_url=srv.url, api_key="anything", max_retries=0)  # the SDK must send some key
    first = [{"role": "user", "content": "Name a color."}]
    reply = curl_chat(srv, first)["choices"][0]["message"]["content"]
    said = curl_chat(srv, [*first, {"role": "assistant", "content": reply},
                           {"role": "user", "content": "From now on, answer in one short sentence."}])

    def sdk_memory() -> list | None:  # what the SDK's next request is served with
        r = sdk.chat.completions.create(model="policy", max_tokens=2,
                                        messages=[{"role": "user", "content": f"Name a fruit {time.time()}."}])
        return turn(srv, r.id)[1]["memory"]

    deadline = time.time() + 60
    while time.time() < deadline and not sdk_memory():
        time.sleep(0.5)
    (hint,) = sdk_memory()  # the preference stated over curl serves the SDK's requests too
    assert "short sentence" in hint.lower(), hint
    # Anthropic's SDK (x-api-key) too; every turn is the one local user's, shown as "-"
    msg = anthropic.Anthropic(base_url=srv.base, api_key="another-token", max_retries=0).messages.create(
        model="policy", max_tokens=2, messages=[{"role": "user", "content": "Hi."}])
    assert turn(srv, msg.id)[1]["memory"] == [hint]
    assert {s["user"] for s in srv.records()["sessions"]} == {None}
    assert turn(srv, said["id"])[0] is None
    for key in (None, "anything", "x"):  # /v1/memory is the same list whatever token is sent
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        with urllib.request.urlopen(urllib.request.Request(srv.url + "/memory", headers=headers), timeout=30) as r:
            mine = json.loads(r.read())
        assert mine["user"] is None and [p["hint"] for p in mine["data"]] == [hint], mine
    # a request that names its user is that user's, with that user's (empty) memory
    named = sdk.chat.completions.create(model="policy", max_tokens=2, user="ann",
                                        messages=[{"role": "user", "content": "Name a tree."}])
    user, recorded = turn(srv, named.id)
    assert user == "ann" and recorded["memory"] is None


def test_with_a_key_each_key_is_still_its_own_user(make_server):
    srv = make_server(extra=["--user-key", "alice=ak", "--api-key", "shared"])
    users = set()
    for key in ("ak", "shared"):
        r = OpenAI(base_url=srv.url, api_key=key, max_retries=0).chat.completions.create(
            model="policy", max_tokens=2, messages=[{"role": "user", "content": f"Hello from {key}."}])
        users.add(turn(srv, r.id)[0])
    assert len(users) == 2 and "alice" in users and next(u for u in users if u != "alice").startswith("key:"), users


def test_policy_is_listed_beside_the_served_name_and_any_name_is_answered_by_it(tiny_server):
    sdk = OpenAI(base_url=tiny_server.url, api_key="anything", max_retries=0)
    assert [m.id for m in sdk.models.list().data] == ["tiny", "policy"]
    for name in ("policy", "tiny", "gpt-4o-unknown", "gpt-4o-unknown"):
        r = sdk.chat.completions.create(model=name, max_tokens=2, messages=[{"role": "user", "content": "Hi."}])
        assert r.model == "tiny", (name, r.model)  # the model that really answered
    time.sleep(0.2)
    warned = [line for line in tiny_server.log_tail(200_000).splitlines() if "gpt-4o-unknown" in line]
    assert len(warned) == 1 and "'tiny'" in warned[0], warned  # once per name, naming the served model
    assert not [line for line in tiny_server.log_tail(200_000).splitlines() if "'policy' are answered" in line]


@pytest.mark.parametrize("name", ["policy", "claude-whatever"])
def test_the_anthropic_and_responses_apis_report_the_served_model(tiny_server, name):
    msg = anthropic.Anthropic(base_url=tiny_server.base, api_key="k", max_retries=0).messages.create(
        model=name, max_tokens=2, messages=[{"role": "user", "content": "Hi."}])
    resp = OpenAI(base_url=tiny_server.url, api_key="k", max_retries=0).responses.create(
        model=name, max_output_tokens=2, input="Hi.")
    assert msg.model == "tiny" and resp.model == "tiny"
