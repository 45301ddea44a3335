"""What `pip install .` gets: the sdist and the wheel built from it hold what the code reads.

Every other test imports the packages from the source tree; these build the distributions
(offline, with the setuptools already installed, as `pip install --no-build-isolation .`
would) from a copy of the tree and look inside them.
"""

from __future__ import annotations

import configparser
import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from agents.sb3_hyperparams import HYPERPARAMS_DIR
from envs.scenario import SCENARIO_DIR
from envs.traces import TRACES
from inference.hardware import PRESET_DIR

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("inference", "envs", "agents")
# what a working tree holds that is no source: build outputs, caches, runs, results
NOT_SOURCE = shutil.ignore_patterns(".git", "build", "dist", "*.egg-info", "__pycache__", "*.pyc",
                                    ".*cache", ".hypothesis", ".venv", "venv", ".gl", "runs",
                                    "results", "*.zip")
# the files around the packages the README's commands and the tests use
SOURCE_DIRS = ("tests", "docs", "bench")

BUILD_SETUPTOOLS = "77.0.1"     # pyproject.toml's build-system requires setuptools>=77.0.1

BUILD = """
import sys, tarfile
from pathlib import Path
from setuptools import build_meta
out = Path(sys.argv[1])
sdist = out / build_meta.build_sdist(str(out))
safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}   # 3.10.12+, 3.11.4+
with tarfile.open(sdist) as tar:
    tar.extractall(out / "unpacked", **safe)
import os
os.chdir(next((out / "unpacked").iterdir()))
build_meta.build_wheel(str(out))
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The sdist built from a copy of the tree, and the wheel built from the unpacked sdist,
    as pip does."""
    # the build-system's own floor (pyproject.toml): an older one cannot build it, as pip
    # --no-build-isolation could not (a Python 3.10 venv comes with setuptools 65; .ci/floors
    # installs the floor, 77.0.1)
    pytest.importorskip("setuptools", minversion=BUILD_SETUPTOOLS)
    tmp = tmp_path_factory.mktemp("packaging")
    shutil.copytree(ROOT, tmp / "src", ignore=NOT_SOURCE)
    out = tmp / "dist"
    out.mkdir()
    subprocess.run([sys.executable, "-c", BUILD, str(out)], cwd=tmp / "src", check=True,
                   capture_output=True, timeout=120)
    (sdist,), (wheel,) = out.glob("*.tar.gz"), out.glob("*.whl")
    return sdist, wheel


@pytest.fixture(scope="module")
def dists(built: tuple[Path, Path]) -> tuple[list[str], list[str]]:
    """The sdist's and the wheel's file names (the sdist's without its top folder)."""
    sdist, wheel = built
    with tarfile.open(sdist) as tar:
        sdist_names = [name.split("/", 1)[1] for name in tar.getnames() if "/" in name]
    with zipfile.ZipFile(wheel) as whl:
        wheel_names = whl.namelist()
    return sdist_names, wheel_names


def runtime_files() -> list[Path]:
    """The data files the packages open at run time, found from the code's own paths."""
    folders = (PRESET_DIR, SCENARIO_DIR, HYPERPARAMS_DIR)
    files = [p for folder in folders for p in folder.iterdir() if p.is_file()]
    traces = [Path(p) for p in TRACES.values()]
    return files + traces + [traces[0].parent / "README.md"]   # the traces' CC-BY attribution


def test_the_wheel_holds_every_file_the_packages_read(dists: tuple[list[str], list[str]]) -> None:
    wheel = set(dists[1])
    files = runtime_files()
    assert len(files) > 10
    for path in files:
        inside = path.resolve().relative_to(ROOT).as_posix()
        assert inside.split("/")[0] in PACKAGES, f"{inside} lies outside the packages"
        assert inside in wheel, f"{inside} is read at run time but not in the wheel"


def test_the_wheel_holds_every_non_python_file_of_the_packages(
        dists: tuple[list[str], list[str]]) -> None:
    """A data file added next to the code without a package-data glob never reaches a user."""
    wheel = set(dists[1])
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*"):
            if path.is_file() and path.suffix not in (".py", ".pyc"):
                inside = path.relative_to(ROOT).as_posix()
                assert inside in wheel, f"{inside} is not in the wheel"


def test_the_wheel_holds_the_packages_and_nothing_else(dists: tuple[list[str], list[str]]) -> None:
    tops = {name.split("/")[0] for name in dists[1]}
    assert {t for t in tops if not t.endswith(".dist-info")} == set(PACKAGES)
    assert not [n for n in dists[1] if "__pycache__" in n or n.endswith(".pyc")]


