"""The validator's rules hold on every torch.profiler trace recorded on the real H200."""
from __future__ import annotations

import functools
from pathlib import Path

import pytest

from tracing.kineto import load_trace
from tracing.validate import validate_file, validate_trace

from conftest import REFERENCE as REF_DIR  # noqa: E402
REFERENCES = ("gpt_small", "gpt_b32", "streams", "gpt_ddp1", "gpt_small_memory")


def _path(name: str) -> Path:
    path = REF_DIR / name / "trace.pt.trace.json.gz"
    if not path.exists():
        pytest.skip(f"reference trace {path} not available")
    return path


@functools.lru_cache(maxsize=None)
def _load(name: str) -> dict:
    return load_trace(_path(name))


@pytest.mark.parametrize("name", REFERENCES)
def test_reference_trace_is_valid(name):
    assert validate_file(_path(name)) == []


@pytest.mark.parametrize("name", REFERENCES)
def test_reference_valid_against_another_reference(name):
    """Reference mode: each trace against itself and against the next one in the list."""
    doc = _load(name)
    other = REFERENCES[(REFERENCES.index(name) + 1) % len(REFERENCES)]
    assert validate_trace(doc, doc) == []
    assert validate_trace(doc, _load(other)) == [], other
