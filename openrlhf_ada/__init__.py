"""openrlhf-ada."""

from openrlhf_ada import _moved

_moved.install()  # the old import paths (openrlhf_ada.utils.*, openrlhf_ada.cpu_compat, ...), before anything imports

from openrlhf_ada.cpu.patches import install_when_torch_loads as _install_cpu_compat  # noqa: E402

_install_cpu_compat()


def __getattr__(name):
    return _moved.top_level(name)
