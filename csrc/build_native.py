"""Build the native core with CFFI in API mode.

The cdef is read from csrc/tickgpu.h between the TICKGPU_CDEF markers, so the C header is the
single source of truth for the ABI: nothing here restates a C signature.
"""
import os
import re
import sys
from pathlib import Path

from cffi import FFI

CSRC = Path(__file__).resolve().parent
HEADER = CSRC / "tickgpu.h"


def read_cdef(header: Path = HEADER) -> str:
    text = header.read_text()
    m = re.search(r"/\* TICKGPU_CDEF_BEGIN \*/(.*)/\* TICKGPU_CDEF_END \*/", text, re.S)
    if m is None:
        raise RuntimeError(f"{header}: TICKGPU_CDEF markers not found")
    body = re.sub(r"/\*.*?\*/", "", m.group(1), flags=re.S)   # CFFI does not take comments
    return re.sub(r"//[^\n]*", "", body)


def sources() -> list[str]:
    # Relative paths: setuptools wants them relative to setup.py.
    root = CSRC.parent
    return sorted(str(p.relative_to(root)) for sub in ("cpu", "hot", "mem", "py") for p in (CSRC / sub).glob("*.c"))


def headers() -> list[str]:
    """Every header the sources include: setuptools rebuilds the extension when one changes
    (without them an edited shared header, say cpu/greeks_kernel.h, leaves a stale build)."""
    root = CSRC.parent
    return sorted(str(p.relative_to(root)) for p in CSRC.rglob("*.h"))


def extra_compile_args() -> list[str]:
    args = ["-O3", "-std=c11", "-fno-math-errno", "-Wall", "-Wextra", "-Wno-unused-parameter"]
    if os.environ.get("TICKGPU_NATIVE_DEBUG"):
        args = ["-O1", "-g", "-std=c11", "-fno-omit-frame-pointer"]
    return args


ffibuilder = FFI()
ffibuilder.cdef(read_cdef())
ffibuilder.set_source(
    "tickgpu._tickgpu_native",
    '#include "tickgpu.h"\n',
    sources=sources(),
    depends=headers(),
    include_dirs=[str(CSRC.relative_to(CSRC.parent))],
    extra_compile_args=extra_compile_args(),
    libraries=["m", "pthread"] + (["dl"] if sys.platform.startswith("linux") else []),
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
