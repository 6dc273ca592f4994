"""Build a tiny random Llama checkpoint (model + tokenizer + chat template) offline.

Why: tests and CPU smoke runs need a real Hugging Face checkpoint that transformers, OpenRLHF and vLLM on CPU can
load, without downloading anything. The tokenizer is a byte-level BPE (every string round-trips) whose vocabulary is
the 256 byte symbols plus merges for a few prompt words ("answer", "What", ...), special tokens
``<s>``/``</s>``/``<pad>`` and chat role markers. The model is a float32 ``LlamaForCausalLM`` with head_dim 64
(vLLM's CPU attention rejects 16). Same seed and arguments -> byte-identical weights.
"""

from __future__ import annotations

import os

BOS, EOS, PAD = "<s>", "</s>", "<pad>"
ROLE_TOKENS = ["<|system|>", "<|user|>", "<|assistant|>"]
WORDS = ["answer", "Answer", "the", "is", "what", "What", "number", "plus", "minus", "times", "Question", "and"]

# Renders "<s><|user|>\n{content}</s>\n...<|assistant|>\n"; content may be a string or a list of {"type": "text"} parts
# (OpenRLHF's prompt dataset passes strings; VLM-style content lists are handled too).
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}<|{{ message['role'] }}|>\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}{% if part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}{{ eos_token }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


def _build_tokenizer(specials=(BOS, EOS, PAD, *ROLE_TOKENS), words=WORDS, bos=BOS, eos=EOS, pad=PAD,
                     chat_template=CHAT_TEMPLATE):
    """A byte-level BPE ``PreTrainedTokenizerFast``: byte alphabet + left-to-right merges for ``words``, the
    ``specials`` first in the vocabulary; ``bos`` (None: none) is put before every encoded text."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    specials = list(specials)
    vocab = {tok: i for i, tok in enumerate(specials)}
    for ch in sorted(pre_tokenizers.ByteLevel.alphabet()):
        vocab[ch] = len(vocab)
    merges = []

    def add_merge(left: str, right: str) -> None:
        if left + right not in vocab:
            vocab[left + right] = len(vocab)
            merges.append((left, right))

    for word in words:  # "answer" = ((((a n) s) w) e) r; then " answer" = "\u0120" + "answer" (byte-level space)
        for i in range(1, len(word)):
            add_merge(word[:i], word[i])
    for word in words:
        add_merge("\u0120", word)

    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    if bos is not None:
        tok.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, vocab[bos])]
        )
    tok.add_special_tokens(specials)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=bos,
        eos_token=eos,
        pad_token=pad,
        additional_special_tokens=[t for t in specials if t not in (bos, eos, pad)],
        chat_template=chat_template,
        model_max_length=512,
        padding_side="left",
    )


def build_tiny_llama(
    path: str | os.PathLike,
    *,
    seed: int = 0,
    hidden_size: int = 128,
    num_layers: int = 2,
    num_heads: int = 2,
    max_position_embeddings: int = 512,
) -> str:
    """Write a tiny random float32 ``LlamaForCausalLM`` and its tokenizer into ``path``; return ``path`` as str.

    head_dim is ``hidden_size // num_heads`` (64 by default); the vocabulary size is the tokenizer's length.
    """
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    if hidden_size % num_heads:
        raise ValueError(f"hidden_size {hidden_size} is not divisible by num_heads {num_heads}")
    path = os.fspath(path)
    tokenizer = _build_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_heads,
        head_dim=hidden_size // num_heads,
        max_position_embeddings=max_position_embeddings,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
        dtype="float32",
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config).to(torch.float32).eval()
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id
    )
    os.makedirs(path, exist_ok=True)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
