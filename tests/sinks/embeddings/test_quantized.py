"""The int8-arithmetic model derived from the wheel's model, and its cache."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sinks.embeddings.minilm import model_files
from sinks.embeddings.quantized import CACHE_ENV, cache_dir, cached_name, int8_model


def test_the_model_is_derived_once_and_then_read_from_the_cache(tmp_path: Path) -> None:
    source, _ = model_files()
    first = int8_model(source, tmp_path)
    assert first.parent == tmp_path and first.name == cached_name(source)
    assert 15_000_000 < first.stat().st_size < 30_000_000  # int8 weights, not float32
    stamp = first.stat().st_mtime_ns
    assert int8_model(source, tmp_path) == first and first.stat().st_mtime_ns == stamp
    assert [p.name for p in tmp_path.iterdir()] == [first.name]  # no scratch left behind


def test_derivation_is_deterministic(tmp_path: Path) -> None:
    source, _ = model_files()
    a = int8_model(source, tmp_path / "a").read_bytes()
    b = int8_model(source, tmp_path / "b").read_bytes()
    assert a == b


def test_the_cache_directory_follows_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "explicit"))
    assert cache_dir() == tmp_path / "explicit"
    monkeypatch.delenv(CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "memstream" / "models"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache_dir() == Path(os.path.expanduser("~")) / ".cache" / "memstream" / "models"
