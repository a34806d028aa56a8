"""What a hostile client found after the first hardening round (issue 27), against a real
`openclaw-rl serve` with a shared key and two per-user keys, on a run directory that already holds
two users' judged turns, preferences and unfollowed hints:

- a prompt that cannot fit the context is refused before it is tokenized (another client's chat
  never waits behind a big prompt: ``test_http_hardening.py``);
- ``/healthz`` without a key shows no user and no path; a user's key shows that user's own; the
  shared key everything; ``/metrics`` per-user series the same way;
- a body declared over the limit is refused at once; HTTP/0.9 is refused;
- the shared key is one identity whichever header carries it;
- a ``\\r`` (any control character) in a user name never reaches ``/metrics`` raw;
- what aiohttp's parser refuses is answered in the API's JSON shape and logged in one line.
"""

from __future__ import annotations

import json
import re
import socket
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from slime_ext.api.metrics import label_value
from slime_ext.chat.prompt import PromptRenderer
from slime_ext.launch import ServerProcess
from slime_ext.learning.teachability import TeacherCheck
from slime_ext.store import Store
from tests.test_preferences import add_turn, judge

SHARED, ALICE_KEY, BOB_KEY = "shared-key", "alice-key", "bob-key"
CTX = 8192  # SmolLM2's context: the tiny model's own is 65536
EVE = "eve\r\nx\x00\x1b"  # a user name full of control characters
HINTS = {"alice": "Answer in French.", "bob": "Answer in haiku.", EVE: "Answer in Latin."}


def seed_store(run_dir: Path) -> None:
    """Each user one judged turn whose hint became a standing preference and whose teacher did not follow it."""
    store = Store(run_dir)
    for user, hint in HINTS.items():
        sid = f"seeded-{user.encode().hex()}"
        add_turn(store, sid, user)
        judge(store, sid, hint, verdict=-1)
        store.record_teacher_check(sid, 0, hint, TeacherCheck(0.0, False, 0.0, 1, False, "no gap", "sample", 1).record())
    store.close()


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("hostile") / "run"
    seed_store(run_dir)
    s = ServerProcess(run_dir, extra=["--method", "none", "--api-key", SHARED, "--user-key", f"alice={ALICE_KEY}",
                                      "--user-key", f"bob={BOB_KEY}", "--context-length", str(CTX)]).start()
    yield s
    s.stop()


def get(s: ServerProcess, path: str, **headers: str) -> tuple[int, str]:
    req = urllib.request.Request(s.base + path, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def post_chat(s: ServerProcess, body: dict, timeout: float = 120, **headers: str) -> tuple[int, dict]:
    req = urllib.request.Request(s.url + "/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json", **headers})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def raw_exchange(port: int, data: bytes, timeout: float = 20) -> tuple[bytes, float, bool]:
    """Send ``data`` on a fresh connection; ``(everything read, seconds until the server closed, closed)``.
    ``closed`` is False when the server still held the connection open after ``timeout``."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data)
        t0, out = time.monotonic(), b""
        try:
            while chunk := sock.recv(65536):
                out += chunk
        except (TimeoutError, socket.timeout):
            return out, time.monotonic() - t0, False
        except ConnectionResetError:
            pass
        return out, time.monotonic() - t0, True


def json_error(response: bytes) -> tuple[int, dict, str]:
    """``(status, the error object, the Content-Type)`` of one raw HTTP response."""
    head, _, body = response.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    ctype = next((ln.split(":", 1)[1].strip() for ln in lines[1:] if ln.lower().startswith("content-type:")), "")
    return int(lines[0].split()[1]), json.loads(body)["error"], ctype


# ---------------------------------------------------------------------------------------------- 1: big prompts
def test_a_prompt_that_cannot_fit_is_refused_before_it_is_tokenized(srv):
    """7 MB of user text cannot fit 8192 tokens whatever the tokenizer does with it: refused at once, from
    a lower bound of its tokens, before the seconds of tokenizing (which used to hold every other chat)."""
    body = {"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": "word " * (7 * 1024 * 1024 // 5)}]}
    status, out = post_chat(srv, body, **{"Authorization": f"Bearer {SHARED}"})
    assert status == 400 and out["error"]["code"] == "context_length_exceeded", out
    assert "without tokenizing" in out["error"]["message"] and f"context is {CTX} tokens" in out["error"]["message"]
    _, metrics = get(srv, "/metrics", Authorization=f"Bearer {SHARED}")
    assert re.search(r"^openclaw_prompts_refused_untokenized_total 1$", metrics, re.M), metrics[-2000:]
    # a prompt that fits is rendered as before
    status, out = post_chat(srv, {"model": "m", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]},
                            **{"Authorization": f"Bearer {SHARED}"})
    assert status == 200, out


@pytest.fixture(scope="module")
def renderer():
    from transformers import AutoTokenizer

    from slime_ext.models import resolve_model

    return PromptRenderer(AutoTokenizer.from_pretrained(resolve_model("tiny")))  # SmolLM2's tokenizer


@pytest.mark.parametrize("text", [
    " " * 5000, "\n" + " " * 4000, "-" * 6000, "=" * 3000 + "\n", "a" * 5000, "word " * 2000, "日本語のテキスト" * 500,
    "🙂" * 2000, "<|im_start|><|im_end|>" * 300, "\t\t\t\t" * 800, "".join(chr(i) for i in range(32, 3000)) * 3,
], ids=["spaces", "newline+spaces", "dashes", "equals", "letters", "words", "japanese", "emoji", "special",
        "tabs", "unicode-range"])
def test_the_token_lower_bound_holds_on_text_built_to_break_it(renderer, text):
    """The early refusal never refuses what would fit: the bound is at most the real count, on runs of the
    vocabulary's longest entries (whitespace), multi-byte scripts and special tokens written as text."""
    tokens = len(renderer.tokenizer(text, add_special_tokens=False)["input_ids"])
    assert 0 < renderer.fewest_tokens(len(text.encode())) <= tokens


