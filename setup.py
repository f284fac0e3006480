# The native core is built by CFFI (API mode); everything else is in pyproject.toml.
from setuptools import setup

setup(cffi_modules=["csrc/build_native.py:ffibuilder"])
