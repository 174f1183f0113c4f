"""Static check: code names topics only through the registry, and only declared ones.

Scans the Python sources of memstream/, streams/, processors/ and sinks/ (AST, best effort):
- `topic_name(settings, "x")`, `settings.topic("x")`, a module constant `SOMETHING_TOPIC = "x"` and
  `dlq_topic("p")` must name a declared topic (resp. a listed processor);
- Kafka client calls (`produce`, `subscribe`, `NewTopic`, `TopicPartition`, a non-settings
  `.topic(...)`) must not get a string literal as the topic: that would bypass the prefix;
- no f-string or `+` builds a topic name from a declared name, and planned topic names that are
  not declared yet do not appear at all.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

from streams.topics import TopicRegistry, load_topics

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("memstream", "processors", "streams", "sinks", "core")
PLANNED = {"compaction.requested", "compaction.flushed", "memory.entries", "example.planned"}
KAFKA_TOPIC_CALLS = {"produce", "subscribe", "NewTopic", "TopicPartition", "NewPartitions"}


@dataclass(frozen=True)
class Violation:
    file: str
    line: int
    problem: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.problem}"


def _call_name(node: ast.Call) -> str | None:
    if isinstance(node.func, ast.Name):
        return node.func.id
    if isinstance(node.func, ast.Attribute):
        return node.func.attr
    return None


def _literal(node: ast.AST | None) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def _literal_nodes(node: ast.AST) -> list[tuple[ast.AST, str]]:
    """String literals that are `node` itself or elements of a list/tuple/set literal `node`."""
    elts = node.elts if isinstance(node, ast.List | ast.Tuple | ast.Set) else [node]
    return [(elt, value) for elt in elts if (value := _literal(elt)) is not None]


def _docstrings(tree: ast.AST) -> set[int]:
    ids: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and _literal(body[0].value) is not None:
                ids.add(id(body[0].value))
    return ids


def scan(source: str, file: str, registry: TopicRegistry) -> list[Violation]:
    tree = ast.parse(source, filename=file)
    declared = set(registry.names())
    out: list[Violation] = []
    allowed: set[int] = _docstrings(tree)  # ids of literal nodes already judged

    def bad(node: ast.AST, problem: str) -> None:
        out.append(Violation(file, getattr(node, "lineno", 0), problem))

    def need_declared(node: ast.AST, value: str, how: str) -> None:
        allowed.add(id(node))
        if value not in declared:
            bad(node, f"{how} names {value!r}, which topics.yaml does not declare")

    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = _call_name(node)
            if name == "topic_name":
                arg = node.args[1] if len(node.args) > 1 else None
                if (value := _literal(arg)) is not None and arg is not None:
                    need_declared(arg, value, "topic_name()")
            elif name == "dlq_topic" and node.args:
                arg = node.args[0]
                if (value := _literal(arg)) is not None:
                    allowed.add(id(arg))
                    if value not in registry.dead_letter.processors:
                        bad(arg, f"dlq_topic({value!r}): processor not listed under dead_letter.processors")
            elif name == "topic" and isinstance(node.func, ast.Attribute) and node.args:
                arg = node.args[0]
                receiver = ast.unparse(node.func.value).lower()
                if (value := _literal(arg)) is not None:
                    if "settings" in receiver:
                        need_declared(arg, value, "settings.topic()")
                    else:
                        allowed.add(id(arg))
                        bad(arg, f"{receiver}.topic({value!r}) bypasses topic_name(settings, ...)")
            elif name in KAFKA_TOPIC_CALLS and node.args:
                for elt, value in _literal_nodes(node.args[0]):
                    allowed.add(id(elt))
                    bad(elt, f"{name}() gets the literal topic {value!r}: use topic_name(settings, ...)")
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = [t.id for t in targets if isinstance(t, ast.Name)]
            if node.value is not None and any(
                n.isupper() and n.endswith(("_TOPIC", "_TOPICS")) for n in names
            ):
                for elt, value in _literal_nodes(node.value):
                    need_declared(elt, value, f"constant {names[0]}")
        elif isinstance(node, ast.JoinedStr):
            for part in node.values:
                if (value := _literal(part)) is not None:
                    allowed.add(id(part))
                    if any(value.endswith(t) for t in declared | PLANNED):
                        bad(
                            part,
                            f"f-string builds a topic name from {value!r}: use topic_name(settings, ...)",
                        )
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            for side in (node.left, node.right):
                if (value := _literal(side)) is not None and value in declared | PLANNED:
                    allowed.add(id(side))
                    bad(side, f"'+' builds a topic name from {value!r}: use topic_name(settings, ...)")

    for node in ast.walk(tree):
        value = _literal(node)
        if value is None or id(node) in allowed:
            continue
        if value in PLANNED - declared:
            bad(node, f"{value!r} is a planned topic that topics.yaml does not declare yet")
        elif value.startswith("dlq.") and value not in declared:
            bad(node, f"{value!r} looks like a dead-letter topic: use dlq_topic(processor)")
    return out


def sources() -> list[Path]:
    files: list[Path] = []
    for package in PACKAGES:
        files.extend(sorted((ROOT / package).rglob("*.py")))
    return files


def test_code_uses_only_declared_topics_through_the_registry() -> None:
    registry = load_topics()
    files = sources()
    assert ROOT / "streams" / "relays" / "journal.py" in files
    violations = [v for f in files for v in scan(f.read_text(), str(f.relative_to(ROOT)), registry)]
    assert not violations, "topic names must come from topics.yaml:\n" + "\n".join(map(str, violations))


BAD_SOURCE = '''
"""Docstrings may mention example.planned and dlq.never-listed freely."""
from streams.topics import topic_name, dlq_topic

JOURNAL_TOPIC = "journal.messages"
OTHER_TOPIC = "no.such.topic"

def f(settings, producer, consumer, app, prefix):
    topic_name(settings, "journal.messages")
    topic_name(settings, "example.planned")
    settings.topic("journal.message")
    producer.produce("journal.messages", b"v")
    consumer.subscribe([topic_name(settings, "journal.messages"), "raw.topic"])
    app.topic("journal.messages")
    dlq_topic("never-listed")
    name = f"{prefix}journal.messages"
    other = prefix + "journal.messages"
    planned = "example.planned"
    dead = "dlq.never-listed"
    return topic_name(settings, JOURNAL_TOPIC), name, other, planned, dead
'''


def test_the_scanner_finds_every_kind_of_bypass() -> None:
    violations = scan(BAD_SOURCE, "bad.py", load_topics())
    lines = sorted(v.line for v in violations)
    assert lines == [6, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19], "\n".join(map(str, violations))


@pytest.mark.parametrize(
    "source",
    [
        'topic_name(settings, "journal.messages")',
        'settings.topic("journal.messages")',
        'JOURNAL_TOPIC = "journal.messages"',
        'log.info("relay %s", "relay.journal.messages")',
        "dlq_topic(processor).broker_name(settings)",
    ],
)
def test_the_scanner_accepts_registry_use(source: str) -> None:
    assert scan(source, "ok.py", load_topics()) == []
