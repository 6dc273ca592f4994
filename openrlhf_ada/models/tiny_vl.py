"""Build a tiny random Qwen2.5-VL checkpoint (model, tokenizer, image processor, chat template) offline.

Why: the vision-language path (prompts with images, `--data.image_key`) needs a real checkpoint that transformers
(`AutoModelForImageTextToText` + `AutoProcessor`), OpenRLHF's Actor and vLLM on CPU all load, without downloading
anything; `openrlhf_ada.models.tiny_llama` is its text-only sibling. What makes it load everywhere:
- the tokenizer (tiny_llama's byte-level BPE) carries Qwen's special tokens, and the config's image, video and
  vision start/end token ids point at them; the chat template puts ``<|vision_start|><|image_pad|><|vision_end|>``
  where a message has an image part (OpenRLHF's prompt dataset turns ``<image>`` tags into such parts);
- the image processor is transformers' PIL one (`Qwen2VLImageProcessorPil`, no torchvision), with a pixel range that
  keeps images small: a 56x56 picture is 16 patches of 14x14, merged 2x2 into 4 image tokens;
- the text model has head_dim 64 (vLLM's CPU attention rejects smaller heads) and an M-RoPE section summing to
  head_dim / 2; the vision tower has 2 blocks (one windowed, one full attention) of head_dim 64.
Float32, random weights; same seed and arguments -> the same weights.
"""

from __future__ import annotations

import json
import os

from openrlhf_ada.models.tiny_llama import WORDS, _build_tokenizer

PAD, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
VISION_START, VISION_END, IMAGE_PAD, VIDEO_PAD = "<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"
SPECIALS = [PAD, IM_START, IM_END, VISION_START, VISION_END, IMAGE_PAD, VIDEO_PAD]
COLOUR_WORDS = ["red", "green", "blue", "yellow", "colour", "shape", "Answer"]

# "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>text<|im_end|>\n<|im_start|>assistant\n": Qwen2-VL's
# layout without its default system turn (short prompts for a tiny model); string content is passed as is.
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' or 'image' in part %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
PATCH, MERGE = 14, 2
MIN_PIXELS, MAX_PIXELS = 56 * 56, 112 * 112  # 4 to 16 image tokens per image


def build_tiny_vl(
    path: str | os.PathLike,
    *,
    seed: int = 0,
    hidden_size: int = 128,
    num_layers: int = 2,
    num_heads: int = 2,
    vision_hidden_size: int = 128,
    vision_depth: int = 2,
    max_position_embeddings: int = 1024,
) -> str:
    """Write a tiny random float32 ``Qwen2_5_VLForConditionalGeneration`` with its processor into ``path``; return
    ``path`` as str."""
    import torch
    from transformers import GenerationConfig, Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    if hidden_size % num_heads or vision_hidden_size % num_heads:
        raise ValueError(f"hidden sizes {hidden_size}, {vision_hidden_size} are not divisible by num_heads {num_heads}")
    head_dim = hidden_size // num_heads
    if head_dim % 16:
        raise ValueError(f"head_dim {head_dim} must be a multiple of 16 (the M-RoPE sections)")
    path = os.fspath(path)
    tokenizer = _build_tokenizer(specials=SPECIALS, words=WORDS + COLOUR_WORDS, bos=None, eos=IM_END, pad=PAD,
                                 chat_template=CHAT_TEMPLATE)
    ids = {tok: tokenizer.convert_tokens_to_ids(tok) for tok in SPECIALS}
    eighth = head_dim // 16  # M-RoPE: temporal, height, width sections summing to head_dim / 2 (Qwen's 2:3:3)
    config = Qwen2_5_VLConfig(
        text_config=dict(
            vocab_size=len(tokenizer), hidden_size=hidden_size, intermediate_size=2 * hidden_size,
            num_hidden_layers=num_layers, num_attention_heads=num_heads, num_key_value_heads=num_heads,
            max_position_embeddings=max_position_embeddings, max_window_layers=num_layers,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                             "mrope_section": [2 * eighth, 3 * eighth, 3 * eighth]},
            bos_token_id=None, eos_token_id=ids[IM_END], pad_token_id=ids[PAD], tie_word_embeddings=False,
            dtype="float32",
        ),
        vision_config=dict(
            depth=vision_depth, hidden_size=vision_hidden_size, intermediate_size=2 * vision_hidden_size,
            num_heads=vision_hidden_size // 64 or 1, out_hidden_size=hidden_size, patch_size=PATCH,
            spatial_merge_size=MERGE, temporal_patch_size=2, window_size=PATCH * MERGE * 2,
            fullatt_block_indexes=[vision_depth - 1],
        ),
        image_token_id=ids[IMAGE_PAD], video_token_id=ids[VIDEO_PAD], vision_start_token_id=ids[VISION_START],
        vision_end_token_id=ids[VISION_END], tie_word_embeddings=False, dtype="float32",
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2_5_VLForConditionalGeneration(config).to(torch.float32).eval()
    model.generation_config = GenerationConfig(eos_token_id=ids[IM_END], pad_token_id=ids[PAD])
    image_processor = Qwen2VLImageProcessorPil(min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS, patch_size=PATCH,
                                               merge_size=MERGE, temporal_patch_size=2)
    os.makedirs(path, exist_ok=True)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    image_processor.save_pretrained(path)
    # The processor's files, written without building Qwen2_5_VLProcessor: that needs a video processor, and Qwen's
    # needs torchvision (the CPU mode stands a plain one in when the processor is loaded)
    video = {"video_processor_type": "Qwen2VLVideoProcessor", "patch_size": PATCH, "merge_size": MERGE,
             "temporal_patch_size": 2, "min_pixels": MIN_PIXELS, "max_pixels": MAX_PIXELS}
    for name, content in (("video_preprocessor_config.json", video),
                          ("processor_config.json", {"processor_class": "Qwen2_5_VLProcessor"})):
        with open(os.path.join(path, name), "w") as f:
            json.dump(content, f, indent=2)
    return path
