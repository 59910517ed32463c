"""Builtin tokenizer: single-token answers, chat template, save/load round trip."""

from __future__ import annotations

import pytest

pytest.importorskip("tokenizers")

from runtime.models.tokenizer import (  # noqa: E402
    ASSISTANT,
    ENDOFTEXT,
    USER,
    Tokenizer,
    build_builtin_tokenizer,
    number_token_ids,
)


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    return build_builtin_tokenizer()


def test_answers_0_to_18_are_single_distinct_tokens(tok: Tokenizer) -> None:
    ids = number_token_ids(tok, 18)
    assert len(set(ids.values())) == 19
    # "a+b=" splits into one token per symbol, so the answer is the next single token
    assert len(tok.encode("7+8=")) == 4
    assert tok.encode("15") == [ids[15]]


def test_numbers_above_18_split_but_round_trip(tok: Tokenizer) -> None:
    assert len(tok.encode("19")) == 2
    text = "Natalia sold 48 clips in April, and 123.5 more!"
    assert tok.decode(tok.encode(text)) == text


def test_special_ids_and_vocab_multiple(tok: Tokenizer) -> None:
    assert tok.token_to_id(ENDOFTEXT) == tok.eos_token_id
    assert tok.pad_token_id != tok.eos_token_id
    assert tok.vocab_size % 64 == 0
    assert tok.encode(ENDOFTEXT) == [tok.eos_token_id]


def test_chat_template_shape(tok: Tokenizer) -> None:
    msgs = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "3+4="}]
    text = tok.apply_chat_template(msgs)
    assert text == f"<|system|>\nbe brief\n{USER}\n3+4=\n{ASSISTANT}\n"
    no_gen = tok.apply_chat_template(msgs, add_generation_prompt=False)
    assert not no_gen.endswith(f"{ASSISTANT}\n")
    ids = tok.encode(text)
    assert ids[-2] == tok.token_to_id(ASSISTANT)
    with pytest.raises(ValueError):
        tok.apply_chat_template([{"role": "robot", "content": "x"}])


def test_save_and_reload(tok: Tokenizer, tmp_path) -> None:
    tok.save(tmp_path)
    again = Tokenizer.from_dir(tmp_path)
    text = tok.apply_chat_template([{"role": "user", "content": "What is 9+9?"}])
    assert again.encode(text) == tok.encode(text)
    assert again.apply_chat_template(
        [{"role": "user", "content": "hi"}]
    ) == tok.apply_chat_template([{"role": "user", "content": "hi"}])
    assert (again.eos_token_id, again.pad_token_id, again.vocab_size) == (
        tok.eos_token_id,
        tok.pad_token_id,
        tok.vocab_size,
    )


def test_hf_tokenizer_renders_same_chat(tok: Tokenizer, tmp_path) -> None:
    transformers = pytest.importorskip("transformers")
    tok.save(tmp_path)
    hf = transformers.AutoTokenizer.from_pretrained(str(tmp_path))
    msgs = [{"role": "user", "content": "2+2="}, {"role": "assistant", "content": "4"}]
    rendered = hf.apply_chat_template(msgs, tokenize=False, add_generation_prompt=False)
    assert rendered == tok.apply_chat_template(msgs, add_generation_prompt=False)
    assert hf.eos_token_id == tok.eos_token_id


def test_digit_tokenizer_is_what_arithmetic_needs(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from runtime.models.tokenizer import build_digits_tokenizer, builtin_tokenizer

    digits = build_digits_tokenizer()
    assert digits.vocab_size == 26
    ids = number_token_ids(digits, 18)
    assert len(set(ids.values())) == 19
    assert len(digits.encode("7+8=")) == 4
    # only end of text is special: nothing else can vanish from the decoded response
    assert digits.decode([ids[7], digits.eos_token_id]) == "7"
    assert digits.decode([digits.token_to_id("<|unk|>") or 0, ids[7]]) == "<|unk|>7"
    digits.save(tmp_path)
    again = Tokenizer.from_dir(tmp_path)
    assert again.vocab_size == 26 and again.encode("3+4=") == digits.encode("3+4=")
    assert builtin_tokenizer("builtin:tiny-digits").vocab_size == 26
    assert (
        builtin_tokenizer("builtin:tiny?n_layers=3").vocab_size
        == build_builtin_tokenizer().vocab_size
    )
