"""docs/compatibility.md stays honest: every cell is tested (by tests that exist), refused (by an entry of the table in
openrlhf_ada/compatibility.py, which the launcher's parser applies), or, for the rows named here, waiting; and each
refused pair is refused by the real launcher's parser with one message naming both flags."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from openrlhf_ada.cli.train_local import parse_local_args
from openrlhf_ada.compatibility import BY_KEY, REFUSALS
from openrlhf_ada.launcher import parse_args

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "compatibility.md"
REWARD = str(ROOT / "openrlhf_ada" / "rewards" / "toy.py")
BASE = ["--actor.model_name_or_path", "some/model", "--reward.remote_url", REWARD, "--rollout.n_samples_per_prompt",
        "4", "--algo.advantage.estimator", "dr_grpo"]

COLUMNS = {
    "features off": [],
    "ADORA": ["--adora.enable"],
    "Reinforce-Ada Seq": ["--ada.enable"],
    "Est": ["--ada.enable", "--ada.strategy", "est"],
    "Seq + cancel": ["--ada.enable", "--ada.cancel"],
}
# each row's upstream feature, as flags added to BASE (the bold name of the row's first cell)
ROWS = {
    "HTTP reward server": ["--reward.remote_url", "http://127.0.0.1:5000/get_reward"],
    "agent": ["--train.agent_func_path", "agent.py"],
    "critic": ["--algo.advantage.estimator", "gae"],
    "one sample per prompt": ["--algo.advantage.estimator", "flash_reinforce", "--rollout.n_samples_per_prompt", "1"],
    "dynamic filtering": ["--algo.dynamic_filtering_enable"],
    "async training": ["--train.async_enable"],
    "partial rollout": ["--train.async_enable", "--train.partial_rollout_enable"],
    "packing": ["--ds.packing_samples", "--vllm.num_engines", "1"],  # upstream packs only with vLLM engines
    "length penalties": ["--reward.overlong_buffer_len", "8", "--reward.stop_properly_penalty_coef", "0.5"],
    "IS correction": ["--algo.advantage.is_correction_level", "token"],
    "evaluation": ["--eval.dataset", "eval.jsonl", "--eval.steps", "1"],
    "reward model": ["--reward.model_name_or_path", "rm"],
    "reward model next to a reward function": ["--reward.model_name_or_path", "rm", "--reward.remote_url",
                                               "http://127.0.0.1:5000/get_reward"],
    "agent with a reward model": ["--train.agent_func_path", "agent.py", "--reward.model_name_or_path", "rm"],
    "4-bit actor": ["--ds.load_in_4bit", "--vllm.num_engines", "1"],
    "learning-rate schedule": ["--actor.lr_scheduler", "reduce_lr_on_plateau"],
    "dynamic batch": ["--train.dynamic_batch_enable", "--vllm.num_engines", "1"],
    "LoRA": ["--ds.lora.rank", "8"],
    "images": None,
    "ZeRO-2": ["--ds.zero_stage", "2"],
}
PENDING_ROWS = set()  # rows other work fills in
# cells no test runs, each with its reason in the document ("not run (...)")
NOT_RUN = {("LoRA", "features off"), ("LoRA", "Est")}
# pairs that should work but no test runs yet: the lead decides (a run of their own, or a place in one)
UNTESTED = set()


def with_base(flags: list) -> list:
    """BASE and `flags`; a reward model scores only where no reward function does, so it goes without BASE's file."""
    base = BASE
    if "--reward.model_name_or_path" in flags:
        i = BASE.index("--reward.remote_url")
        base = BASE[:i] + BASE[i + 2:]
    return base + flags


def cell_argv(row: str, column: str) -> list:
    argv = with_base(ROWS[row] + COLUMNS[column])
    if row == "critic" and "--ada.enable" in argv and column != "Est":
        argv += ["--ada.baseline", "group"]  # a critic has no group for the pool baseline to replace
    return argv


