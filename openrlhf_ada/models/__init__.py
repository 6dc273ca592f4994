"""Models built offline, at test or demo time (nothing downloads at runtime): tiny_llama.py (a tiny random Llama),
smollm2.py (SmolLM2-135M-Instruct as a Hugging Face checkpoint, from a locally installed copy)."""
