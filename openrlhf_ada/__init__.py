"""openrlhf-ada."""

from openrlhf_ada.cpu_compat import install as _install_cpu_compat

_install_cpu_compat()
