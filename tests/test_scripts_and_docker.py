"""The launch scripts and the Docker image, checked against the real thing.

- Every `examples/scripts/train_*.sh` is run by bash with a stub `ray` on PATH that records its argv; the
  launcher's arguments (everything after `-- python3 -m openrlhf_ada.cli.train_ppo_ray`) go through
  `openrlhf_ada.launcher.parse_args`: upstream 0.11.2's own parser and validations plus the project's.
  A stale flag (upstream's scripts and README still carry some) fails there with SystemExit(2).
- Checks that `parse_args` cannot make because upstream runs them later, inside `train()` (colocation sizes).
- `dockerfile/Dockerfile` installs exactly setup.py's GPU_PINS (the `gpu` extra); the comparison itself is
  tested on deliberately wrong pin sets.
- Every shell script is executable and passes `bash -n`; docker_run.sh is run against a stub `docker`.
- The train scripts share examples/scripts/common.sh (sourced from the script's own folder); what each hands to
  `ray job submit`, word for word, is checked against a record by tests/test_script_argv.py.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import subprocess
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS_DIR = ROOT / "examples" / "scripts"
TRAIN_SCRIPTS = sorted(SCRIPTS_DIR.glob("train_*.sh"))
ALL_SCRIPTS = sorted(SCRIPTS_DIR.glob("*.sh"))
DOCKERFILE = ROOT / "dockerfile" / "Dockerfile"
DOCKER_RUN = SCRIPTS_DIR / "docker_run.sh"
SETUP_PY = ROOT / "setup.py"
LAUNCHER = "openrlhf_ada.cli.train_ppo_ray"

DUMMY = {
    "MODEL": "dummy-org/dummy-model",
    "DATA": "dummy/kk_train.jsonl",
    "REWARD_FILE": str(ROOT / "openrlhf_ada" / "rewards" / "toy.py"),  # parsing checks that it exists
    "NUM_GPUS": "8",
    "WANDB_TOKEN": "",
    "SAVE_PATH": "/nonexistent/openrlhf-ada-save",
}

# The authors' Reinforce-Ada-balance settings mapped onto OpenRLHF (dr_grpo, pool baseline, n=4, 8 x 4 rounds, no KL).
AUTHORS_REINFORCE_ADA = {
    "algo.advantage.estimator": "dr_grpo",
    "ada.enable": True,
    "ada.mode": "balance",
    "ada.baseline": "pool",
    "ada.round_size": 8,
    "ada.max_rounds": 4,
    "ada.positive_threshold": 0.7,
    "rollout.n_samples_per_prompt": 4,
    "algo.kl.init_coef": 0.0,
    "algo.kl.use_loss": False,
}

# What each script is for; a script not listed here still gets every generic check.
EXPECTED = {
    "train_reinforce_ada_est.sh": {
        "algo.advantage.estimator": "dr_grpo",
        "ada.enable": True,
        "ada.strategy": "est",
        "ada.est_preset": "paper",  # the paper's combination: dr_grpo with the 1/sqrt(p) weight
        "ada.est_allocation": "inv_sqrt",
        "rollout.n_samples_per_prompt": 8,
        "ada.est_min": 2,
        "ada.est_max": 32,
        "ada.prompt_weight": "inv_sqrt_pass_rate",
        "ada.positive_threshold": 0.7,
        "algo.kl.init_coef": 0.0,
        "adora.enable": False,
    },
    "train_adora_grpo.sh": {
        "algo.advantage.estimator": "group_norm",
        "adora.enable": True,
        "adora.variant": "llm",
        "adora.lam": 0.1,
        "adora.boost": 1.0,
        "adora.positive_threshold": 0.5,
        "ada.enable": False,
        "rollout.n_samples_per_prompt": 8,
        "algo.kl.use_loss": True,
        "algo.kl.estimator": "k3",
    },
    "train_adora_vl_grpo.sh": {  # the authors' ADORA_VL/examples/scripts/qwen25vl_7b_geo3k_adora.sh
        "algo.advantage.estimator": "group_norm",
        "adora.enable": True,
        "adora.variant": "vl",
        "ada.enable": False,
        "rollout.n_samples_per_prompt": 8,
        "rollout.batch_size": 128,
        "train.batch_size": 128,
        "algo.kl.use_loss": True,
        "algo.kl.estimator": "k3",
        "algo.kl.init_coef": 1e-3,
        "actor.adam.lr": 1e-6,
        "actor.lr_warmup_ratio": 0.0,
        "actor.adam.weight_decay": 1e-2,
        "rollout.max_new_tokens": 4096,
        "data.image_key": "images",
        "data.max_images_per_prompt": 1,
        "ds.packing_samples": False,
    },
    "train_reinforce_ada.sh": {**AUTHORS_REINFORCE_ADA, "adora.enable": False},
    "train_adora_reinforce_ada.sh": {**AUTHORS_REINFORCE_ADA, "adora.enable": True, "adora.lam": 0.1},
}

# Flags from upstream's own example scripts / README that OpenRLHF 0.11.2's parser rejects.
STALE_FLAGS = [
    ["--algo.advantage.is_correction_enable"],
    ["--prompt_max_len", "1024"],
    ["--generate_max_len", "1024"],
    ["--colocate_all_models"],
    ["--vllm_enable_sleep"],
    ["--deepspeed_enable_sleep"],
    ["--advantage_estimator", "group_norm"],
    ["--pretrain", "dummy"],
]

# env_vars upstream's train() passes to ray.init (cli/train_ppo_ray.py L25-30); a job runtime_env that sets them
# too makes ray.init fail to merge unless RAY_OVERRIDE_JOB_RUNTIME_ENV=1.
DRIVER_ENV_VARS = {"TOKENIZERS_PARALLELISM", "NCCL_DEBUG", "RAY_ENABLE_ZERO_COPY_TORCH_TENSORS"}


# --- running a script under a stub `ray` -------------------------------------------------------------------------


@dataclass
class Submission:
    ray_argv: list[str]  # `job submit ...` up to the `--`
    command: list[str]  # what ray would run
    launcher_argv: list[str]  # the launcher's arguments

    def ray_option(self, name: str) -> str | None:
        for i, word in enumerate(self.ray_argv):
            if word.startswith(name + "="):
                return word[len(name) + 1:]
            if word == name and i + 1 < len(self.ray_argv):
                return self.ray_argv[i + 1]
        return None


def _stub(bin_dir: Path, name: str, body: str) -> None:
    bin_dir.mkdir(exist_ok=True)
    path = bin_dir / name
    path.write_text("#!/usr/bin/env bash\n" + body)
    path.chmod(0o755)


def _clean_env(tmp_path: Path, **overrides: str) -> dict[str, str]:
    """Only what the scripts need, so that a variable set in the developer's shell cannot change the result."""
    env = {"PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}", "HOME": str(tmp_path)}
    env.update(overrides)
    return env


