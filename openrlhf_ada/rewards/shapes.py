"""The reward of the shapes task (``prepare_data shapes``): ``--reward.remote_url openrlhf_ada/rewards/shapes.py``.

The picture shows one square or circle in red, green, blue or yellow; the label is that colour's name. The first
colour name in the first WINDOW characters of the response (case-insensitive) is the answer: the label's colour
scores 1 (score 1), another colour 0.2 (it answered in the expected form; score 0), none 0. A tiny random model names
a colour now and then, so groups of samples differ and the form is learnt first; telling the colours apart needs the
image. Extra logs: ``shapes_named_colour`` (any colour named) and ``shapes_correct``. The response is found after the
prompt's end (``_common.extract_response``): the query holds each image as all its image tokens, the prompt as one.
"""

import re

import torch

from openrlhf_ada.rewards._common import extract_response

COLOURS = ("red", "green", "blue", "yellow")
WINDOW = 16
FORM_REWARD = 0.2
_COLOUR = re.compile(r"red|green|blue|yellow", re.IGNORECASE)


def answer(response: str):
    """The first colour named in the response's first WINDOW characters, lower case, or None."""
    match = _COLOUR.search(response[:WINDOW])
    return match.group(0).lower() if match else None


def reward_func(queries, prompts, labels):
    rewards, correct, named = [], [], []
    for query, prompt, label in zip(queries, prompts, labels):
        said = answer(extract_response(query, prompt)[0])
        right = said is not None and said == str(label).strip().lower()
        rewards.append(1.0 if right else FORM_REWARD if said else 0.0)
        correct.append(float(right))
        named.append(float(said is not None))
    t = torch.tensor(rewards)
    return {"rewards": t, "scores": torch.tensor(correct),
            "extra_logs": {"shapes_named_colour": torch.tensor(named), "shapes_correct": torch.tensor(correct)}}
