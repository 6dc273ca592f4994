"""The vision-language path without Ray or vLLM: the tiny Qwen2.5-VL loads as transformers and upstream's Actor load
it and sees its image, the CPU mode's stand-ins for torchvision, the shapes task and its reward, and the image checks
that refuse bad data before any model starts, naming file and line."""

import base64
import io
import json
import textwrap

import pytest
import torch
from PIL import Image

from openrlhf_ada.cli.prepare_data import main as prepare_data
from openrlhf_ada.cli.train_local import parse_local_args
from openrlhf_ada.data.checks import DataCheckError, ImageRules, check_prompt_file
from openrlhf_ada.data.prepare import SHAPE_COLOURS, generate_shapes, image_to_data_uri

REWARD = "openrlhf_ada/rewards/shapes.py"


def picture(rgb, size=56):
    return Image.new("RGB", (size, size), rgb)


def uri(rgb, size=56):
    return image_to_data_uri(picture(rgb, size))


def prompt_for(processor, question="What colour?"):
    chat = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": question}]}]
    return processor.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)


# -- the tiny model ------------------------------------------------------------------------------------------------
def test_tiny_vl_loads_places_the_image_and_sees_it(tiny_vl_path):
    from transformers import AutoModelForImageTextToText, AutoProcessor

    processor = AutoProcessor.from_pretrained(tiny_vl_path)
    model = AutoModelForImageTextToText.from_pretrained(tiny_vl_path, dtype=torch.float32).eval()
    text = prompt_for(processor)
    assert text.startswith("<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>What colour?")
    inputs = [processor(text=[text], images=[picture(rgb)], return_tensors="pt") for rgb in ((255, 0, 0), (0, 0, 255))]
    image_id = model.config.image_token_id
    assert image_id == processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    # 56x56 pixels: 4x4 patches of 14, merged 2x2 -> 4 image tokens; each patch 3 channels x 2 frames x 14 x 14
    assert (inputs[0]["input_ids"] == image_id).sum().item() == 4
    assert tuple(inputs[0]["pixel_values"].shape) == (16, 3 * 2 * 14 * 14)
    with torch.no_grad():
        logits = [model(**x).logits[0, -1] for x in inputs]
    assert (logits[0] - logits[1]).abs().max() > 1e-4  # the answer depends on the picture
    assert torch.equal(inputs[0]["input_ids"], inputs[1]["input_ids"])


def test_upstream_actor_and_tokenizer_take_it_as_a_vision_language_model(tiny_vl_path):
    from openrlhf.models import Actor
    from openrlhf.utils.utils import get_tokenizer

    actor = Actor(tiny_vl_path, attn_implementation="eager", param_dtype="bf16")
    assert actor.is_vlm and type(actor.model).__name__ == "Qwen2_5_VLForConditionalGeneration"
    processor = get_tokenizer(tiny_vl_path, None)  # as the cluster trainer asks (openrlhf/trainer/ppo_trainer.py)
    assert hasattr(processor, "image_processor") and processor.pad_token_id is not None


def test_cpu_mode_serves_qwen_image_module_without_torchvision(tmp_path, run_python):
    """vLLM's qwen2_vl.py imports smart_resize from transformers' torchvision module; without the stand-in (a
    negative control, OPENRLHF_ADA_CPU_SKIP) that import fails on this stack."""
    script = tmp_path / "probe.py"
    script.write_text(textwrap.dedent("""
        import importlib.util, json, os
        from openrlhf_ada.cpu.patches import use_cpu_mode_without_cuda
        use_cpu_mode_without_cuda()
        try:
            from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize
            result = {"ok": smart_resize(56, 56, factor=28, min_pixels=3136, max_pixels=12544) == (56, 56)}
        except ImportError as e:
            result = {"ok": False, "error": str(e)}
        result["torchvision"] = importlib.util.find_spec("torchvision") is not None
        print("RESULT " + json.dumps(result))
    """))
    import os

    if run_python(script)["torchvision"]:
        pytest.skip("torchvision is installed here: the stand-in is inert")
    assert run_python(script)["ok"]
    os.environ["OPENRLHF_ADA_CPU_SKIP"] = "vision_without_torchvision"
    try:
        skipped = run_python(script)
    finally:
        del os.environ["OPENRLHF_ADA_CPU_SKIP"]
    assert not skipped["ok"] and "torchvision" in skipped["error"]