def run_script(script: Path, tmp_path: Path, *extra_args: str, **env_overrides: str) -> Submission:
    argv_file = tmp_path / "ray_argv"
    argv_file.unlink(missing_ok=True)
    _stub(tmp_path / "bin", "ray", 'printf "%s\\0" "$@" > "${STUB_ARGV_FILE:?}"\n')
    env = _clean_env(tmp_path, STUB_ARGV_FILE=str(argv_file), **{**DUMMY, **env_overrides})
    proc = subprocess.run(["bash", str(script), *extra_args], env=env, cwd=tmp_path, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, f"{script.name} failed under the stub ray:\n{proc.stderr}"
    argv = argv_file.read_bytes().decode().split("\0")[:-1]
    assert argv[:2] == ["job", "submit"], argv[:4]
    sep = argv.index("--")
    command = argv[sep + 1:]
    assert command[:3] in (["python3", "-m", LAUNCHER], ["python", "-m", LAUNCHER]), command[:3]
    return Submission(ray_argv=argv[:sep], command=command, launcher_argv=command[3:])


def parse(argv: list[str]):
    from openrlhf_ada.launcher import parse_args

    return parse_args(list(argv))


def get(ns, dotted: str):
    for part in dotted.split("."):
        ns = getattr(ns, part)
    return ns


def colocation_problems(ns) -> list[str]:
    """The sizes upstream's train() asserts for colocated runs (cli/train_ppo_ray.py L41-64), which parse_args
    never reaches."""
    problems = []
    actor_gpus = ns.actor.num_nodes * ns.actor.num_gpus_per_node
    if ns.train.colocate_all and not ns.train.async_enable and ns.vllm.num_engines:
        vllm_gpus = ns.vllm.num_engines * ns.vllm.tensor_parallel_size
        if actor_gpus != vllm_gpus:
            problems.append(f"actor GPUs {actor_gpus} != vLLM GPUs {vllm_gpus}")
    if (ns.train.colocate_all or ns.train.colocate_actor_ref) and ns.algo.kl.init_coef > 0:
        if (ns.ref.num_nodes, ns.ref.num_gpus_per_node) != (ns.actor.num_nodes, ns.actor.num_gpus_per_node):
            problems.append("reference and actor placement differ")
    return problems


def test_the_three_scripts_exist():
    assert set(EXPECTED) <= {p.name for p in TRAIN_SCRIPTS}


@pytest.mark.parametrize("script", TRAIN_SCRIPTS, ids=lambda p: p.name)
def test_script_parses_with_the_real_parser(script, tmp_path):
    sub = run_script(script, tmp_path)
    ns = parse(sub.launcher_argv)

    # what every script promises: single node, colocated vLLM with sleep, ZeRO-3, the dummy inputs passed through
    assert ns.train.colocate_all is True
    assert ns.vllm.enable_sleep is True  # upstream turns it off again without colocate_all
    assert ns.ds.enable_sleep is True
    assert ns.ds.zero_stage == 3
    assert ns.actor.num_nodes == 1 and ns.actor.num_gpus_per_node == 8
    assert ns.actor.model_name_or_path == DUMMY["MODEL"]
    assert ns.data.prompt_dataset == DUMMY["DATA"]
    assert ns.reward.remote_url == [DUMMY["REWARD_FILE"]]
    assert ns.ckpt.output_dir == DUMMY["SAVE_PATH"]
    assert ns.logger.wandb.key is None and not any(a.startswith("--logger.wandb") for a in sub.launcher_argv)
    assert colocation_problems(ns) == []

    for dotted, value in EXPECTED.get(script.name, {}).items():
        assert get(ns, dotted) == value, f"{script.name}: {dotted} = {get(ns, dotted)!r}, expected {value!r}"


@pytest.mark.parametrize("script", TRAIN_SCRIPTS, ids=lambda p: p.name)
def test_script_gives_each_flag_once(script, tmp_path):
    # argparse silently keeps the last of two values; a flag given twice is an editing mistake
    flags = [a for a in run_script(script, tmp_path).launcher_argv if a.startswith("--")]
    duplicates = sorted({f for f in flags if flags.count(f) > 1})
    assert duplicates == []


@pytest.mark.parametrize("script", TRAIN_SCRIPTS, ids=lambda p: p.name)
def test_script_runtime_env(script, tmp_path):
    sub = run_script(script, tmp_path)
    assert sub.ray_option("--address") == "http://127.0.0.1:8265"
    runtime_env = json.loads(sub.ray_option("--runtime-env-json"))
    assert runtime_env["working_dir"] == str(ROOT)  # openrlhf_ada and relative reward paths resolve on every node
    assert ".venv" in runtime_env.get("excludes", []) and ".git" in runtime_env["excludes"]
    env_vars = runtime_env.get("env_vars", {})
    if env_vars.get("RAY_OVERRIDE_JOB_RUNTIME_ENV") != "1":
        assert not DRIVER_ENV_VARS & set(env_vars), "ray.init would refuse to merge these keys"
        assert "worker_process_setup_hook" not in runtime_env


@pytest.mark.parametrize("script", TRAIN_SCRIPTS, ids=lambda p: p.name)
def test_script_wandb_and_extra_args(script, tmp_path):
    sub = run_script(script, tmp_path, "--logger.tensorboard_dir", "/nonexistent/tb", WANDB_TOKEN="dummy-token")
    ns = parse(sub.launcher_argv)
    assert ns.logger.wandb.key == "dummy-token"
    assert ns.logger.wandb.run_name and ns.logger.wandb.project
    assert ns.logger.tensorboard_dir == "/nonexistent/tb"  # extra arguments reach the launcher


@pytest.mark.parametrize("script", TRAIN_SCRIPTS, ids=lambda p: p.name)
@pytest.mark.parametrize("num_gpus,tp", [(4, 1), (8, 2)])
def test_script_scales_colocation(script, tmp_path, num_gpus, tp):
    sub = run_script(script, tmp_path, NUM_GPUS=str(num_gpus), VLLM_TP=str(tp))
    ns = parse(sub.launcher_argv)
    assert ns.actor.num_gpus_per_node == num_gpus and ns.vllm.tensor_parallel_size == tp
    assert colocation_problems(ns) == []


def test_colocation_check_catches_a_mismatch(tmp_path):
    sub = run_script(SCRIPTS_DIR / "train_adora_grpo.sh", tmp_path, "--vllm.num_engines", "4")
    assert colocation_problems(parse(sub.launcher_argv)) == ["actor GPUs 8 != vLLM GPUs 4"]


@pytest.mark.parametrize("stale", STALE_FLAGS, ids=lambda s: s[0])
def test_stale_upstream_flag_is_rejected(stale, tmp_path, capsys):
    # through the whole chain: the script forwards extra arguments, parse_args must refuse them
    sub = run_script(SCRIPTS_DIR / "train_adora_grpo.sh", tmp_path, *stale)
    with pytest.raises(SystemExit) as exc:
        parse(sub.launcher_argv)
    assert exc.value.code == 2
    assert stale[0] in capsys.readouterr().err


def test_project_flag_misuse_is_rejected(tmp_path, capsys):
    sub = run_script(SCRIPTS_DIR / "train_reinforce_ada.sh", tmp_path)
    with pytest.raises(SystemExit) as exc:
        parse(sub.launcher_argv + ["--ada.baseline", "pool", "--algo.advantage.estimator", "reinforce"])
    assert exc.value.code == 2
    assert "--ada.baseline" in capsys.readouterr().err


# --- every shell script -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("script", ALL_SCRIPTS, ids=lambda p: p.name)
def test_script_is_executable_and_valid_bash(script):
    assert os.access(script, os.X_OK), f"chmod +x {script.relative_to(ROOT)}"
    assert script.read_text().startswith("#!/usr/bin/env bash\n")
    proc = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("script", TRAIN_SCRIPTS, ids=lambda p: p.name)
def test_train_script_header(script):
    lines = script.read_text().splitlines()
    header = []
    for line in lines[1:]:
        if not line.startswith("#"):
            break
        header.append(line)
    assert len(header) >= 5, "a comment header says what the script trains and with which settings"
    assert "set -euo pipefail" in lines
    sourced = sourced_files(script)
    lines += [line for path in sourced for line in path.read_text().splitlines()]
    for variable in DUMMY:
        assert any(line.startswith(f"{variable}=") for line in lines), \
            f"{variable} is set at the top of {script.name} or of what it sources ({[p.name for p in sourced]})"


_SOURCE = re.compile(r'^(?:source|\.) "\$\(dirname "\$\{BASH_SOURCE\[0\]\}"\)/([^"]+)"$')


def sourced_files(script: Path) -> list[Path]:
    """The files `script` sources from its own folder (`source "$(dirname "${BASH_SOURCE[0]}")/NAME"`)."""
    found = []
    for line in script.read_text().splitlines():
        match = _SOURCE.match(line.strip())
        if match:
            path = script.parent / match.group(1)
            assert path.is_file(), f"{script.name} sources {match.group(1)}, which is not beside it"
            found.append(path)
    return found


def test_the_shared_script_is_sourced_not_run(tmp_path):
    """examples/scripts/common.sh holds what the train_*.sh scripts share; its name keeps it out of TRAIN_SCRIPTS,
    every train script sources it from its own folder, and run on its own it stops before submitting anything."""
    common = SCRIPTS_DIR / "common.sh"
    assert common not in TRAIN_SCRIPTS and common in ALL_SCRIPTS
    assert all(sourced_files(script) == [common] for script in TRAIN_SCRIPTS)
    _stub(tmp_path / "bin", "ray", "exit 0\n")
    proc = subprocess.run(["bash", str(common)], env=_clean_env(tmp_path, RUN_NAME="x"), cwd=tmp_path,
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 1 and "sourced by the train_*.sh scripts" in proc.stderr


# --- Dockerfile pins == setup.py GPU_PINS -------------------------------------------------------------------------


def gpu_pins_from_setup(path: Path = SETUP_PY) -> list[str]:
    """GPU_PINS from setup.py, read with ast (importing setup.py would run setup())."""
    tree = ast.parse(path.read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "GPU_PINS" for t in node.targets):
            return list(ast.literal_eval(node.value))
    raise AssertionError("setup.py defines no GPU_PINS")


def dockerfile_instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    out, buf = [], ""
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("#") or (not line and not buf):
            continue
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        buf += line
        if buf.strip():
            head, _, rest = buf.strip().partition(" ")
            out.append((head.upper(), rest.strip()))
        buf = ""
    return out


_PIN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9._,-]+\])?==[A-Za-z0-9.+!_-]+$")


