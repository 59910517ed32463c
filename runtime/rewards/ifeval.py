"""The ``ifeval`` verifier: the 25 IFEval instruction checkers, strict and loose.

Each checker follows the reference semantics of Google's IFEval checker (counted and
compared exactly as it does; see the README of the IFEval data set), re-implemented
here. Kwargs with empty values are ignored, as the reference does. ``loose`` mode passes
an instruction when any of the reference's 8 response variants passes (first/last line
removed, ``*`` deleted). An empty response follows nothing.

Settings (``[rewards.ifeval]``): ``strict`` (true; false = loose) or ``mode`` = "strict" |
"loose"; ``aggregate`` = "fraction" (share of instructions followed, the default) | "all"
(1 only if every instruction is followed).
"""

from __future__ import annotations

import collections
import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from contract.spec.rewards import IfevalReward
from runtime.rewards.base import RewardResult, Verifier, register
from runtime.rewards.ifeval_text import (
    count_capital_words,
    count_sentences,
    count_words,
    detect_language,
)

Checker = Callable[[str, Mapping[str, Any]], bool]

RELATIONS = ("less than", "at least")


class InstructionError(ValueError):
    """An instruction id we do not know, or kwargs it cannot run with."""


def _compare(actual: int, relation: str, n: int) -> bool:
    if relation == "less than":
        return actual < n
    if relation == "at least":
        return actual >= n
    raise InstructionError(f"relation must be one of {RELATIONS}, got {relation!r}")


def _need(kw: Mapping[str, Any], key: str) -> Any:
    if key not in kw:
        raise InstructionError(f"missing kwarg {key!r}")
    return kw[key]


# --- the 25 checkers ---------------------------------------------------------------------


def capital_word_frequency(r: str, kw: Mapping[str, Any]) -> bool:
    return _compare(
        count_capital_words(r), _need(kw, "capital_relation"), int(_need(kw, "capital_frequency"))
    )


def english_capital(r: str, kw: Mapping[str, Any]) -> bool:
    if not r.isupper():
        return False
    lang = detect_language(r)
    return lang is None or lang == "en"  # undetectable counts as followed, as in the reference


def english_lowercase(r: str, kw: Mapping[str, Any]) -> bool:
    if not r.islower():
        return False
    lang = detect_language(r)
    return lang is None or lang == "en"


def repeat_prompt(r: str, kw: Mapping[str, Any]) -> bool:
    return r.strip().lower().startswith(str(_need(kw, "prompt_to_repeat")).strip().lower())


def two_responses(r: str, kw: Mapping[str, Any]) -> bool:
    parts = r.split("******")
    valid = []
    for i, part in enumerate(parts):
        if not part.strip():
            if i not in (0, len(parts) - 1):
                return False
        else:
            valid.append(part)
    return len(valid) == 2 and valid[0].strip() != valid[1].strip()


def number_placeholders(r: str, kw: Mapping[str, Any]) -> bool:
    return len(re.findall(r"\[.*?\]", r)) >= int(_need(kw, "num_placeholders"))


def postscript(r: str, kw: Mapping[str, Any]) -> bool:
    marker = str(_need(kw, "postscript_marker")).strip()
    low = r.lower()
    if marker == "P.P.S":
        pattern = r"\s*p\.\s?p\.\s?s.*$"
    elif marker == "P.S.":
        pattern = r"\s*p\.\s?s\..*$"
    else:
        pattern = r"\s*" + marker.lower() + r".*$"
    return bool(re.findall(pattern, low, flags=re.MULTILINE))


CONSTRAINED_OPTIONS = ("My answer is yes.", "My answer is no.", "My answer is maybe.")


def constrained_response(r: str, kw: Mapping[str, Any]) -> bool:
    s = r.strip()
    return any(opt in s for opt in CONSTRAINED_OPTIONS)


def json_format(r: str, kw: Mapping[str, Any]) -> bool:
    s = r.strip()
    for prefix in ("```json", "```Json", "```JSON", "```"):
        s = s.removeprefix(prefix)
    s = s.removesuffix("```").strip()
    try:
        json.loads(s)
    except ValueError:
        return False
    return True


