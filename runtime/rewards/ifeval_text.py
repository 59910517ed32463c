"""Text measurements the IFEval checkers need: sentences, words, language.

The reference checker counts sentences with nltk's pretrained English Punkt model and
tokenises words with nltk's Treebank tokenizer; that model is a download outside PyPI,
so these are our own re-implementations of the same rules:

* sentences: a candidate boundary is ``.``/``?``/``!`` followed by whitespace and a
  token (or by closing punctuation), as in Punkt; a period does not end a sentence after
  a known abbreviation, inside an ellipsis-free initial like ``J.``, or after a list
  number such as ``1.`` when the next word is lower-case (Punkt's orthographic rule);
* words for capital-word counting: whitespace split, punctuation split off, English
  contractions split (``DON'T`` -> ``DO`` + ``N'T``), hyphenated words kept whole;
* language: ``langdetect`` (a PyPI package, as in the reference), seeded for
  reproducibility.
"""

from __future__ import annotations

import re
import threading
from functools import lru_cache

# Abbreviations after which a period usually does not end a sentence (Punkt learns such a
# list from its training corpus; these are the common English ones).
ABBREVIATIONS = frozenset(
    [
        "mr",
        "mrs",
        "ms",
        "dr",
        "prof",
        "sr",
        "jr",
        "st",
        "mt",
        "ft",
        "vs",
        "etc",
        "inc",
        "ltd",
        "corp",
        "dept",
        "univ",
        "assn",
        "bros",
        "gen",
        "gov",
        "sen",
        "rep",
        "rev",
        "hon",
        "pres",
        "col",
        "lt",
        "sgt",
        "capt",
        "cmdr",
        "adm",
        "maj",
        "jan",
        "feb",
        "apr",
        "jun",
        "jul",
        "aug",
        "sep",
        "sept",
        "oct",
        "nov",
        "dec",
        "tues",
        "thurs",
        "e.g",
        "i.e",
        "a.m",
        "p.m",
        "u.s",
        "u.k",
        "u.n",
        "u.s.a",
        "d.c",
        "a.d",
        "b.c",
        "ph.d",
        "m.d",
        "b.a",
        "m.a",
        "approx",
        "nos",
        "vols",
        "pp",
        "eds",
        "cf",
        "viz",
    ]
)

# After an abbreviation, Punkt still breaks when the next word is capitalised but is a
# word usually written in lower case (its orthographic heuristic); these are such words.
_LOWERCASE_STARTERS = frozenset(
    [
        "the",
        "a",
        "an",
        "i",
        "it",
        "its",
        "this",
        "that",
        "these",
        "those",
        "they",
        "them",
        "their",
        "we",
        "our",
        "you",
        "your",
        "he",
        "she",
        "his",
        "her",
        "in",
        "on",
        "at",
        "for",
        "but",
        "and",
        "or",
        "so",
        "if",
        "when",
        "while",
        "there",
        "here",
        "as",
        "my",
        "what",
        "how",
        "why",
        "who",
        "which",
        "each",
        "all",
        "some",
        "many",
        "most",
        "also",
        "however",
        "finally",
        "then",
        "now",
        "next",
        "first",
        "second",
        "third",
        "after",
        "before",
        "since",
        "because",
        "although",
        "though",
        "thus",
        "therefore",
        "overall",
        "today",
    ]
)

_END_CANDIDATE = re.compile(r"\S*[.?!](?=[?!)\";}\]*:@'({\[]|\s+\S)")


def _is_initial(word: str) -> bool:
    return bool(re.fullmatch(r"[A-Za-z]\.", word))


