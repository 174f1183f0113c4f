"""Collection names, point ids and the index factory."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from core.config import Settings
from core.stores.vectors import CollectionRef
from sinks.qdrant.edge import QdrantEdgeIndex
from sinks.qdrant.factory import build_index
from sinks.qdrant.layout import collection_name, point_id
from sinks.qdrant.server import QdrantServerIndex


def test_collection_names_are_safe_and_never_collide() -> None:
    refs = [
        CollectionRef(environment="dev", account_id="acme", model_id="all-MiniLM-L6-v2-int8"),
        CollectionRef(environment="dev", account_id="ACME", model_id="all-MiniLM-L6-v2-int8"),
        CollectionRef(environment="dev", account_id="a.c:m@e", model_id="all-MiniLM-L6-v2-int8"),
        CollectionRef(environment="dev", account_id="a-c-m-e", model_id="all-MiniLM-L6-v2-int8"),
        CollectionRef(environment="dev", account_id="acme", model_id="text-embedding-3-small"),
        CollectionRef(environment="prod", account_id="acme", model_id="all-MiniLM-L6-v2-int8"),
        CollectionRef(environment="dev", account_id="x" * 128, model_id="../../etc/passwd"),
    ]
    names = [collection_name(r) for r in refs]
    assert len(set(names)) == len(names)
    for name in names:
        assert re.fullmatch(r"mem_[a-z0-9-]+_[a-z0-9-]+_[a-z0-9-]+_[0-9a-f]{12}", name), name
        assert len(name) <= 128
    assert collection_name(refs[0]) == collection_name(refs[0].model_copy())  # stable


def test_point_ids_are_stable_uuids_per_entry() -> None:
    assert point_id("e-1") == point_id("e-1") != point_id("e-2")
    assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[0-9a-f]{4}-[0-9a-f]{12}", point_id("e-1"))


def test_build_index_from_the_url(tmp_path: Path) -> None:
    edge = build_index(Settings(data_dir=tmp_path))
    assert isinstance(edge, QdrantEdgeIndex) and edge.root == tmp_path.resolve() / "qdrant"
    assert isinstance(build_index(Settings(qdrant_url="http://127.0.0.1:6333")), QdrantServerIndex)
    with pytest.raises(ValueError, match="unsupported qdrant_url"):
        build_index(Settings(qdrant_url="qdrant://x"))
