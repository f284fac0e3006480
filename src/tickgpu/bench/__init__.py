"""Benchmark suites for ``tickgpu bench``: one module per suite, each with ``run(args) -> int``.

Benchmarks live here, not under tests/, so pytest never collects them.
"""
