"""The documentation matches the tree: docs/layout.md lists every module of the package (each .py file under
openrlhf_ada/ except __init__.py; a package is its folder's heading) and nothing that is gone; every file or folder of
the repository that the README or a page under docs/ names (a link, or a path in backticks) exists; every `make`
target the README names is in the Makefile; every project class a page names (`Ada...`, `Adora...`) is defined in the
package; the README stays a front door of about 150 lines."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted((ROOT / "docs").glob("*.md"))
# what a path in backticks must start with to be read as a path inside the repository (runs/, .venv/ and ~/.cache are
# made by the commands, so they are not checked)
REPO_TOPS = ("openrlhf_ada/", "docs/", "examples/", "scripts/", "tests/", "benchmarks/", "dockerfile/", ".ci/",
             "requirements/")
REPO_FILES = ("Makefile", "setup.py", "pyproject.toml", "README.md")


def modules():
    return sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "openrlhf_ada").rglob("*.py")
                  if p.name != "__init__.py" and "__pycache__" not in p.parts)


def backticked_paths(text):
    """Paths in backticks, and the paths that the commands of fenced code blocks name; a bare `name.sh` is a script
    in examples/scripts/ or scripts/."""
    blocks = re.findall(r"^```[a-z]*\n(.*?)^```", text, re.S | re.M)
    tokens = re.findall(r"`([^`\s]+)`", re.sub(r"^```[a-z]*\n.*?^```", "", text, flags=re.S | re.M))
    tokens += [word for block in blocks for word in re.split(r"[\s'\"=,\[\]]+", block)]
    for token in tokens:
        path = token.split("::")[0].rstrip(":,.)")
        if any(c in path for c in "<>*…{}$") or "=" in path:
            continue
        if path.startswith(REPO_TOPS) or path in REPO_FILES:
            yield path
        elif path.endswith(".sh") and "/" not in path:
            yield next((f"{d}/{path}" for d in ("examples/scripts", "scripts") if (ROOT / d / path).is_file()),
                       f"examples/scripts/{path}")


def links(text):
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if not target.startswith(("http://", "https://", "#", "mailto:")):
            yield target.split("#")[0]


def test_layout_lists_every_module_and_only_modules_that_exist():
    text = (ROOT / "docs" / "layout.md").read_text()
    missing = [m for m in modules() if f"`{m}`" not in text]
    assert not missing, f"docs/layout.md does not list {missing}: add a row for each"
    listed = re.findall(r"`(openrlhf_ada/[^`]+\.py)`", text)
    gone = [m for m in listed if not (ROOT / m).is_file()]
    assert not gone, f"docs/layout.md lists modules that are not in the tree: {gone}"


@pytest.mark.parametrize("page", [ROOT / "README.md", *DOCS], ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_repository_path_a_page_names_exists(page):
    text = page.read_text()
    named = {(page.parent / target).resolve() for target in links(text) if target}
    named |= {(ROOT / path).resolve() for path in backticked_paths(text)}
    missing = sorted(p.relative_to(ROOT).as_posix() if p.is_relative_to(ROOT) else str(p) for p in named
                     if not p.exists())
    assert not missing, f"{page.relative_to(ROOT)} names files that do not exist: {missing}"


def test_every_make_target_the_readme_names_exists():
    makefile = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([A-Za-z][\w-]*):", makefile, re.M))
    named = set(re.findall(r"\bmake ([a-z][\w-]*)", (ROOT / "README.md").read_text()))
    assert named and named <= targets, f"the README names make targets the Makefile lacks: {named - targets}"


@pytest.mark.parametrize("page", [ROOT / "README.md", *DOCS], ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_project_class_a_page_names_is_defined(page):
    code = "\n".join(p.read_text() for p in (ROOT / "openrlhf_ada").rglob("*.py"))
    # a class, or a module-level name bound to one (the Ray actors: `AdoraPoolPPOTrainer = ray.remote(...)(_AdoraPoolPPOTrainer)`)
    defined = set(re.findall(r"^\s*class (\w+)", code, re.M)) | set(re.findall(r"^(\w+) = ", code, re.M))
    named = set(re.findall(r"`(Ada[A-Z]\w*|Adora[A-Z]\w*)[`.(]", page.read_text()))
    assert named <= defined, f"{page.relative_to(ROOT)} names classes the package does not define: {named - defined}"


def test_the_readme_is_a_front_door():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 160, f"README.md has {len(lines)} lines: move detail to docs/"
    text = "\n".join(lines)
    for needed in ("https://arxiv.org/abs/2510.04996", "https://arxiv.org/abs/2602.10019",
                   "https://github.com/RLHFlow/Reinforce-Ada", "make demo", "make test", "make cluster-demo",
                   "ray job submit", "(docs/layout.md)"):
        assert needed in text, f"README.md lacks {needed}"