def test_cpu_mode_engines_take_no_videos_without_torchvision(tmp_path, tiny_vl_path, run_python):
    """An engine configured with an image limit only (as upstream's create_vllm_engines does) gets video limit 0, so
    that vLLM's profiling does not process a dummy video with the stand-in video processor (no engine starts)."""
    script = tmp_path / "config.py"
    script.write_text(textwrap.dedent(f"""
        import importlib.util, json
        from openrlhf_ada.cpu.patches import apply_cpu_patches, use_cpu_mode_without_cuda
        use_cpu_mode_without_cuda()
        apply_cpu_patches()
        from vllm.engine.arg_utils import EngineArgs
        config = EngineArgs(model={tiny_vl_path!r}, dtype="float32", enforce_eager=True, max_model_len=96,
                            limit_mm_per_prompt={{"image": 1}}, kv_cache_memory_bytes=64 << 20).create_engine_config()
        multimodal = config.model_config.multimodal_config
        print("RESULT " + json.dumps({{"image": multimodal.get_limit_per_prompt("image"),
                                      "video": multimodal.get_limit_per_prompt("video"),
                                      "torchvision": importlib.util.find_spec("torchvision") is not None}}))
    """))
    result = run_python(script)
    if result["torchvision"]:
        pytest.skip("torchvision is installed here: the stand-in is inert")
    assert (result["image"], result["video"]) == (1, 0)


# -- the shapes task -----------------------------------------------------------------------------------------------
def decode(data_uri):
    return Image.open(io.BytesIO(base64.b64decode(data_uri.split(",", 1)[1]))).convert("RGB")


def shape_colour(image):
    """The colour name nearest to the picture's most saturated pixel (the background is grey)."""
    pixels = list(image.getdata())
    pixel = max(pixels, key=lambda p: max(p) - min(p))
    named = {"red": (220, 40, 40), "green": (40, 170, 60), "blue": (40, 70, 220), "yellow": (230, 200, 40)}
    return min(named, key=lambda n: sum((a - b) ** 2 for a, b in zip(named[n], pixel)))


