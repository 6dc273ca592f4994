"""The reward guard's time limit measures the reward function itself, and HTTP reward servers keep upstream's
retries. Runs the real executor (upstream's SingleTurnAgentExecutor underneath) in this process,
with a real `.py` reward file and a real local HTTP server; no engine is needed for the reward calls."""

from __future__ import annotations

import asyncio
import json
import textwrap
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from openrlhf_ada.trainer.ray.reward_guard import GuardedRewardExecutor

REWARD = textwrap.dedent('''
    import time
    import torch

    def reward_func(queries, prompts, labels):
        if labels[0] == "hang":
            time.sleep(3)
        t = torch.tensor([1.0])
        return {"rewards": t, "scores": t, "extra_logs": {"mine": 2.0}}
''')


def call_all(executor, labels):
    async def run():
        return await asyncio.gather(*(executor._fetch_rewards_via_func([f"q{i}"], [f"p{i}"], [label])
                                      for i, label in enumerate(labels)))

    return [results[0] for results in asyncio.run(run())]


def test_the_time_limit_counts_the_reward_functions_own_time(tmp_path):
    """More hanging calls than the thread pool upstream uses (asyncio.to_thread: min(32, cpus + 4) threads): with
    the old wrapper the fast calls waited behind them and timed out too; each call now has its own clock."""
    path = tmp_path / "reward.py"
    path.write_text(REWARD)
    executor = GuardedRewardExecutor([str(path)], timeout=1.0)
    hangs = executor.max_concurrent + 2
    results = call_all(executor, ["hang"] * hangs + ["fast"] * 2)
    assert [r["extra_logs"].get("reward_fail_code") for r in results[:hangs]] == [2.0] * hangs  # timeout
    for fast in results[hangs:]:
        assert fast["rewards"].tolist() == [1.0]
        assert fast["extra_logs"] == {"mine": 2.0}  # no reward_failed / reward_fail_code on a success


class _FlakyRewardServer(BaseHTTPRequestHandler):
    calls = 0

    def do_POST(self):
        type(self).calls += 1
        self.rfile.read(int(self.headers["Content-Length"]))
        if type(self).calls == 1:  # the first request fails: upstream retries after 1 s
            self.send_response(500)
            self.end_headers()
            return
        body = json.dumps({"rewards": [1.0], "scores": [1.0], "extra_logs": {}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def flaky_server():
    _FlakyRewardServer.calls = 0
    server = HTTPServer(("127.0.0.1", 0), _FlakyRewardServer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/get_reward"
    server.shutdown()


def test_http_reward_servers_keep_upstreams_retries(flaky_server):
    """--fault.reward_timeout (0.5 s here) no longer cuts upstream's retry policy short: the second try succeeds."""
    executor = GuardedRewardExecutor([flaky_server], timeout=0.5)

    async def run():
        return await executor._fetch_rewards_via_http(["q"], ["p"], ["l"])

    result = asyncio.run(run())[0]
    assert _FlakyRewardServer.calls == 2 and result["rewards"].tolist() == [1.0]
