"""GRESO's pre-rollout skip (`--ada.skip greso`) end to end in train_local (the hf engine) with plain fixed-n GRPO (no
--ada.enable): the history kept without --ada.history, saturated prompts skipped from the second epoch on and
replaced by the next ones, p_easy / p_hard moved after every step of it, and both in the checkpoint. Seq and Est
take the same draw (round_loop.RoundStep.draw); their flags and the state's resume are checked in
tests/test_adaptive_family_flags.py. The run is train_local's `run` in this process, on the suite's local Ray."""

from __future__ import annotations

import json
from hashlib import sha256

import pytest
from test_est_on_cpu import LABELS, argv

from openrlhf_ada.cli.train_local import parse_local_args
from openrlhf_ada.cli.train_local import run as train_local
from openrlhf_ada.trainer.metrics_log import read_metrics

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def test_train_local_greso_skips_saturated_prompts_with_fixed_n(tmp_path, tiny_llama_path, ray_local):
    """6 prompts ('1' always correct, '0' always wrong, four that alternate), 3 a step, n = 4, 6 steps. Epoch 0
    (steps 1-2) skips nothing (no history) and leaves p_e at 0.5 (no adaptation in the first epoch). From epoch 1 on
    '1' and '0' are on a streak (z >= 1: skipped with probability 1 - p_e^z, about 1/2 and more), the alternating
    ones never (their groups hold both rewards); every step of epoch >= 1 moves each p_e by exactly 0.01, and the
    seeded draws skip at least one prompt over epochs 1-2 (probability (1/2 x 1/4)^2 of none). A skipped prompt's
    slot goes to the next one of the epoch (the epoch's last step is short when its data runs out, as with
    --ada.history's skip)."""
    out = tmp_path / "greso"
    args = argv(tmp_path, tiny_llama_path, out, 6)
    args = args[: args.index("--ada.enable")]  # plain fixed-n GRPO
    args[args.index("--rollout.batch_size") + 1] = "3"
    train_local(parse_local_args(args + ["--ada.skip", "greso"]))
    rows = read_metrics(str(out))
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5, 6] and all(1 <= r["prompts"] <= 3 for r in rows)
    epochs = [r["ada/epoch"] for r in rows]
    assert epochs[:2] == [0, 0] and epochs[2] == 1 and epochs[-1] >= 2
    for r in rows[:2]:
        assert (r["ada/greso_skipped"], r["ada/greso_p_easy"], r["ada/greso_p_hard"]) == (0, 0.5, 0.5)
    assert sum(r["ada/greso_skipped"] for r in rows[2:]) >= 1
    # a skipped prompt's slot goes to the next one (a step short of prompts only where the epoch's data runs out)
    assert any(r["ada/greso_skipped"] >= 1 and r["prompts"] == 3 and r["ada/prompts_consumed"] > 3 for r in rows)
    before = rows[1]
    for r in rows[2:]:  # one step of 0.01 each, up or down
        for kind in ("ada/greso_p_easy", "ada/greso_p_hard"):
            assert abs(r[kind] - before[kind]) == pytest.approx(0.01)
        before = r
    state = json.loads((out / "ckpt" / "latest" / "trainer_state.json").read_text())["generator"]
    assert state["greso"] == {"format": 1, "p_easy": pytest.approx(rows[-1]["ada/greso_p_easy"]),
                              "p_hard": pytest.approx(rows[-1]["ada/greso_p_hard"])}
    key = {lab: sha256(f"Count to {i}:".encode()).hexdigest() for i, lab in enumerate(LABELS) if lab != "mix"}
    history = state["history"]["prompts"]
    assert history[key["1"]][0] == [0, 4, 0] and history[key["0"]][0] == [0, 0, 4]  # epoch 0, one group of 4
