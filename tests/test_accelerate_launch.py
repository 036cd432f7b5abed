"""`phantora-prof accelerate launch ...`: Accelerate's own option and config parsing decides the
launch (one process, or torchrun's N per node) and the script's environment; the script then runs
on simulated GPUs as Accelerate would have started it."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import REPO

pytest.importorskip("accelerate")

from phantora_prof.accelerate_launch import accelerate_command  # noqa: E402
from phantora_prof.errors import ConfigError  # noqa: E402

SCRIPT = """\
import os, torch
from accelerate import Accelerator
acc = Accelerator()
model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 256))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
model, opt = acc.prepare(model, opt)
x = torch.randn(32, 256, device=acc.device)
for step in range(2):
    with acc.autocast():
        loss = model(x).float().pow(2).mean()
    acc.backward(loss)
    opt.step(); opt.zero_grad()
print("rank", acc.process_index, "of", acc.num_processes, acc.distributed_type, acc.mixed_precision,
      type(model).__name__, os.environ.get("ACCELERATE_MIXED_PRECISION"), flush=True)
"""


@pytest.fixture(autouse=True)
def _no_user_config(tmp_path, monkeypatch):
    """Accelerate reads ~/.cache/huggingface/accelerate/default_config.yaml when it exists."""
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))


def test_one_process_gets_accelerates_environment():
    launch = accelerate_command(["accelerate", "launch", "--mixed_precision", "bf16", "--num_processes", "1",
                                 "--num_machines", "1", "--dynamo_backend", "no", "train.py", "--lr", "3"])
    assert not launch.distributed and launch.nproc_per_node == 1
    assert launch.command == (sys.executable, "train.py", "--lr", "3")
    env = dict(launch.env)
    assert env["ACCELERATE_MIXED_PRECISION"] == "bf16"
    assert "ACCELERATE_MIXED_PRECISION" not in os.environ  # the CLI's own environment is left as it was


def test_multi_gpu_and_fsdp_are_torchrun_launches():
    launch = accelerate_command(["accelerate", "launch", "--multi_gpu", "--num_processes", "8", "--num_machines",
                                 "2", "--main_process_ip", "10.0.0.1", "--mixed_precision", "bf16",
                                 "--dynamo_backend", "no", "-m", "mypkg.train"])
    assert launch.distributed and (launch.nproc_per_node, launch.nnodes) == (4, 2)
    assert launch.command == (sys.executable, "-m", "mypkg.train")
    assert not {"MASTER_ADDR", "MASTER_PORT", "RANK"} & set(dict(launch.env))  # phantora-prof sets those per rank
    fsdp = dict(accelerate_command(["accelerate", "launch", "--use_fsdp", "--fsdp_version", "2", "--num_processes",
                                    "2", "--num_machines", "1", "--mixed_precision", "bf16", "--dynamo_backend",
                                    "no", "train.py"]).env)
    assert fsdp["ACCELERATE_USE_FSDP"] == "true" and fsdp["FSDP_VERSION"] == "2"


def test_what_cannot_be_simulated_says_so():
    with pytest.raises(ConfigError, match="TPU"):
        accelerate_command(["accelerate", "launch", "--tpu", "--num_processes", "1", "--num_machines", "1",
                            "--mixed_precision", "no", "--dynamo_backend", "no", "train.py"])
    with pytest.raises(ConfigError, match="not a launch"):
        accelerate_command(["accelerate", "config"])
    with pytest.raises(ConfigError, match="multiple"):
        accelerate_command(["accelerate", "launch", "--multi_gpu", "--num_processes", "3", "--num_machines", "2",
                            "--main_process_ip", "h", "--mixed_precision", "no", "--dynamo_backend", "no", "x.py"])


def test_an_accelerate_script_runs_on_two_simulated_gpus(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               HF_HOME=str(tmp_path / "hf"), COLUMNS="200")
    r = subprocess.run([sys.executable, "-m", "phantora_prof", "--out", "t", "accelerate", "launch", "--multi_gpu",
                        "--num_processes", "2", "--num_machines", "1", "--mixed_precision", "bf16",
                        "--dynamo_backend", "no", str(script)],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    for rank in (0, 1):
        assert f"[rank{rank}]: rank {rank} of 2 DistributedType.MULTI_GPU bf16 DistributedDataParallel bf16" \
            in r.stdout, r.stdout[-2000:]
        assert (tmp_path / "t" / f"rank{rank}.pt.trace.json.gz").exists()
