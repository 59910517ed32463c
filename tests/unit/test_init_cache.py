"""Builtin weights are initialised once, then read back from the init cache."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("olmo_core")

from runtime.models import init_cache, load_model  # noqa: E402


def test_second_load_reads_the_cached_initialisation(tmp_path, monkeypatch):
    monkeypatch.setenv("RLC_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(init_cache, "MIN_PARAMS", 0)
    first = load_model("builtin:tiny", seed=3).model.state_dict()
    files = list((tmp_path / "builtin-init").glob("tiny-*.safetensors"))
    assert len(files) == 1
    other = load_model("builtin:tiny", seed=5).model.state_dict()
    assert not torch.equal(other["embeddings.weight"], first["embeddings.weight"])
    # a cache hit must not initialise again
    from olmo_core.nn.transformer import Transformer

    def no_init(self, *a, **k):
        raise AssertionError("initialised again")

    monkeypatch.setattr(Transformer, "init_weights", no_init)
    second = load_model("builtin:tiny", seed=3).model.state_dict()
    assert first.keys() == second.keys()
    assert all(torch.equal(first[k], second[k]) for k in first)


def test_cache_off(tmp_path, monkeypatch):
    monkeypatch.setenv("RLC_CACHE_DIR", "off")
    monkeypatch.setattr(init_cache, "MIN_PARAMS", 0)
    assert init_cache.cache_path("builtin:tiny", 0) is None
    load_model("builtin:tiny", seed=1)


def test_the_writer_leaves_a_written_cache_alone(tmp_path, monkeypatch):
    """Two cold loaders of one builtin (an engine, the trainer) each run the writer: the
    second finds the first's file under the lock, and neither initialises nor reads it."""
    monkeypatch.setenv("RLC_CACHE_DIR", str(tmp_path))
    init_cache.write("builtin:tiny", 7)
    path = init_cache.cache_path("builtin:tiny", 7)
    assert path is not None and path.is_file()
    written = path.stat().st_mtime_ns
    from runtime.models.weights import load_safetensors

    fresh = load_model("builtin:tiny", seed=7).model.state_dict()  # tiny: not from the cache
    cached = load_safetensors(path)
    assert cached.keys() == fresh.keys() and all(torch.equal(fresh[k], cached[k]) for k in cached)

    def no_init(*a, **k):
        raise AssertionError("initialised again")

    monkeypatch.setattr(init_cache, "initialise_on_cpu", no_init)
    init_cache.write("builtin:tiny", 7)
    assert path.stat().st_mtime_ns == written