# ---------------------------------------------------------------------------------------------- 2: /healthz
def test_healthz_without_a_key_shows_no_user_and_no_path(srv):
    status, text = get(srv, "/healthz")
    body = json.loads(text)
    assert status == 200 and body["status"] == "ok" and body["judged_turns"] == 3  # liveness and figures
    assert body["hints_teacher_cannot_follow"] == 3 and body["policy_version"] == 0
    assert "preferences_by_user" not in body and "hints_unfollowed_recent" not in body
    assert "source" not in body["sampling_defaults"] and "temperature" in body["sampling_defaults"]
    for secret in ("alice", "bob", "eve", *HINTS.values(), "seeded-", str(Path.home()), str(srv.run_dir)):
        assert secret not in text, (secret, text)
    assert "key" in body["access"]  # says why


def test_healthz_with_a_users_key_shows_that_users_own(srv):
    for key, user, other in ((ALICE_KEY, "alice", "bob"), (BOB_KEY, "bob", "alice")):
        status, text = get(srv, "/healthz", Authorization=f"Bearer {key}")
        body = json.loads(text)
        assert status == 200 and body["preferences_by_user"] == {user: {"preferences": 1, "standing": 1}}, body
        assert [h["hint"] for h in body["hints_unfollowed_recent"]] == [HINTS[user]]
        assert other not in text and HINTS[other] not in text and "eve" not in text
        assert "source" in body["sampling_defaults"]  # filesystem details need a key, any key
    status, text = get(srv, "/healthz", **{"x-api-key": ALICE_KEY})  # Anthropic's header, the same key
    assert json.loads(text)["preferences_by_user"] == {"alice": {"preferences": 1, "standing": 1}}


def test_healthz_with_the_shared_key_shows_everything(srv):
    status, text = get(srv, "/healthz", Authorization=f"Bearer {SHARED}")
    body = json.loads(text)
    assert status == 200 and set(body["preferences_by_user"]) == set(HINTS), body
    assert sorted(h["hint"] for h in body["hints_unfollowed_recent"]) == sorted(HINTS.values())
    assert "generation_config.json" in body["sampling_defaults"]["source"] and "access" not in body


def test_healthz_refuses_a_wrong_key_rather_than_answering_as_if_none_was_sent(srv):
    status, text = get(srv, "/healthz", Authorization="Bearer not-a-key")
    assert status == 401 and json.loads(text)["error"]["code"] == "invalid_api_key"


def test_metrics_per_user_series_follow_the_same_rule(srv):
    _, mine = get(srv, "/metrics", Authorization=f"Bearer {ALICE_KEY}")
    assert 'openclaw_user_judged_turns{user="alice"} 1' in mine and 'user="bob"' not in mine and "eve" not in mine
    _, every = get(srv, "/metrics", Authorization=f"Bearer {SHARED}")
    assert 'user="alice"' in every and 'user="bob"' in every


# ---------------------------------------------------------------------------------------------- 6: labels
def test_no_control_character_of_a_user_name_reaches_metrics_raw(srv):
    _, text = get(srv, "/metrics", Authorization=f"Bearer {SHARED}")
    assert not re.search(r"[\x00-\x09\x0b-\x1f\x7f\x85\u2028\u2029]", text), "a raw control character in /metrics"
    assert "\r" not in text
    assert r'openclaw_user_judged_turns{user="eve\\x0d\nx\\x00\\x1b"} 1' in text, text[-1500:]
    for line in text.splitlines():  # every line is a comment or `name{labels} value`
        assert line.startswith("#") or re.fullmatch(r'[a-zA-Z_:][a-zA-Z0-9_:]*(\{([a-z_]+="([^"\\]|\\.)*",?)*\})? \S+', line), line


