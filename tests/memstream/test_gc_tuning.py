import gc
from collections.abc import Iterator

import pytest

from memstream.gc_tuning import THRESHOLDS, tune_gc


@pytest.fixture
def restored_gc() -> Iterator[None]:
    before = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*before)


@pytest.mark.usefixtures("restored_gc")
def test_start_up_objects_are_frozen_and_the_thresholds_raised() -> None:
    before = gc.get_freeze_count()
    survivors = [[n] for n in range(1000)]  # tracked containers alive at start-up
    tune_gc()
    assert gc.get_threshold() == THRESHOLDS
    assert gc.get_freeze_count() >= before + len(survivors)


@pytest.mark.usefixtures("restored_gc")
def test_cycles_are_still_collected_after_tuning() -> None:
    tune_gc()

    class Node:
        other: object = None

    a, b = Node(), Node()
    a.other, b.other = b, a
    del a, b
    assert gc.collect() >= 2