def pip_install_words(text: str) -> list[list[str]]:
    """The arguments of every `pip install` in a RUN line (after `pip install` / `python -m pip install`)."""
    found = []
    for instruction, args in dockerfile_instructions(text):
        if instruction != "RUN":
            continue
        lexer = shlex.shlex(args, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        commands, words = [], []
        for token in lexer:  # quotes respected; &&, ||, ;, | end a command
            if token in ("&&", "||", ";", "|"):
                commands.append(words)
                words = []
            else:
                words.append(token)
        commands.append(words)
        for words in commands:
            for i in range(len(words) - 1):
                if words[i] in ("pip", "pip3") and words[i + 1] == "install":
                    found.append(words[i + 2:])
                    break
    return found


def dockerfile_pins(text: str) -> list[str]:
    return [w for words in pip_install_words(text) for w in words if _PIN.match(w)]


def pin_mismatches(expected: list[str], found: list[str]) -> list[str]:
    """What differs between the pins setup.py expects and the pins an image installs ([] when they agree).

    Every expected pin must be exact (==) and installed with the same version and extras; every pin of the same
    package in the image must agree with it (a second, different pin would win or conflict). Pins of packages that
    setup.py does not list (the verifiers) are the image's own business."""
    by_name: dict[str, list[Requirement]] = defaultdict(list)
    for pin in found:
        req = Requirement(pin)
        by_name[canonicalize_name(req.name)].append(req)
    problems = []
    for pin in expected:
        req = Requirement(pin)
        name = canonicalize_name(req.name)
        if not str(req.specifier).startswith("==") or len(req.specifier) != 1:
            problems.append(f"{pin}: setup.py should pin exactly (==)")
        if name not in by_name:
            problems.append(f"{pin}: no pinned install of {name} in the Dockerfile")
            continue
        for other in by_name[name]:
            if other.specifier != req.specifier:
                problems.append(f"{name}: setup.py pins {req.specifier}, the Dockerfile {other.specifier}")
        if not any(set(other.extras) == set(req.extras) for other in by_name[name]):
            problems.append(f"{name}: setup.py wants extras {sorted(req.extras)}, the Dockerfile installs "
                            f"{[sorted(o.extras) for o in by_name[name]]}")
    return problems


def test_dockerfile_pins_equal_setup_gpu_pins():
    pins = gpu_pins_from_setup()
    assert len(pins) >= 6
    assert pin_mismatches(pins, dockerfile_pins(DOCKERFILE.read_text())) == []


def test_setup_gpu_extra_is_gpu_pins():
    tree = ast.parse(SETUP_PY.read_text())
    extras = [kw.value for node in ast.walk(tree) if isinstance(node, ast.Call)
              for kw in node.keywords if kw.arg == "extras_require"]
    assert len(extras) == 1 and isinstance(extras[0], ast.Dict)
    gpu = [v for k, v in zip(extras[0].keys, extras[0].values) if isinstance(k, ast.Constant) and k.value == "gpu"]
    assert len(gpu) == 1 and isinstance(gpu[0], ast.Name) and gpu[0].id == "GPU_PINS"


GOOD = ["openrlhf[vllm]==0.11.2", "vllm==0.29.0", "deepspeed==0.19.6"]


@pytest.mark.parametrize("found,needle", [
    (["openrlhf[vllm]==0.11.2", "vllm==0.28.0", "deepspeed==0.19.6"], "vllm"),  # wrong version
    (["openrlhf[vllm]==0.11.2", "vllm==0.29.0"], "deepspeed"),  # missing
    (["openrlhf==0.11.2", "vllm==0.29.0", "deepspeed==0.19.6"], "extras"),  # extras dropped
    (["openrlhf[vllm]==0.11.2", "vllm==0.29.0", "vllm==0.30.0", "deepspeed==0.19.6"], "0.30.0"),  # two pins
    (["openrlhf[vllm]==0.11.2", "vllm==0.29.0", "DeepSpeed==0.19.7"], "deepspeed"),  # other spelling, other version
])
def test_pin_comparison_catches_a_mismatch(found, needle):
    assert pin_mismatches(GOOD, GOOD) == []
    assert pin_mismatches(GOOD, list(reversed(GOOD)) + ["math-verify==0.9.0"]) == []
    problems = pin_mismatches(GOOD, found)
    assert problems and any(needle in p for p in problems), problems


def test_pin_comparison_wants_exact_pins():
    assert pin_mismatches(["vllm>=0.29.0"], ["vllm==0.29.0"])


def test_dockerfile_parser_catches_an_edited_dockerfile():
    text = DOCKERFILE.read_text()
    assert "transformers==5.15.0" in text
    wrong = text.replace("transformers==5.15.0", "transformers==5.19.0")
    assert any("transformers" in p for p in pin_mismatches(gpu_pins_from_setup(), dockerfile_pins(wrong)))
    dropped = text.replace("deepspeed==0.19.6", "deepspeed")
    assert any("deepspeed" in p for p in pin_mismatches(gpu_pins_from_setup(), dockerfile_pins(dropped)))


def test_dockerfile_parser_reads_continuations_and_skips_comments():
    text = ('FROM x\n# RUN pip install vllm==0.1.0\nRUN pip uninstall -y a==1.0 && \\\n'
            '    MAX_JOBS=4 pip install --no-build-isolation \\\n      "ray[default]==2.55.0" \\\n'
            '      flash-attn==2.8.3\nRUN python -m pip install b==2.0; echo c==3.0\n')
    assert dockerfile_pins(text) == ["ray[default]==2.55.0", "flash-attn==2.8.3", "b==2.0"]


def test_dockerfile_structure():
    instructions = dockerfile_instructions(DOCKERFILE.read_text())
    froms = [args for ins, args in instructions if ins == "FROM"]
    assert len(froms) == 1 and re.fullmatch(r"nvcr\.io/nvidia/pytorch:\d{2}\.\d{2}-py3", froms[0]), froms
    installed = {canonicalize_name(Requirement(w).name) for words in pip_install_words(DOCKERFILE.read_text())
                 for w in words if not w.startswith("-") and w != "."}
    assert {"math-verify", "reasoning-gym"} <= installed
    assert ["--no-deps", "-e", "."] in pip_install_words(DOCKERFILE.read_text())
    for ins, args in instructions:  # every COPY source exists, or the build stops there
        if ins == "COPY":
            *sources, _dest = shlex.split(args)
            for source in sources:
                assert (ROOT / source).exists(), f"COPY {source}: not in the repository"
    workdirs = [args for ins, args in instructions if ins == "WORKDIR"]
    assert f"MOUNT={workdirs[-1]}" in DOCKER_RUN.read_text(), "docker_run.sh mounts the repo where it is installed"


def dockerignored(path: str, ignore_file: Path = ROOT / ".dockerignore") -> bool:
    """Whether .dockerignore keeps path (relative to the repository root) out of the build context: each pattern
    matched against the path and its parent folders, `**/` prefixes also tried bare; a `!` line re-includes."""
    import fnmatch

    parts = path.split("/")
    prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    excluded = False
    for line in ignore_file.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negate, pattern = line.startswith("!"), line.lstrip("!").strip("/")
        patterns = {pattern, pattern[3:]} if pattern.startswith("**/") else {pattern}
        if any(fnmatch.fnmatchcase(prefix, pat) for prefix in prefixes for pat in patterns):
            excluded = not negate
    return excluded


def test_dockerignore_check():
    assert dockerignored(".venv/bin/python") and dockerignored("a/b/__pycache__/x.pyc") and dockerignored(".git")
    assert not dockerignored("setup.py") and not dockerignored("openrlhf_ada/__init__.py")


def test_dockerfile_flash_attn_wheel_build_arg():
    """FLASH_ATTN_WHEEL=path installs that wheel (pinned, from nothing but that file); empty builds from source."""
    text = DOCKERFILE.read_text()
    instructions = dockerfile_instructions(text)
    assert ("ARG", "FLASH_ATTN_WHEEL=") in instructions  # empty by default: today's build from source
    pin = next(p for p in gpu_pins_from_setup() if canonicalize_name(Requirement(p).name) == "flash-attn")
    runs = [args for ins, args in instructions if ins == "RUN" and "FLASH_ATTN_WHEEL" in args]
    assert len(runs) == 1, runs
    mount = re.match(r"--mount=type=bind,source=\$\{FLASH_ATTN_WHEEL:-([^}]+)\},target=(\S+) ", runs[0])
    assert mount, runs[0]
    placeholder = mount.group(1)  # bound when no wheel is given: must be in the build context
    assert (ROOT / placeholder).is_file() and not dockerignored(placeholder)
    installs = pip_install_words("RUN " + runs[0])
    assert len(installs) == 2, installs
    from_wheel, from_source = installs
    assert "--no-index" in from_wheel and any(w.startswith("--find-links=") for w in from_wheel)
    assert [w for w in from_wheel if not w.startswith("-")] == [pin]  # pip refuses a wheel of another version
    assert from_source == ["--no-build-isolation", pin]
    documented = re.findall(r"--build-arg FLASH_ATTN_WHEEL=(\S+)", text)
    assert documented, "the Dockerfile shows how to pass a wheel"
    for path in documented:
        assert path.endswith(".whl") and not path.startswith("/") and not dockerignored(path)


def _load_check_docker_pins():
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location("check_docker_pins", ROOT / "scripts" / "check_docker_pins.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look the module up
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return module


def test_check_docker_pins_reads_the_dockerfile():
    # scripts/check_docker_pins.py has its own Dockerfile parser (the resolution itself needs the index: not here)
    check = _load_check_docker_pins()
    installs = check.pip_installs(DOCKERFILE.read_text())
    assert check.all_requirements(installs) == list(dict.fromkeys(dockerfile_pins(DOCKERFILE.read_text())))
    assert ["."] in [i.editables for i in installs] and not any(i.skipped for i in installs)
    text = ('RUN --mount=type=bind,source=${W:-x},target=/w if [ -n "$W" ]; then cp /w "/t/${W##*/}" && \\\n'
            '    pip install --no-index --find-links=/t a==1.0; else X=1 python3 -m pip install \\\n'
            '    --no-build-isolation -c c.txt "b[x]>=2" ./local.whl; fi\n# RUN pip install c==3\n')
    wheel, source = check.pip_installs(text)
    assert wheel.requirements == ["a==1.0"] and source.requirements == ["b[x]>=2"]
    assert source.skipped == ["-c c.txt", "./local.whl"]


INSTALL_GPU = ROOT / "scripts" / "install_gpu.sh"


def test_check_docker_pins_reads_the_install_script_and_setup_extras():
    """scripts/install_gpu.sh (the GPU stack without Docker) as the checker reads it: vLLM, flash-attn's build tools,
    flash-attn without build isolation, then `-e '.[gpu]'`, which stands for setup.py's requirements and GPU_PINS."""
    check = _load_check_docker_pins()
    installs = check.script_pip_installs(INSTALL_GPU.read_text())
    assert [i.names() for i in installs[:3]] == [{"vllm"}, {"setuptools", "wheel", "packaging", "psutil", "ninja"},
                                                 {"flash-attn"}]
    assert installs[2].options == ["--no-build-isolation"] and installs[3].editables == [".[gpu]"]
    assert installs[3].project == ["torch", "numpy"] + gpu_pins_from_setup()
    assert set(gpu_pins_from_setup()) <= set(check.all_requirements(installs))
    pins = [r for i in installs for r in i.requirements if "==" in r]
    assert pins and pin_mismatches(gpu_pins_from_setup(), pins + gpu_pins_from_setup()) == []  # same versions
    assert check.project_requirements(".", deps=True) == ["torch", "numpy"]
    assert check.project_requirements(".[gpu]", deps=False) == []  # --no-deps, as the Dockerfile installs it


def test_install_order_builds_flash_attn_after_torch_without_isolation():
    """pip builds flash-attn's sdist (a setup.py that imports torch) in an isolated environment without torch: the
    one-step `pip install -e '.[gpu]'` fails in a fresh environment. The checker's order rule catches it, and
    anything that builds flash-attn before torch; the Dockerfile and scripts/install_gpu.sh pass."""
    check = _load_check_docker_pins()
    assert check.build_order_problems(check.pip_installs(DOCKERFILE.read_text())) == []
    assert check.build_order_problems(check.script_pip_installs(INSTALL_GPU.read_text())) == []

    def problems(script):
        return check.build_order_problems(check.script_pip_installs(script))

    one_step = problems("pip install -e '.[gpu]'\n")
    assert len(one_step) == 1 and "flash-attn" in one_step[0] and "--no-build-isolation" in one_step[0]
    pulled = problems("pip install vllm==0.29.0\npip install 'openrlhf[vllm]==0.11.2'\n")  # openrlhf requires it
    assert len(pulled) == 1 and "openrlhf requires flash-attn" in pulled[0]
    early = problems("pip install --no-build-isolation flash-attn==2.8.3\npip install vllm==0.29.0\n")
    assert len(early) == 1 and "before torch" in early[0]
    assert problems("pip install torch\npip install --no-build-isolation flash-attn==2.8.3\npip install -e .[gpu]\n") == []
    assert problems("pip install --no-index --find-links=w flash-attn==2.8.3\npip install -e '.[gpu]'\n") == []
    # a wheel in one branch of an `if` does not excuse an isolated build in the other
    branches = problems("if [ -n \"$W\" ]; then pip install --no-index --find-links=w flash-attn==2.8.3; "
                        "else pip install flash-attn==2.8.3; fi\n")
    assert len(branches) == 1 and "isolated" in branches[0]


def test_the_gpu_install_without_docker_is_the_script():
    """README and docs/cluster.md give scripts/install_gpu.sh for the install without Docker, never the one-step
    `pip install -e '.[gpu]'` that fails in a fresh environment."""
    text = INSTALL_GPU.read_text()
    assert os.access(INSTALL_GPU, os.X_OK) and "set -euo pipefail" in text
    subprocess.run(["bash", "-n", str(INSTALL_GPU)], check=True)
    for doc in (ROOT / "README.md", ROOT / "docs" / "cluster.md"):
        body = doc.read_text()
        assert "scripts/install_gpu.sh" in body, doc
        assert "Without Docker: `pip install -e '.[gpu]'`" not in body, doc


# --- docker_run.sh against a stub docker --------------------------------------------------------------------------


def test_docker_run_builds_then_starts_a_gpu_container(tmp_path):
    calls_dir = tmp_path / "calls"
    calls_dir.mkdir()
    _stub(tmp_path / "bin", "docker", (
        'n=$(ls "${STUB_CALLS:?}" | wc -l)\n'
        'printf "%s\\0" "$@" > "$STUB_CALLS/$(printf %03d "$n")"\n'
        '[[ "$1 $2" == "image inspect" ]] && exit 1\n'  # the image does not exist yet
        'exit 0\n'))
    env = _clean_env(tmp_path, STUB_CALLS=str(calls_dir))
    proc = subprocess.run(["bash", str(DOCKER_RUN)], env=env, cwd=tmp_path, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    calls = [f.read_bytes().decode().split("\0")[:-1] for f in sorted(calls_dir.iterdir())]
    assert [c[0] if c[0] != "image" else "image inspect" for c in calls] == ["image inspect", "build", "run"]
    build, run = calls[1], calls[2]
    assert build[build.index("-f") + 1] == str(DOCKERFILE) and build[-1] == str(ROOT)
    assert "--gpus" in run and any(a.startswith("--shm-size=") for a in run)
    assert run[run.index("-v") + 1] == f"{ROOT}:/workspace/openrlhf-ada"
    image = build[build.index("-t") + 1]
    assert run[-2:] == [image, "bash"]
