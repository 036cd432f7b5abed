"""Stopping a run: `kill -TERM` (a scheduler, `timeout`) or Ctrl-C on the CLI stops every
rank, leaves no process and no temporary directory, writes valid traces of the run up to the
signal, says so in one line and exits with 128 + the signal number; a script that handles the
signal itself has torchrun's grace period to finish and keeps its own exit status."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pytest

from conftest import REFERENCE, REPO, SCRIPTS
from tracing.kineto import load_trace
from tracing.validate import validate_trace

PY = sys.executable


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is gone for this purpose
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[-1][:1] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("sig,nproc,group", [(signal.SIGTERM, 2, False), (signal.SIGINT, 1, False),
                                             (signal.SIGTERM, 2, True)])
def test_signal_stops_every_rank_and_writes_valid_traces(tmp_path, sig, nproc, group):
    """`group`: the signal goes to every process of the run at once (a batch scheduler, Ctrl-C in
    a terminal), so the ranks may end before the CLI handles it."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               TMPDIR=str(tmp), COLUMNS="200")
    proc = subprocess.Popen([PY, "-m", "phantora_prof", "--nproc-per-node", str(nproc), "--out", "t", PY,
                             str(SCRIPTS / "until_killed.py"), str(tmp_path)],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=group)
    try:
        deadline = time.monotonic() + 120
        lines: list[str] = []
        seen: set[str] = set()
        while (len(seen) < nproc or len(lines) < 3) and time.monotonic() < deadline:  # every rank simulates
            line = proc.stdout.readline()
            if not line:
                break
            if "iter" in line:
                lines.append(line)
                seen.add(line.split("iter")[0])
        assert len(seen) == nproc, proc.stderr.read()[-3000:] if proc.poll() is not None else "no progress"
        pids = [int((tmp_path / f"pid.{r}").read_text()) for r in range(nproc)]
        sent = time.monotonic()
        if group:
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + sig, err[-3000:]
    assert not [p for p in pids if _alive(p)], "rank processes left running"
    assert time.monotonic() - sent < 30
    assert list(tmp.glob("phantora-*")) == []  # the coordinator's socket directory is gone
    message = [ln for ln in err.splitlines() if "interrupted" in ln]
    assert len(message) == 1, err[-3000:]
    assert f"interrupted by {sig.name}" in message[0] and f"stopped {nproc} rank(s)" in message[0]
    assert "t/" in message[0]
    assert "Traceback" not in err.split("phantora-prof: simulated")[-1]  # none of ours
    reference = load_trace(REFERENCE / "gpt_small" / "trace.pt.trace.json.gz") if REFERENCE.is_dir() else None
    # (a rank killed while printing may leave a cut line)
    printed = max(int(m) for m in re.findall(r"^(?:\[rank0\]: )?iter (\d+)$", out + "".join(lines), re.M))
    for rank in range(nproc):
        doc = load_trace(tmp_path / "t" / f"rank{rank}.pt.trace.json.gz")  # complete, valid JSON
        assert validate_trace(doc, reference) == []
        gemms = sum(1 for e in doc["traceEvents"] if e.get("name") == "aten::mm" and e.get("cat") == "cpu_op")
        if rank == 0:
            assert gemms >= printed  # everything up to the last printed sync, at least
    assert (tmp_path / "t" / "run.pftrace").stat().st_size > 0


def _signal_after_first_iter(tmp_path, script: str, args: list[str], send, new_session: bool = False):
    """Run SCRIPT (from tests/scripts) under `phantora-prof --no-trace`, call `send(proc)` once it
    printed its first "iter" line, and return (proc, stdout, stderr) when it has ended."""
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""), COLUMNS="200")
    proc = subprocess.Popen([PY, "-m", "phantora_prof", "--no-trace", PY, str(SCRIPTS / script), *args],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=new_session)
    try:
        line = ""
        deadline = time.monotonic() + 120
        while "iter" not in line and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
        assert "iter" in line, proc.stderr.read()[-3000:] if proc.poll() is not None else "no progress"
        send(proc)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc, out, err