def read_matrix() -> dict:
    """{(row, column): cell text} from the document's first table, the matrix."""
    lines = []
    for line in DOC.read_text(encoding="utf-8").splitlines():
        if line.startswith("|"):
            lines.append(line)
        elif lines:
            break
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    assert header[1:] == list(COLUMNS), header
    cells = {}
    for line in lines[2:]:
        first, *rest = [c.strip() for c in line.strip("|").split("|")]
        name = re.match(r"\*\*(.+?)\*\*", first).group(1)
        assert len(rest) == len(COLUMNS), line
        cells.update({(name, column): text for column, text in zip(COLUMNS, rest)})
    return cells


def test_every_row_and_column_is_in_the_matrix():
    cells = read_matrix()
    assert {row for row, _ in cells} == set(ROWS)


@pytest.mark.parametrize("row,column", [(r, c) for r in ROWS for c in COLUMNS])
def test_every_cell_is_tested_or_refused(row, column, capsys):
    text = read_matrix()[(row, column)]
    if text.startswith("tested"):
        named = re.findall(r"`(test_\w+\.py)::(test_\w+)", text)
        assert named, text
        for file, test in named:
            path = ROOT / "tests" / file
            assert path.is_file() and re.search(rf"^(async )?def {test}\(", path.read_text(), re.M), (file, test)
        if ROWS[row] is not None:
            parse_args(cell_argv(row, column))  # a tested pair passes the start-up checks
    elif text.startswith("refused"):
        key = re.match(r"refused: `([\w-]+)`", text).group(1)
        with pytest.raises(SystemExit):
            parse_args(cell_argv(row, column))
        err = capsys.readouterr().err
        assert all(word in err for word in refusal_words(BY_KEY[key])), err
    elif (row, column) in UNTESTED:
        assert text == "(pending: untested)", text
        parse_args(cell_argv(row, column))  # not refused
    elif row in PENDING_ROWS:
        assert text == "(pending)", text
    else:
        assert (row, column) in NOT_RUN and text.startswith("not run ("), text


# -- the named tests switch their pair on --------------------------------------------------------------------------


def _value(argv: list, flag: str, default=None):
    """The value of `flag`'s last occurrence in a launcher argv (argparse keeps the last)."""
    at = [i for i, a in enumerate(argv) if a == flag]
    return argv[at[-1] + 1] if at else default


# each row's upstream feature and each column's project setting, read off the argv a test hands the launcher
ROW_ON = {
    "HTTP reward server": lambda a: str(_value(a, "--reward.remote_url", "")).startswith("http"),
    "agent": lambda a: "--train.agent_func_path" in a,
    "critic": lambda a: _value(a, "--algo.advantage.estimator") == "gae",
    "one sample per prompt": lambda a: _value(a, "--rollout.n_samples_per_prompt") == "1",
    "dynamic filtering": lambda a: "--algo.dynamic_filtering_enable" in a,
    "async training": lambda a: "--train.async_enable" in a,
    "partial rollout": lambda a: "--train.async_enable" in a and "--train.partial_rollout_enable" in a,
    "packing": lambda a: "--ds.packing_samples" in a or "--train.dynamic_batch_enable" in a,  # upstream: one -> both
    "length penalties": lambda a: "--reward.overlong_buffer_len" in a or "--reward.stop_properly_penalty_coef" in a,
    "IS correction": lambda a: _value(a, "--algo.advantage.is_correction_level", "off") != "off",
    "evaluation": lambda a: "--eval.dataset" in a,
    "reward model": lambda a: "--reward.model_name_or_path" in a,
    "dynamic batch": lambda a: "--train.dynamic_batch_enable" in a,
    "LoRA": lambda a: int(_value(a, "--ds.lora.rank", 0)) > 0,
    "images": lambda a: "--data.image_key" in a,
    "ZeRO-2": lambda a: _value(a, "--ds.zero_stage") == "2",
}
COLUMN_ON = {
    # features off: neither, or ADORA from a later step (--adora.start_step): the steps before run without it
    "features off": lambda a: "--ada.enable" not in a and ("--adora.enable" not in a
                                                          or int(_value(a, "--adora.start_step", 0)) > 1),
    "ADORA": lambda a: "--adora.enable" in a,
    "Reinforce-Ada Seq": lambda a: "--ada.enable" in a and _value(a, "--ada.strategy", "seq") == "seq",
    "Est": lambda a: "--ada.enable" in a and _value(a, "--ada.strategy") == "est",
    "Seq + cancel": lambda a: "--ada.enable" in a and "--ada.cancel" in a,
}


