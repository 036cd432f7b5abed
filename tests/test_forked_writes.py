"""Trace files written by forked children (phantora_prof/forked_writes.py): the same bytes as
written in process, a child's failure comes back as an OSError naming the file, and an
interrupted writing leaves neither children nor half-written files."""
from __future__ import annotations

import os
import time

import pytest

from phantora_prof.forked_writes import ForkedWrites
from synthetic_traces import synthetic_rank
from tracing.kineto import write_kineto


def test_children_write_the_same_bytes(tmp_path):
    traces = [synthetic_rank(r, 4, steps=20, ops_per_step=5) for r in range(4)]
    for r, tr in enumerate(traces):
        write_kineto(tr, tmp_path / f"serial{r}.json.gz")
    writes = ForkedWrites(max_children=2)
    with writes:
        for r, tr in enumerate(traces):
            path = tmp_path / f"forked{r}.json.gz"
            writes.submit(write_kineto, path, tr, path)
    for r in range(4):
        assert (tmp_path / f"forked{r}.json.gz").read_bytes() == (tmp_path / f"serial{r}.json.gz").read_bytes()
    assert not list(tmp_path.glob(".*.tmp"))


def _fail(path):
    raise OSError(28, "No space left on device")


def test_a_failed_write_is_an_oserror_naming_the_file(tmp_path):
    path = tmp_path / "rank3.pt.trace.json.gz"
    with pytest.raises(OSError, match="rank3.pt.trace.json.gz.*No space left on device"):
        with ForkedWrites() as writes:
            writes.submit(_fail, path, path)


def _slow_write(path):
    tmp = path.parent / f".{path.name}.{os.getpid()}.abcd.tmp"
    tmp.write_text("half")
    time.sleep(60)


def test_an_interrupted_writing_kills_the_children_and_removes_their_files(tmp_path):
    writes = ForkedWrites()
    if not writes.enabled:
        pytest.skip("no fork here (one core, or not Linux)")
    path = tmp_path / "rank0.pt.trace.json.gz"
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        with writes:
            writes.submit(_slow_write, path, path)
            deadline = time.monotonic() + 10
            while not list(tmp_path.glob(".*.tmp")) and time.monotonic() < deadline:
                time.sleep(0.01)
            raise KeyboardInterrupt
    assert time.monotonic() - t0 < 20
    assert not list(tmp_path.glob(".*.tmp")) and not path.exists()