def multiple_sections(r: str, kw: Mapping[str, Any]) -> bool:
    splitter = str(_need(kw, "section_spliter")).strip()
    sections = re.split(r"\s?" + splitter + r"\s?\d+\s?", r)
    return len(sections) - 1 >= int(_need(kw, "num_sections"))


def number_bullet_lists(r: str, kw: Mapping[str, Any]) -> bool:
    stars = re.findall(r"^\s*\*[^\*].*$", r, flags=re.MULTILINE)
    dashes = re.findall(r"^\s*-.*$", r, flags=re.MULTILINE)
    return len(stars) + len(dashes) == int(_need(kw, "num_bullets"))


def number_highlighted_sections(r: str, kw: Mapping[str, Any]) -> bool:
    n = sum(1 for h in re.findall(r"\*[^\n\*]*\*", r) if h.strip("*").strip())
    n += sum(
        1
        for h in re.findall(r"\*\*[^\n\*]*\*\*", r)
        if h.removeprefix("**").removesuffix("**").strip()
    )
    return n >= int(_need(kw, "num_highlights"))


def title(r: str, kw: Mapping[str, Any]) -> bool:
    return any(t.lstrip("<").rstrip(">").strip() for t in re.findall(r"<<[^\n]+>>", r))


def keyword_existence(r: str, kw: Mapping[str, Any]) -> bool:
    return all(re.search(k, r, flags=re.IGNORECASE) for k in _need(kw, "keywords"))


def forbidden_words(r: str, kw: Mapping[str, Any]) -> bool:
    return not any(
        re.search(r"\b" + w + r"\b", r, flags=re.IGNORECASE)
        for w in set(_need(kw, "forbidden_words"))
    )


def keyword_frequency(r: str, kw: Mapping[str, Any]) -> bool:
    keyword = str(_need(kw, "keyword")).strip()
    n = len(re.findall(keyword, r, flags=re.IGNORECASE))
    return _compare(n, _need(kw, "relation"), int(_need(kw, "frequency")))


def letter_frequency(r: str, kw: Mapping[str, Any]) -> bool:
    # The reference replaces a non a-z "letter" by a random one; we count the literal
    # character, which is what the prompt asks for.
    letter = str(_need(kw, "letter")).strip().lower()
    n = collections.Counter(r.lower())[letter]
    return _compare(n, _need(kw, "let_relation"), int(_need(kw, "let_frequency")))


def response_language(r: str, kw: Mapping[str, Any]) -> bool:
    lang = detect_language(r)
    return lang is None or lang == _need(kw, "language")


def nth_paragraph_first_word(r: str, kw: Mapping[str, Any]) -> bool:
    want_n = int(_need(kw, "num_paragraphs"))
    nth = int(_need(kw, "nth_paragraph"))
    first = str(_need(kw, "first_word")).lower()
    paragraphs = re.split(r"\n\n", r)
    n = sum(1 for p in paragraphs if p.strip())
    if nth > n:
        return False
    para = paragraphs[nth - 1].strip()  # indexes the raw split, as the reference does
    if not para:
        return False
    word = para.split()[0].strip().lstrip("'").lstrip('"')
    got = ""
    for ch in word:
        if ch in {".", ",", "?", "!", "'", '"'}:
            break
        got += ch.lower()
    return n == want_n and got == first


def number_paragraphs(r: str, kw: Mapping[str, Any]) -> bool:
    parts = re.split(r"\s?\*\*\*\s?", r)
    n = len(parts)
    for i, p in enumerate(parts):
        if not p.strip():
            if i in (0, len(parts) - 1):
                n -= 1
            else:
                return False
    return n == int(_need(kw, "num_paragraphs"))


def number_sentences(r: str, kw: Mapping[str, Any]) -> bool:
    return _compare(count_sentences(r), _need(kw, "relation"), int(_need(kw, "num_sentences")))


def number_words(r: str, kw: Mapping[str, Any]) -> bool:
    return _compare(count_words(r), _need(kw, "relation"), int(_need(kw, "num_words")))


def no_comma(r: str, kw: Mapping[str, Any]) -> bool:
    return "," not in r


def end_checker(r: str, kw: Mapping[str, Any]) -> bool:
    return r.strip().strip('"').lower().endswith(str(_need(kw, "end_phrase")).strip().lower())