class _Launched(Exception):
    def __init__(self, argv):
        super().__init__("launched")
        self.argv = list(argv)


def launched_argv(file: str, test: str, tmp_path: Path):
    """The argv that `file`'s `test` hands the launcher on its first run: the test is called with stand-ins for its
    fixtures (a folder, names, a reward server's URL) and stopped at its first `launch(...)` of the cluster launcher,
    so nothing starts. None for a test that trains otherwise (train_local, `ray job submit`, a unit of the pipeline)
    or that needs a real fixture before it launches."""
    import inspect
    from types import SimpleNamespace

    import siblings

    module = siblings.load(file)
    pipeline = siblings.load("test_pipeline_on_cpu.py")
    tmp_path.mkdir(parents=True, exist_ok=True)

    def launch(module_name, flags, *args, **kwargs):
        if module_name == "openrlhf_ada.cli.train_ppo_ray":
            raise _Launched(flags)
        raise RuntimeError("not the project's launcher")

    stand_ins = {"tmp_path": tmp_path, "tiny_llama_path": "tiny-llama", "scripted_reward": "scripted_reward.py",
                 "reward_server": SimpleNamespace(url="http://127.0.0.1:9/get_reward")}
    fn = getattr(module, test)
    kwargs = {name: stand_ins.get(name) for name in inspect.signature(fn).parameters}
    saved = [(m, m.launch) for m in {id(m): m for m in (module, pipeline)}.values() if hasattr(m, "launch")]
    for m, _ in saved:
        m.launch = launch
    try:
        fn(**kwargs)
    except _Launched as e:
        return e.argv
    except (Exception, SystemExit):  # noqa: BLE001 - trains some other way, or needed a real fixture first
        return None
    finally:
        for m, original in saved:
            m.launch = original
    return None


# rows whose tests train through train_local or `ray job submit`, not the launcher's argv (checked by name only)
BY_NAME_ONLY_ROWS = {"images"}


@pytest.mark.parametrize("row,column", [(r, c) for r in ROWS for c in COLUMNS])
def test_every_tested_cell_names_a_run_that_switches_its_pair_on(row, column, tmp_path):
    """A tested cell is tested by its named runs only if they switch the pair on: each named launcher run's argv
    holds the row's feature and the column's setting, and at least one named test is such a run."""
    text = read_matrix()[(row, column)]
    if not text.startswith("tested") or row in BY_NAME_ONLY_ROWS:
        return
    checked = []
    for i, (file, test) in enumerate(re.findall(r"`(test_\w+\.py)::(test_\w+)", text)):
        argv = launched_argv(file, test, tmp_path / str(i))
        if argv is None:
            continue
        assert ROW_ON[row](argv), (row, file, test, "does not switch the feature on")
        assert COLUMN_ON[column](argv), (column, file, test, "does not run the setting")
        checked.append(test)
    assert checked, f"no named test of ({row}, {column}) is a launcher run switching the pair on: {text}"


# each refusal's two sides as flags added to BASE: its upstream feature, and the setting (or flag) it meets
PAIRS = {
    "one-sample-adora": (ROWS["one sample per prompt"], COLUMNS["ADORA"]),
    "one-sample-ada": (ROWS["one sample per prompt"], COLUMNS["Reinforce-Ada Seq"]),
    "no-group-baseline-est": (["--algo.advantage.estimator", "gae", "--ada.baseline", "group"], COLUMNS["Est"]),
    "reward-model-ada": (ROWS["reward model"], COLUMNS["Reinforce-Ada Seq"]),
    "reward-url-and-model": (["--reward.remote_url", "http://127.0.0.1:5000/get_reward"], ROWS["reward model"]),
    "agent-and-reward-model": (["--train.agent_func_path", "agent.py"], ROWS["reward model"]),
    "load-in-4bit-vllm": (["--ds.load_in_4bit"], ["--vllm.num_engines", "1"]),
    "actor-lr-scheduler": (["--actor.lr_scheduler", "reduce_lr_on_plateau"], []),  # refused whatever the setting
    "critic-lr-scheduler": (["--critic.lr_scheduler", "warmup_stable_decay"], ["--algo.advantage.estimator", "gae"]),
}
CPU_MODE_REFUSAL = "cannot run in the CPU mode"  # the CPU mode's own start-up refusal (e.g. 4-bit needs CUDA)


