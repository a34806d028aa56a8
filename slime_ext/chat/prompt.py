"""Render chat messages (and tools) to prompt token ids with the model's own chat template.

The server tokenizes here, once, and the engine receives exactly these ids; they are what the
store records. Templates that know tools (they mention ``tools``) get them natively. For other
templates (SmolLM2's) the tools are described in the system message in the Hermes / Qwen
convention the parser in ``reply.py`` reads back: ``<tool_call>{"name", "arguments"}</tool_call>``;
assistant tool calls are written into the assistant text that way and tool results become user
messages wrapped in ``<tool_response>``.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from slime_ext.sessions import message_text

TOOLS_PREAMBLE = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{tools}\n</tools>\n\n"
    "For each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n{{\"name\": <function-name>, \"arguments\": <args-json-object>}}\n</tool_call>"
)


def tool_call_text(call: dict[str, Any]) -> str:
    fn = call["function"]
    args = fn.get("arguments", "{}")
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except (ValueError, RecursionError):  # shown as the string the client sent
            pass
    return "<tool_call>\n" + json.dumps({"name": fn["name"], "arguments": args}, ensure_ascii=False) + "\n</tool_call>"


class PromptRenderer:
    """Messages -> prompt token ids, using the tokenizer's chat template."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        template = tokenizer.chat_template or ""
        self.native_tools = "tools" in template and "tool_call" in template

    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], tool_choice: Any = "auto",
               add_generation_prompt: bool = True, template_kwargs: dict[str, Any] | None = None) -> list[int]:
        """Prompt ids; ``template_kwargs`` are extra variables for the template (``enable_thinking``)."""
        msgs, extra = self._template_input(messages, tools, tool_choice)
        ids = self.tokenizer.apply_chat_template(msgs, add_generation_prompt=add_generation_prompt, tokenize=True,
                                                 return_dict=False, **(template_kwargs or {}), **extra)
        return list(ids)

    def text(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], tool_choice: Any = "auto",
             template_kwargs: dict[str, Any] | None = None) -> str:
        """The prompt as text, not tokenized: what ``render`` encodes (cheap next to encoding a huge prompt)."""
        msgs, extra = self._template_input(messages, tools, tool_choice)
        return self.tokenizer.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False,
                                                  **(template_kwargs or {}), **extra)

    def fewest_tokens(self, n_bytes: int) -> int:
        """A lower bound on the tokens that ``n_bytes`` bytes of UTF-8 text encode to, found without encoding
        them: no token stands for more bytes than ``max_token_bytes``. 0 when the vocabulary is unknown."""
        per_token = self.max_token_bytes
        return -(-n_bytes // per_token) if per_token else 0

    @functools.cached_property
    def max_token_bytes(self) -> int:
        """The most bytes of text one token can stand for, over-estimated, for a tokenizer that spells every
        byte of its input with tokens (byte-level BPE, or SentencePiece with byte fallback): the UTF-8 length
        of the longest vocabulary entry (a byte-level entry spells each byte with one character of one or two
        bytes; a SentencePiece entry spells a space with a three-byte '▁'), times 4 when the tokenizer
        normalizes text first (normalizing can shrink text, e.g. Hangul jamo composing to a third of their
        bytes). 0 for other tokenizers (a WordPiece one drops whitespace: no bound holds) and when there is
        no vocabulary to read."""
        tok = getattr(self.tokenizer, "tokenizer", self.tokenizer)  # a processor wraps its tokenizer
        backend = getattr(tok, "backend_tokenizer", None)
        decoder = str(getattr(backend, "decoder", None))
        if "ByteLevel" not in decoder and "ByteFallback" not in decoder:
            return 0
        try:
            longest = max(len(t.encode("utf-8", "surrogatepass")) for t in tok.get_vocab())
        except Exception:
            return 0
        return longest * (4 if backend.normalizer is not None else 1)

    def _template_input(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]],
                        tool_choice: Any) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """``(messages, extra template variables)`` as the chat template takes them."""
        use_tools = bool(tools) and tool_choice != "none"
        if self.native_tools:
            msgs = [self._native(m) for m in messages]
            extra = {"tools": tools} if use_tools else {}
        else:
            msgs = self._fallback(messages, tools if use_tools else [])
            extra = {}
        if use_tools and tool_choice not in ("auto", None):
            name = tool_choice["function"]["name"] if isinstance(tool_choice, dict) else None
            must = f"You must call the function {name}." if name else "You must call at least one function."
            msgs = _append_to_system(msgs, must)
        return msgs, extra

    @staticmethod
    def _native(m: dict[str, Any]) -> dict[str, Any]:
        out = {"role": m["role"], "content": message_text(m)}
        if m.get("tool_calls"):
            out["tool_calls"] = [
                {**tc, "function": {**tc["function"], "arguments": _args_json(tc["function"].get("arguments"))}}
                for tc in m["tool_calls"]
            ]
        return out

    @staticmethod
    def _fallback(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
        msgs: list[dict[str, Any]] = []
        for m in messages:
            text = message_text(m)
            if m["role"] == "assistant" and m.get("tool_calls"):
                blocks = [tool_call_text(tc) for tc in m["tool_calls"]]
                text = "\n".join(([text] if text else []) + blocks)
                msgs.append({"role": "assistant", "content": text})
            elif m["role"] == "tool":
                msgs.append({"role": "user", "content": f"<tool_response>\n{text}\n</tool_response>"})
            else:
                msgs.append({"role": m["role"], "content": text})
        if tools:
            described = "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
            msgs = _append_to_system(msgs, TOOLS_PREAMBLE.format(tools=described))
        return msgs


def _args_json(args: Any) -> str:
    return args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)


def _append_to_system(msgs: list[dict[str, Any]], text: str) -> list[dict[str, Any]]:
    if msgs and msgs[0]["role"] == "system":
        first = dict(msgs[0])
        first["content"] = (first["content"] + "\n\n" + text) if first["content"] else text
        return [first] + msgs[1:]
    return [{"role": "system", "content": text}] + msgs


def stop_token_ids(tokenizer: Any) -> tuple[int, ...]:
    """Token ids that end an assistant turn: EOS and the usual end-of-turn markers the vocabulary has."""
    ids = set()
    if getattr(tokenizer, "eos_token_id", None) is not None:
        ids.add(int(tokenizer.eos_token_id))
    for tok in ("<|im_end|>", "<|endoftext|>", "<|eot_id|>"):
        try:
            tid = tokenizer.convert_tokens_to_ids(tok)
        except Exception:
            continue
        if isinstance(tid, int) and tid >= 0 and tid != getattr(tokenizer, "unk_token_id", None):
            ids.add(tid)
    return tuple(sorted(ids))
