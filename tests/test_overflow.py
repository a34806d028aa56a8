"""``chat/overflow.py``: a prompt past the context keeps the conversation whole and loses the middle of the longest
system message (head and tail kept, a marker saying how much was cut); what cannot fit is refused."""

import pytest

from slime_ext.chat.overflow import MIN_KEPT, fit_messages


def encode(text):
    return text.split()


def decode(tokens):
    return " ".join(tokens)


def render(messages):
    """One token per word of each message (its text parts joined), plus two per message (its role and its end)."""
    def text(m):
        return m["content"] if isinstance(m["content"], str) else "".join(p["text"] for p in m["content"])

    return [t for m in messages for t in ["<" + m["role"] + ">", *encode(text(m)), "</>"]]


def fit(messages, budget, context=1000):
    return fit_messages(messages, render(messages), render, encode, decode, budget, context)


SYSTEM = " ".join(f"s{i}" for i in range(2000))
CHAT = [{"role": "user", "content": "plan my day"}, {"role": "assistant", "content": "sure: first coffee"},
        {"role": "user", "content": "shorter please"}]


def test_a_prompt_that_fits_is_left_alone():
    messages = [{"role": "system", "content": "be brief"}, *CHAT]
    assert fit(messages, budget=100) == (messages, render(messages), 0)


def test_the_longest_system_message_loses_its_middle_and_the_conversation_stays():
    short = {"role": "system", "content": "short rules here"}
    messages = [{"role": "system", "content": SYSTEM}, short, *CHAT]
    out, ids, cut = fit(messages, budget=900)
    assert len(ids) <= 900 and ids == render(out) and cut > 0
    assert out[1:] == messages[1:]  # the other system message and every turn, unchanged
    words = out[0]["content"].split()
    assert words[0] == "s0" and words[-1] == "s1999"  # the head and the tail are kept
    kept = [w for w in words if w.startswith("s") and w[1:].isdigit()]
    assert len(kept) == 2000 - cut >= MIN_KEPT and f"[... {cut} tokens of this message were cut" in out[0]["content"]
    head = [int(w[1:]) for w in kept]
    assert head == sorted(head) and len(set(head)) == len(head)  # a contiguous head and tail, in order


def test_a_system_message_of_text_parts_is_cut_too():
    parts = [{"type": "text", "text": SYSTEM[:5000]}, {"type": "text", "text": SYSTEM[5000:]}]
    out, ids, cut = fit([{"role": "system", "content": parts}, *CHAT], budget=900)
    assert len(ids) <= 900 and cut > 0 and isinstance(out[0]["content"], str)
    assert out[0]["content"].startswith("s0 s1") and out[0]["content"].endswith("s1999")


def test_the_next_turn_gets_the_same_cut_so_its_prefix_is_reused():
    system = {"role": "system", "content": " ".join(f"s{i}" for i in range(5000))}
    first, _, cut = fit([system, *CHAT[:1]], budget=3000)
    second, _, cut2 = fit([system, *CHAT, {"role": "user", "content": "one more thing " * 20}], budget=3000)
    assert cut == cut2 and first[0] == second[0]  # the same system message, token for token
    assert (5000 - cut) % 512 == 0


def test_what_cannot_fit_is_refused_naming_the_numbers():
    with pytest.raises(ValueError, match="the prompt is 2007 tokens, but this model's context is 1000 tokens"):
        fit([{"role": "user", "content": SYSTEM}, *CHAT[:1]], budget=900)  # no system message to cut
    long_chat = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": SYSTEM}]
    with pytest.raises(ValueError, match="cutting the system prompt cannot make it fit in 900"):
        fit(long_chat, budget=900)  # the conversation alone is too long
