"""Folding for screening: ASCII is kept, every invisible character is dropped, look-alikes
become the Latin letters they are read as."""

from __future__ import annotations

import string
import sys
import unicodedata

from core.memory.folding import CONFUSABLES, fold, is_invisible


def test_ascii_is_kept_as_is() -> None:
    assert fold(string.printable) == string.printable


def test_every_format_character_is_dropped() -> None:
    format_chars = [chr(cp) for cp in range(sys.maxunicode + 1) if unicodedata.category(chr(cp)) == "Cf"]
    assert len(format_chars) > 150  # soft hyphen, zero-width, bidi controls, U+180E, tags ...
    for char in format_chars:
        assert fold(f"ig{char}nore") == "ignore", f"U+{ord(char):04X}"


def test_marks_and_default_ignorables_are_dropped() -> None:
    for char in ("\u034f", "\u0301", "\u20dd", "\ufe0f", "\U000e0100", "\u115f", "\u3164", "\uffa0"):
        assert is_invisible(char) and fold(f"ig{char}nore") == "ignore", f"U+{ord(char):04X}"
    assert fold("re\u0301sume\u0301") == "resume"


def test_look_alikes_become_latin_letters() -> None:
    assert all(len(latin) == 1 and latin in string.ascii_letters for latin in CONFUSABLES.values())
    assert all(not char.isascii() and char.isalpha() for char in CONFUSABLES)
    cyrillic = "\u0406gn\u043er\u0435 \u0440r\u0435vi\u043eus"  # I, o, e, p, e, o
    greek = "\u0399gn\u03bfre \u03b1ll"
    small_capitals = "\u026a\u0262\u0274\u1d0f\u0280\u1d07"
    assert (fold(cyrillic), fold(greek), fold(small_capitals)) == ("Ignore previous", "Ignore all", "ignore")


def test_compatibility_forms_fold_to_plain_letters() -> None:
    assert fold("\uff49\uff47\uff4e\uff4f\uff52\uff45") == "ignore"  # fullwidth
    assert fold("\U0001d422\U0001d420\U0001d427") == "ign"  # mathematical bold
    assert fold("\ufb01le") == "file" and fold("\u24d8") == "i"  # ligature, circled letter
