"""Teacher prompts: the request with the hint in a marked block on the last user message."""

import pytest
from transformers import AutoTokenizer

from slime_ext.chat.prompt import PromptRenderer
from slime_ext.learning.teacher import HINT_BLOCK, teacher_messages, teacher_prompt_ids
from slime_ext.models import resolve_model

HINT = "Answer with a single word."


def test_hint_goes_to_the_last_user_message_only_and_the_request_is_not_changed():
    msgs = [{"role": "system", "content": "sys"}, {"role": "user", "content": "first"},
            {"role": "assistant", "content": "reply"}, {"role": "user", "content": "second"},
            {"role": "tool", "content": "result"}]
    out = teacher_messages(msgs, f"  {HINT}\n")
    assert out[3]["content"] == "second" + HINT_BLOCK.format(hint=HINT)
    assert [m for i, m in enumerate(out) if i != 3] == [m for i, m in enumerate(msgs) if i != 3]
    assert msgs[3]["content"] == "second"  # a copy: the recorded request is untouched


def test_content_parts_get_a_text_part():
    msgs = [{"role": "user", "content": [{"type": "text", "text": "look"}]}]
    out = teacher_messages(msgs, HINT)
    assert out[0]["content"][0] == {"type": "text", "text": "look"}
    assert out[0]["content"][1]["type"] == "text" and HINT in out[0]["content"][1]["text"]
    assert len(msgs[0]["content"]) == 1


@pytest.mark.parametrize("msgs, hint, error", [
    ([{"role": "assistant", "content": "x"}], HINT, "no user message"),
    ([{"role": "user", "content": "x"}], "   ", "empty"),
])
def test_bad_inputs_are_refused(msgs, hint, error):
    with pytest.raises(ValueError, match=error):
        teacher_messages(msgs, hint)


def test_rendered_teacher_prompt_is_the_student_prompt_plus_the_hint_block():
    tok = AutoTokenizer.from_pretrained(str(resolve_model("tiny")))
    renderer = PromptRenderer(tok)
    msgs = [{"role": "user", "content": "What is the capital of France?"}]
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object", "properties": {}}}}]
    student = tok.decode(renderer.render(msgs, tools))
    teacher = tok.decode(teacher_prompt_ids(renderer, msgs, HINT, tools, "auto"))
    assert teacher == student.replace("What is the capital of France?", "What is the capital of France?" + HINT_BLOCK.format(hint=HINT))
    assert "lookup" in teacher  # the request's tools are rendered as for the student

