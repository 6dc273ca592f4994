r"""Prompt datasets (jsonl) for OpenRLHF's trainer: the work of ``python -m openrlhf_ada.cli.prepare_data
{kk,countdown,hf}`` (openrlhf_ada/cli/prepare_data.py holds its flags).

Every line is one JSON object that OpenRLHF 0.11.2's ``--data.prompt_dataset`` reads (``load_dataset("json")``):

``input``
    the user message: the task, then how to format the final answer (``<think>``/``<answer>`` tags for kk and
    countdown as in Logic-RL / TinyZero, ``\boxed{}`` for math). A plain string, so it works with
    ``--data.apply_chat_template`` (it becomes the user turn; ``<image>`` marks where images go) and without it.
``label``
    what the reward file checks against: for ``kk`` and ``countdown`` a JSON object in a string (see
    ``openrlhf_ada/rewards/kk.py`` and ``countdown.py``), for ``shapes`` the colour's name, for ``hf`` the reference
    answer as a plain string.
``datasource``
    the task name; upstream reports eval pass rates per datasource.
``images`` (``shapes``, and ``hf`` with an image column)
    a list of images as ``data:image/png;base64,...`` strings (upstream's ``load_images`` reads them), so the file
    is self-contained.

Train with ``--data.prompt_dataset FILE --data.input_key input --data.label_key label --data.apply_chat_template``
and ``--reward.remote_url openrlhf_ada/rewards/{kk,countdown,math}.py``. The same seed and arguments write a
byte-identical file. ``--eval-size N`` writes N more distinct items to a second file (``--eval-out``, default
``<out>.eval.jsonl``) for ``--eval.dataset``.
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import os
import random
import sys
import threading
from pathlib import Path
from typing import Any, Iterable
from urllib.parse import urlparse

INPUT_KEY, LABEL_KEY, DATASOURCE_KEY, IMAGE_KEY = "input", "label", "datasource", "images"

KK_INSTRUCTION = (
    "Think it through step by step inside <think> </think> tags, then state the identity of every inhabitant inside "
    "<answer> </answer> tags, in the format given above, i.e. "
    "<think> reasoning process here </think><answer> answer here </answer>."
)
MATH_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."

PROBLEM_KEYS = ("problem", "question", "prompt", "query", "input", "instruction")
ANSWER_KEYS = ("answer", "final_answer", "ground_truth", "gt_answer", "solution", "label")
IMAGE_KEYS = ("images", "image")
_LOCAL_FILE_BUILDERS = {".json": "json", ".jsonl": "json", ".csv": "csv", ".parquet": "parquet", ".arrow": "arrow"}
_TRUE = {"1", "true", "yes", "on"}


class PrepareDataError(RuntimeError):
    """A clear, user-facing failure: printed as ``error: ...`` with exit status 2."""


class HubUnavailableError(PrepareDataError):
    """The Hugging Face Hub cannot be used (offline mode or no network)."""


# ---------------------------------------------------------------------------------------------------------------------
# Prompts and labels (the reward files parse exactly these)
# ---------------------------------------------------------------------------------------------------------------------
def kk_prompt(question: str) -> str:
    """User message for a Knights-and-Knaves puzzle (reasoning-gym's text, which ends with its answer format)."""
    return f"{question.strip()}\n\n{KK_INSTRUCTION}"


def kk_label(answer: str, names: list[str], solution: list[bool], knight: str = "knight", knave: str = "knave") -> str:
    """Label for ``rewards/kk.py``: reasoning-gym's solution text plus the names, roles and truth values."""
    return json.dumps(
        {
            "task": "knights_knaves",
            "answer": answer,
            "names": [str(n) for n in names],
            "solution": [bool(s) for s in solution],
            "knight": str(knight),
            "knave": str(knave),
            "n_people": len(names),
        },
        ensure_ascii=False,
    )


def countdown_prompt(numbers: list[int], target: int, use_all: bool = False) -> str:
    """User message for a countdown task; the answer is an expression inside <answer> tags."""
    rule = "each number exactly once" if use_all else "each number at most once"
    return (
        f"Using the numbers {list(numbers)}, create an arithmetic expression that equals {target}. You may use "
        f"+, -, *, / and parentheses, and {rule}. Think it through step by step inside <think> </think> tags, then "
        "give only the expression inside <answer> </answer> tags, for example <answer> (1 + 2) / 3 </answer>."
    )


def countdown_label(numbers: list[int], target: int, use_all: bool = False, reference: str | None = None) -> str:
    """Label for ``rewards/countdown.py``."""
    return json.dumps(
        {"task": "countdown", "numbers": [int(n) for n in numbers], "target": int(target), "use_all": bool(use_all),
         "reference": reference},
        ensure_ascii=False,
    )


def math_prompt(problem: str) -> str:
    r"""User message for a math problem; the answer goes in ``\boxed{}``."""
    return f"{problem.strip()}\n\n{MATH_INSTRUCTION}"


def math_label(answer: Any) -> str | None:
    r"""Reference answer as a plain string for ``rewards/math.py``; None when there is none.

    GSM8K-style ``... #### 72`` keeps the part after ``####``; a full solution keeps the content of its last
    ``\boxed{}``.
    """
    if answer is None or isinstance(answer, bool):
        return None
    if isinstance(answer, (list, tuple)):
        answer = answer[0] if len(answer) == 1 else None
        if answer is None:
            return None
    text = str(answer).strip()
    if "####" in text:
        text = text.rsplit("####", 1)[1].strip()
    if "\\boxed" in text or "\\fbox" in text:
        from openrlhf_ada.rewards._common import last_boxed

        status, content = last_boxed(text)
        text = content.strip() if status == "ok" and content else ""
    return text or None


# ---------------------------------------------------------------------------------------------------------------------
# Procedural tasks (reasoning-gym)
# ---------------------------------------------------------------------------------------------------------------------
def _progress(total: int, desc: str, enabled: bool):
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="item", disable=not enabled, file=sys.stderr)