def quotation(r: str, kw: Mapping[str, Any]) -> bool:
    s = r.strip()
    return len(s) > 1 and s[0] == '"' and s[-1] == '"'


CHECKERS: dict[str, Checker] = {
    "change_case:capital_word_frequency": capital_word_frequency,
    "change_case:english_capital": english_capital,
    "change_case:english_lowercase": english_lowercase,
    "combination:repeat_prompt": repeat_prompt,
    "combination:two_responses": two_responses,
    "detectable_content:number_placeholders": number_placeholders,
    "detectable_content:postscript": postscript,
    "detectable_format:constrained_response": constrained_response,
    "detectable_format:json_format": json_format,
    "detectable_format:multiple_sections": multiple_sections,
    "detectable_format:number_bullet_lists": number_bullet_lists,
    "detectable_format:number_highlighted_sections": number_highlighted_sections,
    "detectable_format:title": title,
    "keywords:existence": keyword_existence,
    "keywords:forbidden_words": forbidden_words,
    "keywords:frequency": keyword_frequency,
    "keywords:letter_frequency": letter_frequency,
    "language:response_language": response_language,
    "length_constraints:nth_paragraph_first_word": nth_paragraph_first_word,
    "length_constraints:number_paragraphs": number_paragraphs,
    "length_constraints:number_sentences": number_sentences,
    "length_constraints:number_words": number_words,
    "punctuation:no_comma": no_comma,
    "startend:end_checker": end_checker,
    "startend:quotation": quotation,
}


def loose_variants(response: str) -> list[str]:
    """The reference's 8 loose-mode variants of a response."""
    lines = response.split("\n")
    first = "\n".join(lines[1:]).strip()
    last = "\n".join(lines[:-1]).strip()
    both = "\n".join(lines[1:-1]).strip()
    base = [response, first, last, both]
    return [response, response.replace("*", ""), first, last, both] + [
        v.replace("*", "") for v in base[1:]
    ]


def check_instruction(
    instruction_id: str, kwargs: Mapping[str, Any] | None, response: str, mode: str = "strict"
) -> bool:
    """Whether ``response`` follows one instruction (raises `InstructionError`)."""
    checker = CHECKERS.get(instruction_id)
    if checker is None:
        raise InstructionError(f"unknown IFEval instruction {instruction_id!r}")
    kw = {k: v for k, v in (kwargs or {}).items() if v}  # the reference drops empty kwargs
    candidates = [response] if mode == "strict" else loose_variants(response)
    return any(c.strip() and checker(c, kw) for c in candidates)


def check_all(
    instruction_ids: Sequence[str],
    kwargs_list: Sequence[Mapping[str, Any] | None],
    response: str,
    mode: str = "strict",
) -> list[bool]:
    if len(instruction_ids) != len(kwargs_list):
        raise InstructionError("instruction_id_list and kwargs have different lengths")
    return [
        check_instruction(i, k, response, mode)
        for i, k in zip(instruction_ids, kwargs_list, strict=True)
    ]


@register("ifeval")
class IFEvalVerifier(Verifier):
    settings_type = IfevalReward

    def __init__(self, config: Mapping[str, Any] | IfevalReward | None = None) -> None:
        super().__init__(config)
        settings = self.settings_model
        assert isinstance(settings, IfevalReward)
        self.mode = "strict" if settings.strict else "loose"
        self.aggregate = settings.aggregate

    def score(self, response: str, target: Any, metadata: Mapping[str, Any]) -> RewardResult:
        if not isinstance(target, Mapping) or "instruction_id_list" not in target:
            return RewardResult(
                0.0, ok=False, failure="target needs instruction_id_list and kwargs"
            )
        ids = list(target["instruction_id_list"])
        kws = list(target.get("kwargs") or [{}] * len(ids))
        try:
            follows = check_all(ids, kws, response, self.mode)
        except InstructionError as exc:
            return RewardResult(0.0, ok=False, failure=str(exc))
        if not follows:
            return RewardResult(0.0, ok=False, failure="no instructions")
        if self.aggregate == "all":
            score = 1.0 if all(follows) else 0.0
        else:
            score = sum(follows) / len(follows)
        return RewardResult(score, detail={"follow_instruction_list": follows})
