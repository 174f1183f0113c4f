"""Folding text for screening: the form the screening patterns are matched on. Pure, no I/O.

`fold(text)` undoes the tricks that keep a phrase readable to a model (and a person) while
hiding it from a pattern:

1. NFKD: compatibility look-alikes become their plain letters and digits (fullwidth, bold or
   script mathematical letters, ligatures, circled letters), and accented letters split into
   base + mark;
2. every invisible character is dropped: all format characters (category Cf: soft hyphen,
   zero-width characters, U+180E, bidi controls, word joiners, tag characters ...), combining
   and enclosing marks (Mn, Me: the accents split off in step 1, the combining grapheme joiner,
   variation selectors) and the other default-ignorable code points (Hangul fillers ...);
3. confusables: Cyrillic, Greek and Armenian letters that look like Latin ones, and Latin small
   capitals and other Latin look-alikes, become those Latin letters (`CONFUSABLES`);
4. NFKC again, so that the result is in normal form.

The folded text is only ever matched: it is never stored or shown (the stored content is what
the user sent). Every ASCII character is kept as it is; other characters are only replaced by
the letters they look like, or dropped when they render as nothing.
"""

from __future__ import annotations

import unicodedata

_INVISIBLE_CATEGORIES = frozenset({"Cf", "Mn", "Me"})
_DEFAULT_IGNORABLE = frozenset(
    {0x115F, 0x1160, 0x3164, 0xFFA0}  # Hangul fillers (Lo): render as nothing
    | set(range(0xFFF0, 0xFFF9))  # unassigned specials, reserved as default-ignorable
    | set(range(0xE0000, 0xE1000))  # tags and variation selectors supplement (incl. unassigned)
)

