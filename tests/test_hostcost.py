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
