"""Thinking models (Qwen3's ``enable_thinking``, ``<think>`` replies): the request's template switch reaches the chat
template, reasoning comes back as ``reasoning_content`` (streamed and not) and never as content, and the turn
records the switch so the teacher re-renders the prompt the same way."""

from __future__ import annotations

import json
import shutil
import urllib.error
import urllib.request

import pytest

from slime_ext.chat.reply import ReplyParser
from slime_ext.models import resolve_model

# a ChatML template whose thinking switch opens the reply inside <think> (as Qwen3's thinking checkpoints do)
TEMPLATE = ("{%- for m in messages %}{{ '<|im_start|>' + m.role + '\\n' + (m.content if m.content is string else '') "
            "+ '<|im_end|>\\n' }}{%- endfor %}{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
            "{%- if enable_thinking is defined and enable_thinking %}{{ '<think>\\n' }}{%- endif %}{%- endif %}")


def events(text: str, step: int, **kw) -> tuple[str, str]:
    p, out = ReplyParser(**kw), []
    for i in range(step, len(text) + step, step):
        out += p.feed(text[:i])
    out += p.feed(text, final=True)
    assert p.reasoning == "".join(v for k, v in out if k == "reasoning") and p.content == "".join(
        v for k, v in out if k == "content")
    return p.reasoning, p.content


@pytest.mark.parametrize("step", [1, 2, 5, 1000])
def test_reasoning_is_split_from_the_answer_however_the_text_arrives(step):
    assert events("<think>\nCount: 2+2.\n</think>\n\nIt is 4.", step) == ("Count: 2+2.\n", "It is 4.")
    assert events("Still thinking: a</think>\n\nb", step, thinking=True) == ("Still thinking: a", "b")
    assert events("Plain answer, no <think> here.", step) == ("", "Plain answer, no <think> here.")
    assert events("<think>cut off by the length limit", step) == ("cut off by the length limit", "")


@pytest.fixture(scope="module")
def thinking_model(tmp_path_factory):
    d = tmp_path_factory.mktemp("thinking") / "model"
    shutil.copytree(resolve_model("tiny"), d)
    (d / "chat_template.jinja").write_text(TEMPLATE)
    return d


def post(srv, body):
    req = urllib.request.Request(srv.url + "/chat/completions", data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return r.read().decode()


def test_enable_thinking_reaches_the_template_and_reasoning_is_not_content(make_server, thinking_model):
    srv = make_server(str(thinking_model), extra=["--max-tokens-cap", "12"])
    user = [{"role": "user", "content": "Think, then answer."}]
    body = json.loads(post(srv, {"messages": user, "max_tokens": 12, "seed": 1, "enable_thinking": True}))
    msg = body["choices"][0]["message"]
    assert msg["reasoning_content"] and msg["content"] == ""  # the random model never closes </think>
    stream = post(srv, {"messages": user, "max_tokens": 12, "seed": 1, "stream": True,
                        "chat_template_kwargs": {"enable_thinking": True}})
    deltas = [json.loads(line[6:])["choices"][0]["delta"] for line in stream.splitlines()
              if line.startswith("data: {") and json.loads(line[6:])["choices"]]
    assert "".join(d.get("reasoning_content") or "" for d in deltas) == msg["reasoning_content"]  # same seed
    assert not "".join(d.get("content") or "" for d in deltas)
    plain = json.loads(post(srv, {"messages": user, "max_tokens": 12, "seed": 1, "enable_thinking": False}))
    assert "reasoning_content" not in plain["choices"][0]["message"]
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(thinking_model)
    turns = [t for s in srv.records()["sessions"] for t in s["turns"]]
    switch = sorted(t["sampling"]["chat_template_kwargs"]["enable_thinking"] for t in turns)
    assert switch == [False, True, True]  # recorded, for the teacher to render the prompt the same way
    for t in turns:  # the template saw the switch: the thinking prompts end inside <think>
        opened = tok.decode(t["prompt_token_ids"][-4:]).rstrip().endswith("<think>")
        assert opened == t["sampling"]["chat_template_kwargs"]["enable_thinking"]


@pytest.mark.parametrize("field, value", [("enable_thinking", "yes"), ("chat_template_kwargs", {"messages": 1}),
                                          ("chat_template_kwargs", ["enable_thinking"])])
def test_a_bad_thinking_switch_is_refused_naming_it(tiny_server, field, value):
    with pytest.raises(urllib.error.HTTPError) as e:
        post(tiny_server, {"messages": [{"role": "user", "content": "hi"}], field: value})
    err = json.loads(e.value.read())["error"]
    assert e.value.code == 400 and err["param"] == field


def test_the_teacher_renders_the_hinted_prompt_with_the_turns_switch(thinking_model):
    from transformers import AutoTokenizer

    from slime_ext.chat.prompt import PromptRenderer
    from slime_ext.learning.teacher import teacher_prompt_ids

    renderer = PromptRenderer(AutoTokenizer.from_pretrained(thinking_model))
    question = [{"role": "user", "content": "What is 2+2?"}]
    thinking = renderer.tokenizer.decode(teacher_prompt_ids(renderer, question, "Answer in one word.",
                                                            template_kwargs={"enable_thinking": True}))
    plain = renderer.tokenizer.decode(teacher_prompt_ids(renderer, question, "Answer in one word."))
    assert "Answer in one word." in thinking and thinking.rstrip().endswith("<think>")
    assert not plain.rstrip().endswith("<think>") and plain.rstrip() == thinking.rstrip().removesuffix("<think>").rstrip()
