"""The host cost model: its JSON table, the lookup, and the calibration that built it."""
from __future__ import annotations

import json
from importlib import resources

import pytest

from phantora_prof import hostcost

from conftest import REFERENCE

GPT_SMALL = REFERENCE / "gpt_small" / "trace.pt.trace.json.gz"


def _table() -> dict:
    return json.loads(resources.files("phantora_prof").joinpath("cost/data/host_costs.json").read_text())


def test_json_loads_and_costs_positive():
    t = _table()
    for thread in ("forward", "backward"):
        assert t["ops"][thread], thread
        assert all(isinstance(v, int) and v > 0 for v in t["ops"][thread].values())
        assert 0 < t["default"][thread]["view"] < t["default"][thread]["compute"]
    assert t["autograd_node_ns"] > 0 and t["cpu_op_ns"] > 0 and t["api_default_ns"] > 0
    assert all(isinstance(v, int) and v > 0 for v in t["api_ns"].values())
    for name in hostcost.CBID:  # every API the runtime emits has a cost
        assert name in hostcost.API_NS


def test_views_cheaper_than_compute_ops():
    for backward in (False, True):
        view = hostcost.dispatch_ns("aten::view", False, backward)
        for op in ("aten::addmm" if not backward else "aten::mm", "aten::native_layer_norm" if not backward
                   else "aten::native_layer_norm_backward", "aten::_to_copy"):
            assert view < hostcost.dispatch_ns(op, True, backward), (op, backward)
    assert hostcost.DISPATCH_NS_VIEW < hostcost.DISPATCH_NS_COMPUTE


def test_the_default_host_profile_scales_the_measured_tables():
    """hostcost charges the measured per-op tables times the host profile's scales (cost/data/hosts):
    the script thread's costs shrink by `forward` because its Python is counted on its own now."""
    raw = _table()
    prof = hostcost.load_profile("h200")
    speed, fwd = prof["scale"]["all"], prof["scale"]["forward"]
    assert hostcost.PROFILE["name"] == "h200"
    assert hostcost.dispatch_ns("aten::addmm", True) == int(raw["ops"]["forward"]["aten::addmm"] * speed * fwd)
    assert hostcost.dispatch_ns("aten::mm", True, True) == int(raw["ops"]["backward"]["aten::mm"] * speed)
    assert hostcost.api_ns("cudaLaunchKernel") == int(raw["api_ns"]["cudaLaunchKernel"] * speed)
    slow = hostcost.load_profile("h200-2026-12-01")
    assert slow["scale"]["all"] > speed  # that lease's host was slower than the reference


def test_a_host_profile_file_and_a_bad_name(tmp_path):
    from phantora_prof.errors import ConfigError

    f = tmp_path / "mine.json"
    f.write_text('{"name": "mine", "scale": {"all": 2.0}}')
    assert hostcost.load_profile(str(f))["scale"]["all"] == 2.0
    with pytest.raises(ConfigError, match="no such host profile"):
        hostcost.load_profile("h999")
    f.write_text('{"scale": {}}')
    with pytest.raises(ConfigError, match="has no 'name'"):
        hostcost.load_profile(str(f))


def test_unknown_ops_get_the_defaults():
    t = hostcost.TABLE  # the measured tables with the default host profile applied
    assert hostcost.dispatch_ns("mylib::nothing_like_it", True) == t["default"]["forward"]["compute"]
    assert hostcost.dispatch_ns("mylib::nothing_like_it", False) == t["default"]["forward"]["view"]
    assert hostcost.dispatch_ns("mylib::nothing_like_it", True, backward=True) == t["default"]["backward"]["compute"]
    assert hostcost.dispatch_ns("mylib::nothing_like_it", False, backward=True) == t["default"]["backward"]["view"]
    assert hostcost.dispatch_ns("aten::addmm", True) == t["ops"]["forward"]["aten::addmm"]
    assert hostcost.api_ns("cudaSomethingNew") == t["api_default_ns"]
    assert hostcost.api_ns("cudaLaunchKernel") == t["api_ns"]["cudaLaunchKernel"]
    # compatibility names
    assert hostcost.DISPATCH_NS_CPU > 0 and hostcost.AUTOGRAD_NODE_NS == t["autograd_node_ns"]
    assert "cuLaunchKernelEx" in hostcost.DRIVER_APIS


