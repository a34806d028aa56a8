"""Chat messages with images -> token ids for a vision-language model of the Qwen-VL family (Qwen2-VL,
Qwen2.5-VL, Qwen3-VL), and the vision tensors its trainer needs.

A message's image part (``{"type": "image", "image": <PNG bytes>}``) is rendered by the model's chat template
as one image token between vision markers (``<|vision_start|><|image_pad|><|vision_end|>``); the model's
processor then repeats that token once per vision embedding: ``grid_t * grid_h * grid_w / merge_size**2`` of
the patch grid its image processor cuts the image into. ``VisionRenderer`` does exactly that with the image
processor alone (the count from the image's size, ``get_number_of_image_patches``: no pixels are processed
to render; ``train_inputs`` processes them once per episode) (what ``Qwen3VLProcessor`` does for images, without its video half, which needs torchvision).
So the ids it gives are the ids the model sees: SGLang's ``/generate`` takes them with the images as
``image_data`` (in the order of their runs), and ``train_inputs`` (``pixel_values``, ``image_grid_thw``) is
what Slime's actor feeds the vision tower for the same runs (``Sample.multimodal_train_inputs``).

Invariant: the i-th run of image tokens in ``render``'s ids is ``tokens_per_image(images[i])`` long, and
``train_inputs(images)["image_grid_thw"][i]`` gives the same count (``grid_t*grid_h*grid_w / merge_size**2``).
The embedded engine is text-only; this renderer serves the Slime path (``slime_ext.hooks.generate``).
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

IMAGE_TOKEN = "<|image_pad|>"  # the Qwen-VL family's image placeholder


def image_parts(messages: Sequence[dict[str, Any]]) -> list[bytes]:
    """The images of ``messages`` (PNG bytes of their ``image`` parts), in order."""
    return [part["image"] for m in messages if isinstance(m.get("content"), list)
            for part in m["content"] if isinstance(part, dict) and part.get("type") == "image"]


def placeholder_runs(ids: Sequence[int], token: int) -> list[int]:
    """Lengths of the runs of ``token`` in ``ids``, in order: one per image the ids show."""
    runs: list[int] = []
    prev = None
    for t in ids:
        if t == token:
            if prev == token:
                runs[-1] += 1
            else:
                runs.append(1)
        prev = t
    return runs


def first_images(train_inputs: dict[str, Any], n: int) -> dict[str, Any]:
    """The ``train_inputs`` of the first ``n`` images of a list (its patches come image after image)."""
    thw = train_inputs["image_grid_thw"][:n]
    rows = int(thw.prod(dim=-1).sum()) if n else 0
    return {**train_inputs, "image_grid_thw": thw, "pixel_values": train_inputs["pixel_values"][:rows]}


def load_images(images: Sequence[bytes]) -> list[Any]:
    """PNG (or any format PIL reads) bytes -> RGB PIL images; ValueError names the image that is not one."""
    from PIL import Image, UnidentifiedImageError

    out = []
    for i, data in enumerate(images):
        try:
            out.append(Image.open(io.BytesIO(data)).convert("RGB"))
        except (UnidentifiedImageError, OSError) as e:
            raise ValueError(f"image {i}: not an image PIL can read ({e})") from None
    return out


class VisionRenderer:
    """Messages (with image parts) -> prompt token ids, placeholders expanded; see the module docstring.
    ``render`` has ``PromptRenderer.render``'s signature, so the agent loop's ``ChatSegments`` takes either."""

    vision = True  # ChatSegments refuses images with a renderer that lacks this

    def __init__(self, tokenizer: Any, image_processor: Any, image_token: str = IMAGE_TOKEN) -> None:
        self.tokenizer = tokenizer
        self.image_processor = image_processor
        self.image_token = image_token
        self.image_token_id = tokenizer.convert_tokens_to_ids(image_token)
        if self.image_token_id is None or self.image_token_id == tokenizer.unk_token_id:
            raise ValueError(f"the tokenizer has no {image_token!r} token: not a Qwen-VL family model")
        self.merge_size = int(getattr(image_processor, "merge_size", 1) or 1)

    @classmethod
    def from_pretrained(cls, path: str | Path) -> VisionRenderer:
        """The renderer of a Hugging Face checkpoint folder (its tokenizer and image processor)."""
        from transformers import AutoImageProcessor, AutoTokenizer

        try:
            image_processor = AutoImageProcessor.from_pretrained(str(path))
        except (OSError, ValueError) as e:
            raise ValueError(f"{path}: no image processor (preprocessor_config.json) to show the model images; "
                             f"is it a vision-language model? ({type(e).__name__}: {e})") from None
        return cls(AutoTokenizer.from_pretrained(str(path)), image_processor)

    def tokens_per_image(self, image: bytes) -> int:
        """Placeholder tokens of one image: its patch count at the size the processor resizes it to."""
        from PIL import Image

        width, height = Image.open(io.BytesIO(image)).size  # the header only
        return self.image_processor.get_number_of_image_patches(height, width) // self.merge_size ** 2

    def train_inputs(self, images: Sequence[bytes]) -> dict[str, Any]:
        """The image processor's tensors for ``images`` (``pixel_values``, ``image_grid_thw``), in order."""
        return dict(self.image_processor(images=load_images(images), return_tensors="pt"))

    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], tool_choice: Any = "auto",
               add_generation_prompt: bool = True, template_kwargs: dict[str, Any] | None = None) -> list[int]:
        images = image_parts(messages)
        text = self.tokenizer.apply_chat_template(messages, tools=tools or None, tokenize=False,
                                                  add_generation_prompt=add_generation_prompt, **(template_kwargs or {}))
        pieces = text.split(self.image_token)
        if len(pieces) - 1 != len(images):
            raise ValueError(f"the chat template rendered {len(pieces) - 1} {self.image_token} token(s) for "
                             f"{len(images)} image(s): it does not render image parts the Qwen-VL way")
        runs = [self.image_token * self.tokens_per_image(image) for image in images]
        expanded = pieces[0] + "".join(run + piece for run, piece in zip(runs, pieces[1:]))
        return list(self.tokenizer(expanded, add_special_tokens=False)["input_ids"])