_LOOK_ALIKES: dict[str, tuple[str, ...]] = {
    "a": ("CYRILLIC SMALL LETTER A", "GREEK SMALL LETTER ALPHA", "LATIN LETTER SMALL CAPITAL A"),
    "A": ("CYRILLIC CAPITAL LETTER A", "GREEK CAPITAL LETTER ALPHA"),
    "b": (
        "CYRILLIC SMALL LETTER VE",
        "CYRILLIC SMALL LETTER SOFT SIGN",
        "CYRILLIC CAPITAL LETTER SOFT SIGN",
        "GREEK SMALL LETTER BETA",
        "LATIN LETTER SMALL CAPITAL B",
    ),
    "B": ("CYRILLIC CAPITAL LETTER VE", "GREEK CAPITAL LETTER BETA"),
    "c": ("CYRILLIC SMALL LETTER ES", "GREEK LUNATE SIGMA SYMBOL", "LATIN LETTER SMALL CAPITAL C"),
    "C": ("CYRILLIC CAPITAL LETTER ES", "GREEK CAPITAL LUNATE SIGMA SYMBOL"),
    "d": ("CYRILLIC SMALL LETTER KOMI DE", "LATIN LETTER SMALL CAPITAL D"),
    "D": ("CYRILLIC CAPITAL LETTER KOMI DE",),
    "e": ("CYRILLIC SMALL LETTER IE", "GREEK SMALL LETTER EPSILON", "LATIN LETTER SMALL CAPITAL E"),
    "E": ("CYRILLIC CAPITAL LETTER IE", "GREEK CAPITAL LETTER EPSILON"),
    "f": ("LATIN LETTER SMALL CAPITAL F",),
    "g": ("ARMENIAN SMALL LETTER CO", "LATIN SMALL LETTER SCRIPT G", "LATIN LETTER SMALL CAPITAL G"),
    "h": (
        "CYRILLIC SMALL LETTER EN",
        "CYRILLIC SMALL LETTER SHHA",
        "ARMENIAN SMALL LETTER HO",
        "LATIN LETTER SMALL CAPITAL H",
    ),
    "H": ("CYRILLIC CAPITAL LETTER EN", "CYRILLIC CAPITAL LETTER SHHA", "GREEK CAPITAL LETTER ETA"),
    "i": (
        "CYRILLIC SMALL LETTER BYELORUSSIAN-UKRAINIAN I",
        "GREEK SMALL LETTER IOTA",
        "LATIN SMALL LETTER DOTLESS I",
        "LATIN LETTER SMALL CAPITAL I",
    ),
    "I": (
        "CYRILLIC CAPITAL LETTER BYELORUSSIAN-UKRAINIAN I",
        "CYRILLIC LETTER PALOCHKA",
        "GREEK CAPITAL LETTER IOTA",
    ),
    "j": (
        "CYRILLIC SMALL LETTER JE",
        "GREEK LETTER YOT",
        "LATIN SMALL LETTER DOTLESS J",
        "LATIN LETTER SMALL CAPITAL J",
    ),
    "J": ("CYRILLIC CAPITAL LETTER JE",),
    "k": ("CYRILLIC SMALL LETTER KA", "GREEK SMALL LETTER KAPPA", "LATIN LETTER SMALL CAPITAL K"),
    "K": ("CYRILLIC CAPITAL LETTER KA", "GREEK CAPITAL LETTER KAPPA"),
    "l": ("CYRILLIC SMALL LETTER PALOCHKA", "LATIN LETTER SMALL CAPITAL L"),
    "m": ("CYRILLIC SMALL LETTER EM", "LATIN LETTER SMALL CAPITAL M"),
    "M": ("CYRILLIC CAPITAL LETTER EM", "GREEK CAPITAL LETTER MU"),
    "n": (
        "CYRILLIC SMALL LETTER PE",
        "GREEK SMALL LETTER ETA",
        "ARMENIAN SMALL LETTER VO",
        "LATIN LETTER SMALL CAPITAL N",
    ),
    "N": ("GREEK CAPITAL LETTER NU",),
    "o": (
        "CYRILLIC SMALL LETTER O",
        "GREEK SMALL LETTER OMICRON",
        "ARMENIAN SMALL LETTER OH",
        "LATIN LETTER SMALL CAPITAL O",
    ),
    "O": ("CYRILLIC CAPITAL LETTER O", "GREEK CAPITAL LETTER OMICRON"),
    "p": ("CYRILLIC SMALL LETTER ER", "GREEK SMALL LETTER RHO", "LATIN LETTER SMALL CAPITAL P"),
    "P": ("CYRILLIC CAPITAL LETTER ER", "GREEK CAPITAL LETTER RHO"),
    "q": ("CYRILLIC SMALL LETTER QA",),
    "Q": ("CYRILLIC CAPITAL LETTER QA",),
    "r": ("CYRILLIC SMALL LETTER GHE", "LATIN LETTER SMALL CAPITAL R"),
    "s": ("CYRILLIC SMALL LETTER DZE", "LATIN LETTER SMALL CAPITAL S"),
    "S": ("CYRILLIC CAPITAL LETTER DZE",),
    "t": ("CYRILLIC SMALL LETTER TE", "GREEK SMALL LETTER TAU", "LATIN LETTER SMALL CAPITAL T"),
    "T": ("CYRILLIC CAPITAL LETTER TE", "GREEK CAPITAL LETTER TAU"),
    "u": ("GREEK SMALL LETTER UPSILON", "ARMENIAN SMALL LETTER SEH", "LATIN LETTER SMALL CAPITAL U"),
    "v": ("GREEK SMALL LETTER NU", "LATIN LETTER SMALL CAPITAL V"),
    "w": ("CYRILLIC SMALL LETTER WE", "GREEK SMALL LETTER OMEGA", "LATIN LETTER SMALL CAPITAL W"),
    "W": ("CYRILLIC CAPITAL LETTER WE",),
    "x": ("CYRILLIC SMALL LETTER HA", "GREEK SMALL LETTER CHI"),
    "X": ("CYRILLIC CAPITAL LETTER HA", "GREEK CAPITAL LETTER CHI"),
    "y": (
        "CYRILLIC SMALL LETTER U",
        "CYRILLIC SMALL LETTER STRAIGHT U",
        "GREEK SMALL LETTER GAMMA",
        "LATIN LETTER SMALL CAPITAL Y",
    ),
    "Y": ("CYRILLIC CAPITAL LETTER U", "CYRILLIC CAPITAL LETTER STRAIGHT U", "GREEK CAPITAL LETTER UPSILON"),
    "z": ("LATIN LETTER SMALL CAPITAL Z",),
    "Z": ("GREEK CAPITAL LETTER ZETA",),
}
"""Latin letter -> the Unicode names of the letters read as it: Cyrillic, Greek and Armenian
look-alikes, Latin small capitals, dotless i/j and script g (the letters attacks use; not a full
UTS #39 skeleton, which would also fold digits into letters and break the number patterns)."""

CONFUSABLES: dict[str, str] = {
    unicodedata.lookup(name): latin for latin, names in _LOOK_ALIKES.items() for name in names
}
"""Look-alike letter -> the Latin letter it is read as."""

_CONFUSABLE_TABLE = str.maketrans(CONFUSABLES)


def is_invisible(char: str) -> bool:
    """True for a character that renders as nothing on its own (format characters, combining and
    enclosing marks, other default-ignorable code points)."""
    return unicodedata.category(char) in _INVISIBLE_CATEGORIES or ord(char) in _DEFAULT_IGNORABLE


def fold(text: str) -> str:
    """`text` as the screening patterns see it (module doc). Pure."""
    decomposed = unicodedata.normalize("NFKD", text)
    visible = "".join(char for char in decomposed if not is_invisible(char))
    return unicodedata.normalize("NFKC", visible.translate(_CONFUSABLE_TABLE))
