"""A scripted reward file for the engine tests (a real `.py` reward file, loaded by the engines' reward guard).

A label "<run>|<behaviour>,<behaviour>,..." scripts each successive sample of a prompt (counted per label in the
engine process that scores it): a number is the reward; "slow<seconds>" (default 1) a correct answer whose verifier
takes that long, so that other requests run meanwhile; "raise" / "x" raise; "none" returns None; "hang" sleeps 30 s;
"nan", "inf", "str", "shape" return rewards the guard must reject; "<number>e" adds an extra_logs key that other
samples lack.
"""

import threading
import time

import torch

_lock, _seen = threading.Lock(), {}


def reward_func(queries, prompts, labels):
    label = labels[0]
    with _lock:
        k = _seen.get(label, 0)
        _seen[label] = k + 1
    what = label.split("|")[1].split(",")[k]
    if what.startswith("slow"):
        time.sleep(float(what[4:] or 1))
        what = "1"
    if what in ("raise", "x"):
        raise RuntimeError("reward service exploded")
    if what == "none":
        return None
    if what == "hang":
        time.sleep(30)
    if what == "nan":
        return {"rewards": torch.tensor([float("nan")]), "scores": torch.tensor([1.0])}
    if what == "inf":
        return {"rewards": torch.tensor([float("inf")])}
    if what == "str":
        return {"rewards": "great", "scores": "great"}
    if what == "shape":
        return {"rewards": torch.tensor([1.0, 0.0]), "scores": torch.tensor([1.0, 0.0])}
    if what.endswith("e"):
        t = torch.tensor([float(what[:-1])])
        return {"rewards": t, "scores": t, "extra_logs": {"odd_key": 1.0}}
    t = torch.tensor([float(what)])
    return {"rewards": t, "scores": t, "extra_logs": {}}
