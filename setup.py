# The native core is built by CFFI (API mode); the staged tick's Python entry (csrc/ext/fasttick.c)
# is a CPython extension on NumPy's C API. Everything else is in pyproject.toml.
import numpy
from setuptools import Extension, setup

fasttick = Extension(
    "tickgpu._fasttick",
    sources=["csrc/ext/fasttick.c"],
    include_dirs=[numpy.get_include()],
    extra_compile_args=["-O2", "-std=c11", "-Wall", "-Wextra", "-Wno-unused-parameter",
                        "-Wno-missing-field-initializers", "-Wno-cast-function-type"],
)

setup(cffi_modules=["csrc/build_native.py:ffibuilder"], ext_modules=[fasttick])
