"""GPU profiles: the model constants of each simulated GPU, with where each number comes from.

cost/data/profiles/<gpu>.json holds every fitted, measured or hand-set constant of the kernel
model and the engine (cost/profiles.py); the code holds none of them. These tests hold the
files to that: every built-in GPU has a profile, every entry has a source, inheritance says
so, and no module of cost/ or engine/ defines a numeric model constant of its own.
"""
from __future__ import annotations

import ast
import json
from dataclasses import fields
from pathlib import Path

import pytest

from phantora_prof.cost.gpus import GPUS, get_gpu
from phantora_prof.cost.profiles import PROFILES, GpuProfile, load_profile, profile_for, shipped_profiles
from phantora_prof.errors import ConfigError

ROOT = Path(__file__).resolve().parent.parent

# Module-level numbers in cost/ and engine/ that are not model constants of a GPU: software
# facts of PyTorch / CUDA / Kineto, interpolation and error-band parameters (GPU-independent,
# documented where they are defined), units and bookkeeping.
NOT_GPU_CONSTANTS = {
    "phantora_prof/cost/__init__.py": {"_CACHE_MAX", "BLAS_OPERANDS", "CONTIGUOUS_OPERANDS", "CONV_OPERANDS",
                                       "FORMAT_OPERANDS", "SOFTMAX_OPERANDS"},  # argument positions
    "phantora_prof/cost/cat_paths.py": {"MAX_BATCHED_DIMS", "_INT32_MAX"},  # ATen facts (Shape.cu, int32 indexing)
    "phantora_prof/cost/errorband.py": {"Z90", "HOST_SIGMA", "BAND_SCALE", "STEP_BAND_SCALE", "ROOFLINE_NOTE_SHARE", "DEFAULT_SIGMA", "MIN_SAMPLES"},
    "phantora_prof/cost/families.py": {"BANDWIDTH", "DIM_BANDWIDTH", "OUTER_COLUMNS_BANDWIDTH", "_NORMALIZED_SHAPE_ARG", "EXACT_D2",
                                        "UPSAMPLE_SCALE_BANDWIDTH"},  # interpolation
    "phantora_prof/cost/gpus.py": {"TFLOP", "TB", "GB", "MiB"},  # datasheet units
    "phantora_prof/cost/kernels.py": {"CHUNK", "MAX_TENSORS", "MAX_BLOCKS", "MULTI_TENSOR_ELEMS_PER_ITER", "_ITEMSIZE", "_ALL_TYPES_CASE", "_WHERE_CASE", "_CLAMP_CASE"},  # ATen facts
    "phantora_prof/cost/measured.py": {"ROW_EXTRAPOLATE", "GEMM_K", "GEMM_POWER", "ATTN_K", "ATTN_POWER",
                                       "MISMATCH_PENALTY"},
    "phantora_prof/cost/skinny_gemm.py": {"PIECE_ROWS"},  # cuBLAS's piece of m (the sweep's launch counts)
    "phantora_prof/cost/ops.py": {"RNN_GATES",  # cuDNN's gates per RNN mode
                                  "_ATTN_BIAS"},  # argument positions
    "phantora_prof/cost/roofline.py": {"CHANNEL_ALIGNMENT",  # the tensor cores' channel multiple
                                       "ROWS_MIN_RUN"},  # the shortest row real profiles measured (coverage)
    "phantora_prof/engine/coordinator.py": {"SIGINT_NOTE_WAIT_S"},  # how long a Ctrl-C waits for the ranks' notes (real seconds)
    "phantora_prof/engine/collectives.py": {"_RANKS_SHOWN"},  # torch.profiler's kTruncatLength (trace format)
    "phantora_prof/engine/host_layout.py": {"_NO_KEY", "_MAX_SHIFT_NS", "_CLOSE_NS"},
    "phantora_prof/engine/kineto_args.py": {"TENSOR_LIST_DISPLAY_LENGTH_LIMIT"},
    "phantora_prof/engine/op_children.py": {"_CARVE", "_OTHER_LAYOUT", "_OTHER_DIMS"},  # trace layout, template lookup weight
    "phantora_prof/engine/representatives.py": {"AUTO_ALL_LIVE_UP_TO"},  # a run policy (--live-ranks auto)
    "phantora_prof/engine/rank_timeline.py": {"_HIDDEN_DEPTH"},
}


