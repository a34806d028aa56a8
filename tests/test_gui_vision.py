"""The GUI setting with a vision-language model on Slime's path: the page's screenshot goes with every
observation, the prompt holds one placeholder run per screenshot as long as the model's processor makes it,
SGLang gets the screenshots as ``image_data`` (checked by the SGLang-protocol test server against the ids), and
each sample carries Slime's multimodal fields for exactly the images its tokens show. The embedded engine
and the text settings refuse images with a clear error."""

import asyncio
import io
import types

import pytest
from _sglang_server import serving_in_thread
from _tiny_vl import make_tiny_vl

from slime_ext.chat.vision import first_images, placeholder_runs
from slime_ext.engines.base import EngineError, SamplingParams
from slime_ext.engines.local import LocalEngine
from slime_ext.envs import get_task, list_tasks, make_env
from slime_ext.envs.agent_loop import ChatSegments
from slime_ext.hooks.generate import EnvSettings, generate
from slime_ext.types import Sample

SAMPLING = {"temperature": 1.0, "top_p": 1.0, "max_new_tokens": 6, "sampling_seed": 11}  # the same episodes


def _png(width: int, height: int, color: str = "red") -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (width, height), color).save(buf, format="PNG")
    return buf.getvalue()


@pytest.fixture(scope="module")
def tiny_vl(tmp_path_factory):
    return make_tiny_vl(tmp_path_factory.mktemp("tiny-vl"))


@pytest.fixture(scope="module")
def renderer(tiny_vl):
    from slime_ext.chat.vision import VisionRenderer

    return VisionRenderer.from_pretrained(tiny_vl)


@pytest.fixture(scope="module")
def vl_router(tiny_vl, renderer):
    from transformers import AutoImageProcessor

    with serving_in_thread(tiny_vl, image_processor=AutoImageProcessor.from_pretrained(str(tiny_vl)),
                           image_token_id=renderer.image_token_id) as fake:
        host, port = fake.url.split("//")[1].split(":")
        yield types.SimpleNamespace(ip=host, port=int(port), model_dir=str(tiny_vl), fake=fake)


def test_each_image_becomes_one_placeholder_run_of_the_processors_length(renderer):
    # patch 16, merge 2: a 128x64 image is an 8x4 patch grid (8 tokens), 64x64 a 4x4 one (4 tokens); both are
    # multiples of 32 inside the processor's pixel bounds, so it keeps their size
    small, square = _png(128, 64), _png(64, 64, "blue")
    messages = [{"role": "user", "content": [{"type": "image", "image": small}, {"type": "text", "text": "one"}]},
                {"role": "user", "content": [{"type": "image", "image": square}, {"type": "text", "text": "two"}]}]
    ids = renderer.render(messages, [])
    assert placeholder_runs(ids, renderer.image_token_id) == [8, 4]
    assert [renderer.tokens_per_image(im) for im in (small, square)] == [8, 4]
    tensors = renderer.train_inputs([small, square])
    assert tensors["image_grid_thw"].tolist() == [[1, 4, 8], [1, 4, 4]]
    assert tensors["pixel_values"].shape[0] == 32 + 16  # one row per patch, the images in order
    first = first_images(tensors, 1)
    assert first["image_grid_thw"].tolist() == [[1, 4, 8]] and first["pixel_values"].shape[0] == 32
    assert (first["pixel_values"] == renderer.train_inputs([small])["pixel_values"]).all()
    text = renderer.tokenizer.decode(ids)
    assert text.index("one") < text.index("two") and text.count("<|vision_start|>") == 2
    assert renderer.render([{"role": "user", "content": "no image"}], []).count(renderer.image_token_id) == 0


