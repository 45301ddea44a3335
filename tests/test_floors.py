"""`.ci/floors` installs the oldest versions pyproject.toml allows and runs the tests; its pins
must be those bounds, or it checks versions nobody declared."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
# the dev extra's tools that check the code rather than run it: .ci/run installs their own floors
CHECKERS = {"ruff", "mypy", "types-pyyaml"}


def _declared() -> dict[str, Version]:
    """pyproject.toml's lower bounds (its `>=`) of the dependencies, the dev extra's test
    runners and the build system, by canonical name. Read as text: tomllib is Python 3.11's, the floors run 3.10."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    runtime = re.search(r"^dependencies = \[(.*?)^\]", text, re.S | re.M)
    dev = re.search(r"^dev = \[(.*?)\]", text, re.M)
    build = re.search(r"^requires = \[(.*?)\]", text, re.M)   # the build-system's
    assert runtime and dev and build, "pyproject.toml's dependencies, dev extra or build not found"
    bounds = {}
    for spec in re.findall(r'"([^"]+)"', runtime.group(1) + dev.group(1) + build.group(1)):
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
    assert f"\noldest={oldest}  #" in script
    assert "python=${PYTHON:-python$oldest}" in script


def _floors_with(python: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "PYTHON": python}
    return subprocess.run(["bash", str(ROOT / ".ci" / "floors")], env=env, capture_output=True,
                          text=True, timeout=60, check=False)


def _fake_python(tmp_path: Path, version: str) -> str:
    """An "interpreter" that answers the version question and fails anything else (such as
    making the venv), so a run stops right after the checks."""
    fake = tmp_path / "python"
    fake.write_text(f'#!/bin/sh\n[ "$1" = "-c" ] && echo {version} && exit 0\nexit 7\n')
    fake.chmod(0o755)
    return str(fake)


def test_the_floors_refuse_a_python_older_than_the_projects_floor(tmp_path: Path) -> None:
    run = _floors_with(_fake_python(tmp_path, "3.9"))
    assert run.returncode == 2
    assert "is Python 3.9, older than the 3.10 the project allows" in run.stderr


def test_the_floors_note_a_newer_python_and_go_on(tmp_path: Path) -> None:
    run = _floors_with(_fake_python(tmp_path, "3.12"))
    assert "note: " in run.stderr and "is Python 3.12; the oldest allowed is 3.10" in run.stderr
    assert run.returncode == 7  # it went on to make the venv


def test_the_floors_name_an_interpreter_they_cannot_run(tmp_path: Path) -> None:
    run = _floors_with(str(tmp_path / "no-such-python"))
    assert run.returncode == 2
    assert f"cannot run {tmp_path / 'no-such-python'}" in run.stderr


def test_the_docs_name_the_floors_pins_and_ci_s_torch() -> None:
    """README.md lists some of the floors' pins and the Python they run on, and README.md and
    CONTRIBUTING.md the CPU torch that .ci/run installs first: each as pinned, so that a moved
    pin or torch leaves no old version in the set-up the docs give."""
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    contributing = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    listed = re.search(r"`bash \.ci/floors` installs the oldest version pyproject\.toml allows "
                       r"of each requirement \(([^)]*)\) together on Python (3\.\d+)", readme)
    assert listed is not None, "README.md's floors sentence changed: update this test"
    names = {"stable-baselines3": "Stable-Baselines3"}
    pinned = _pinned()
    stated = dict(re.findall(r"([\w-]+) (\d[\w.]*)", listed.group(1)))
    assert len(stated) >= 4, stated
    for name, version in stated.items():
        key = canonicalize_name(next((k for k, v in names.items() if v == name), name))
        assert Version(version) == pinned[key], f"README.md: {name} {version}; pinned {pinned[key]}"
    (oldest,) = re.findall(r'^requires-python = ">=(3\.\d+)"$',
                           (ROOT / "pyproject.toml").read_text(encoding="utf-8"), re.M)
    assert listed.group(2) == oldest
    assert f"on Python {oldest}" in contributing
    (ci_torch,) = re.findall(r"pip install -q torch==([\d.]+)",
                             (ROOT / ".ci" / "run").read_text(encoding="utf-8"))
    for doc, text in (("README.md", readme), ("CONTRIBUTING.md", contributing)):
        torches = re.findall(r"pip install torch==([\d.]+)", text)
        assert torches and set(torches) == {ci_torch}, (doc, torches, ci_torch)
    tested = re.search(r"asks for torch >= ([\d.]+) and is tested with (\d+\.\d+)", readme)
    assert tested is not None, "README.md's torch sentence changed: update this test"
    assert Version(tested.group(1)) == _declared()["torch"]
    assert ci_torch.startswith(f"{tested.group(2)}.")
