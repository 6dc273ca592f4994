"""`generate_rounds`: every round a dispatch sends to one engine, in one Ray call, each round handed back as soon as
all of its samples are generated and scored.

Why. Upstream's dispatch makes one `generate_responses` call per prompt, and Reinforce-Ada's rounds multiply the
prompts' calls: at 512 prompts x 4 a step made about 1,400 engine calls where the fixed-n path made 520, each with its
own task submission, reply object and `ray.get` in the trainer. The round loop (trainer/ppo_utils/transport.py,
`RoundTransport`) still lets upstream's dispatch choose each prompt's engine (its least-loaded balancing), then sends
each engine the rounds it was given as one call: a Ray streaming generator over the same executor tasks upstream's
`generate_responses` would have run, in the same order.

What comes back. Each time tasks finish, the call yields one message `{"rounds": [(key, [response, ...]), ...]}` with
every round whose samples are now all back (in the order the rounds were sent; each round's responses in request
order, as upstream's `asyncio.gather` returns them, each compact: responses.py). A round is never held back for
another: the async schedule dispatches a prompt's next round as soon as its own is back, as with one call per round.
A round of no samples comes back in the first message. A task that raises makes the call raise (after the rounds
finished before it), as upstream's `generate_responses` raises; the call's other tasks are cancelled then, and when
the trainer drops the call.

Both engine actors use it (the vLLM actor, trainer/ray/vllm_engine.py, and the transformers one, hf_engine.py); it
needs only the actor's `executor`, as upstream's `generate_responses` does.
"""

from __future__ import annotations

import asyncio
from typing import AsyncIterator, List, Sequence, Tuple

from openrlhf_ada.trainer.ray.responses import compact_response

#: One round as the trainer sends it: (its key, prompt, label, samples, images).
Round = Tuple[object, str, object, int, object]


async def generate_rounds(actor, rounds: Sequence[Round], sampling_params, max_length: int,
                          hf_tokenizer) -> AsyncIterator[dict]:
    """Run `rounds` on `actor`'s executor, one task per sample, created round by round in the order given; yield
    `{"rounds": [(key, responses), ...]}` whenever rounds complete (module docstring)."""
    loop = asyncio.get_running_loop()
    tasks_of: List[list] = []
    round_of = {}  # task -> its round's position
    for position, (_key, prompt, label, num_samples, images) in enumerate(rounds):
        tasks = [loop.create_task(actor.executor.execute(prompt=prompt, label=label, sampling_params=sampling_params,
                                                         max_length=max_length, hf_tokenizer=hf_tokenizer,
                                                         llm_engine=actor, images=images))
                 for _ in range(int(num_samples))]
        tasks_of.append(tasks)
        round_of.update((task, position) for task in tasks)
    left = [len(tasks) for tasks in tasks_of]
    finished = [position for position, count in enumerate(left) if count == 0]  # rounds of no samples: at once
    pending = set(round_of)
    try:
        while True:
            if finished:
                yield _message(rounds, tasks_of, round_of, finished)
                finished = []
            if not pending:
                return
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            error = _count_done(done, round_of, left, finished)
            del done  # the frame keeps no finished task past its round's message
            if error is not None:  # the rounds finished before it in this turn, then the error
                if finished:
                    yield _message(rounds, tasks_of, round_of, finished)
                raise error
    finally:  # the call failed or was dropped: nothing of it keeps generating
        for task in round_of:
            task.cancel()


def _count_done(done, round_of: dict, left: List[int], finished: List[int]):
    """Count `done`'s tasks against their rounds in the order sent, a round whose last task this is into `finished`;
    stop at the first task that raised and return its error (None when none did)."""
    for task in sorted(done, key=lambda t: round_of[t]):
        if task.exception() is not None:
            return task.exception()
        position = round_of[task]
        left[position] -= 1
        if left[position] == 0:
            finished.append(position)
    return None


def _message(rounds: Sequence[Round], tasks_of: List[list], round_of: dict, positions: List[int]) -> dict:
    """The finished rounds at `positions` as one message; their tasks are let go once it is built, so the actor holds
    only the rounds not yet sent back, not every response of the call until its last round."""
    message = {"rounds": [(rounds[p][0], [compact_response(task.result()) for task in tasks_of[p]])
                          for p in sorted(positions)]}
    for p in positions:
        for task in tasks_of[p]:
            del round_of[task]
        tasks_of[p] = []
    return message
