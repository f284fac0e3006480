"""The README's commands and example stay true."""
import re
from pathlib import Path

import numpy as np

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_opens_with_the_two_commands():
    text = README.read_text()
    block = re.search(r"```sh\n(.*?)```", text, re.S).group(1).strip().splitlines()
    assert block == [
        "python3 -m venv .venv && .venv/bin/pip install -e . && .venv/bin/tickgpu demo",
        "python3 -m venv .venv && .venv/bin/pip install -e '.[test]' && .venv/bin/python -m pytest",
    ]
    assert text.index("```sh") < text.index("```python")


def test_readme_example_runs_and_round_trips():
    code = re.search(r"```python\n(.*?)```", README.read_text(), re.S).group(1)
    ns: dict = {}
    exec(compile(code, str(README), "exec"), ns)
    np.testing.assert_allclose(ns["vols"], 0.2, rtol=1e-12)
    assert (ns["status"] == 0).all()
    assert ns["stats"].mismatches == 0 and ns["stats"].messages == 999
    assert ns["resynced"] and ns["code"] == 0   # the first row: the opening book is not in the messages
    np.testing.assert_array_equal(ns["book"].snapshot(10).ravel(), ns["data"].orderbook[0])
