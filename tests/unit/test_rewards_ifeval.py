"""IFEval checkers: one passing and one failing case for each of the 25 ids, modes, scoring."""

from __future__ import annotations

import pytest

from runtime.rewards.base import get_verifier
from runtime.rewards.ifeval import CHECKERS, InstructionError, check_instruction, loose_variants
from runtime.rewards.ifeval_text import count_capital_words, count_sentences, word_tokens

EN = "This is a plain English answer about the weather in the city today and tomorrow."

# (id, kwargs, a response that follows, a response that does not)
CASES = [
    (
        "change_case:capital_word_frequency",
        {"capital_frequency": 2, "capital_relation": "at least"},
        "THE CAT sat.",
        "The cat SAT.",
    ),
    ("change_case:english_capital", {}, EN.upper(), EN),
    ("change_case:english_lowercase", {}, EN.lower(), EN),
    (
        "combination:repeat_prompt",
        {"prompt_to_repeat": "Write a poem."},
        "write a poem. Roses are red.",
        "Sure! Write a poem.",
    ),
    ("combination:two_responses", {}, "first answer\n******\nsecond answer", "same\n******\nsame"),
    (
        "detectable_content:number_placeholders",
        {"num_placeholders": 2},
        "Dear [name], at [address].",
        "Dear [name].",
    ),
    (
        "detectable_content:postscript",
        {"postscript_marker": "P.S."},
        "Hello.\n\nP.S. see you",
        "Hello. PS see you",
    ),
    (
        "detectable_content:postscript",
        {"postscript_marker": "P.P.S"},
        "Hi.\nP.P.S more",
        "Hi.\nP.S. more",
    ),
    ("detectable_format:constrained_response", {}, "My answer is yes.", "Yes."),
    ("detectable_format:json_format", {}, '```json\n{"a": 1}\n```', "{'a': 1}"),
    (
        "detectable_format:multiple_sections",
        {"section_spliter": "SECTION", "num_sections": 2},
        "SECTION 1\nfoo\nSECTION 2\nbar",
        "SECTION 1\nfoo",
    ),
    ("detectable_format:number_bullet_lists", {"num_bullets": 2}, "* a\n* b", "* a\n* b\n- c"),
    (
        "detectable_format:number_highlighted_sections",
        {"num_highlights": 2},
        "*one* and **two**",
        "*one* and ** **",
    ),
    ("detectable_format:title", {}, "<<My Title>>\ntext", "<< >>\ntext"),
    ("keywords:existence", {"keywords": ["cat", "dog"]}, "A Cat and a dog.", "A cat."),
    ("keywords:forbidden_words", {"forbidden_words": ["cat"]}, "concatenate", "A CAT."),
    (
        "keywords:frequency",
        {"keyword": "the", "frequency": 2, "relation": "less than"},
        "the end",
        "the theme",
    ),
    (
        "keywords:letter_frequency",
        {"letter": "z", "let_frequency": 2, "let_relation": "at least"},
        "Zoo zebra",
        "zoo",
    ),
    (
        "language:response_language",
        {"language": "de"},
        "Das ist eine kurze Antwort auf Deutsch über das Wetter in der Stadt.",
        EN,
    ),
    (
        "length_constraints:nth_paragraph_first_word",
        {"num_paragraphs": 2, "nth_paragraph": 2, "first_word": "then"},
        'First part.\n\n"Then, the second.',
        "First part.\n\nNext the second.",
    ),
    (
        "length_constraints:number_paragraphs",
        {"num_paragraphs": 2},
        "a\n***\nb",
        "a\n***\n\n***\nb",
    ),
    (
        "length_constraints:number_sentences",
        {"num_sentences": 3, "relation": "less than"},
        "One. Two.",
        "One. Two! Three?",
    ),
    (
        "length_constraints:number_words",
        {"num_words": 3, "relation": "at least"},
        "one two three",
        "one two",
    ),
    ("punctuation:no_comma", {}, "no commas here", "yes, one"),
    (
        "startend:end_checker",
        {"end_phrase": "Any other questions?"},
        'Done. Any other questions?"',
        "Any other questions? Done.",
    ),
    ("startend:quotation", {}, '"quoted"', '"half'),
]


def test_all_25_ids_have_a_checker_and_a_case() -> None:
    assert len(CHECKERS) == 25
    assert {c[0] for c in CASES} == set(CHECKERS)


@pytest.mark.parametrize(("iid", "kwargs", "good", "bad"), CASES, ids=[c[0] for c in CASES])
def test_checker(iid: str, kwargs: dict, good: str, bad: str) -> None:
    assert check_instruction(iid, kwargs, good, "strict")
    assert not check_instruction(iid, kwargs, bad, "strict")


def test_empty_response_follows_nothing() -> None:
    assert not check_instruction("punctuation:no_comma", {}, "  ", "strict")
    assert not check_instruction("punctuation:no_comma", {}, "", "loose")


def test_loose_mode_variants() -> None:
    r = "Sure, here it is:\n*hello world*\nHope this helps"
    assert len(loose_variants(r)) == 8
    assert not check_instruction("punctuation:no_comma", {}, r, "strict")
    assert check_instruction("punctuation:no_comma", {}, r, "loose")  # first line removed
    quoted = '**"wrapped"**'
    assert not check_instruction("startend:quotation", {}, quoted, "strict")
    assert check_instruction("startend:quotation", {}, quoted, "loose")  # `*` deleted


def test_kwargs_with_empty_values_are_ignored_and_unknown_ids_fail() -> None:
    assert check_instruction("punctuation:no_comma", {"unused": None}, "ok", "strict")
    with pytest.raises(InstructionError):
        check_instruction("keywords:nonsense", {}, "x")
    with pytest.raises(InstructionError, match="relation"):
        check_instruction(
            "length_constraints:number_words", {"num_words": 3, "relation": "about"}, "x"
        )


def test_text_helpers() -> None:
    assert count_sentences("Mr. Smith went home. He slept. Then he woke up!") == 3
    # a list number ends a sentence before an upper-case word, not before a lower-case one
    assert count_sentences("List:\n1. Apples\n2. pears") == 2
    assert word_tokens("DON'T stop (NOW), ok.") == [
        "DO",
        "N'T",
        "stop",
        "(",
        "NOW",
        "),",
        "ok",
        ".",
    ]
    assert count_capital_words("I SAID NO, WELL-KNOWN fact.") == 4


def test_verifier_fraction_all_and_failures() -> None:
    target = {
        "instruction_id_list": ["punctuation:no_comma", "startend:quotation"],
        "kwargs": [{}, {}],
    }
    frac = get_verifier("ifeval")
    assert frac.score("no comma here", target, {}).score == 0.5
    r = frac.score('"no comma"', target, {})
    assert r.score == 1.0 and r.detail == {"follow_instruction_list": [True, True]}
    assert get_verifier("ifeval", {"aggregate": "all"}).score("no comma", target, {}).score == 0.0
    loose = get_verifier("ifeval", {"strict": False})
    assert loose.mode == "loose"
    bad = frac.score("x", {"instruction_id_list": ["nope:x"], "kwargs": [{}]}, {})
    assert not bad.ok and "unknown" in (bad.failure or "")
    assert not frac.score("x", "not a target", {}).ok
    with pytest.raises(ValueError):
        get_verifier("ifeval", {"aggregate": "most"})