@pytest.mark.skipif(not GPT_SMALL.exists(), reason="reference traces not available")
def test_calibration_reproduces_the_json_and_the_measured_step():
    from phantora_prof.calibrate import host_costs as C

    data = C.analyse(str(GPT_SMALL))
    table = C.fit(data)
    assert table == _table(), "host_costs.json is stale: run phantora-prof calibrate host-costs"
    fit = table["fit"]
    # re-costing the reference step with the table gives the fitted host time per phase
    recost = C.step_host_ns(data, table)
    assert abs(recost["forward"] - fit["host_ns"]["forward"]) < 0.001 * fit["host_ns"]["forward"]
    rest = recost["backward"] + recost["optimizer"]
    assert abs(rest - fit["host_ns"]["backward_optimizer"]) < 0.001 * rest
    # replaying the reference step (real kernel durations) gives the measured unprofiled step
    assert abs(fit["replayed_step_ns"] - fit["real_step_ns"]) < 0.01 * fit["real_step_ns"]
    # the profiler inflates host time: every factor shrinks it
    assert 0 < fit["factor_main_thread"] < 1 and 0 < fit["factor_autograd_thread"] < 1
    assert 5e6 < fit["host_ns"]["forward"] < fit["host_ns"]["backward_optimizer"] < fit["real_step_ns"]


def _tensors(n: int) -> tuple:
    from phantora_prof.protocol import TensorArg

    return tuple(TensorArg((4096,), (1,), "float32", 0) for _ in range(n))


def test_an_op_over_tensor_lists_costs_per_listed_tensor():
    """measure/host_lists.py on the H200 host: foreach and fused optimizer ops cost ~0.24 us per
    tensor of each input list, out-of-place ones ~2.5 us more per tensor they create."""
    one = hostcost.tensor_list_ns("aten::_foreach_add_", (_tensors(1), 1.0), {}, 0)
    many = hostcost.tensor_list_ns("aten::_foreach_add_", (_tensors(257), 1.0), {}, 0)
    assert one is not None and many is not None
    assert many - one == pytest.approx(256 * hostcost.LIST_PER_INPUT_NS, abs=2)
    # three lists (addcdiv_): three times the per-tensor cost
    three = hostcost.tensor_list_ns("aten::_foreach_addcdiv_", (_tensors(257), _tensors(257), _tensors(257)), {}, 0)
    assert three - one == pytest.approx(3 * 257 * hostcost.LIST_PER_INPUT_NS - hostcost.LIST_PER_INPUT_NS, abs=3)
    # out of place: the tensors it creates cost more than the ones it reads
    sqrt = hostcost.tensor_list_ns("aten::_foreach_sqrt", (_tensors(256),), {}, 256)
    assert sqrt - many > 200 * hostcost.LIST_PER_OUTPUT_NS
    # an op without a tensor list keeps the per-op table
    assert hostcost.tensor_list_ns("aten::add", _tensors(2), {}, 1) is None
    assert hostcost.tensor_list_counts((_tensors(3), _tensors(2), 0.5), {"x": _tensors(4)}) == 9
    import torch  # an op's own arguments (ops on CPU tensors): lists of torch tensors

    steps = [torch.zeros(()) for _ in range(5)]
    assert hostcost.tensor_list_counts((steps, 1.0), {}, torch.Tensor) == 5


def test_reading_a_cpu_scalar_costs_less_than_a_cpu_op():
    assert hostcost.cpu_op_ns(8, "aten::_local_scalar_dense") < hostcost.cpu_op_ns(8, "aten::add") / 3
    assert hostcost.cpu_op_ns(8, "aten::add") == hostcost.cpu_op_ns(8)


LIST_SCRIPT = """
import sys, time, torch
n = int(sys.argv[1])
xs = [torch.ones(4096, device="cuda") for _ in range(n)]
step = torch.zeros(())
torch.cuda.synchronize()
t0 = time.perf_counter()
for _ in range(10):
    torch._foreach_mul_(xs, 0.5)
    ys = torch._foreach_sqrt(xs)
    step.add_(1)
    step.item()
t1 = time.perf_counter()
print("HOST_US", (t1 - t0) * 1e6 / 10)
"""


