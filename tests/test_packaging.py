"""pyproject.toml, environment.yml, README.md and .ci/run describe one installation; check they agree,
and that the ``notebooks`` extra (with the core) installs everything the notebooks import.

Each check returns the list of its disagreements instead of asserting, so that the tests at the
bottom can hand it a broken copy and see it complain: a check that cannot fail tests nothing.
"""

from __future__ import annotations

import ast
import copy
import re
import sys
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]

#: The HTML comment in README.md that marks the test command; .ci/run runs the command after it.
CI_MARKER = "<!-- ci-test-command -->"

#: conda package names that PyPI spells differently
CONDA_TO_PYPI = {"pytorch": "torch"}

#: `-e .[a,b]`, `.[a,b]`, `-e .`: the pip line that installs this checkout, with its extras
LOCAL_INSTALL = re.compile(r"""^(?:-e\s+|--editable\s+)?["']?\.(?:\[(?P<extras>[^\]]*)\])?["']?$""")


def load_pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def load_environment() -> dict:
    return yaml.safe_load((ROOT / "environment.yml").read_text())


# ---------------------------------------------------------------- parsing

def conda_spec(line: str) -> tuple[str, SpecifierSet]:
    """A conda match spec as (PyPI name, PEP 440 specifier). conda's ``python=3.12`` means any
    3.12.x, so a single ``=`` becomes ``==3.12.*``; ``name 3.12.*`` is read the same way."""
    m = re.fullmatch(r"\s*([A-Za-z0-9_.\-]+)\s*(.*?)\s*", line)
    if not m:
        raise ValueError(f"cannot read conda dependency {line!r}")
    name, version = m.group(1), m.group(2)
    if "|" in version or "[" in version:
        raise ValueError(f"conda dependency {line!r} uses syntax this check does not read")
    if re.fullmatch(r"=?[0-9][0-9A-Za-z.*]*", version):  # `=3.12`, `3.12.*`, ` 3.12`: conda's fuzzy match
        version = "==" + version.lstrip("=").removesuffix(".*") + ".*"
    name = CONDA_TO_PYPI.get(name, name)
    return canonicalize_name(name), SpecifierSet(version)


def environment_specs(env: dict) -> tuple[list[tuple[str, SpecifierSet, str]], list[str]]:
    """Every requirement environment.yml states, as (name, specifier, source line), and the pip
    lines that install this checkout (``-e .[extras]``)."""
    specs, local = [], []
    for dep in env.get("dependencies") or []:
        if isinstance(dep, dict):
            for line in dep.get("pip") or []:
                line = line.strip()
                if LOCAL_INSTALL.match(line):
                    local.append(line)
                elif not line.startswith("-"):  # other pip options (--index-url ...) state no requirement
                    req = Requirement(line)
                    specs.append((canonicalize_name(req.name), req.specifier, line))
        else:
            name, spec = conda_spec(str(dep))
            specs.append((name, spec, str(dep)))
    return specs, local


def local_extras(line: str) -> list[str]:
    extras = LOCAL_INSTALL.match(line).group("extras") or ""
    return [e.strip() for e in extras.split(",") if e.strip()]


def satisfiable(*sets: SpecifierSet) -> bool:
    """Whether one version satisfies every set. Tries each version the sets name and its
    neighbours (last part ±1, one more part), which decides it for the ==, !=, >=, <=, >, < and
    ``==X.*`` bounds that requirement files use."""
    candidates = set()
    for s in sets:
        for spec in s:
            release = Version(spec.version.removesuffix(".*")).release
            candidates.add(release)
            candidates.add(release[:-1] + (release[-1] + 1,))
            candidates.add(release + (1,))
            if release[-1] > 0:
                candidates.add(release[:-1] + (release[-1] - 1,))
    if not candidates:
        return True  # no set constrains anything
    return any(all(s.contains(v, prereleases=True) for s in sets)
               for v in (Version(".".join(map(str, r))) for r in candidates))


# ---------------------------------------------------------------- checks

def check_environment(pyproject: dict, env: dict) -> list[str]:
    """environment.yml against pyproject.toml: it installs this checkout, with extras that exist, on
    a Python that requires-python admits, and pins no core dependency outside pyproject's range."""
    problems = []
    project = pyproject["project"]
    specs, local = environment_specs(env)

    if len(local) != 1:
        problems.append(f"environment.yml must install this checkout once (`-e .[extras]`), found {local}")
    extras = project.get("optional-dependencies", {})
    for line in local:
        for extra in local_extras(line):
            if extra not in extras:
                problems.append(f"environment.yml asks for extra {extra!r}, pyproject.toml has {sorted(extras)}")

    requires_python = SpecifierSet(project["requires-python"])
    pythons = [(spec, line) for name, spec, line in specs if name == "python"]
    if not pythons:
        problems.append("environment.yml does not name a Python version")
    for spec, line in pythons:
        if not satisfiable(spec, requires_python):
            problems.append(f"environment.yml's {line!r} is outside requires-python {requires_python}")

    core = {canonicalize_name(r.name): r for r in map(Requirement, project["dependencies"])}
    for name, spec, line in specs:
        if name in core and not satisfiable(spec, core[name].specifier):
            problems.append(f"environment.yml's {line!r} contradicts pyproject.toml's {str(core[name])!r}")
    return problems