def refusal_words(refusal) -> list:
    """What the one message must hold: both flags (or the feature's flag and the trainers), and the reason's start."""
    return [refusal.feature.split(" ")[0], " with " + refusal.setting.split(" {")[0], refusal.reason[:40]]


def test_every_refusal_is_in_the_matrix_and_has_its_pair():
    refused = {re.match(r"refused: `([\w-]+)`", text).group(1) for text in read_matrix().values()
               if text.startswith("refused")}
    assert refused <= set(BY_KEY) == set(PAIRS)
    text = DOC.read_text(encoding="utf-8")
    assert not [key for key in BY_KEY if f"`{key}`" not in text]


@pytest.mark.parametrize("parse", [parse_args, parse_local_args], ids=["launcher", "train_local"])
@pytest.mark.parametrize("refusal", REFUSALS, ids=lambda r: r.key)
def test_each_refused_pair_is_refused_at_start_up_naming_both_flags(refusal, parse, refused):
    feature, setting = PAIRS[refusal.key]
    err = refused(parse, with_base(feature + setting), refusal_words(refusal))
    assert err.count("error:") == 1


@pytest.mark.parametrize("refusal", REFUSALS, ids=lambda r: r.key)
def test_either_side_alone_is_accepted(refusal, capsys):
    """Each side alone passes this entry (an entry that refuses its feature whatever the setting, the trainers, is
    tested by the test below). On this machine the CPU mode may refuse a side by itself (4-bit needs CUDA): then
    with its own message, not the entry's."""
    feature, setting = PAIRS[refusal.key]
    for side in (feature, setting) if setting else ():
        try:
            assert not refusal.refuses(parse_args(with_base(side)))
        except SystemExit:
            err = capsys.readouterr().err
            assert CPU_MODE_REFUSAL in err and refusal.reason[:40] not in err, err


@pytest.mark.parametrize("role,setting", [("actor", []), ("critic", ["--algo.advantage.estimator", "gae"])])
def test_every_schedule_the_trainers_step_without_a_metric_is_accepted_and_only_those(role, setting, capsys):
    """transformers' schedule names (tests/test_heldout_eval.py checks which of them build and step without a
    metric: LR_SCHEDULERS): each of those passes the launcher, and each other name (or an unknown one) is refused."""
    from transformers import SchedulerType

    from openrlhf_ada.compatibility import LR_SCHEDULERS

    for name in [t.value for t in SchedulerType] + ["cosine_schedule"]:
        argv = with_base(setting + [f"--{role}.lr_scheduler", name])
        if name in LR_SCHEDULERS:
            assert getattr(parse_args(argv), role).lr_scheduler == name
        else:
            with pytest.raises(SystemExit):
                parse_args(argv)
            err = capsys.readouterr().err
            assert f"--{role}.lr_scheduler {name!r} with " in err, err


def test_a_4bit_actor_gives_the_weight_sync_packed_uint8_weights(tmp_path):
    """Why load-in-4bit-vllm refuses: loaded as upstream's Actor loads it (bitsandbytes NF4, double quantization,
    bf16 compute), a model's linear weights are packed uint8 parameters (two 4-bit values a byte), and
    `named_parameters()` is what upstream's weight sync sends the engines, which hold the bf16 model."""
    import torch
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig, LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                         num_attention_heads=4, num_key_value_heads=4)
    LlamaForCausalLM(config).to(torch.bfloat16).save_pretrained(tmp_path)
    nf4 = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                             bnb_4bit_compute_dtype=torch.bfloat16)
    model = AutoModelForCausalLM.from_pretrained(tmp_path, quantization_config=nf4, dtype=torch.bfloat16,
                                                 device_map="cpu")
    sent = dict(model.named_parameters())
    q_proj = sent["model.layers.0.self_attn.q_proj.weight"]
    assert q_proj.dtype == torch.uint8 and q_proj.numel() == 64 * 64 // 2, (q_proj.dtype, q_proj.shape)
    assert sent["model.embed_tokens.weight"].dtype == torch.bfloat16  # what the engines hold for every weight