def generate_kk(
    count: int,
    *,
    seed: int,
    min_people: int = 3,
    max_people: int = 7,
    depth: int = 2,
    width: int = 2,
    progress: bool = False,
) -> list[dict]:
    """``count`` distinct Knights-and-Knaves records, people counts cycling over min..max (equal shares), shuffled."""
    from reasoning_gym.logic.knights_knaves import KnightsKnavesConfig, KnightsKnavesDataset

    people = list(range(min_people, max_people + 1))
    datasets = {
        n: KnightsKnavesDataset(
            KnightsKnavesConfig(n_people=n, depth_constraint=depth, width_constraint=width, seed=seed * 1000 + n,
                                size=max(count, 1))
        )
        for n in people
    }
    next_index = dict.fromkeys(people, 0)
    seen: set[str] = set()
    records = []
    with _progress(count, "knights_knaves", progress) as bar:
        for k in range(count):
            n = people[k % len(people)]
            for _attempt in range(1000):
                item = datasets[n][next_index[n]]
                next_index[n] += 1
                if item["question"] not in seen:
                    break
            else:
                raise PrepareDataError(f"could not find {count} distinct puzzles with {n} people; ask for fewer")
            seen.add(item["question"])
            meta = item["metadata"]
            terms = meta["knight_knave_terms"]
            records.append({
                INPUT_KEY: kk_prompt(item["question"]),
                LABEL_KEY: kk_label(item["answer"], list(meta["names"]), list(meta["solution"]), terms["knight"],
                                    terms["knave"]),
                DATASOURCE_KEY: "knights_knaves",
            })
            bar.update(1)
    random.Random(seed).shuffle(records)
    return records


#: The shapes task's colours: name -> RGB. Each word is one token of the tiny VL model (openrlhf_ada/models/tiny_vl.py).
SHAPE_COLOURS = {"red": (220, 40, 40), "green": (40, 170, 60), "blue": (40, 70, 220), "yellow": (230, 200, 40)}
SHAPES_QUESTION = "<image>What colour is the shape? Answer in one word."