@pytest.mark.parametrize("code", [0, 3])
def test_a_script_that_handles_sigterm_finishes_and_keeps_its_exit_status(tmp_path, code):
    """As under `python` (and within torchrun's 30 s grace): the script's SIGTERM handler ends
    its loop, its checkpoint takes longer than a few seconds of real time and is written whole,
    and the run's exit status is the script's own, not 128 + 15."""
    proc, out, err = _signal_after_first_iter(tmp_path, "graceful_stop.py", [str(tmp_path), "5", str(code)],
                                              lambda p: p.send_signal(signal.SIGTERM))
    assert "caught SIGTERM" in out and "saved" in out, err[-3000:]
    assert (tmp_path / "checkpoint").exists()
    assert proc.returncode == code, err[-3000:]
    message = [ln for ln in err.splitlines() if "interrupted" in ln]
    assert len(message) == 1 and f"exited with status {code}" in message[0], err[-3000:]


@pytest.mark.parametrize("group", [True, False])
def test_ctrl_c_reaches_a_script_once_and_its_save_completes(tmp_path, group):
    """`except KeyboardInterrupt: save()` under Ctrl-C. `group`: the SIGINT reaches the CLI and
    the rank at once (a terminal's Ctrl-C), and the CLI must not interrupt the rank's save a
    second time; otherwise it reaches the CLI alone (`kill -INT`) and is passed on once. Either
    way the script saves and exits 0, as under `python`."""
    send = (lambda p: os.killpg(p.pid, signal.SIGINT)) if group else (lambda p: p.send_signal(signal.SIGINT))
    proc, out, err = _signal_after_first_iter(tmp_path, "interrupt_save.py", [str(tmp_path), "3"], send,
                                              new_session=True)
    assert out.count("interrupted") == 1 and "saved" in out, out[-2000:] + err[-3000:]
    assert (tmp_path / "checkpoint").exists()
    assert proc.returncode == 0, err[-3000:]
    assert "KeyboardInterrupt" not in err
    message = [ln for ln in err.splitlines() if "interrupted" in ln]
    assert len(message) == 1 and "exited with status 0" in message[0], err[-3000:]


def test_an_unhandled_ctrl_c_prints_python_s_traceback(tmp_path):
    """No handler in the script: KeyboardInterrupt ends it with python's traceback (the script's
    frames only) and the run exits 130."""
    proc, out, err = _signal_after_first_iter(tmp_path, "until_killed.py", [str(tmp_path)],
                                              lambda p: os.killpg(p.pid, signal.SIGINT), new_session=True)
    assert proc.returncode == 130, err[-3000:]
    tb = err[err.index("Traceback"):]
    assert tb.count("KeyboardInterrupt") == 1 and "until_killed.py" in tb
    assert "phantora_prof" not in tb.split("KeyboardInterrupt")[0]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_a_script_ended_by_a_signal_ends_the_run_by_it(tmp_path, sig):
    """A script whose process a signal ends (its own os.kill, the OOM killer, Lightning's child
    observer) ends phantora-prof by the same signal once the outputs are written, so the caller
    sees what `python` would have given (returncode -N here, 128 + N in a shell); before, the
    exit status was -N masked to a byte (247 for SIGKILL)."""
    script = tmp_path / "die.py"
    script.write_text("import os, signal, torch\n"
                      "x = torch.ones(4, device='cuda') + 1\n"
                      "torch.cuda.synchronize()  # the ops so far reach the simulator: in the trace\n"
                      f"print('dying', flush=True)\nos.kill(os.getpid(), {int(sig)})\n")
    proc = subprocess.run([sys.executable, "-m", "phantora_prof", "--out", str(tmp_path / "out"), "python",
                           str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert proc.returncode == -sig, proc.stderr[-3000:]
    assert "dying" in proc.stdout
    assert f"ended by {signal.Signals(sig).name}" in proc.stderr
    validate_trace(load_trace(tmp_path / "out" / "rank0.pt.trace.json.gz"))