def _numeric(node: ast.AST) -> bool:
    """A number, or a container of numbers (a dict of rates, a tuple of limits)."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, (int, float)) and not isinstance(node.value, bool)
    if isinstance(node, ast.UnaryOp):
        return _numeric(node.operand)
    if isinstance(node, ast.BinOp):
        return _numeric(node.left) and _numeric(node.right)
    if isinstance(node, (ast.Tuple, ast.List)):
        return bool(node.elts) and all(_numeric(e) for e in node.elts)
    if isinstance(node, ast.Dict):
        return bool(node.values) and all(_numeric(v) for v in node.values)
    if isinstance(node, ast.Call):  # float("inf")
        return isinstance(node.func, ast.Name) and node.func.id in ("float", "int")
    return False


def test_every_built_in_gpu_has_a_profile_and_every_entry_a_source():
    assert set(GPUS) <= set(shipped_profiles())
    names = {f.name for f in fields(GpuProfile)} - {"gpu", "eff", "sources"}
    for key in shipped_profiles():
        prof = load_profile(key)
        assert set(prof.sources) == names | {f"eff.{k}" for k in prof.eff}, key
        for entry, source in prof.sources.items():
            assert len(source) > 20, (key, entry, source)
            assert source.split(":")[0].split(" ")[0] in ("fitted", "measured", "hand-set", "published",
                                                         "kernel", "by", "inherited"), (key, entry, source)


def test_inherited_entries_say_so_and_overrides_win():
    h200, a100, h100 = load_profile("h200"), load_profile("a100"), load_profile("h100")
    assert h100.eff == h200.eff and h100.kernel_gap_ns == h200.kernel_gap_ns
    assert all(s.startswith("inherited from h200: ") for k, s in h100.sources.items() if k != "hbm_sustained_ratio")
    assert h100.sources["hbm_sustained_ratio"].startswith("fitted") and h100.hbm_sustained_ratio != 1.0
    assert a100.efficiency("gemm").compute == 0.85 and a100.sources["eff.gemm"].startswith("published")
    assert a100.efficiency("layer_norm") == h200.efficiency("layer_norm")
    assert a100.sources["eff.layer_norm"] == "inherited from h200: " + h200.sources["eff.layer_norm"]
    assert profile_for(get_gpu("A100")) is a100


def test_profile_files_are_well_formed_and_only_h200_is_standalone():
    for path in sorted(PROFILES.glob("*.json")):
        doc = json.loads(path.read_text())
        assert doc["schema"] == "phantora-gpu-profile/1" and doc["gpu"] == path.stem
        assert doc.get("about"), path
        assert (doc.get("inherits") is None) == (path.stem == "h200"), path


def test_unknown_gpu_and_bad_entries_are_clear_errors(tmp_path, monkeypatch):
    with pytest.raises(ConfigError, match="no model profile for GPU 'b200'.*profiles exist for: a100, h100, h200"):
        load_profile("b200")
    from phantora_prof.cost import profiles

    doc = json.loads((PROFILES / "h200.json").read_text())
    del doc["kernel"]["gemm_tail"]
    (tmp_path / "h200.json").write_text(json.dumps(doc))
    monkeypatch.setattr(profiles, "PROFILES", tmp_path)
    load_profile.cache_clear()
    try:
        with pytest.raises(ConfigError, match=r"missing entries \['gemm_tail'\]"):
            load_profile("h200")
        doc = json.loads((PROFILES / "h200.json").read_text())
        doc["eff"]["gemm"]["compute"] = 1.5
        (tmp_path / "h200.json").write_text(json.dumps(doc))
        load_profile.cache_clear()
        with pytest.raises(ConfigError, match=r"compute=1.5 must be in \(0, 1\]"):
            load_profile("h200")
    finally:
        monkeypatch.undo()
        load_profile.cache_clear()


def test_no_model_constant_lives_in_the_code():
    """A numeric module-level constant in cost/ or engine/ is either listed above as not a GPU
    model constant or belongs in the profiles."""
    found = {}
    for folder in ("phantora_prof/cost", "phantora_prof/engine"):
        for path in sorted((ROOT / folder).glob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            for node in ast.parse(path.read_text()).body:
                targets = node.targets if isinstance(node, ast.Assign) else (
                    [node.target] if isinstance(node, ast.AnnAssign) and node.value is not None else [])
                for t in targets:
                    if isinstance(t, ast.Name) and t.id.upper() == t.id and _numeric(node.value):
                        if t.id not in NOT_GPU_CONSTANTS.get(rel, ()):
                            found.setdefault(rel, []).append(t.id)
    assert not found, f"numeric constants outside the GPU profiles: {found}"