def shape_image(colour: str, rng: random.Random, size: int = 56):
    """A ``size`` x ``size`` picture: a light grey background (a random shade) with one filled square or circle of
    ``colour`` (a random shade of it, place and size), so that no two pictures are alike."""
    from PIL import Image, ImageDraw

    grey = rng.randint(200, 250)
    image = Image.new("RGB", (size, size), (grey, grey, grey))
    side = rng.randint(size // 3, size * 3 // 4)
    x, y = rng.randint(0, size - side), rng.randint(0, size - side)
    fill = tuple(max(0, min(255, c + rng.randint(-15, 15))) for c in SHAPE_COLOURS[colour])
    draw = ImageDraw.Draw(image)
    (draw.rectangle if rng.random() < 0.5 else draw.ellipse)([x, y, x + side - 1, y + side - 1], fill=fill)
    return image


def generate_shapes(count: int, *, seed: int, size: int = 56) -> list[dict]:
    """``count`` vision-language records: a picture of one coloured shape (``shape_image``, embedded as a PNG data
    URI), the question "What colour is the shape?", the colour's name as the label; colours in turn, so each occurs
    equally often. Reward: rewards/shapes.py."""
    rng = random.Random(seed)
    names = list(SHAPE_COLOURS)
    return [{INPUT_KEY: SHAPES_QUESTION, LABEL_KEY: names[i % len(names)], DATASOURCE_KEY: "shapes",
             IMAGE_KEY: [image_to_data_uri(shape_image(names[i % len(names)], rng, size))]} for i in range(count)]


def generate_countdown(
    count: int,
    *,
    seed: int,
    min_numbers: int = 3,
    max_numbers: int = 4,
    min_value: int = 1,
    max_value: int = 99,
    min_target: int = 10,
    max_target: int = 100,
    use_all: bool = False,
    progress: bool = False,
) -> list[dict]:
    """``count`` distinct countdown records (numbers, reachable target) from reasoning-gym's generator."""
    from reasoning_gym.games.countdown import CountdownConfig, CountdownDataset

    dataset = CountdownDataset(
        CountdownConfig(min_numbers=min_numbers, max_numbers=max_numbers, min_value=min_value, max_value=max_value,
                        min_target=min_target, max_target=max_target, seed=seed, size=max(count, 1))
    )
    seen: set[tuple] = set()
    records = []
    index = 0
    failures = 0
    with _progress(count, "countdown", progress) as bar:
        while len(records) < count:
            if failures > 1000 + 10 * count:
                raise PrepareDataError(
                    f"only {len(records)} of {count} distinct countdown tasks found; widen the number/target ranges"
                )
            try:
                item = dataset[index]
            except ValueError:  # reasoning-gym found no expression within the target range for this index
                item = None
            index += 1
            if item is None:
                failures += 1
                continue
            numbers, target = [int(x) for x in item["metadata"]["numbers"]], int(item["metadata"]["target"])
            key = (tuple(sorted(numbers)), target)
            if key in seen:
                failures += 1
                continue
            seen.add(key)
            records.append({
                INPUT_KEY: countdown_prompt(numbers, target, use_all),
                LABEL_KEY: countdown_label(numbers, target, use_all, item["metadata"]["expression"]),
                DATASOURCE_KEY: "countdown",
            })
            bar.update(1)
    return records


# ---------------------------------------------------------------------------------------------------------------------
# Hugging Face datasets
# ---------------------------------------------------------------------------------------------------------------------
def hub_offline_reason(environ: dict | None = None) -> str | None:
    """Which offline switch is on (``HF_HUB_OFFLINE`` / ``HF_DATASETS_OFFLINE``), or None."""
    environ = os.environ if environ is None else environ
    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        if environ.get(var, "").strip().lower() in _TRUE:
            return f"{var}={environ[var]} is set (offline mode)"
    return None


def check_hub_reachable(endpoint: str | None = None, timeout: float = 5.0) -> None:
    """Raise HubUnavailableError unless a TCP connection to the Hub opens within ``timeout`` seconds.

    The probe runs in a daemon thread so that a hanging DNS lookup cannot stall the caller either.
    """
    endpoint = endpoint or os.environ.get("HF_ENDPOINT") or "https://huggingface.co"
    parsed = urlparse(endpoint)
    host = parsed.hostname or endpoint
    port = parsed.port or (80 if parsed.scheme == "http" else 443)
    result: dict[str, Any] = {}

    def probe() -> None:
        import socket

        try:
            socket.create_connection((host, port), timeout=timeout).close()
            result["ok"] = True
        except BaseException as exc:  # noqa: BLE001 - reported below
            result["error"] = exc

    thread = threading.Thread(target=probe, name="prepare-data-hub-probe", daemon=True)
    thread.start()
    thread.join(timeout + 0.5)
    if not result.get("ok"):
        why = result.get("error") or f"no answer within {timeout:g} s"
        raise HubUnavailableError(f"no network connection to {host}:{port} ({why})")


def _hub_error(name: str, reason: str) -> HubUnavailableError:
    return HubUnavailableError(
        f"cannot download dataset {name!r} from the Hugging Face Hub: {reason}.\n"
        "Fix: run this command on a machine with network access and copy the written .jsonl to where training "
        f"runs; or download the dataset on such a machine first (`hf download --repo-type dataset {name} "
        "--local-dir DIR`, `huggingface-cli download ...` on older versions, or "
        "`datasets.load_dataset(...).save_to_disk(DIR)`), bring DIR here and pass "
        "--name DIR (a local file or folder is read without network)."
    )


def load_hf_dataset(name: str, *, config: str | None = None, split: str = "train", connect_timeout: float = 5.0):
    """A ``datasets.Dataset`` from a local file/folder or the Hub; fails fast and clearly when the Hub is out of reach."""
    path = Path(name).expanduser()
    if path.exists():
        import datasets

        try:
            if path.is_file():
                builder = _LOCAL_FILE_BUILDERS.get(path.suffix.lower())
                if builder is None:
                    raise PrepareDataError(f"{name}: unknown file type (use {', '.join(_LOCAL_FILE_BUILDERS)})")
                return datasets.load_dataset(builder, data_files=str(path), split="train")
            if any((path / f).exists() for f in ("dataset_info.json", "state.json", "dataset_dict.json")):
                loaded = datasets.load_from_disk(str(path))
                if isinstance(loaded, datasets.DatasetDict):
                    if split not in loaded:
                        raise PrepareDataError(f"{name} has splits {list(loaded)}, not {split!r}")
                    loaded = loaded[split]
                return loaded
            return datasets.load_dataset(str(path), config, split=split)
        except PrepareDataError:
            raise
        except Exception as exc:  # noqa: BLE001 - reported with context
            raise PrepareDataError(f"cannot read local dataset {name!r}: {type(exc).__name__}: {exc}") from exc

    offline = hub_offline_reason()
    if offline:
        raise _hub_error(name, offline)
    try:
        check_hub_reachable(timeout=connect_timeout)
    except HubUnavailableError as exc:
        raise _hub_error(name, str(exc)) from None
    import datasets

    try:
        return datasets.load_dataset(name, config, split=split)
    except Exception as exc:  # noqa: BLE001 - reported with context
        raise PrepareDataError(
            f"cannot load dataset {name!r} (config {config!r}, split {split!r}): {type(exc).__name__}: {exc}"
        ) from exc


def _pick(columns: Iterable[str], wanted: str | None, candidates: tuple[str, ...], what: str, flag: str) -> str | None:
    columns = list(columns)
    if wanted:
        if wanted not in columns:
            raise PrepareDataError(f"{flag} {wanted!r} is not a column; columns: {columns}")
        return wanted
    for key in candidates:
        if key in columns:
            return key
    if what == "image":
        return None
    raise PrepareDataError(f"no {what} column among {columns}; name it with {flag}")


def image_to_data_uri(image: Any) -> str | None:
    """A PIL image, ``{"bytes": ...}`` dict or raw bytes as a PNG data URI; a path/URL string as is."""
    if image is None:
        return None
    if isinstance(image, str):
        return image
    if isinstance(image, dict):
        if image.get("bytes"):
            image = image["bytes"]
        elif image.get("path"):
            return image["path"]
        else:
            return None
    if isinstance(image, (bytes, bytearray)):
        from PIL import Image

        image = Image.open(io.BytesIO(image))
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def hf_records(
    dataset,
    *,
    datasource: str,
    count: int | None,
    seed: int,
    problem_key: str | None = None,
    answer_key: str | None = None,
    image_key: str | None = None,
    progress: bool = False,
) -> list[dict]:
    """Records from a ``datasets.Dataset``: shuffled with ``seed``, the first ``count`` usable rows (all if None)."""
    columns = dataset.column_names
    pkey = _pick(columns, problem_key, PROBLEM_KEYS, "problem", "--problem-key")
    akey = _pick(columns, answer_key, ANSWER_KEYS, "answer", "--answer-key")
    ikey = _pick(columns, image_key, IMAGE_KEYS, "image", "--image-key")
    dataset = dataset.shuffle(seed=seed)
    total = len(dataset) if count is None else min(count, len(dataset))
    records, skipped = [], 0
    with _progress(total, datasource, progress) as bar:
        for row in dataset:
            if len(records) >= total:
                break
            problem, answer = row.get(pkey), math_label(row.get(akey))
            if not isinstance(problem, str) or not problem.strip() or answer is None:
                skipped += 1
                continue
            record = {INPUT_KEY: math_prompt(problem), LABEL_KEY: answer, DATASOURCE_KEY: datasource}
            if ikey is not None:
                raw = row.get(ikey)
                images = [image_to_data_uri(img) for img in (raw if isinstance(raw, list) else [raw])]
                images = [img for img in images if img]
                if not images:
                    skipped += 1
                    continue
                missing = len(images) - record[INPUT_KEY].count("<image>")
                if missing > 0:  # upstream puts an image wherever "<image>" stands in the user text
                    record[INPUT_KEY] = "<image>" * missing + record[INPUT_KEY]
                record[IMAGE_KEY] = images
            records.append(record)
            bar.update(1)
    if skipped:
        print(f"skipped {skipped} rows without a usable problem/answer/image", file=sys.stderr)
    if count is not None and len(records) < count:
        print(f"warning: only {len(records)} usable rows (asked for {count})", file=sys.stderr)
    return records


# ---------------------------------------------------------------------------------------------------------------------
# Writing and the command line
# ---------------------------------------------------------------------------------------------------------------------
def write_jsonl(records: list[dict], path: str | os.PathLike) -> None:
    """Write records as UTF-8 jsonl, atomically: a failure leaves neither a half-written file nor the temporary."""
    path = Path(path)
    check_output_path(path, "output")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise PrepareDataError(f"cannot create the folder of {str(path)!r}: {exc.strerror or exc}") from None
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            for record in records:
                f.write(json.dumps(record, ensure_ascii=False) + "\n")
        os.replace(tmp, path)
    except BaseException as exc:
        tmp.unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise PrepareDataError(f"cannot write {str(path)!r}: {exc.strerror or exc}") from None
        raise


def check_output_path(path: str | os.PathLike, what: str) -> None:
    """Refuse an output path that is a folder, or that a parent path component blocks (a file where a folder must be)."""
    path = Path(path)
    if path.is_dir():
        raise PrepareDataError(f"the {what} path {str(path)!r} is a folder; give a file name, e.g. "
                               f"{str(path / 'data.jsonl')!r}")
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise PrepareDataError(f"the {what} path {str(path)!r} cannot be created: {str(parent)!r} is a file")
            break


def check_outputs(args: argparse.Namespace) -> None:
    """Before generating anything: the output paths are usable, and the eval file would not replace the training
    file."""
    check_output_path(args.out, "--out")
    if args.eval_size:
        eval_path = args.eval_out or default_eval_path(args.out)
        check_output_path(eval_path, "--eval-out")
        if os.path.realpath(eval_path) == os.path.realpath(args.out):
            raise PrepareDataError(f"--eval-out {eval_path!r} is the --out file: the eval rows would replace the "
                                   "training rows; give the eval file another name (default: <out>.eval.jsonl)")


def default_eval_path(out: str) -> str:
    base = out[: -len(".jsonl")] if out.endswith(".jsonl") else out
    return base + ".eval.jsonl"


def _reward_hint(reward_file: str) -> str:
    path = Path(__file__).resolve().parent.parent / "rewards" / reward_file
    return (f"train with: --data.prompt_dataset <file> --data.input_key {INPUT_KEY} --data.label_key {LABEL_KEY} "
            f"--data.apply_chat_template --reward.remote_url {path}")


def run(args: argparse.Namespace) -> list[tuple[str, int]]:
    """Generate and write the file(s); return ``[(path, rows), ...]``."""
    check_outputs(args)
    progress = not args.no_progress
    total = args.size + args.eval_size if args.size is not None else None
    if args.task == "kk":
        if not 2 <= args.min_people <= args.max_people <= 12:
            raise PrepareDataError("need 2 <= --min-people <= --max-people <= 12")
        records = generate_kk(total, seed=args.seed, min_people=args.min_people, max_people=args.max_people,
                              depth=args.depth, width=args.width, progress=progress)
        hint = _reward_hint("kk.py")
    elif args.task == "countdown":
        if not 2 <= args.min_numbers <= args.max_numbers:
            raise PrepareDataError("need 2 <= --min-numbers <= --max-numbers")
        if args.min_value > args.max_value or args.min_target > args.max_target:
            raise PrepareDataError("need --min-value <= --max-value and --min-target <= --max-target")
        records = generate_countdown(total, seed=args.seed, min_numbers=args.min_numbers,
                                     max_numbers=args.max_numbers, min_value=args.min_value,
                                     max_value=args.max_value, min_target=args.min_target,
                                     max_target=args.max_target, use_all=args.use_all, progress=progress)
        hint = _reward_hint("countdown.py")
    elif args.task == "shapes":
        records = generate_shapes(total, seed=args.seed, size=args.image_size)
        hint = _reward_hint("shapes.py") + f" --data.image_key {IMAGE_KEY} --data.max_images_per_prompt 1"
    else:
        dataset = load_hf_dataset(args.name, config=args.config, split=args.split,
                                  connect_timeout=args.connect_timeout)
        datasource = args.datasource or Path(args.name.rstrip("/")).stem or "hf"
        records = hf_records(dataset, datasource=datasource, count=total, seed=args.seed,
                             problem_key=args.problem_key, answer_key=args.answer_key, image_key=args.image_key,
                             progress=progress)
        hint = _reward_hint("math.py")
        if not records:
            raise PrepareDataError(f"no usable rows in {args.name!r}")

    n_train = len(records) - args.eval_size if args.eval_size else len(records)
    if n_train < 1:
        raise PrepareDataError(f"only {len(records)} rows, not enough for --eval-size {args.eval_size} plus training")
    written = [(args.out, n_train)]
    write_jsonl(records[:n_train], args.out)
    if args.eval_size:
        eval_path = args.eval_out or default_eval_path(args.out)
        write_jsonl(records[n_train:], eval_path)
        written.append((eval_path, len(records) - n_train))
    for path, rows in written:
        print(f"wrote {rows} rows to {path}", file=sys.stderr)
    print(hint, file=sys.stderr)
    return written
