#!/usr/bin/env python3
"""Resolve the pins of dockerfile/Dockerfile with pip, for the image's Python and platform, without building it;
or those of the install without Docker, scripts/install_gpu.sh.

    python scripts/check_docker_pins.py                   # Python 3.12 (NGC 26.xx), manylinux_2_28_x86_64
    python scripts/check_docker_pins.py --report r.json   # also keep pip's installation report
    python scripts/check_docker_pins.py --install-script scripts/install_gpu.sh   # the same for the script

What it does:

1. Reads the Dockerfile itself: RUN instructions (continuation lines joined, comment lines dropped), split into
   shell commands, and in every `pip install` / `python -m pip install` the arguments that are requirement
   specifiers. Options (--no-build-isolation, --find-links=..., ...) and paths are left out; the editable install
   of this project (`-e .`, `-e '.[gpu]'`) stands for setup.py's requirements and those of the extras it names
   (none with --no-deps). Both branches of an `if` count. With --install-script, the lines of that shell script
   instead of RUN instructions.
   Then the build order, without the index: flash-attn's sdist has a setup.py that imports torch, so pip's
   isolated build (which has no torch) cannot build it. The first install that brings it in, by name or through a
   distribution that requires it (openrlhf), must build it with --no-build-isolation after torch is installed
   (torch itself, or vLLM, which brings its torch build), or take a wheel (--no-index/--only-binary). A wrong order
   is a conflict (exit 1).
2. Runs pip's resolver once on all of them together, the way they add up in the image:
   `pip install --dry-run --ignore-installed --only-binary=:all: --python-version 3.12
   --platform manylinux_2_28_x86_64 (and each older manylinux tag) --report ...`. `--platform` needs
   `--only-binary=:all:`, so a distribution that has no wheel for the image (flash-attn and deepspeed have only
   sdists; openrlhf requires both, so they cannot simply be left out) is given to pip as a stand-in wheel: same
   name and version, with the requirements the sdist's own metadata declares (PKG-INFO, else the egg-info's
   requires.txt). pip then resolves those requirements together with the rest (flash-attn 2.8.3: torch, einops).
3. Prints the resolved versions of the key packages, checks every resolved package's requirements against the
   resolved set (the stand-ins' among them) and that every pin read in step 1 is what was resolved, and
   prints pip's conflict, if any.

Exit status: 0 when the pins resolve, 1 on a conflict, 2 when the check could not be made (index unreachable,
unreadable Dockerfile or script, pip failing otherwise).

pip runs isolated from this machine's pip configuration: `--isolated`, PIP_CONFIG_FILE=/dev/null and no other
PIP_* variables, so a global constraint file (one capping torch, say), extra indexes or find-links of the machine
running the check do not change the result; the index is --index-url (default: pip's own default index). pip
evaluates environment markers (`python_version > "3.11"`) for the interpreter that runs it, so run this script
with a Python of the image's version (3.12) for an exact answer; it warns otherwise. The default platform,
manylinux_2_28 (vLLM's own wheel tag), is the conservative one: the image's glibc is newer (an Ubuntu 24.04
base, glibc 2.39: inferred, not read from the image), and `--platform manylinux_2_39_x86_64` admits the wheels it
could take besides (fewer stand-ins).

It needs the package index and downloads the wheels it resolves (several GB: torch, the CUDA libraries, vLLM),
one pip round per stand-in it finds: minutes, so it is not part of the test suite.
"""

from __future__ import annotations

import argparse
import email.parser
import io
import json
import os
import re
import shlex
import ssl
import subprocess
import sys
import tarfile
import tempfile
import urllib.error
import urllib.request
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

try:
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.specifiers import SpecifierSet
    from packaging.tags import Tag, compatible_tags, cpython_tags
    from packaging.utils import canonicalize_name, parse_wheel_filename
    from packaging.version import InvalidVersion, Version
