"""``ignore_eos`` (as vLLM, SGLang and llama.cpp take it): the reply runs to ``max_tokens`` whatever the model
says, so benchmarks compare equal token counts; anything but a boolean is refused naming the field."""

import json
import urllib.error
import urllib.request

import pytest


def post(srv, body):
    req = urllib.request.Request(srv.url + "/chat/completions", data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())


def test_ignore_eos_runs_every_reply_to_max_tokens(tiny_server):
    for seed in range(6):
        out = post(tiny_server, {"messages": [{"role": "user", "content": f"hi {seed}"}], "max_tokens": 24,
                                 "seed": seed, "ignore_eos": True})
        assert out["usage"]["completion_tokens"] == 24 and out["choices"][0]["finish_reason"] == "length"
    with pytest.raises(urllib.error.HTTPError) as e:
        post(tiny_server, {"messages": [{"role": "user", "content": "hi"}], "ignore_eos": "yes"})
    assert e.value.code == 400 and json.loads(e.value.read())["error"]["param"] == "ignore_eos"
