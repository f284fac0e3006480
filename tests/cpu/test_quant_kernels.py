"""The quant Triton kernels under the Triton interpreter, against the NumPy reference.

The cases live in quant_interpreter_cases.py and run in a pytest process of their own with
TRITON_INTERPRET=1: Triton decides between compiling and interpreting when it is imported, so doing it
here would turn every other Triton use in this process (the bundle builder's tests) into
interpretation. Needs triton and torch (test-time only: the interpreter takes torch CPU tensors).
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("triton")

CASES = Path(__file__).with_name("quant_interpreter_cases.py")


def test_quant_kernels_under_the_triton_interpreter():
    env = dict(os.environ, TRITON_INTERPRET="1")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(CASES)],
                          capture_output=True, text=True, env=env, timeout=1200,
                          cwd=Path(__file__).resolve().parents[2])
    tail = proc.stdout[-6000:] + proc.stderr[-2000:]
    assert proc.returncode == 0, tail
    assert " passed" in proc.stdout and "failed" not in proc.stdout.splitlines()[-1], tail
    print(proc.stdout.splitlines()[-1])
