"""Whether a profile is written in English, which the offline generator and judges read.

The probe banks, the capability bank and the embedding model's scope and refusal judges are
English. A profile in another language still runs, but its near-domain probes are chosen by
how close English requests come to foreign text, which is close to chance, so the user is
warned. The check is deliberately crude: function words of a few common languages against
English ones, and the share of letters outside the Latin alphabet.
"""

from __future__ import annotations

import re
import unicodedata

_ENGLISH = frozenset(
    "the a an of to and or in on for with is are was my your you i it how what can do does this "
    "that about from be at we our which when where who will would should".split()
)
# Function words of French, Spanish, Portuguese, Italian, German and Dutch that English text
# does not use as words.
_OTHER = frozenset(
    "le la les des du et est une pour avec mon ma mes votre vos je vous nous sur dans qui que "
    "el los las por para con es y mi su una del al como pero "
    "os um uma não com seu sua "
    "il di che per non gli della sono "
    "der die das und ist mit für ich nicht ein eine mein wie ich sie "
    "het een en van ik niet zijn voor".split()
)
_WORD = re.compile(r"[^\W\d_]+")


def not_english(text: str) -> str | None:
    """Why `text` does not read as English (a short phrase), or None when it does or is too
    short to tell."""
    words = [word.lower() for word in _WORD.findall(text)]
    letters = sum(len(word) for word in words)
    if letters >= 20:
        latin = sum(unicodedata.name(char, "").startswith("LATIN") for w in words for char in w)
        if latin < letters / 2:
            return "most of its letters are outside the Latin alphabet"
    english = sum(word in _ENGLISH for word in words)
    other = sum(word in _OTHER for word in words)
    if other >= 3 and other > english:
        return f"it uses {other} function words of other languages against {english} English ones"
    return None
