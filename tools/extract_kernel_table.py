"""Moved to phantora_prof/calibrate/kernel_table.py (`phantora-prof calibrate kernels`).

This stand-in remains only because tests/test_cost.py and tests/test_cost_measured.py load
tools/extract_kernel_table.py by path (and replace module globals such as `estimate`, so it runs the
module's code in its own namespace instead of re-exporting it). Delete it once those tests
import phantora_prof.calibrate.kernel_table.
"""
import importlib.util as _util

_spec = _util.find_spec("phantora_prof.calibrate.kernel_table")
exec(compile(_spec.loader.get_source(_spec.name), _spec.origin, "exec"), globals())
