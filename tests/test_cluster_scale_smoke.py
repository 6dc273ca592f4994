"""benchmarks/cluster_scale.py at a tiny shape (4 prompts x n = 4, 32 new tokens, 2 stand-in engines) on a local
Ray: its rows against counts known by hand and against the engines' own counts. No timing assertions."""

import importlib.util
import os
import sys

import pytest

pytestmark = pytest.mark.slow  # starts Ray and two engine actors

BENCHMARKS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks")
PROMPTS, N, ENGINES = 4, 4, 2


def load():
    name = "_benchmarks_cluster_scale"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, os.path.join(BENCHMARKS, "cluster_scale.py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


@pytest.fixture(scope="module")
def result(ray_local, tiny_llama_path):
    cs = load()
    return cs, cs.run([(PROMPTS, N)], max_new_tokens=32, repeats=2, engines_n=ENGINES, dp=2, seed=0,
                      tokenizer_path=tiny_llama_path, warmup=False)


def rows(result, setting):
    return [r for r in result["rows"] if r["setting"] == setting]


def test_upstream_ships_the_tokenizer_with_every_request_and_the_project_once_per_engine(result):
    cs, res = result
    for r in rows(res, "upstream GRPO") + rows(res, "upstream GRPO (A/A)"):
        assert r["requests"] == PROMPTS and r["generated"] == r["trained"] == PROMPTS * N == r["engine_samples"]
        assert r["tokenizers_unpickled"] == PROMPTS  # one copy per request, in the engines
        assert r["bytes_to_engines"] >= PROMPTS * res["tokenizer_bytes"]
    for name, (path, _) in cs.SETTINGS.items():
        if path != "project":
            continue
        first, second = rows(res, name)
        # each engine process unpickles the handle's tokenizer once, on its first request; nothing in later steps
        assert first["tokenizers_unpickled"] <= ENGINES and second["tokenizers_unpickled"] == 0, name
        # a request carries the handle, not the tokenizer: each is a small part of one tokenizer's bytes. (The
        # bound is per request: the rounds, and so the requests in a step, vary with the engines' timing.)
        for r in (first, second):
            assert r["bytes_to_engines"] < r["requests"] * res["tokenizer_bytes"] / 4, name


def test_every_setting_trains_n_per_prompt_and_keeps_nothing_after_the_step(result):
    cs, res = result
    for r in res["rows"]:
        assert r["trained"] == PROMPTS * N and r["buffer_items"] == PROMPTS * N, r["setting"]
        assert r["generated"] == r["engine_samples"] >= PROMPTS * N, r["setting"]  # the metrics agree with the engines
        assert r["held_by_generator_mb"] == 0.0, r["setting"]
        assert r["ray_calls"]["ray.wait"] >= 1 and r["ray_calls_total"] >= r["requests"], r["setting"]
    for r in rows(res, "Reinforce-Ada async") + rows(res, "Reinforce-Ada sync"):
        assert r["requests"] >= PROMPTS  # one call per round: at least one round per prompt


def test_the_pools_hold_the_engine_actors_compact_responses(result):
    """The project's stand-in engines answer through the engine actor's own formatting (int32 ids, float32
    log-probs): 8 bytes per held token, plus per sample under 2 KB of dict, headers and record and the ~0.2 KB prompt
    text, over at least 512 + 8 held tokens: at most 8 + 2,300 / 520 = 12.4 bytes per token (upstream's lists of
    the same tokens take over 60). Upstream's path has no pools: nothing counted."""
    cs, res = result
    for r in res["rows"]:
        if cs.SETTINGS[r["setting"]][0] == "upstream":
            assert r["pool_bytes_per_token"] is None, r["setting"]
        else:
            assert 8 <= r["pool_bytes_per_token"] <= 12.4, (r["setting"], r["pool_bytes_per_token"])


def test_cancel_takes_one_ray_get_per_stream_not_per_sample(result):
    """The stand-in has a stream's samples all ready at once, so each stream is one message: the trainer's ray.get
    calls are one per stream (plus upstream's reads of the engines' load), fewer than the samples generated (one per
    sample and one per stream's end, when each message carried one sample)."""
    cs, res = result
    for r in rows(res, "Reinforce-Ada async --ada.cancel"):
        assert r["requests"] <= r["ray_calls"]["ray.get"] < r["generated"]


def test_summary_and_section(result):
    cs, res = result
    summary = cs.summarize(res)
    assert {m["setting"] for m in summary} == set(cs.SETTINGS)
    base = next(m for m in summary if m["setting"] == cs.BASE)
    assert base["cpu_ratio"] == 1.0 and base["calls_ratio_per_sample"] == 1.0
    text = cs.render(res, summary, "python benchmarks/cluster_scale.py --shapes 4x4")
    assert "| 4x4 | Reinforce-Ada async --ada.cancel |" in text and "The one stand-in: generation" in text
    assert "Load average" in text
    assert "4x4, trainer CPU seconds per step (targets: at most 0.5x upstream" in text


def test_per_step_targets_by_hand():
    """Seconds per step against upstream's and the fixed-n path's, each judged against its target: 4 s against 10 s
    upstream (0.40x: met) and 3 s fixed n (1.33x: met); 6 s (0.60x, 2.00x: neither)."""
    cs = load()

    def row(setting, cpu, prompts=512):
        return {"setting": setting, "prompts": prompts, "n": 4, "cpu": cpu, "advantages_s": 0.1}

    summary = [row("upstream GRPO", 10.0), row("upstream GRPO (A/A)", 9.0), row("project GRPO (fixed n)", 3.0),
               row("Reinforce-Ada async", 4.0), row("Reinforce-Ada sync", 6.0)]
    lines = cs.per_step_targets(summary)
    assert "Reinforce-Ada async 4.0 s: 0.40x upstream (met), 1.33x fixed n (met)" in lines[0]
    assert "Reinforce-Ada sync 6.0 s: 0.60x upstream (not met), 2.00x fixed n (not met)" in lines[0]
    assert "A/A 0.90x upstream" in lines[0]
    assert cs.per_step_targets([row("upstream GRPO", 10.0)]) == []  # nothing to compare at that shape


def test_memory_targets_by_hand():
    """Reinforce-Ada async's step peak RSS growth against 1.5 GB (1,400 MB: met at 512x32; 1,600 MB: not met at
    1024x32), and the pools' bytes per held token over the project's rows against 10 (8.9 and 10.4: not met)."""
    cs = load()

    def row(setting, rss, prompts, pool=None):
        return {"setting": setting, "prompts": prompts, "n": 32, "peak_rss_mb": rss, "pool_bytes_per_token": pool}

    summary = [row("upstream GRPO", 300.0, 512), row("project GRPO (fixed n)", 200.0, 512, 8.9),
               row("Reinforce-Ada async", 1400.0, 512, 9.5), row("Reinforce-Ada async", 1600.0, 1024, 10.4)]
    lines = cs.memory_targets(summary)
    assert lines[0] == ("- 512x32, the step's peak RSS growth (target for Reinforce-Ada async: at most 1.5 GB): "
                        "Reinforce-Ada async 1400 MB (met); upstream GRPO 300 MB; project GRPO (fixed n) 200 MB.")
    assert "1024x32" in lines[1] and "1600 MB (not met)" in lines[1]
    assert lines[2] == "- The pools' bytes per held response token (target: at most 10): 8.90-10.40 over the project's " \
                       "rows (not met)."
