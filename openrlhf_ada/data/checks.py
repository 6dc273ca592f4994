"""Checks of a prompt dataset before any training starts: problems that would otherwise surface hours into a run,
or as an error that does not say where.

- a file that is empty, a line that is not UTF-8, or a row that is not JSON: an error naming the file and line
  (and the byte's column for UTF-8);
- rows missing the input or label key (`--data.input_key`, `--data.label_key`): an error naming the first such row
  and the keys it has;
- an input that is not text (null, a number, ...; with `--data.apply_chat_template` a list of chat messages is
  text too) or a null label: an error naming the file and line (upstream would fail inside transformers, or train
  on a label that no reward file can read);
- prompts longer than the prompt budget (`--data.max_len - --rollout.max_new_tokens` tokens, after the chat template
  when `--data.apply_chat_template`): skipped and counted (upstream would silently cut their beginning off);
- duplicate prompts: counted and reported (kept: repeating a prompt can be intended);
- images (`--data.image_key`): a row with images for a text-only model, more images than
  `--data.max_images_per_prompt`, a number of `<image>` tags in the input that differs from the number of images,
  or an image that cannot be decoded (a data URI or a local file PIL cannot open, a file that does not exist): an
  error naming the file and line (upstream skips an image it cannot load with a warning and fails later, inside an
  engine, without saying which row).

Every failure is a `DataCheckError` (a ValueError) whose message is complete on its own: the trainers print it
without a traceback.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Iterator, List, Optional, Tuple


class DataCheckError(ValueError):
    """A problem in the prompt data: the message says what, where (file:line) and how to fix it."""


@dataclass(frozen=True)
class DataReport:
    path: str
    rows: int = 0
    duplicates: int = 0

    def summary(self) -> str:
        return f"{self.path}: {self.rows} rows; {self.duplicates} duplicate prompts (kept)"


def _describe(value) -> str:
    if value is None:
        return "null"
    kind = ("a boolean" if isinstance(value, bool) else "a number" if isinstance(value, (int, float)) else
            "a list" if isinstance(value, list) else "an object" if isinstance(value, dict) else "a value")
    return f"{kind} ({json.dumps(value)[:60]})"


def _input_problem(value, chat_template: bool) -> Optional[str]:
    """Why `value` cannot be a prompt, or None."""
    if isinstance(value, str):
        return None
    if chat_template and isinstance(value, list) and value and all(
        isinstance(m, dict) and isinstance(m.get("role"), str) and "content" in m for m in value
    ):
        return None
    if isinstance(value, list) and not chat_template:
        return f"is {_describe(value)}: a list of chat messages needs --data.apply_chat_template"
    return f"is {_describe(value)}, not text"


@dataclass(frozen=True)
class ImageRules:
    """What the run accepts as images: the rows' key (`--data.image_key`), at most `max_images` per prompt
    (`--data.max_images_per_prompt`; 0: text only) and whether the model sees images (`vision`: its config has a
    vision part)."""

    key: str
    max_images: int
    vision: bool


def check_prompt_file(path: str, input_key: str, label_key: Optional[str], *,
                      chat_template: bool = False, images: Optional[ImageRules] = None) -> DataReport:
    """Structural checks of a .jsonl/.json prompt file (with `images`, of its images too). Raises DataCheckError
    (what, where, how to fix)."""
    if not os.path.isfile(path):
        raise DataCheckError(f"{path}: no such file")
    rows = duplicates = 0
    seen = set()
    for where, row in _rows(path):
        missing = [k for k in (input_key, label_key) if k and k not in row]
        if missing:
            raise DataCheckError(
                f"{where}: row has no {missing} (it has {sorted(row)}); set --data.input_key / "
                "--data.label_key to the file's field names"
            )
        problem = _input_problem(row[input_key], chat_template)
        if problem:
            raise DataCheckError(f"{where}: the input (--data.input_key {input_key!r}) {problem}; every row "
                                 "needs its prompt text: fix or remove the row")
        if label_key and row[label_key] is None:
            raise DataCheckError(f"{where}: the label (--data.label_key {label_key!r}) is null: the reward "
                                 "file has nothing to check the answer against; fix or remove the row")
        if images is not None:
            _check_images(where, row, input_key, images)
        key = json.dumps(row[input_key], sort_keys=True)
        duplicates += key in seen
        seen.add(key)
        rows += 1
    if rows == 0:
        raise DataCheckError(f"{path}: the file holds no rows; write prompts with python -m openrlhf_ada.cli.prepare_data")
    return DataReport(path, rows, duplicates)


def _image_refs(value) -> list:
    if value is None:
        return []
    return [v for v in (value if isinstance(value, list) else [value]) if v is not None]


def _image_tags(value) -> int:
    """`<image>` tags in an input: a string, or the text of chat messages."""
    if isinstance(value, str):
        return value.count("<image>")
    if isinstance(value, list):
        return sum(_image_tags(m.get("content")) for m in value if isinstance(m, dict))
    return 0


def _check_images(where: str, row: dict, input_key: str, rules: ImageRules) -> None:
    refs = _image_refs(row.get(rules.key))
    if not refs:
        return
    if not rules.vision:
        raise DataCheckError(f"{where}: the row has {len(refs)} image(s) (--data.image_key {rules.key!r}) but the "
                             "model (--actor.model_name_or_path) is text-only (its config has no vision_config): "
                             "train a vision-language model, or remove the images")
    if len(refs) > rules.max_images:
        raise DataCheckError(f"{where}: {len(refs)} images, more than --data.max_images_per_prompt "
                             f"{rules.max_images} (0: text only): raise the flag or drop images from the row")
    tags = _image_tags(row.get(input_key))
    if tags != len(refs):
        raise DataCheckError(f"{where}: the input has {tags} <image> tag(s) for {len(refs)} image(s): each image "
                             "goes where an <image> tag stands in the text; give every image its tag")
    for number, ref in enumerate(refs, 1):
        problem = _image_problem(ref)
        if problem:
            raise DataCheckError(f"{where}: image {number} (--data.image_key {rules.key!r}) {problem}")


def _image_problem(ref) -> Optional[str]:
    """Why upstream's loader (openrlhf/utils/vlm_utils.py load_images) could not read `ref`, or None. URLs are not
    fetched here."""
    import base64
    import binascii
    import io

    if not isinstance(ref, str):
        return f"is {_describe(ref)}: give a data URI, a file path or a URL"
    if ref.startswith(("http://", "https://")):
        return None
    if os.path.isfile(ref):
        return _unreadable(ref, ref)
    uri = ref.startswith("data:image")
    try:
        raw = base64.b64decode(ref.split(",", 1)[1] if uri and "," in ref else ref, validate=True)
    except (binascii.Error, ValueError) as e:
        if uri:
            return f"is a data URI whose base64 cannot be decoded ({e})"
        return f"{ref[:80]!r} is neither a data URI, base64, nor an existing file"
    return _unreadable(io.BytesIO(raw), "its data URI" if uri else "base64")


def _unreadable(source, what: str) -> Optional[str]:
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(source) as image:
            image.load()
    except (UnidentifiedImageError, OSError, ValueError) as e:
        return f"cannot be decoded as an image ({what}: {e})"
    return None


def _decode(path: str, number: int, raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DataCheckError(
            f"{path}:{number}: not UTF-8 (byte 0x{raw[e.start]:02x} at column {e.start + 1} of the line): "
            "re-save the file as UTF-8 (e.g. iconv -f latin1 -t utf-8)"
        ) from None


def _rows(path: str) -> Iterator[Tuple[str, dict]]:
    """(where, row) for every row: "file:line" for jsonl, "file, row K" for a .json list."""
    if path.endswith(".json"):
        with open(path, "rb") as f:
            raw = f.read()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            line = raw.count(b"\n", 0, e.start) + 1
            column = e.start - (raw.rfind(b"\n", 0, e.start) + 1) + 1
            raise DataCheckError(f"{path}:{line}: not UTF-8 (byte 0x{raw[e.start]:02x} at column {column}): "
                                 "re-save the file as UTF-8") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise DataCheckError(f"{path}:{e.lineno}: not valid JSON ({e.msg})") from None
        for index, row in enumerate(data if isinstance(data, list) else [data], 1):
            if not isinstance(row, dict):
                raise DataCheckError(f"{path}, row {index}: a row must be a JSON object, got {type(row).__name__}")
            yield f"{path}, row {index}", row
        return
    with open(path, "rb") as f:
        for number, raw in enumerate(f, 1):
            line = _decode(path, number, raw)
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise DataCheckError(f"{path}:{number}: not a JSON line ({e.msg})") from None
            if not isinstance(row, dict):
                raise DataCheckError(f"{path}:{number}: a row must be a JSON object, got {type(row).__name__}")
            yield f"{path}:{number}", row


def too_long_prompts(prompts: List[str], tokenizer, budget: int) -> List[int]:
    """Indices of prompts (already templated) with more than `budget` tokens."""
    return [i for i, p in enumerate(prompts) if len(tokenizer(p, add_special_tokens=False)["input_ids"]) > budget]


def image_rules(args) -> ImageRules:
    """The run's ImageRules from its flags: `--data.image_key`, `--data.max_images_per_prompt`, and whether the
    config of `--actor.model_name_or_path` has a vision part (upstream's own test, openrlhf/utils/utils.py
    is_vlm_model)."""
    from openrlhf.utils.utils import is_vlm_model

    return ImageRules(key=args.data.image_key, max_images=args.data.max_images_per_prompt,
                      vision=is_vlm_model(args.actor.model_name_or_path))


def check_dataset_images(args) -> None:
    """The image checks alone (`check_prompt_file`'s with ImageRules) on every local .json/.jsonl file of
    `--data.prompt_dataset` and `--eval.dataset`: what the cluster launcher runs before Ray starts."""
    rules = None
    for flag, files in (("--data.prompt_dataset", args.data.prompt_dataset or ""),
                        ("--eval.dataset", getattr(args.eval, "dataset", None) or "")):
        for path in filter(None, files.split(",")):
            if not (os.path.isfile(path) and path.endswith((".json", ".jsonl"))):
                continue
            rules = rules or image_rules(args)
            try:
                for where, row in _rows(path):
                    _check_images(where, row, args.data.input_key, rules)
            except DataCheckError as e:
                raise DataCheckError(f"{flag}: {e}") from None