def readme_test_command(readme: str) -> list[str]:
    """The command lines that follow CI_MARKER in README.md, inside the code block after it."""
    commands = []
    for tail in readme.split(CI_MARKER)[1:]:
        m = re.match(r"\s*```[a-z]*\n(.*?)\n```", tail, re.S)
        commands.append(m.group(1).strip() if m else "")
    return commands


def check_readme(pyproject: dict, readme: str, ci_run: str) -> list[str]:
    """README.md marks exactly one test command, a pytest run; the extras it installs exist; and
    .ci/run reads its command from that marker rather than keeping a copy of its own."""
    problems = []
    commands = readme_test_command(readme)
    if len(commands) != 1 or not commands[0]:
        return [f"README.md must mark one test command with {CI_MARKER} before a code block, found {commands}"]
    command = commands[0]
    if "\n" in command:
        problems.append(f"README.md's test command must be one line, got {command!r}")
    if "pytest" not in command:
        problems.append(f"README.md's test command does not run pytest: {command!r}")
    extras = pyproject["project"].get("optional-dependencies", {})
    for m in re.finditer(r"\.\[([^\]]*)\]", command):
        for extra in (e.strip() for e in m.group(1).split(",")):
            if extra not in extras:
                problems.append(f"README.md's test command asks for extra {extra!r}, not in {sorted(extras)}")
    if CI_MARKER not in ci_run:
        problems.append(f".ci/run does not take its test command from README.md's {CI_MARKER}")
    return problems


def check_pyproject(pyproject: dict) -> list[str]:
    """pyproject.toml's own promises: the markers the suite uses are declared, and every extra
    names requirements pip can read."""
    problems = []
    markers = {m.split(":")[0].strip() for m in pyproject["tool"]["pytest"]["ini_options"].get("markers", [])}
    for marker in ("gpu", "slow"):
        if marker not in markers:
            problems.append(f"pytest marker {marker!r} is not declared in pyproject.toml")
    for extra, reqs in pyproject["project"].get("optional-dependencies", {}).items():
        for req in reqs:
            try:
                Requirement(req)
            except Exception as e:  # packaging's InvalidRequirement
                problems.append(f"extra {extra!r}: {req!r} is not a requirement pip can read ({e})")
    return problems


def _imports(tree: ast.AST, *, top_level_only: bool, package: str = "") -> set[str]:
    """Dotted module names a module imports: every import, or only those run on import (not
    inside a function); relative imports resolved against ``package``, the importing module's
    package."""
    names = set()
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    while nodes:
        node = nodes.pop()
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            names.add(module)
            names |= {f"{module}.{a.name}" for a in node.names}  # `from pkg import submodule`
        elif top_level_only and isinstance(node, (ast.If, ast.Try, ast.With)):
            nodes += [n for field in ("body", "orelse", "finalbody", "handlers") for n in getattr(node, field, [])]
        elif top_level_only and isinstance(node, ast.ExceptHandler):
            nodes += node.body
    return names


#: The checkout's own top-level modules, by the folder each is found in: the wheel, the lab beside
#: it, and the notebooks' helper module.
LOCAL = {"warpdecode": ROOT, "bench": ROOT, "lessons": ROOT / "notebooks"}


def local_module(name: str, root: Path = ROOT) -> Path | None:
    """The file of the checkout's module ``name`` (``a.b`` as a/b.py or a/b/__init__.py), else None."""
    parts = name.split(".")
    base = LOCAL[parts[0]] if root == ROOT else root
    for path in (base.joinpath(*parts[:-1], parts[-1] + ".py"), base.joinpath(*parts, "__init__.py")):
        if path.is_file():
            return path
    return None


