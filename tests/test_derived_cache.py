"""Derived cost models kept between runs (cost/derived_cache.py): read back exactly as built,
never stale, never required."""
from __future__ import annotations

import shutil
from pathlib import Path

from phantora_prof.cost import derived_cache, families, measured

PACKAGE = Path(derived_cache.__file__).resolve().parent.parent


def test_a_model_is_built_once_and_read_back_on_later_calls(tmp_path, monkeypatch):
    monkeypatch.setenv("PHANTORA_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv(derived_cache.ENV_DISABLE, raising=False)
    built = []

    def build():
        built.append(1)
        return {"x": [1.5, (2, "a")]}

    assert derived_cache.load_or_build("thing", build) == {"x": [1.5, (2, "a")]}
    assert derived_cache.load_or_build("thing", build) == {"x": [1.5, (2, "a")]}
    assert len(built) == 1
    assert [p.name.split("-")[0] for p in (tmp_path / "derived").iterdir()] == ["thing"]
    monkeypatch.setenv(derived_cache.ENV_DISABLE, "1")  # off: built every time
    derived_cache.load_or_build("thing", build)
    assert len(built) == 2


def test_an_unreadable_or_unwritable_cache_only_costs_a_rebuild(tmp_path, monkeypatch):
    monkeypatch.delenv(derived_cache.ENV_DISABLE, raising=False)
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("PHANTORA_CACHE_DIR", str(blocker))  # derived/ cannot be made under a file
    assert derived_cache.load_or_build("thing", lambda: 3) == 3
    monkeypatch.setenv("PHANTORA_CACHE_DIR", str(tmp_path / "c"))
    derived_cache.load_or_build("thing", lambda: 3)
    (path,) = (tmp_path / "c" / "derived").iterdir()
    path.write_bytes(b"\x80garbage")
    assert derived_cache.load_or_build("thing", lambda: 4) == 4


def test_the_key_covers_the_cost_code_its_tables_and_the_call_records(tmp_path):
    copy = tmp_path / "phantora_prof"
    shutil.copytree(PACKAGE / "cost", copy / "cost", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(PACKAGE / "protocol.py", copy / "protocol.py")
    key = derived_cache.source_key(copy)
    assert key == derived_cache.source_key(PACKAGE)
    for changed in (copy / "cost" / "data" / "profiles" / "h200.json", copy / "cost" / "ops.py",
                    copy / "protocol.py"):
        original = changed.read_bytes()
        changed.write_bytes(original + b"\n")
        derived_cache.source_key.cache_clear()
        assert derived_cache.source_key(copy) != key, changed
        changed.write_bytes(original)
        derived_cache.source_key.cache_clear()
    assert derived_cache.source_key(copy) == key


def test_cached_models_equal_freshly_built_ones(tmp_path, monkeypatch):
    """What a rank reads back is what it would have built: same values, so same traces."""
    monkeypatch.setenv("PHANTORA_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv(derived_cache.ENV_DISABLE, raising=False)
    for module in (measured, families):
        module.model.cache_clear()
        first = module.model()  # built and written
        module.model.cache_clear()
        again = module.model()  # read back
        module.model.cache_clear()
        assert again is not first and vars(again) == vars(first), module.__name__


def test_the_split_k_sweep_read_back_answers_as_built(tmp_path, monkeypatch):
    """The split-K sweep's groups (13,224 H200 calls) come from the cache after the first build,
    and answer every swept call as the freshly read table does."""
    from phantora_prof.cost import split_k

    monkeypatch.setenv("PHANTORA_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv(derived_cache.ENV_DISABLE, raising=False)
    split_k._sweep.cache_clear()
    built, tiles = split_k._sweep()
    assert list(tmp_path.glob("derived/split_k-*.pkl"))
    split_k._sweep.cache_clear()
    read, tiles_again = split_k._sweep()
    split_k._sweep.cache_clear()
    assert read is not built and tiles_again == tiles and read.keys() == built.keys()
    for key, group in built.items():
        assert read[key].at == group.at and read[key].axes == group.axes
        for (m, n, k), split in list(group.at.items())[::97]:
            assert read[key].nearest(m, n, k) == split