except ImportError:  # a bare interpreter: pip carries its own copy
    from pip._vendor.packaging.requirements import InvalidRequirement, Requirement
    from pip._vendor.packaging.specifiers import SpecifierSet
    from pip._vendor.packaging.tags import Tag, compatible_tags, cpython_tags
    from pip._vendor.packaging.utils import canonicalize_name, parse_wheel_filename
    from pip._vendor.packaging.version import InvalidVersion, Version

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "dockerfile" / "Dockerfile"
SETUP_PY = ROOT / "setup.py"
KEY_PACKAGES = ["torch", "vllm", "transformers", "deepspeed", "ray", "openrlhf", "flash-attn"]

# --- the Dockerfile ------------------------------------------------------------------------------------------------

# pip install options that take their value as the next word
_OPTIONS_WITH_VALUE = {
    "-r", "--requirement", "-c", "--constraint", "-e", "--editable", "-i", "--index-url", "--extra-index-url",
    "-f", "--find-links", "-t", "--target", "--prefix", "--root", "--src", "--upgrade-strategy", "--platform",
    "--python-version", "--implementation", "--abi", "--no-binary", "--only-binary", "--progress-bar", "--log",
    "--cache-dir", "--trusted-host", "--cert", "--client-cert", "--proxy", "--timeout", "--retries",
    "--exists-action", "-C", "--config-settings", "--global-option", "--report", "--root-user-action",
    "--use-feature", "--use-deprecated", "--python", "--keyring-provider", "--build-option",
}
_SHELL_KEYWORDS = {"if", "then", "else", "elif", "fi", "do", "done", "while", "until", "!", "{", "}", "exec",
                   "time", "command", "env", "sudo"}
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_PYTHON = re.compile(r"^(.*/)?python[0-9.]*$")
_PIP = re.compile(r"^(.*/)?pip[0-9.]*$")


@dataclass
class PipInstall:
    line: int  # of the RUN instruction in the Dockerfile (1-based)
    requirements: list[str] = field(default_factory=list)  # requirement specifiers, as written
    editables: list[str] = field(default_factory=list)  # `-e PATH`
    skipped: list[str] = field(default_factory=list)  # paths, URLs and files pip would read (-r/-c)
    options: list[str] = field(default_factory=list)  # every option, as written (--no-build-isolation, ...)
    project: list[str] = field(default_factory=list)  # what `-e .[extras]` of this project requires

    @property
    def build_isolation(self) -> bool:
        return "--no-build-isolation" not in self.options

    @property
    def wheels_only(self) -> bool:
        """Takes no sdist: --no-index (files given by --find-links) or --only-binary."""
        return any(o == "--no-index" or o.startswith("--only-binary") for o in self.options)

    def names(self) -> set[str]:
        return {canonicalize_name(Requirement(r).name) for r in self.requirements + self.project}


def logical_lines(text: str) -> list[tuple[int, str]]:
    """(first line, text) with continuation lines joined; comment lines (also inside a continued line) dropped."""
    out: list[tuple[int, str]] = []
    buf, start = "", 0
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if line.startswith("#") or (not line and not buf):
            continue
        if not buf:
            start = number
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        out.append((start, (buf + line).strip()))
        buf = ""
    if buf.strip():
        out.append((start, buf.strip()))
    return out


def dockerfile_instructions(text: str) -> list[tuple[int, str, str]]:
    """(line, INSTRUCTION, arguments) with continuation lines joined; comment lines (also inside a continued
    instruction) are dropped, as Docker does."""
    out = []
    for start, line in logical_lines(text):
        head, _, rest = line.partition(" ")
        out.append((start, head.upper(), rest.strip()))
    return out