def _break_after(token: str, following: str) -> bool:
    """Whether a boundary candidate ``token`` (ending in . ? or !) ends a sentence."""
    stripped = token.rstrip("\"')]}*")
    if not stripped:
        return False
    last = stripped[-1]
    if last in "?!":
        return True
    if last != ".":
        return False
    if stripped.endswith(".."):
        # an ellipsis ends a sentence only when an upper-case word follows
        return bool(following[:1].isupper())
    body = stripped[:-1]
    word = re.sub(r"^[\"'(\[{*]+", "", body).lower()
    if word in ABBREVIATIONS or word.split("-")[-1] in ABBREVIATIONS:
        nxt = re.sub(r"^[\"'(\[{*]+", "", following)
        head = re.match(r"[A-Za-z]+", nxt)
        return bool(head and nxt[:1].isupper() and head.group(0).lower() in _LOWERCASE_STARTERS)
    if _is_initial(word + "."):
        return bool(following[:1].isupper()) and len(following) > 1 and following[1:2].islower()
    if re.fullmatch(r"\d+", word) or re.fullmatch(r"[\d.,]+", word):
        # "1." in a list: a break unless the next word is lower-case
        return not following[:1].islower()
    return True


def split_sentences(text: str) -> list[str]:
    """Sentences of ``text`` (Punkt-like rules, see the module docstring)."""
    sentences: list[str] = []
    start = 0
    for m in _END_CANDIDATE.finditer(text):
        end = m.end()
        rest = text[end:]
        # closing punctuation directly after the mark belongs to this sentence
        close = re.match(r"[\"')\]}*]*", rest)
        nxt = rest[close.end() if close else 0 :].lstrip()
        following = nxt.split(None, 1)[0] if nxt else ""
        if not following and not (close and close.group(0)):
            continue
        if not following:
            continue
        if _break_after(m.group(0) + (close.group(0) if close else ""), following):
            stop = end + (close.end() if close else 0)
            piece = text[start:stop].strip()
            if piece:
                sentences.append(piece)
            start = stop
    tail = text[start:].strip()
    if tail:
        sentences.append(tail)
    return sentences


def count_sentences(text: str) -> int:
    return len(split_sentences(text))


_WORD_RE = re.compile(r"\w+")


def count_words(text: str) -> int:
    """Words as the reference counts them: runs of ``\\w`` characters."""
    return len(_WORD_RE.findall(text))


_CONTRACTION_RE = re.compile(r"(?i)^(.+?)(n't|'s|'m|'re|'ve|'ll|'d)$")
_LEAD_PUNCT = re.compile(r"^[\"'`(\[{<]+")
_TRAIL_PUNCT = re.compile(r"[\"'`)\]}>.,;:!?]+$")


def word_tokens(text: str) -> list[str]:
    """Treebank-style word tokens (punctuation split off, contractions split)."""
    out: list[str] = []
    for chunk in text.split():
        for piece in re.split(r"(--|…)", chunk):
            if not piece or piece in ("--", "…"):
                continue
            lead = _LEAD_PUNCT.match(piece)
            if lead:
                out.append(lead.group(0))
                piece = piece[lead.end() :]
            trail = _TRAIL_PUNCT.search(piece)
            tail = ""
            if trail and trail.start() > 0:
                tail = piece[trail.start() :]
                piece = piece[: trail.start()]
            elif trail:
                out.append(piece)
                continue
            m = _CONTRACTION_RE.match(piece)
            if m:
                out.extend([m.group(1), m.group(2)])
            elif piece:
                out.append(piece)
            if tail:
                out.append(tail)
    return out


def count_capital_words(text: str) -> int:
    return sum(1 for w in word_tokens(text) if w.isupper())


_LANG_LOCK = threading.Lock()


@lru_cache(maxsize=1)
def _langdetect() -> object:
    import langdetect

    langdetect.DetectorFactory.seed = 0
    return langdetect


@lru_cache(maxsize=4096)
def detect_language(text: str) -> str | None:
    """ISO 639-1 code of ``text``; None when langdetect cannot decide (no letters).

    Seeded, so a text always gets the same answer; cached because loose mode asks about
    near-identical variants of one response and detection is the costly step (~70 ms).
    """
    ld = _langdetect()
    with _LANG_LOCK:
        try:
            return str(ld.detect(text))  # type: ignore[attr-defined]
        except ld.LangDetectException:  # type: ignore[attr-defined]
            return None
