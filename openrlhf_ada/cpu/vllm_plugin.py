"""vLLM's `vllm.general_plugins` entry point (setup.py): vLLM loads it in every process it starts (EngineCore,
workers), before it builds the engine, which makes it the one way to reach those processes: they are started by the
engine actor, out of reach of Ray's worker setup hook.

Two things happen there: the errors those processes log are recorded for the engine actor
(openrlhf_ada/trainer/ray/engine_errors.py: an engine core that fails says why), and, in the CPU mode only, the CPU
mode's vLLM patches are applied (openrlhf_ada/cpu/patches.py; a no-op wherever torch sees a CUDA device).
"""


def load() -> None:
    from openrlhf_ada.cpu.patches import apply_cpu_patches
    from openrlhf_ada.trainer.ray.engine_errors import record_errors_in_this_process

    record_errors_in_this_process()
    apply_cpu_patches(vllm_process=True)