def shell_commands(script: str) -> list[list[str]]:
    """A RUN line split into simple commands: words, with quotes removed; &&, ||, ;, |, and the keywords of if /
    while blocks separate them. `#` inside a word (`${X##*/}`) is not a comment here."""
    lexer = shlex.shlex(script, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = ""
    commands, words = [], []
    for token in lexer:
        if token and set(token) <= set("&|;()<>"):
            commands.append(words)
            words = []
        else:
            words.append(token)
    commands.append(words)
    out = []
    for words in commands:
        while words and (words[0] in _SHELL_KEYWORDS or _ASSIGNMENT.match(words[0])):
            words = words[1:]  # `then MAX_JOBS=4 pip install ...`
        if words:
            out.append(words)
    return out


def _pip_install_args(words: list[str]) -> list[str] | None:
    if len(words) >= 2 and _PIP.match(words[0]) and words[1] == "install":
        return words[2:]
    if len(words) >= 4 and _PYTHON.match(words[0]) and words[1:4] == ["-m", "pip", "install"]:
        return words[4:]
    return None


def _looks_like_path(word: str) -> bool:
    return ("/" in word or "\\" in word or word.startswith((".", "$", "~")) or "://" in word
            or word.endswith((".whl", ".tar.gz", ".zip")))


def pip_installs(text: str, setup_py: Path = SETUP_PY) -> list[PipInstall]:
    """Every `pip install` of the Dockerfile's RUN instructions, in order."""
    runs = []
    for line, instruction, args in dockerfile_instructions(text):
        if instruction != "RUN":
            continue
        if args.startswith("["):  # exec form
            args = " ".join(shlex.quote(a) for a in json.loads(args))
        runs.append((line, args))
    return _installs(runs, setup_py)


def script_pip_installs(text: str, setup_py: Path = SETUP_PY) -> list[PipInstall]:
    """Every `pip install` of a shell script (run from the repository root), in order."""
    return _installs(logical_lines(text), setup_py)


def _installs(lines: list[tuple[int, str]], setup_py: Path) -> list[PipInstall]:
    found = []
    for line, args in lines:
        for words in shell_commands(args):
            rest = _pip_install_args(words)
            if rest is None:
                continue
            install = PipInstall(line=line)
            it = iter(rest)
            for word in it:
                if word.startswith("-"):
                    option = word.split("=", 1)[0]
                    value = word.split("=", 1)[1] if "=" in word else None
                    if option in _OPTIONS_WITH_VALUE and value is None:
                        value = next(it, None)
                    install.options.append(word if value is None or "=" in word else f"{word} {value}")
                    if option in ("-e", "--editable"):
                        install.editables.append(value or "")
                    elif option in ("-r", "--requirement", "-c", "--constraint"):
                        install.skipped.append(f"{option} {value}")
                    continue
                if _looks_like_path(word):
                    install.skipped.append(word)
                    continue
                try:
                    Requirement(word)
                except InvalidRequirement:
                    install.skipped.append(word)
                    continue
                install.requirements.append(word)
            for editable in install.editables:
                install.project += project_requirements(editable, setup_py, deps="--no-deps" not in install.options)
            found.append(install)
    return found


def setup_requirements(setup_py: Path = SETUP_PY) -> tuple[list[str], dict[str, list[str]]]:
    """setup.py's install_requires and extras_require, read without running it (list constants and module-level
    lists of strings, such as GPU_PINS)."""
    import ast

    tree = ast.parse(setup_py.read_text())
    names = {t.id: node.value for node in tree.body if isinstance(node, ast.Assign)
             for t in node.targets if isinstance(t, ast.Name)}

    def strings(node) -> list[str]:
        node = names.get(node.id, node) if isinstance(node, ast.Name) else node
        return [str(v) for v in ast.literal_eval(node)]

    call = next(n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "setup")
    keywords = {kw.arg: kw.value for kw in call.keywords}
    requires = strings(keywords["install_requires"]) if "install_requires" in keywords else []
    extras = {}
    if "extras_require" in keywords:
        node = keywords["extras_require"]
        extras = {ast.literal_eval(k): strings(v) for k, v in zip(node.keys, node.values)}
    return requires, extras


def project_requirements(editable: str, setup_py: Path = SETUP_PY, deps: bool = True) -> list[str]:
    """What `pip install -e .[extras]` of this project asks for: setup.py's requirements and its extras' (nothing
    with --no-deps, or for another path)."""
    path, _, extras = editable.partition("[")
    if path.rstrip("/") != "." or not deps:
        return []
    requires, table = setup_requirements(setup_py)
    for extra in filter(None, (e.strip() for e in extras.rstrip("]").split(","))):
        if extra not in table:
            raise ValueError(f"-e {editable}: setup.py has no extra {extra!r}")
        requires = requires + table[extra]
    return requires


# --- the build order ----------------------------------------------------------------------------------------------

#: sdists whose setup.py imports torch (and which declare no build requirements): pip's isolated build has no torch
BUILD_NEEDS_TORCH = {"flash-attn"}
#: installs that bring torch into the environment (vLLM requires its own torch build)
BRINGS_TORCH = {"torch", "vllm"}
#: distributions that require one of BUILD_NEEDS_TORCH (openrlhf 0.11.2: flash-attn==2.8.3)
PULLS_IN = {"openrlhf": {"flash-attn"}}


def build_order_problems(installs: list[PipInstall]) -> list[str]:
    """The installs, in order, against the rule of step 1 (module docstring): each distribution of
    BUILD_NEEDS_TORCH is installed, before anything else pulls it in, from a wheel or by a build without isolation
    after torch is in."""
    problems, torch_in, installed = [], False, set()
    wheel_line: dict[str, int] = {}  # installed from a wheel by the install on that line (an `if` branch, maybe)
    for install in installs:
        installed |= {name for name, line in wheel_line.items() if line != install.line}
        names = install.names()
        direct = names & BUILD_NEEDS_TORCH
        pulled = {need: sorted(n for n in names if need in PULLS_IN.get(n, ())) for need in BUILD_NEEDS_TORCH}
        for name in sorted(BUILD_NEEDS_TORCH - installed):
            if install.wheels_only:
                if name in direct:  # a wheel needs no build; another branch of the same line may, and is checked
                    wheel_line.setdefault(name, install.line)
                continue
            if name not in direct:
                if pulled[name]:
                    problems.append(f"line {install.line}: {', '.join(pulled[name])} requires {name}, which pip "
                                    f"would build in an isolated environment without torch: install {name} "
                                    "before, with --no-build-isolation after torch")
                    installed.add(name)
                continue
            if install.build_isolation:
                problems.append(f"line {install.line}: {name} is built in pip's isolated environment, which has no "
                                "torch (its setup.py imports torch): install it on its own with --no-build-isolation, "
                                "after torch")
            elif not torch_in:
                problems.append(f"line {install.line}: {name} is built without isolation before torch is installed: "
                                "install torch (or vLLM, which brings it) first")
            installed.add(name)
        torch_in = torch_in or bool(names & BRINGS_TORCH)
    return problems


def all_requirements(installs: list[PipInstall]) -> list[str]:
    """The requirements of every install (the project's among them), in order, each once."""
    seen, out = set(), []
    for install in installs:
        for req in install.requirements + install.project:
            key = str(Requirement(req))
            if key not in seen:
                seen.add(key)
                out.append(req)
    return out


# --- the target environment ----------------------------------------------------------------------------------------


def _platforms(platform: str) -> list[str]:
    """The platform tags a system of that platform installs: a manylinux_2_Y system also takes the older
    manylinux tags (pip does not expand --platform manylinux_2_Y itself, so each is passed)."""
    m = re.fullmatch(r"manylinux_2_(\d+)_(\w+)", platform)
    if not m:
        return [platform]
    glibc, arch = int(m.group(1)), m.group(2)
    tags = [f"manylinux_2_{y}_{arch}" for y in range(glibc, 4, -1)]
    legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
    return tags + [f"{name}_{arch}" for y, name in legacy.items() if y <= glibc]


def target_tags(python_version: str, platform: str) -> set[Tag]:
    version = tuple(int(p) for p in python_version.split(".")[:2])
    platforms = _platforms(platform)
    return set(cpython_tags(version, platforms=platforms)) | set(compatible_tags(version, platforms=platforms))


def target_markers(python_version: str, platform: str) -> dict[str, str]:
    arch = re.search(r"(x86_64|aarch64|ppc64le|s390x|i686|armv7l)$", platform)
    machine = arch.group(1) if arch else platform
    version = ".".join(python_version.split(".")[:2])
    return {"python_version": version, "python_full_version": version + ".0", "implementation_name": "cpython",
            "platform_python_implementation": "CPython", "os_name": "posix", "sys_platform": "linux",
            "platform_system": "Linux", "platform_machine": machine, "implementation_version": version + ".0"}


# --- the index -----------------------------------------------------------------------------------------------------


class Index:
    """The simple repository API (JSON, PEP 691) of one index, for file lists and sdists."""

    def __init__(self, url: str, cert: str | None):
        self.url = url.rstrip("/") + "/"
        self.context = ssl.create_default_context(cafile=cert) if cert else ssl.create_default_context()
        self._files: dict[str, list[dict]] = {}

    def _get(self, url: str, accept: str | None = None) -> bytes:
        request = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
        with urllib.request.urlopen(request, context=self.context, timeout=120) as response:
            return response.read()

    def files(self, name: str) -> list[dict]:
        name = canonicalize_name(name)
        if name not in self._files:
            data = json.loads(self._get(f"{self.url}{name}/", "application/vnd.pypi.simple.v1+json"))
            self._files[name] = [f for f in data.get("files", []) if not f.get("yanked")]
        return self._files[name]

    def download(self, url: str) -> bytes:
        return self._get(url)


def _sdist_version(filename: str) -> Version | None:
    for ext in (".tar.gz", ".zip"):
        if filename.endswith(ext):
            try:
                return Version(filename[: -len(ext)].rsplit("-", 1)[1])
            except (IndexError, InvalidVersion):
                return None
    return None


def has_wheel(index: Index, req: Requirement, tags: set[Tag], python_version: str) -> bool:
    """Whether the index has a wheel for the target that satisfies req."""
    for f in index.files(req.name):
        if not f["filename"].endswith(".whl"):
            continue
        try:
            _, version, _, file_tags = parse_wheel_filename(f["filename"])
        except Exception:  # noqa: BLE001 - an odd file name is no wheel for us
            continue
        if req.specifier.contains(version, prereleases=True) and file_tags & tags and _python_ok(f, python_version):
            return True
    return False


def _python_ok(f: dict, python_version: str) -> bool:
    spec = f.get("requires-python")
    return not spec or SpecifierSet(spec).contains(python_version + ".0", prereleases=True)


def best_sdist(index: Index, req: Requirement, python_version: str) -> tuple[Version, dict] | None:
    """The newest sdist on the index that satisfies req (what pip would build)."""
    candidates = []
    for f in index.files(req.name):
        version = _sdist_version(f["filename"])
        if version is None or not req.specifier.contains(version, prereleases=bool(req.specifier)):
            continue
        if _python_ok(f, python_version):
            candidates.append((version, f))
    return max(candidates, key=lambda c: c[0]) if candidates else None


@dataclass
class StandIn:
    name: str
    version: str
    sdist: str  # file name on the index
    requires_dist: list[str]
    requires_python: str | None
    requires_from: str  # where requires_dist comes from: PKG-INFO, the egg-info's requires.txt, or nowhere

    def base_requirements(self) -> list[str]:
        """The requirements without an `extra` marker: what installing the distribution itself pulls in."""
        return [r for r in self.requires_dist if Requirement(r).marker is None or "extra" not in r.split(";", 1)[1]]


def _sdist_texts(data: bytes, filename: str) -> dict[str, str]:
    """PKG-INFO and the egg-info's requires.txt (when there is one) of an sdist, by their path in it."""
    def wanted(name: str) -> bool:
        parts = name.split("/")
        return (len(parts) == 2 and parts[1] == "PKG-INFO") or (
            len(parts) == 3 and parts[1].endswith(".egg-info") and parts[2] == "requires.txt")

    if filename.endswith(".zip"):
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            return {n: archive.read(n).decode("utf-8", "replace") for n in archive.namelist() if wanted(n)}
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
        return {m.name: archive.extractfile(m).read().decode("utf-8", "replace")
                for m in archive.getmembers() if m.isfile() and wanted(m.name)}


def requires_txt(text: str) -> list[str]:
    """setuptools' egg-info requires.txt as Requires-Dist lines ([extra], [:marker] and [extra:marker] sections)."""
    out, marker = [], None
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            extra, _, env = line[1:-1].partition(":")
            parts = [f"({env})"] if env else []
            parts += [f'extra == "{extra}"'] if extra else []
            marker = " and ".join(parts) or None
            continue
        out.append(f"{line}; {marker}" if marker else line)
    return out


def read_sdist_metadata(data: bytes, filename: str) -> tuple[email.message.Message, list[str], str]:
    """An sdist's PKG-INFO, its requirements and where they were found."""
    texts = _sdist_texts(data, filename)
    pkg_info = [n for n in texts if n.endswith("/PKG-INFO")]
    meta = email.parser.Parser().parsestr(texts[pkg_info[0]])
    if meta.get_all("Requires-Dist"):
        return meta, meta.get_all("Requires-Dist"), "PKG-INFO"
    requires = [n for n in texts if n.endswith("/requires.txt")]
    if requires:
        return meta, requires_txt(texts[requires[0]]), "requires.txt"
    return meta, [], "none declared"


def make_stand_in(index: Index, req: Requirement, python_version: str, directory: Path) -> StandIn | None:
    """A wheel with the name, version and requirements of the sdist pip would build for req, in directory."""
    best = best_sdist(index, req, python_version)
    if best is None:
        return None
    version, f = best
    meta, requires, requires_from = read_sdist_metadata(index.download(f["url"]), f["filename"])
    stand_in = StandIn(name=meta.get("Name", req.name), version=str(version), sdist=f["filename"],
                       requires_dist=requires, requires_python=meta.get("Requires-Python"), requires_from=requires_from)
    dist = f"{canonicalize_name(stand_in.name).replace('-', '_')}-{stand_in.version}"
    lines = ["Metadata-Version: 2.1", f"Name: {stand_in.name}", f"Version: {stand_in.version}"]
    if stand_in.requires_python:
        lines.append(f"Requires-Python: {stand_in.requires_python}")
    lines += [f"Provides-Extra: {e}" for e in meta.get_all("Provides-Extra") or []]
    lines += [f"Requires-Dist: {r}" for r in stand_in.requires_dist]
    files = {f"{dist}.dist-info/METADATA": "\n".join(lines) + "\n",
             f"{dist}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: check_docker_pins\nRoot-Is-Purelib: true\n"
                                        "Tag: py3-none-any\n"}
    files[f"{dist}.dist-info/RECORD"] = "".join(f"{n},,\n" for n in files) + f"{dist}.dist-info/RECORD,,\n"
    with zipfile.ZipFile(directory / f"{dist}-py3-none-any.whl", "w") as wheel:
        for name, content in files.items():
            wheel.writestr(name, content)
    return stand_in


# --- pip -----------------------------------------------------------------------------------------------------------


def pip_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull
    return env


def run_pip(python: str, requirements: list[str], args: argparse.Namespace, find_links: Path, report: Path,
            target: Path) -> subprocess.CompletedProcess:
    command = [python, "-m", "pip", "install", "--isolated", "--disable-pip-version-check", "--dry-run",
               "--ignore-installed", "--target", str(target), "--only-binary=:all:",
               "--python-version", args.python_version,
               *[arg for platform in _platforms(args.platform) for arg in ("--platform", platform)],
               "--index-url", args.index_url, "--find-links", str(find_links), "--report", str(report)]
    if args.cert:
        command += ["--cert", args.cert]
    if args.fast_deps:
        command += ["--use-feature=fast-deps"]  # metadata by HTTP range requests, where the index has no .metadata
    return subprocess.run(command + requirements, env=pip_env(), capture_output=True, text=True)


def pip_has_fast_deps(python: str) -> bool:
    proc = subprocess.run([python, "-m", "pip", "install", "--help"], env=pip_env(), capture_output=True, text=True)
    return "fast-deps" in proc.stdout


_NOT_FOUND = re.compile(r"No matching distribution found for (\S.*?)\s*$", re.M)


def conflict_lines(proc: subprocess.CompletedProcess) -> list[str]:
    """pip's ERROR lines (stderr) and its explanation of a conflict (stdout)."""
    out = [line for line in proc.stderr.splitlines() if line.startswith("ERROR:")]
    lines = proc.stdout.splitlines()
    if "The conflict is caused by:" in lines:
        for line in lines[lines.index("The conflict is caused by:"):]:
            if not line.strip():
                break
            out.append(line)
    return out


def check_requirements(install: list[dict], markers: dict[str, str]) -> list[str]:
    """Every requirement of every resolved distribution (with the extras asked of it) against the resolved set."""
    resolved = {canonicalize_name(i["metadata"]["name"]): Version(i["metadata"]["version"]) for i in install}
    problems = []
    for item in install:
        meta = item["metadata"]
        extras = {canonicalize_name(e) for e in item.get("requested_extras") or []}
        for text in meta.get("requires_dist") or []:
            req = Requirement(text)
            if req.marker is not None:
                if not any(req.marker.evaluate({**markers, "extra": e}) for e in extras | {""}):
                    continue
            name = canonicalize_name(req.name)
            if name not in resolved:
                problems.append(f"{meta['name']} {meta['version']} requires {req}: not in the resolved set")
            elif not req.specifier.contains(resolved[name], prereleases=True):
                problems.append(f"{meta['name']} {meta['version']} requires {req}: resolved {resolved[name]}")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dockerfile", type=Path, default=DOCKERFILE)
    parser.add_argument("--install-script", type=Path, default=None,
                        help="check this shell script's pip installs (scripts/install_gpu.sh) instead of the Dockerfile")
    parser.add_argument("--python-version", default="3.12", help="the image's Python (NGC 26.xx: 3.12)")
    parser.add_argument("--platform", default="manylinux_2_28_x86_64")
    parser.add_argument("--index-url", default=None, help="the package index (default: pip's own default index)")
    parser.add_argument("--cert", default=os.environ.get("PIP_CERT"),
                        help="CA bundle for the index (default: $PIP_CERT); trust only, no effect on the result")
    parser.add_argument("--python", default=sys.executable, help="the interpreter whose pip resolves")
    parser.add_argument("--report", type=Path, help="keep pip's installation report (JSON) here")
    parser.add_argument("--max-rounds", type=int, default=25)
    parser.add_argument("--no-fast-deps", dest="fast_deps", action="store_false",
                        help="do not use pip's fast-deps feature (read wheel metadata without downloading)")
    args = parser.parse_args(argv)

    source = args.install_script or args.dockerfile
    try:
        read = script_pip_installs if args.install_script else pip_installs
        installs = read(source.read_text())
    except (OSError, ValueError, IndexError, StopIteration, SyntaxError) as exc:
        print(f"cannot read {source}: {exc}", file=sys.stderr)
        return 2
    requirements = all_requirements(installs)
    if not requirements:
        print(f"{source}: no pip install with requirements found", file=sys.stderr)
        return 2
    print(f"{source}: {len(installs)} pip installs")
    for install in installs:
        extra = "".join(f" [-e {e}: {' '.join(install.project) or '-'}]" for e in install.editables)
        extra += "".join(f" [skipped {s}]" for s in install.skipped)
        print(f"  line {install.line}: {' '.join(install.requirements) or '-'}{extra}")
    order = build_order_problems(installs)
    if order:
        print("\nCONFLICT: the build order:")
        print("\n".join("  " + p for p in order))
        return 1
    print(f"build order: {', '.join(sorted(BUILD_NEEDS_TORCH))} built without isolation after torch, or from a wheel")

    version = subprocess.run([args.python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                             capture_output=True, text=True).stdout.strip()
    if version != ".".join(args.python_version.split(".")[:2]):
        print(f"warning: pip runs on Python {version}, the image has {args.python_version}: environment markers "
              f"(python_version) are evaluated for {version}; run this with a Python {args.python_version}")

    args.fast_deps = args.fast_deps and pip_has_fast_deps(args.python)
    if args.index_url is None:
        from pip._internal.models.index import PyPI  # pip's default index, as pip itself would use it

        args.index_url = PyPI.simple_url
    index = Index(args.index_url, args.cert)
    tags = target_tags(args.python_version, args.platform)
    markers = target_markers(args.python_version, args.platform)
    stand_ins: dict[str, StandIn] = {}
    with tempfile.TemporaryDirectory(prefix="check-docker-pins-") as tmp:
        tmp_path = Path(tmp)
        links = tmp_path / "stand-ins"
        links.mkdir()
        report = args.report or tmp_path / "report.json"

        def add_stand_in(req: Requirement) -> bool:
            stand_in = make_stand_in(index, req, args.python_version, links)
            if stand_in is None:
                return False
            stand_ins[canonicalize_name(stand_in.name)] = stand_in
            print(f"  no wheel for the image: {req} -> stand-in {stand_in.name} {stand_in.version} from "
                  f"{stand_in.sdist}, requires {', '.join(stand_in.base_requirements()) or 'nothing'} "
                  f"({stand_in.requires_from})")
            return True

        try:
            print(f"index {index.url}; target: Python {args.python_version}, {args.platform}")
            for text in requirements:
                req = Requirement(text)
                if not has_wheel(index, req, tags, args.python_version):
                    add_stand_in(req)
            for round_ in range(1, args.max_rounds + 1):
                print(f"pip resolving, round {round_} ...", flush=True)
                proc = run_pip(args.python, requirements, args, links, report, tmp_path / "target")
                if proc.returncode == 0:
                    break
                missing = _NOT_FOUND.findall(proc.stderr)
                if "conflicting dependencies" in proc.stderr or "ResolutionImpossible" in proc.stderr:
                    print(f"\nCONFLICT: pip cannot install the pins of {source} together:")
                    print("\n".join("  " + line for line in conflict_lines(proc)))
                    return 1
                if not missing:
                    print(f"pip failed:\n{proc.stderr[-3000:]}", file=sys.stderr)
                    return 2
                req = Requirement(missing[-1].split(";")[0].strip())
                if canonicalize_name(req.name) in stand_ins and req.specifier.contains(
                        stand_ins[canonicalize_name(req.name)].version, prereleases=True):
                    print(f"\nCONFLICT: {req} is not installable for the image:\n{proc.stderr[-3000:]}")
                    return 1
                if not add_stand_in(req):
                    print(f"\nCONFLICT: nothing on the index satisfies {req} for Python {args.python_version} "
                          f"{args.platform}:")
                    print("\n".join("  " + line for line in conflict_lines(proc)))
                    return 1
            else:
                print(f"gave up after {args.max_rounds} rounds:\n{proc.stderr[-3000:]}", file=sys.stderr)
                return 2
            install = json.loads(report.read_text())["install"]
        except (OSError, urllib.error.URLError, ValueError) as exc:
            print(f"cannot check: {exc}", file=sys.stderr)
            return 2

    resolved = {canonicalize_name(i["metadata"]["name"]): i["metadata"]["version"] for i in install}
    print(f"\nresolved {len(resolved)} distributions; key packages:")
    for name in KEY_PACKAGES:
        note = " (sdist: built in the image)" if name in stand_ins else ""
        print(f"  {name:13} {resolved.get(canonicalize_name(name), '(not resolved)')}{note}")

    problems = check_requirements(install, markers)
    for text in requirements:
        req = Requirement(text)
        got = resolved.get(canonicalize_name(req.name))
        if got is None or not req.specifier.contains(got, prereleases=True):
            problems.append(f"{source} pins {req}, resolved {got}")
    for _name, stand_in in sorted(stand_ins.items()):
        wants = stand_in.base_requirements()
        got = ", ".join(f"{Requirement(r).name} {resolved.get(canonicalize_name(Requirement(r).name))}" for r in wants)
        print(f"  {stand_in.name} {stand_in.version} requires {', '.join(wants) or 'nothing'}: {got or '-'}")
    if problems:
        print("\nCONFLICT:")
        print("\n".join("  " + p for p in problems))
        return 1
    print("\nno conflict: every requirement of the resolved set is satisfied")
    return 0


if __name__ == "__main__":
    sys.exit(main())
