from memstream.ops.progress import Progress
from memstream.ops.render import ProgressLine, bar


def test_bar_with_total() -> None:
    text = bar(Progress("journal", 5, 10, "3 threads", {"messages_per_s": 1200}), width=10)
    assert text == "journal    [#####.....]  50% 5/10 3 threads messages_per_s=1200"


def test_bar_without_total_and_empty_total() -> None:
    assert bar(Progress("scan", 42)) == "scan       42"
    assert bar(Progress("republish", 0, 0), width=4) == "republish  [####] 100% 0/0"


def test_bar_clamps_overshoot() -> None:
    assert "100% 12/10" in bar(Progress("x", 12, 10), width=4)


def test_tty_rewrites_one_line_per_phase() -> None:
    out: list[str] = []
    line = ProgressLine(out.append, tty=True)
    line(Progress("a", 1, 2))
    line(Progress("a", 2, 2))
    line(Progress("b", 1, 1))
    line.finish()
    text = "".join(out)
    assert text.count("\n") == 2  # phase change + finish
    assert text.startswith("\ra ")


def test_non_tty_prints_phase_starts_and_ends_only() -> None:
    out: list[str] = []
    line = ProgressLine(out.append, tty=False, interval_s=3600)
    for done in range(5):
        line(Progress("a", done, 4))
    line(Progress("b", 0, 1))
    assert [text.split()[0] for text in out] == ["a", "a", "b"]
    assert all(text.endswith("\n") for text in out)