def test_observation_tokens_with_a_screenshot_continue_the_conversation(renderer):
    seg = ChatSegments(renderer)
    shot = _png(1024, 768)  # a screenshot: the processor scales it to 128x96, 12 tokens
    prompt = seg.prompt_ids("do it", [shot])
    obs = seg.observation_ids("clicked [3]", "user", ended=True, images=[shot])
    assert placeholder_runs(prompt, renderer.image_token_id) == [12] and placeholder_runs(obs, renderer.image_token_id) == [12]
    # the observation is exactly what rendering the whole conversation adds after the model's turn
    whole = renderer.render([{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"},
                             {"role": "user", "content": [{"type": "image", "image": shot},
                                                          {"type": "text", "text": "clicked [3]"}]}], [])
    assert whole[-len(obs):] == obs


def test_a_text_model_an_embedded_engine_and_a_text_setting_refuse_images(tiny_vl):
    from transformers import AutoTokenizer

    from slime_ext.chat.prompt import PromptRenderer

    text_only = ChatSegments(PromptRenderer(AutoTokenizer.from_pretrained(str(tiny_vl))))
    with pytest.raises(ValueError, match="text-only"):
        text_only.prompt_ids("do it", [_png(64, 64)])
    engine = LocalEngine(tiny_vl, dtype="float32", threads=1)

    async def one():
        async for _ in engine.generate([1, 2, 3], SamplingParams(max_new_tokens=2), images=[_png(64, 64)]):
            pass

    with pytest.raises(EngineError, match="embedded engine is text-only"):
        asyncio.run(one())
    with pytest.raises(ValueError, match="setting 'terminal' shows no images"):
        make_env("terminal", max_turns=2, vision=True)
    with pytest.raises(ValueError, match="vision true or false"):
        EnvSettings.from_args(types.SimpleNamespace(openclaw_rl_env={"vision": "yes"}))


def test_the_gui_env_shows_a_screenshot_only_with_vision():
    from tests.conftest import require_chromium

    require_chromium()
    from PIL import Image

    task = get_task("gui", list_tasks("gui", "train")[0].id)
    with make_env("gui", max_turns=3, vision=True) as env:
        first = env.reset(task)
        assert "a screenshot of it" in first
        [shot] = env.observation_images()
        viewport = tuple(env.sandbox.evaluate("[window.innerWidth, window.innerHeight]"))
        assert Image.open(io.BytesIO(shot)).size == viewport  # what the page shows, not the whole document
        env.step("scroll down")
        [after] = env.observation_images()
        assert Image.open(io.BytesIO(after)).size == viewport
    with make_env("gui", max_turns=3) as env:
        env.reset(task)
        assert env.observation_images() == []


@pytest.mark.parametrize("samples", ["episode", "step"])
def test_a_vision_episode_sends_the_screenshots_and_fills_slimes_multimodal_fields(vl_router, renderer, samples):
    from tests.conftest import require_chromium

    require_chromium()
    args = types.SimpleNamespace(sglang_router_ip=vl_router.ip, sglang_router_port=vl_router.port,
                                 hf_checkpoint=vl_router.model_dir,
                                 openclaw_rl_env={"max_turns": 3, "vision": True, "samples": samples})
    task_id = list_tasks("gui", "train")[0].id
    seen = len(vl_router.fake.image_sizes)
    out = asyncio.run(generate(args, Sample(index=3, prompt="p", metadata={"setting": "gui", "task_id": task_id}),
                               dict(SAMPLING)))
    outs = out if isinstance(out, list) else [out]
    assert outs and all(s.status != Sample.Status.FAILED for s in outs), [s.metadata for s in outs]
    sent = vl_router.fake.image_sizes[seen:]  # every request the server accepted, its images checked
    assert [len(s) for s in sent] == list(range(1, len(sent) + 1))  # one more screenshot per turn
    assert len({size for images in sent for size in images}) == 1  # the same viewport every time
    for s in outs:
        runs = placeholder_runs(s.tokens, renderer.image_token_id)
        grid = s.multimodal_train_inputs["image_grid_thw"].tolist()
        assert len(runs) == len(grid) == len(s.multimodal_inputs["images"]) >= 1
        assert runs == [t * h * w // 4 for t, h, w in grid]
        assert s.multimodal_train_inputs["pixel_values"].shape[0] == sum(t * h * w for t, h, w in grid)
        assert [im.size for im in s.multimodal_inputs["images"]] == sent[-1][:len(runs)]
        assert all(s.tokens[i] != renderer.image_token_id  # no placeholder is ever trained on
                   for i, m in enumerate(s.loss_mask, start=len(s.tokens) - s.response_length) if m)


def test_a_text_episode_sends_no_images(vl_router):
    from tests.conftest import require_chromium

    require_chromium()
    args = types.SimpleNamespace(sglang_router_ip=vl_router.ip, sglang_router_port=vl_router.port,
                                 hf_checkpoint=vl_router.model_dir, openclaw_rl_env={"max_turns": 2})
    before = len(vl_router.fake.requests)
    sample = Sample(index=1, prompt="p", metadata={"setting": "gui", "task_id": list_tasks("gui", "train")[0].id})
    out = asyncio.run(generate(args, sample, dict(SAMPLING)))
    assert out.status != Sample.Status.FAILED and out.multimodal_train_inputs is None
    assert all("image_data" not in body for body in vl_router.fake.requests[before:])


def test_images_that_do_not_match_their_placeholders_are_refused_by_the_server(vl_router, renderer):
    from slime_ext.engines.sglang import SGLangEngine

    async def one(ids, images):
        engine = await SGLangEngine.connect(f"http://{vl_router.ip}:{vl_router.port}")
        try:
            return [t.token_id async for t in engine.generate(ids, SamplingParams(max_new_tokens=2), images=images)]
        finally:
            await engine.close()

    pad = renderer.image_token_id
    with pytest.raises(EngineError, match="needs 8 placeholder tokens, input_ids hold 3"):
        asyncio.run(one([1, *[pad] * 3, 2], [_png(128, 64)]))
    with pytest.raises(EngineError, match="1 image placeholder run"):
        asyncio.run(one([1, *[pad] * 8, 2], [_png(128, 64), _png(128, 64)]))
    assert len(asyncio.run(one([1, *[pad] * 8, 2], [_png(128, 64)]))) == 2