@pytest.mark.parametrize("value, shown", [
    ("a\\b", "a\\\\b"), ('say "hi"', 'say \\"hi\\"'), ("two\nlines", "two\\nlines"), ("cr\r", "cr\\\\x0d"),
    ("nul\x00", "nul\\\\x00"), ("esc\x1b", "esc\\\\x1b"), ("del\x7f", "del\\\\x7f"), ("nel\x85", "nel\\\\x85"),
    ("sep\u2028", "sep\\\\x2028"), ("tab\t", "tab\\\\x09"), ("ünïcode", "ünïcode"),
])
def test_label_values_escape_what_the_format_escapes_and_show_every_other_control_character(value, shown):
    assert label_value(value) == shown


# ---------------------------------------------------------------------------------------------- 3, 4: framing
@pytest.mark.parametrize("method, path", [("POST", "/v1/chat/completions"), ("GET", "/healthz")])
@pytest.mark.parametrize("declared", [99_999_999_999_999, 9 * 1024 * 1024])
def test_a_body_declared_over_the_limit_is_refused_at_once(srv, declared, method, path):
    """It was waited for (60 s, a connection slot held) and answered 408; now a 413 at once, then closed,
    on any endpoint."""
    head = (f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {SHARED}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {declared}\r\n\r\n{{}}").encode()
    out, took, closed = raw_exchange(srv.port, head, timeout=20)
    status, err, ctype = json_error(out)
    assert status == 413 and err["code"] == "request_too_large" and str(declared) in err["message"], out[:400]
    assert ctype.startswith("application/json") and closed and took < 10, (took, closed)
    assert srv.health()["status"] == "ok"


def test_an_http09_request_line_is_refused_and_closed(srv):
    out, _, closed = raw_exchange(srv.port, b"GET /healthz\r\n\r\n")
    status, err, _ = json_error(out)
    assert status == 400 and err["code"] == "http_version_not_supported" and closed, out[:400]
    assert b'"status": "ok"' not in out


# ---------------------------------------------------------------------------------------------- 5: identity
def test_the_shared_key_is_one_identity_whichever_header_carries_it(srv):
    """``x-api-key`` (Anthropic's clients) recorded turns with no user, ``Bearer`` as ``key:<hash>``."""
    ids = []
    for header, value in {"Authorization": f"Bearer {SHARED}", "x-api-key": SHARED}.items():
        body = {"model": "m", "max_tokens": 2, "messages": [{"role": "user", "content": f"sent with {header}"}]}
        status, out = post_chat(srv, body, **{header: value})
        assert status == 200, out
        ids.append(out["id"])
    user_of = {t["request_id"]: s["user"] for s in srv.records()["sessions"] for t in s["turns"]}
    users = [user_of[i] for i in ids]
    assert users[0] == users[1] and users[0].startswith("key:") and SHARED not in users[0], users


# ---------------------------------------------------------------------------------------------- 7: parser errors
PARSER_REFUSES = {
    "header_too_long": b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: " + b"a" * 9000 + b"\r\n\r\n",
    "bare_cr": b"GET /healthz HTTP/1.1\rHost: 127.0.0.1\r\n\r\n",
    "nul_in_header": b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-A: a\x00b\r\n\r\n",
    "obs_fold": b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-A: a\r\n b\r\n\r\n",
    "bad_chunk_size": b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                      b"Transfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n",
    "content_length_and_chunked": b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 5\r\n"
                                  b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    "secret_in_a_bad_header": b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer sk-leak\x00ed\r\n\r\n",
}


@pytest.mark.parametrize("request_bytes", list(PARSER_REFUSES.values()), ids=list(PARSER_REFUSES))
def test_what_the_http_parser_refuses_is_answered_as_the_api_answers_and_logged_in_one_line(srv, request_bytes):
    before = srv.log_path.read_text(errors="replace")
    out, _, closed = raw_exchange(srv.port, request_bytes)
    status, err, ctype = json_error(out)
    assert status == 400 and ctype.startswith("application/json") and closed, out[:400]
    assert err["type"] == "invalid_request_error" and err["code"] == "malformed_request" and err["message"], err
    time.sleep(0.2)
    new = srv.log_path.read_text(errors="replace")[len(before):]
    lines = [ln for ln in new.splitlines() if "malformed HTTP request" in ln]  # none once 5 in 10 s were logged
    assert len(lines) <= 1 and all(" INFO " in ln for ln in lines), new
    assert "Traceback" not in new and "ERROR" not in new and "sk-leak" not in new, new


def test_head_of_a_post_endpoint_says_what_is_allowed(srv):
    out, _, _ = raw_exchange(srv.port, b"HEAD /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                       b"Authorization: Bearer " + SHARED.encode() + b"\r\nConnection: close\r\n\r\n")
    head = out.decode("latin-1").split("\r\n")
    assert head[0].split()[1] == "405", out[:300]
    headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in head[1:] if ln)}
    assert headers["allow"] == "POST" and headers["content-type"].startswith("application/json"), headers
