"""The package list is written out by hand in pyproject.toml and the Dockerfile: every package of
the source tree must be in the wheel, and in the production image."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

from setuptools import find_packages

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT: dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text())
INCLUDE: list[str] = PYPROJECT["tool"]["setuptools"]["packages"]["find"]["include"]
TOP_LEVEL = sorted(pattern.removesuffix("*") for pattern in INCLUDE)


def test_every_directory_with_modules_is_a_package_in_the_wheel() -> None:
    found = set(find_packages(str(ROOT), include=INCLUDE))
    with_modules = {
        ".".join(path.parent.relative_to(ROOT).parts)
        for top in TOP_LEVEL
        for path in (ROOT / top).rglob("*.py")
        if "__pycache__" not in path.parts
    }
    missing = sorted(with_modules - found)
    assert not missing, f"not in the wheel (add an __init__.py, or the package to `include`): {missing}"


def test_the_top_level_packages_are_the_layers() -> None:
    assert TOP_LEVEL == ["core", "memstream", "processors", "sinks", "streams"]
    assert sorted(PYPROJECT["tool"]["mypy"]["packages"]) == sorted([*TOP_LEVEL, "faults"])


def test_the_image_copies_every_top_level_package() -> None:
    copied = set(re.findall(r"^COPY (\w+) \./\1$", (ROOT / "Dockerfile").read_text(), re.MULTILINE))
    assert copied == set(TOP_LEVEL)


def test_package_data_exists() -> None:
    assert all((ROOT / top / "py.typed").is_file() for top in TOP_LEVEL)
    assert (ROOT / "streams" / "topics.yaml").is_file()
    assert list((ROOT / "sinks" / "postgres" / "migrations").glob("*.sql"))
