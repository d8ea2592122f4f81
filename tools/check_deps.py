"""Every third-party import of the package is declared in pyproject.toml, in the part that provides it.

    python tools/check_deps.py        (make lint runs it; exit 1 naming each undeclared import)

For each ``import X`` / ``from X import ...`` under python/llmpipe and train/ whose top-level module is
neither the standard library nor llmpipe, the distribution that installs X (from the installed
environment's metadata) must be a dependency of the core or of an extra. A module that
llmpipe/extras.py maps to an extra must be declared in that extra (or the core), so the one line a
user sees when it is missing names the right extra.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(req: str) -> str:
    m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", req)
    assert m, req
    return normalise(m.group(1))


def declared() -> tuple[set[str], dict[str, set[str]]]:
    """The core's distributions and each extra's (its own plus those of the extras it names)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = {requirement_name(r) for r in project["dependencies"]}
    raw = project.get("optional-dependencies", {})

    def expand(extra: str, seen: frozenset[str] = frozenset()) -> set[str]:
        out: set[str] = set()
        for r in raw[extra]:
            m = re.match(r"\s*llmpipe\[([^\]]+)\]", r)
            if m:
                for e in m.group(1).split(","):
                    if e.strip() not in seen:
                        out |= expand(e.strip(), seen | {extra})
            else:
                out.add(requirement_name(r))
        return out

    return core, {e: expand(e) for e in raw}


def imports(paths: list[Path]) -> dict[str, list[str]]:
    """Top-level module -> the places that import it (third-party only)."""
    found: dict[str, list[str]] = {}
    stdlib = set(sys.stdlib_module_names)
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top not in stdlib and top != "llmpipe":
                    found.setdefault(top, []).append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def main() -> int:
    # the checkout's extras table (a file of constants), whether or not the package is installed
    spec = importlib.util.spec_from_file_location("extras", ROOT / "python" / "llmpipe" / "extras.py")
    assert spec is not None and spec.loader is not None
    extras_module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(extras_module)
    EXTRA_OF_MODULE: dict[str, str] = extras_module.EXTRA_OF_MODULE

    core, extras = declared()
    anywhere = core.union(*extras.values())
    dists = packages_distributions()
    paths = sorted((ROOT / "python" / "llmpipe").rglob("*.py")) + sorted((ROOT / "train").glob("*.py"))
    problems = []
    for module, where in sorted(imports(paths).items()):
        names = {normalise(d) for d in dists.get(module, [])}
        if not names:
            problems.append(f"{module} (imported at {where[0]}) is not installed: declare it and install it")
        elif not names & anywhere:
            problems.append(
                f"{module} (imported at {where[0]}, from {sorted(names)[0]}) is not declared in pyproject.toml"
            )
        extra = EXTRA_OF_MODULE.get(module)
        if extra is not None and names and not names & (core | extras.get(extra, set())):
            problems.append(
                f"{module}: llmpipe/extras.py names the '{extra}' extra, which does not declare it"
            )
    for module, extra in EXTRA_OF_MODULE.items():
        if extra not in extras:
            problems.append(
                f"llmpipe/extras.py maps {module} to '{extra}', which is not an extra of pyproject.toml"
            )
    for p in problems:
        print(f"check_deps: {p}", file=sys.stderr)
    if not problems:
        print(f"check_deps: every import of the package is declared ({len(core)} core, {len(extras)} extras)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
