"""openrlhf-ada."""

from openrlhf_ada.cpu.patches import install_when_torch_loads as _install_cpu_compat

_install_cpu_compat()