def test_foreach_host_time_grows_with_the_list_under_the_simulator(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    path = tmp_path / "lists.py"
    path.write_text(LIST_SCRIPT)
    env = dict(os.environ, PYTHONPATH=str(root))

    def host_us(n: int) -> float:
        r = subprocess.run([sys.executable, "-m", "phantora_prof", "--no-trace", "python", str(path), str(n)],
                           cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        return float(next(ln for ln in r.stdout.splitlines() if ln.startswith("HOST_US")).split()[1])

    small, large = host_us(4), host_us(132)
    # 128 more tensors: mul_ reads one list, sqrt reads one and creates one per tensor
    per = 2 * hostcost.LIST_PER_INPUT_NS + hostcost.LIST_PER_OUTPUT_NS
    assert large - small == pytest.approx(128 * per / 1e3, rel=0.1)


def test_optimizer_steps_cost_per_parameter_by_implementation_and_class():
    """measure/host_lists.py 'optimizers': a foreach AdamW step costs ~21 us per parameter on the
    H200 host, ~12 us of it beyond its ops and counted Python; subclasses take their base's figure."""
    import torch

    from phantora_prof.runtime.host import optim_host

    p = torch.nn.Parameter(torch.zeros(2))
    assert optim_host.implementation({"params": [p], "fused": True}) == "fused"
    assert optim_host.implementation({"params": [p], "foreach": False}) == "forloop"
    assert optim_host.implementation({"params": [p], "foreach": None}) == "forloop"  # CPU parameters
    assert optim_host.implementation({"params": [p], "foreach": True}) == "foreach"

    class MyAdamW(torch.optim.AdamW):
        pass
    names = [c.__name__ for c in MyAdamW.__mro__]
    assert hostcost.optimizer_step_ns("foreach", names) == hostcost.optimizer_step_ns("foreach", ["AdamW"])
    assert hostcost.optimizer_step_ns("foreach", ["AdamW"]) > hostcost.optimizer_step_ns("foreach", ["SGD"]) > 0
    assert hostcost.optimizer_step_ns("foreach", ["Lion"]) == hostcost.optimizer_step_ns("foreach", ["default"])
    assert hostcost.optimizer_step_ns("forloop", ["AdamW"]) == 0


def test_a_host_profile_reaches_every_rank(cli):
    """`--host` applies to forked ranks too: the rank fork server preloads the cost tables, and it
    once did so with the default profile whatever --host said (every multi-rank run was priced on
    the reference host)."""
    import json
    import re

    from conftest import SCRIPTS

    slow = cli.cwd / "slow.json"
    ref = hostcost.load_profile("h200")  # the reference host 3x slower, its relative scales kept
    slow.write_text(json.dumps({"name": "slow", "scale": dict(ref["scale"], all=3.0 * ref["scale"]["all"])}))
    loops = {}
    for spec in ("h200", str(slow)):
        r = cli("--no-trace", "--host", spec, "--nproc-per-node", "2", "python", str(SCRIPTS / "host_loop_ranks.py"))
        assert r.returncode == 0, r.stderr[-2000:]
        loops[spec] = [float(v) for v in re.findall(r"loop_ms ([\d.]+)", r.stdout)]
        assert len(loops[spec]) == 2, r.stdout
    expected = 3.0  # the loop's ops and Python alike
    for base, slower in zip(loops["h200"], loops[str(slow)]):
        assert 0.85 * expected < slower / base < 1.15 * expected, loops


def test_python_file_weights_are_well_formed():
    """host_model.json python_files: keys are paths below site-packages (a file, or a top-level
    package ending in "/"), as the native hook looks them up; weights within python_rates.py's
    clamp. A key with a site-packages prefix or a leading slash would never match."""
    w = hostcost.PYTHON_FILE_WEIGHTS
    assert w.get("torch/", 0) > 1.5  # torch's Python costs more than a user's loop (session 44)
    for key, weight in w.items():
        assert not key.startswith("/") and "-packages/" not in key, key
        assert key.endswith(".py") or (key.endswith("/") and key.count("/") == 1), key
        assert 0.5 <= weight <= 25.0, (key, weight)
