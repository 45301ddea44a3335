"""The README's Python examples run as printed: an API change that breaks one fails here."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)


def test_the_readme_has_its_python_examples():
    assert len(BLOCKS) >= 2


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_a_readme_example_runs(index):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(BLOCKS[index], f"README.md python block {index}", "exec"), {})
    ratio = re.search(r"vs best-static: ([\d.]+)", out.getvalue())
    if ratio is not None:   # the own-policy example: a ratio a queue-aware rule keeps below 1
        assert 0.0 < float(ratio.group(1)) < 1.0, out.getvalue()
        assert "'samples_to_stabilise'" in out.getvalue()


def test_the_readmes_glm_9b_weight_size_is_the_models():
    """The hardware example sizes a device's memory against the glm-9b weights it states; the
    figure is the model's (a shape edit that changed it would leave the README's advice wrong)."""
    from inference.model_config import get_model
    stated = re.search(r"glm-9b: ([\d.]+e\d+)\)", README.read_text(encoding="utf-8"))
    assert stated is not None
    assert float(stated.group(1)) == float(f"{get_model('glm-9b').weight_bytes:.2e}")
