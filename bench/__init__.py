"""Benchmarks: every module of this package that defines ``main()`` is one benchmark.

Run them all with ``python -m bench``, or some with ``python -m bench NAME ...`` where
NAME is the module name without its ``_bench`` suffix (``python -m bench resolve``).
"""