def test_the_wheel_marks_its_packages_typed(dists: tuple[list[str], list[str]]) -> None:
    """PEP 561: without a py.typed in a package, a user's mypy ignores its annotations."""
    for package in PACKAGES:
        assert f"{package}/py.typed" in dists[1], f"{package} has no py.typed in the wheel"


def source_files(folder: Path) -> list[Path]:
    """The files under `folder`, less caches and hidden files."""
    return [p for p in folder.rglob("*") if p.is_file() and p.suffix != ".pyc" and not any(
        part == "__pycache__" or part.startswith(".") for part in p.relative_to(ROOT).parts)]


def test_the_sdist_holds_the_scripts_docs_benches_and_tests(
        dists: tuple[list[str], list[str]]) -> None:
    """The README's train.py and evaluate.py, the docs it points to, and tests that run
    (tests/conftest.py's fixtures; the benches and scripts the tests run) are source too."""
    expected = [p for p in ROOT.iterdir() if p.is_file() and p.suffix in (".py", ".md", ".toml")]
    expected += [p for folder in SOURCE_DIRS for p in source_files(ROOT / folder)]
    assert ROOT / "train.py" in expected and ROOT / "tests" / "conftest.py" in expected
    sdist = set(dists[0])
    missing = [p.relative_to(ROOT).as_posix() for p in expected
               if p.relative_to(ROOT).as_posix() not in sdist]
    assert not missing, f"not in the sdist: {', '.join(missing)}"


# the commands a wheel install puts on PATH, and the repo's scripts they run
COMMANDS = {"infer-alloc-train": "train.py", "infer-alloc-evaluate": "evaluate.py"}

# run in the unpacked wheel: each command's entry point, imported as pip's launcher imports it
RUN_ENTRY_POINTS = """
import importlib, json, sys
from pathlib import Path
for name, target in json.loads(sys.argv[1]).items():
    module_name, attr = target.split(":")
    module = importlib.import_module(module_name)
    print(name, Path(module.__file__).resolve().relative_to(Path.cwd().resolve()).as_posix())
    try:
        getattr(module, attr)(["--help"])
    except SystemExit as exc:
        print(name, "exit", exc.code)
"""


def test_the_wheel_installs_the_two_commands_from_its_own_files(
        built: tuple[Path, Path], tmp_path: Path) -> None:
    """A wheel install has no train.py or evaluate.py: its entry_points.txt names the two
    commands, and each target imports from the wheel's own files (not the source tree) and
    answers --help under the command's name."""
    with zipfile.ZipFile(built[1]) as whl:
        (entry_points,) = [n for n in whl.namelist() if n.endswith(".dist-info/entry_points.txt")]
        parser = configparser.ConfigParser()
        parser.read_string(whl.read(entry_points).decode())
        whl.extractall(tmp_path)
    scripts = dict(parser["console_scripts"])
    assert set(scripts) == set(COMMANDS)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}   # the wheel's files alone
    done = subprocess.run([sys.executable, "-c", RUN_ENTRY_POINTS, json.dumps(scripts)],
                          cwd=tmp_path, env=env, text=True, capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    for name, target in scripts.items():
        module_file = target.split(":")[0].replace(".", "/") + ".py"
        assert f"{name} {module_file}" in lines, f"{name} did not import {module_file} from the wheel"
        assert f"{name} exit 0" in lines
        assert f"usage: {name} " in done.stdout


def test_the_wheel_states_its_license_as_an_spdx_expression(built: tuple[Path, Path]) -> None:
    """`license = { text = ... }` is deprecated by setuptools, whose builds refuse it from
    2027; the SPDX string needs setuptools 77, the build-system's floor."""
    import re

    _, wheel = built
    with zipfile.ZipFile(wheel) as zf:
        (name,) = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
        metadata = zf.read(name).decode()
    assert "License-Expression: Apache-2.0" in metadata.splitlines()
    assert "License-File: LICENSE" in metadata.splitlines()     # the license's text, shipped
    with zipfile.ZipFile(wheel) as zf:
        (text,) = [n for n in zf.namelist() if n.endswith(".dist-info/licenses/LICENSE")]
        assert zf.read(text) == (ROOT / "LICENSE").read_bytes()
    requires = re.search(r'^requires = \["setuptools>=([\d.]+)"',
                         (ROOT / "pyproject.toml").read_text(), re.MULTILINE)
    assert requires is not None and requires.group(1) == BUILD_SETUPTOOLS