def test_shapes_rows_show_their_label_and_differ(tmp_path):
    out = tmp_path / "shapes.jsonl"
    assert prepare_data(["shapes", "--out", str(out), "--size", "12", "--eval-size", "4", "--seed", "3"]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 12 and len((tmp_path / "shapes.eval.jsonl").read_text().splitlines()) == 4
    assert sorted({r["label"] for r in rows}) == sorted(SHAPE_COLOURS)
    for row in rows:
        assert row["input"].count("<image>") == 1 and len(row["images"]) == 1
        image = decode(row["images"][0])
        assert image.size == (56, 56) and shape_colour(image) == row["label"]
    assert len({r["images"][0] for r in rows}) == len(rows)  # no two pictures alike
    assert generate_shapes(5, seed=3) == generate_shapes(5, seed=3)


def test_shapes_reward_by_hand():
    from openrlhf_ada.rewards.shapes import reward_func

    prompt = "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>What colour is the shape?<|im_end|>\n" \
             "<|im_start|>assistant\n"
    # the query holds the image as all its tokens (4 here): the response is found after the prompt's end
    query_head = prompt.replace("<|image_pad|>", "<|image_pad|>" * 4)
    cases = [("Red.", "red", 1.0, 1.0), (" the blue one", "blue", 1.0, 1.0), ("green", "red", 0.2, 0.0),
             ("xx", "red", 0.0, 0.0), ("a long answer, then red", "red", 0.0, 0.0), ("yellowred", "red", 0.2, 0.0)]
    for response, label, reward, score in cases:
        out = reward_func([query_head + response], [prompt], [label])
        assert out["rewards"].tolist() == [pytest.approx(reward)] and out["scores"].tolist() == [score], response


# -- bad image data is refused before any model starts ---------------------------------------------------------------
def rows_file(tmp_path, rows, name="data.jsonl"):
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


BROKEN = "data:image/png;base64," + base64.b64encode(b"\x89PNG\r\n\x1a\nnot a picture").decode()
GOOD = {"input": "<image>What colour?", "label": "red", "images": [uri((200, 0, 0))]}
VISION = ImageRules(key="images", max_images=1, vision=True)


@pytest.mark.parametrize("bad,rules,words", [
    ({"images": [BROKEN]}, VISION, ["cannot be decoded as an image"]),
    ({"images": ["data:image/png;base64,@@@"]}, VISION, ["base64 cannot be decoded"]),
    ({"images": ["/no/such/picture.png"]}, VISION, ["neither a data URI"]),
    ({"images": [uri((1, 2, 3))] * 2, "input": "<image><image>Which?"}, VISION,
     ["2 images, more than --data.max_images_per_prompt 1"]),
    ({}, ImageRules(key="images", max_images=1, vision=False), ["text-only", "--actor.model_name_or_path"]),
    ({"input": "What colour?"}, VISION, ["0 <image> tag(s) for 1 image(s)"]),
])
def test_bad_images_name_file_and_line(tmp_path, bad, rules, words):
    text = {"input": "What?", "label": "x"}  # rows without images pass under any rules
    path = rows_file(tmp_path, [GOOD if rules.vision else text, text, {**GOOD, **bad}, text])
    with pytest.raises(DataCheckError) as e:
        check_prompt_file(path, "input", "label", images=rules)
    assert "data.jsonl:3:" in str(e.value), str(e.value)
    for word in words:
        assert word in str(e.value), str(e.value)


def test_rows_without_images_pass_for_any_model(tmp_path):
    path = rows_file(tmp_path, [{"input": "What?", "label": "x"}, {**GOOD, "images": []}])
    assert check_prompt_file(path, "input", "label", images=ImageRules("images", 0, False)).rows == 2


def local_argv(tmp_path, model, data, *extra):
    return ["--actor.model_name_or_path", model, "--data.prompt_dataset", data, "--data.label_key", "label",
            "--reward.remote_url", REWARD, "--algo.advantage.estimator", "group_norm", "--rollout.n_samples_per_prompt", "2", "--data.image_key", "images",
            "--local.output_dir", str(tmp_path / "run"), *extra]


@pytest.mark.parametrize("case,words", [
    ("undecodable", ["data.jsonl:2:", "image 1", "cannot be decoded"]),
    ("text_model", ["data.jsonl:1:", "text-only"]),
    ("too_many", ["data.jsonl:1:", "more than --data.max_images_per_prompt 0"]),
    ("hf_engine", ["--local.engine hf generates text only"]),
])
def test_train_local_refuses_bad_image_runs_at_start(tmp_path, tiny_vl_path, tiny_llama_path, capsys, case, words):
    broken = {**GOOD, "images": [BROKEN]}
    data = rows_file(tmp_path, [GOOD, broken] if case == "undecodable" else [GOOD])
    model = tiny_llama_path if case == "text_model" else tiny_vl_path
    extra = {"too_many": [], "hf_engine": ["--local.engine", "hf"]}.get(case, [])
    images = [] if case == "too_many" else ["--data.max_images_per_prompt", "1"]
    with pytest.raises(SystemExit):
        parse_local_args(local_argv(tmp_path, model, data, *images, *extra))
    err = capsys.readouterr().err
    for word in words:
        assert word in err, err


def test_train_local_accepts_the_shapes_task(tmp_path, tiny_vl_path):
    data = tmp_path / "shapes.jsonl"
    prepare_data(["shapes", "--out", str(data), "--size", "4"])
    args = parse_local_args(local_argv(tmp_path, tiny_vl_path, str(data), "--data.max_images_per_prompt", "1",
                                       "--data.apply_chat_template"))
    assert args.data.max_images_per_prompt == 1


def test_cluster_launcher_refuses_an_undecodable_image_before_ray(tmp_path, tiny_vl_path):
    import os
    import subprocess
    import sys

    data = rows_file(tmp_path, [GOOD, {**GOOD, "images": [BROKEN]}])
    proc = subprocess.run(
        [sys.executable, "-m", "openrlhf_ada.cli.train_ppo_ray", "--actor.model_name_or_path", tiny_vl_path,
         "--data.prompt_dataset", data, "--data.label_key", "label", "--data.image_key", "images",
         "--data.max_images_per_prompt", "1", "--reward.remote_url", REWARD, "--algo.advantage.estimator",
         "group_norm", "--rollout.n_samples_per_prompt", "2", "--vllm.num_engines", "1"],
        capture_output=True, text=True, timeout=300, env={**os.environ, "OPENRLHF_ADA_CPU": "1"})
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "data.jsonl:2: image 1" in proc.stderr and "cannot be decoded as an image" in proc.stderr
    assert "Started a local Ray instance" not in proc.stdout + proc.stderr  # refused before Ray


def test_batched_log_probs_use_each_samples_own_picture(tiny_vl_path):
    """train_local's scoring of a batch (upstream's concat of samples: left-padded, each sample's processor outputs in
    order) equals scoring each sample alone, and differs when the pictures are given to the wrong samples."""
    import copy

    from openrlhf.trainer.ppo_utils.experience import Experience
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from openrlhf_ada.trainer.local_trainer import sequence_log_probs

    processor = AutoProcessor.from_pretrained(tiny_vl_path)
    model = AutoModelForImageTextToText.from_pretrained(tiny_vl_path, dtype=torch.float32).eval()
    samples = []
    for question, rgb, size in (("What colour?", (255, 0, 0), 56), ("Which colour is the shape?", (0, 0, 255), 84)):
        inputs = processor(text=[prompt_for(processor, question)], images=[picture(rgb, size)], return_tensors="pt")
        sequence = torch.cat([inputs["input_ids"], torch.tensor([[300, 301, 302]])], dim=1)
        mm = {k: v for k, v in inputs.items() if k in ("pixel_values", "image_grid_thw")}
        ones = torch.ones_like(sequence)
        samples.append(Experience(sequences=sequence, attention_mask=ones, action_mask=ones[:, 1:],
                                  mm_train_inputs=[mm], labels=[question]))
    assert samples[0].sequences.shape != samples[1].sequences.shape  # 4 and 9 image tokens: padding is exercised
    batch = Experience.concat_experiences(samples, processor.tokenizer.pad_token_id)
    with torch.no_grad():
        alone = [sequence_log_probs(model, s)[0] for s in samples]
        together = sequence_log_probs(model, batch)
        swapped = copy.copy(batch)
        swapped.mm_train_inputs = batch.mm_train_inputs[::-1]
        for b, own in enumerate(alone):
            row = together[b][batch.attention_mask[b, 1:].bool()]
            assert torch.allclose(row, own, atol=1e-4), (b, (row - own).abs().max())
        with pytest.raises((ValueError, RuntimeError)):  # 4 image tokens cannot take a 9-token picture: no silent mix-up
            sequence_log_probs(model, swapped)


@pytest.mark.parametrize("multimodal", [True, False])
def test_weight_sync_drops_cached_image_embeddings(multimodal):
    """After a weight sync the engine resets vLLM's encoder cache too (image embeddings of the old weights), for a
    vision-language model only."""
    import asyncio
    from types import SimpleNamespace

    from openrlhf_ada.trainer.ray.vllm_engine import _GuardedRolloutRayActor

    calls = []

    class FakeLLM:
        model_config = SimpleNamespace(is_multimodal_model=multimodal)

        async def reset_prefix_cache(self):
            calls.append("prefix")

        async def reset_encoder_cache(self):
            calls.append("encoder")

    actor = _GuardedRolloutRayActor.__new__(_GuardedRolloutRayActor)
    actor.llm = FakeLLM()
    asyncio.run(actor.reset_prefix_cache())
    assert calls == (["prefix", "encoder"] if multimodal else ["prefix"])


@pytest.mark.parametrize("placeholders", [{5, 7}, None])
def test_engine_never_samples_the_image_placeholder_tokens(placeholders):
    """A response holding the model's image pad token fails upstream's training forward (it takes every such token
    for an image slot: "Image features and image tokens do not match", seen at the tiny model's second step through
    the launcher): the engine bans the processor's image and video pad tokens (the ids upstream's create_vllm_engines
    and train_local pass it) from every response, and leaves a text model's sampling alone."""
    import asyncio

    from vllm import SamplingParams

    from openrlhf_ada.trainer.ray.vllm_engine import BANNED_LOGIT_BIAS, _GuardedRolloutRayActor

    seen = []

    class FakeLLM:
        async def generate(self, prompt, params, request_id):
            seen.append((prompt, params))
            yield "output"

    actor = _GuardedRolloutRayActor.__new__(_GuardedRolloutRayActor)
    actor.llm, actor._mm_pad_token_ids = FakeLLM(), placeholders
    asked = SamplingParams(max_tokens=4, logit_bias={3: 1.5})
    out = asyncio.run(actor.generate([1, 5, 5, 2], asked, multi_modal_data={"image": ["picture"]} if placeholders
                                     else None))
    assert out == "output" and asked.logit_bias == {3: 1.5}  # the caller's parameters stay as they were
    prompt, params = seen[0]
    if placeholders:
        assert params.logit_bias == {3: 1.5, 5: BANNED_LOGIT_BIAS, 7: BANNED_LOGIT_BIAS} and BANNED_LOGIT_BIAS <= -100
        assert prompt["prompt_token_ids"] == [1, 5, 2]  # upstream's collapse of the placeholder run, still done
    else:
        assert params.logit_bias == {3: 1.5}


def test_cluster_demo_prepares_the_vision_language_script(tmp_path, capsys):
    """`make cluster-demo ARGS="--script train_adora_vl_grpo.sh"`: the tiny vision-language model and the shapes task
    (rows with one picture, the shapes reward, the image field for the script's IMAGE_KEY); SmolLM2 has no vision
    tower, so that pair is refused before anything starts."""
    from openrlhf_ada.cli.cluster_demo import VL_SCRIPT, main, prepare

    env = prepare("tiny", str(tmp_path), prompts=4, seed=0, images=True)
    assert env["REWARD_FILE"] == "openrlhf_ada/rewards/shapes.py" and env["IMAGE_KEY"] == "images"
    config = json.loads((tmp_path / "model" / "config.json").read_text())
    assert "vision_config" in config
    rows = [json.loads(line) for line in open(env["DATA"])]
    assert len(rows) == 4 and all(len(r["images"]) == 1 and r["input"].startswith("<image>") for r in rows)
    with pytest.raises(SystemExit):
        main(["--script", VL_SCRIPT, "--model", "smollm2", "--out", str(tmp_path / "demo")])
    assert "--model tiny only" in capsys.readouterr().err
    assert not (tmp_path / "demo").exists()