def third_party_imports(source: str, root: Path = ROOT) -> set[str]:
    """The top-level names of the modules outside the standard library and the checkout (the
    wheel, ``bench``, the notebooks' ``lessons``) that a notebook's code imports, directly or
    through the checkout's modules it imports (their module-level imports, followed)."""
    seen, out = set(), set()
    todo = list(_imports(ast.parse(source), top_level_only=False))
    while todo:
        name = todo.pop()
        top = name.split(".")[0]
        if top not in LOCAL:
            if top and top not in sys.stdlib_module_names:
                out.add(top)
            continue
        if name in seen:
            continue
        seen.add(name)
        path = local_module(name, root)
        if path is not None:
            package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
            todo += _imports(ast.parse(path.read_text()), top_level_only=True, package=package)
    return out


def distribution(module: str) -> str:
    """The distribution (canonical name) that installs top-level module ``module``."""
    return canonicalize_name((packages_distributions().get(module) or [module])[0])


def check_notebook_imports(pyproject: dict, env: dict, notebooks: dict[str, str], root: Path = ROOT) -> list[str]:
    """Every module a notebook imports comes with the core dependencies plus the ``notebooks``
    extra, and environment.yml installs that extra."""
    problems = []
    project = pyproject["project"]
    extra = project.get("optional-dependencies", {}).get("notebooks", [])
    have = {canonicalize_name(Requirement(r).name) for r in [*project["dependencies"], *extra]}
    for name, source in sorted(notebooks.items()):
        for module in sorted(third_party_imports(source, root)):
            if distribution(module) not in have:
                problems.append(f"{name} imports {module!r}, which neither the core dependencies nor the "
                                f"`notebooks` extra installs")
    _, local = environment_specs(env)
    if not any("notebooks" in local_extras(line) for line in local):
        problems.append(f"environment.yml does not install the `notebooks` extra: {local}")
    return problems


def load_notebooks() -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted((ROOT / "notebooks").glob("*.py"))}


# ---------------------------------------------------------------- the repository as it is

def test_environment_agrees_with_pyproject():
    problems = check_environment(load_pyproject(), load_environment())
    assert not problems, "\n".join(problems)


def test_readme_command_agrees_with_pyproject_and_ci():
    readme = (ROOT / "README.md").read_text()
    ci_run = (ROOT / ".ci" / "run").read_text()
    problems = check_readme(load_pyproject(), readme, ci_run)
    assert not problems, "\n".join(problems)


def test_pyproject_is_consistent():
    problems = check_pyproject(load_pyproject())
    assert not problems, "\n".join(problems)


def test_the_notebooks_extra_installs_what_the_notebooks_import():
    notebooks = load_notebooks()
    assert notebooks, "no notebooks/*.py"
    problems = check_notebook_imports(load_pyproject(), load_environment(), notebooks)
    assert not problems, "\n".join(problems)


# ---------------------------------------------------------------- each check catches what it is for

def _set_pip(env: dict, lines: list[str]) -> dict:
    env = copy.deepcopy(env)
    for dep in env["dependencies"]:
        if isinstance(dep, dict):
            dep["pip"] = lines
    return env


def _set_python(env: dict, spec: str) -> dict:
    env = copy.deepcopy(env)
    env["dependencies"] = [spec if str(d).startswith("python") else d for d in env["dependencies"]]
    return env


@pytest.mark.parametrize(
    "case, mutate, expect",
    [
        ("extra pyproject lacks", lambda e: _set_pip(e, ["-e .[notebook]"]), "'notebook'"),
        ("no install of the checkout", lambda e: _set_pip(e, ["torch>=2.5"]), "install this checkout"),
        ("Python below requires-python", lambda e: _set_python(e, "python=3.9"), "requires-python"),
        ("Python pinned exactly, too old", lambda e: _set_python(e, "python==3.8.10"), "requires-python"),
        ("torch pinned below the core range", lambda e: _set_pip(e, ["-e .[dev]", "torch==2.4.1"]), "torch"),
        ("triton capped below the core range", lambda e: _set_pip(e, ["-e .", "triton<3.6"]), "triton"),
        ("torch from conda, too old", lambda e: {**e, "dependencies": ["pytorch=2.4", *e["dependencies"]]}, "pytorch"),
    ],
)
def test_environment_check_catches(case, mutate, expect):
    problems = check_environment(load_pyproject(), mutate(load_environment()))
    assert any(expect in p for p in problems), f"{case}: not caught, got {problems}"


@pytest.mark.parametrize(
    "case, mutate",
    [
        ("a compatible torch bound", lambda e: _set_pip(e, ["-e .[dev]", "torch>=2.6,<3"])),
        ("a patch release of Python", lambda e: _set_python(e, "python=3.12.4")),
        ("a numpy cap (pyproject has no numpy bound)", lambda e: _set_pip(e, ["-e .", "numpy<2.4"])),
    ],
)
def test_environment_check_accepts(case, mutate):
    assert check_environment(load_pyproject(), mutate(load_environment())) == [], case


