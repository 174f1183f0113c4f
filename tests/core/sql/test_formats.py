"""Output formats: names in any case, canonical spelling, content types, and how blocks assemble."""

from __future__ import annotations

from core.sql.formats import Assembly, format_names, output_format


def test_names_in_any_case_give_the_canonical_format() -> None:
    fmt = output_format("csvwithnames")
    assert fmt is not None and fmt.name == "CSVWithNames" and fmt.assembly is Assembly.CSV_HEADER_1
    assert fmt.content_type.startswith("text/csv")
    assert output_format("Protobuf") is None  # reads a schema file: not served


def test_every_format_has_an_assembly() -> None:
    kinds = {name: output_format(name) for name in format_names()}
    assert all(fmt is not None for fmt in kinds.values())
    assert {kinds["Parquet"].assembly, kinds["JSON"].assembly, kinds["Native"].assembly} == {  # type: ignore[union-attr]
        Assembly.PARQUET,
        Assembly.WHOLE,
        Assembly.CONCAT,
    }
