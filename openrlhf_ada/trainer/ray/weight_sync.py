"""train_local's weight sync, on any device: functions that run inside a vLLM worker through `collective_rpc` (kept in
a light module: the engine process imports it by name). The new weights travel as a safetensors file and
`reload_weights` puts them in place (on CPU the backend repacks linear weights after loading, so `model.load_weights`
on the live model does not work there; upstream's WorkerWrap.update_weight allocates on CUDA)."""


def reload_weights_from_file(worker, path: str) -> bool:
    from safetensors.torch import load_file

    worker.reload_weights(weights_iterator=iter(load_file(path).items()))
    return True