def test_readme_check_catches():
    pyproject = load_pyproject()
    ok = f"{CI_MARKER}\n```bash\npip install -e \".[dev]\" && python -m pytest\n```\n"
    ci_run = f"grep '{CI_MARKER}' README.md"
    assert check_readme(pyproject, ok, ci_run) == []
    assert check_readme(pyproject, "no marker here", ci_run)
    assert check_readme(pyproject, ok + ok, ci_run)  # two marked commands: which one does CI run?
    assert check_readme(pyproject, ok.replace("[dev]", "[tests]"), ci_run)
    assert check_readme(pyproject, ok.replace("python -m pytest", "python -m unittest"), ci_run)
    assert check_readme(pyproject, ok, "python -m pytest")  # .ci/run with its own copy


def test_pyproject_check_catches():
    pyproject = copy.deepcopy(load_pyproject())
    pyproject["tool"]["pytest"]["ini_options"]["markers"] = ["slow: takes long"]
    pyproject["project"]["optional-dependencies"]["dev"].append("pytest>=>8")
    problems = check_pyproject(pyproject)
    assert any("'gpu'" in p for p in problems) and any("pytest>=>8" in p for p in problems), problems


def test_notebook_import_check_catches():
    """A notebook importing a module no extra installs (directly, or through a module of the checkout
    that imports it on import: bench.plots' matplotlib), and an environment without the extra."""
    pyproject, env = load_pyproject(), load_environment()
    assert third_party_imports("from bench import plots\nimport json") >= {"matplotlib"}
    assert third_party_imports("from lessons import plots") >= {"matplotlib"}  # through the helper module
    assert "transformers" in third_party_imports("def f():\n    from transformers import AutoModel")
    without = copy.deepcopy(pyproject)
    extra = without["project"]["optional-dependencies"]["notebooks"]
    extra[:] = [r for r in extra if canonicalize_name(Requirement(r).name) not in ("transformers", "matplotlib")]
    problems = check_notebook_imports(without, env, {"06.py": "import transformers",
                                                     "05.py": "from bench import plots"})
    assert any("06.py imports 'transformers'" in p for p in problems), problems
    assert any("05.py imports 'matplotlib'" in p for p in problems), problems
    assert check_notebook_imports(pyproject, _set_pip(env, ["-e .[dev]"]), {}), "environment not checked"
    assert check_notebook_imports(pyproject, env, {"ok.py": "import torch, numpy, math"}) == []


# ---------------------------------------------------------------- the wheel and the lab beside it

#: What the wheel must never import: the lab, the lessons and the research live beside it.
LAB = ("bench", "notebooks", "lessons", "experiments")


def wheel_imports(package_dir: Path = ROOT / "warpdecode") -> dict[str, set[str]]:
    """Each module of the wheel (dotted name) and the modules it imports anywhere in its code,
    function-level imports included; ``from pkg import a, b`` names the submodules a and b where
    they are modules, else ``pkg``."""
    files = {".".join(p.relative_to(package_dir.parent).with_suffix("").parts).removesuffix(".__init__"): p
             for p in sorted(package_dir.rglob("*.py"))}
    graph = {}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
                module = ".".join([*base, *([node.module] if node.module else [])])
                subs = {f"{module}.{a.name}" for a in node.names if f"{module}.{a.name}" in files}
                found |= subs if len(subs) == len(node.names) else subs | {module}
        graph[name] = found - {name}
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while not component or component[-1] != v:
                component.append(stack.pop())
                on_stack.discard(component[-1])
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return cycles


def test_the_wheel_ships_warpdecode_alone():
    """The wheel's packages are warpdecode's; bench/, notebooks/ and experiments/ stay in the checkout."""
    from setuptools import find_namespace_packages

    find = load_pyproject()["tool"]["setuptools"]["packages"]["find"]
    assert find["include"] == ["warpdecode*"], find
    packages = find_namespace_packages(where=str(ROOT), include=find["include"])
    assert "warpdecode" in packages and "warpdecode.kernels" in packages and "warpdecode.tuned" in packages
    assert all(p.split(".")[0] == "warpdecode" for p in packages), packages


def test_the_wheel_never_imports_the_lab_and_has_no_import_cycle():
    graph = wheel_imports()
    assert "warpdecode.tuner" in graph["warpdecode"]  # function-level imports are seen (tune imports it)
    upward = {m: sorted(i for i in imports if i.split(".")[0] in LAB) for m, imports in graph.items()}
    assert not any(upward.values()), {m: i for m, i in upward.items() if i}
    assert import_cycles(graph) == []
    assert import_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]  # the check bites
