"""`.ci/floors` installs the oldest versions pyproject.toml allows and runs the tests; its pins
must be those bounds, or it checks versions nobody declared."""

from __future__ import annotations

import re
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
# the dev extra's tools that check the code rather than run it: .ci/run installs their own floors
CHECKERS = {"ruff", "mypy", "types-pyyaml"}


def _declared() -> dict[str, Version]:
    """pyproject.toml's lower bounds (its `>=`) of the dependencies and the dev extra's test
    runners, by canonical name. Read as text: tomllib is Python 3.11's, the floors run 3.10."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    runtime = re.search(r"^dependencies = \[(.*?)^\]", text, re.S | re.M)
    dev = re.search(r"^dev = \[(.*?)\]", text, re.M)
    assert runtime and dev, "pyproject.toml's dependencies or dev extra not found"
    bounds = {}
    for spec in re.findall(r'"([^"]+)"', runtime.group(1) + dev.group(1)):
        requirement = Requirement(spec)
        name = canonicalize_name(requirement.name)
        if name in CHECKERS:
            continue
        (floor,) = [s.version for s in requirement.specifier if s.operator == ">="]
        bounds[name] = Version(floor)
    return bounds


def _pinned() -> dict[str, Version]:
    pins = {}
    for line in (ROOT / ".ci" / "floors.txt").read_text(encoding="utf-8").splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, version = line.split("==")
            pins[canonicalize_name(name)] = Version(version)
    return pins


def test_the_floors_pin_each_declared_lower_bound_and_nothing_else() -> None:
    declared = _declared()
    assert {"torch", "numpy", "gymnasium", "stable-baselines3", "pytest"} <= declared.keys()
    assert _pinned() == declared


def test_the_floors_run_the_oldest_python_the_project_allows() -> None:
    script = (ROOT / ".ci" / "floors").read_text(encoding="utf-8")
    (oldest,) = re.findall(r'^requires-python = ">=(3\.\d+)"$',
                           (ROOT / "pyproject.toml").read_text(encoding="utf-8"), re.M)
    assert f"python=${{PYTHON:-python{oldest}}}" in script
