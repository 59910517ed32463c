"""Chat templates render exactly as transformers' ``apply_chat_template`` renders them.

The tokenizers are built here with transformers' own classes and written with
``save_pretrained`` (nothing is downloaded): an OLMo 2-style template (``bos_token``,
``<|user|>`` turns), an OLMo 3-style ChatML template using transformers' helpers
(``raise_exception``, ``strftime_now``, ``tojson``, namespaces, whitespace control), named
templates in ``additional_chat_templates/``, and the legacy ``tokenizer_config.json`` entry.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

from runtime.models.tokenizer import ChatTemplateError, Tokenizer  # noqa: E402

OLMO2_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'system' %}"
    "{{ '<|system|>\\n' + message['content'] + '\\n' }}{% elif message['role'] == 'user' %}"
    "{{ '<|user|>\\n' + message['content'] + '\\n' }}{% elif message['role'] == 'assistant' %}"
    "{% if not loop.last %}{{ '<|assistant|>\\n'  + message['content'] + eos_token + '\\n' }}"
    "{% else %}{{ '<|assistant|>\\n'  + message['content'] + eos_token }}{% endif %}{% endif %}"
    "{% if loop.last and add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}{% endfor %}"
)

OLMO3_TEMPLATE = """{%- set ns = namespace(has_system=false) -%}
{%- for message in messages -%}
  {%- if message['role'] == 'system' -%}{%- set ns.has_system = true -%}{%- endif -%}
{%- endfor -%}
{%- if not ns.has_system -%}
<|im_start|>system
You are a helpful assistant. Year: {{ strftime_now('%Y') }}. Tools: {{ [] | tojson }}<|im_end|>
{% endif -%}
{%- for message in messages -%}
  {%- if message['role'] not in ['system', 'user', 'assistant'] -%}
    {{- raise_exception('unknown role ' + message['role']) -}}
  {%- endif -%}
<|im_start|>{{ message['role'] }}
{{ message['content'] | trim }}{% if message['role'] == 'assistant' %}{{ eos_token }}{% else %}<|im_end|>{% endif %}
{% endfor -%}
{%- if add_generation_prompt -%}
<|im_start|>assistant
{% endif -%}"""

SPECIALS = ["<|endoftext|>", "<|pad|>", "<|im_start|>", "<|im_end|>", "<|user|>", "<|assistant|>"]

CONVERSATIONS = [
    [{"role": "user", "content": "What is 3+4?"}],
    [
        {"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": "  Name a prime.  "},
        {"role": "assistant", "content": "7"},
        {"role": "user", "content": 'Another, with "quotes" and {braces}?'},
    ],
]


def _save_tokenizer(out: Path, template: str | dict[str, str] | None) -> Path:
    vocab = {tok: i for i, tok in enumerate([*SPECIALS, "[UNK]", "a", "b"])}
    backend = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    hf = transformers.PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token="<|endoftext|>",
        eos_token="<|endoftext|>",
        pad_token="<|pad|>",
        unk_token="[UNK]",
    )
    if template is not None:
        hf.chat_template = template
    hf.save_pretrained(str(out))
    return out


def _both(path: Path, messages: list[dict[str, str]], gen: bool) -> tuple[str, str]:
    theirs = transformers.AutoTokenizer.from_pretrained(str(path)).apply_chat_template(
        messages, tokenize=False, add_generation_prompt=gen
    )
    ours = Tokenizer.from_dir(path).apply_chat_template(messages, add_generation_prompt=gen)
    return ours, theirs


@pytest.mark.parametrize("style", ["olmo2", "olmo3"])
def test_rendering_equals_transformers(style: str, tmp_path: Path) -> None:
    template = OLMO2_TEMPLATE if style == "olmo2" else OLMO3_TEMPLATE
    path = _save_tokenizer(tmp_path, template)
    assert (path / "chat_template.jinja").is_file()  # where current transformers keeps it
    for messages in CONVERSATIONS:
        for gen in (True, False):
            ours, theirs = _both(path, messages, gen)
            assert ours == theirs
    if style == "olmo2":  # the real bos token, not ""
        assert _both(path, CONVERSATIONS[0], True)[0].startswith("<|endoftext|><|user|>")


def test_raise_exception_reaches_the_caller(tmp_path: Path) -> None:
    path = _save_tokenizer(tmp_path, OLMO3_TEMPLATE)
    bad = [{"role": "robot", "content": "hi"}]
    with pytest.raises(Exception, match="unknown role robot") as theirs:
        transformers.AutoTokenizer.from_pretrained(str(path)).apply_chat_template(
            bad, tokenize=False
        )
    with pytest.raises(type(theirs.value), match="unknown role robot"):
        Tokenizer.from_dir(path).apply_chat_template(bad)


def test_named_templates_and_the_legacy_config_entry(tmp_path: Path) -> None:
    named = _save_tokenizer(
        tmp_path / "named", {"default": OLMO2_TEMPLATE, "chatml": OLMO3_TEMPLATE}
    )
    assert (named / "additional_chat_templates" / "chatml.jinja").is_file()
    ours, theirs = _both(named, CONVERSATIONS[1], True)
    assert ours == theirs
    hf = transformers.AutoTokenizer.from_pretrained(str(named))
    expected = hf.apply_chat_template(
        CONVERSATIONS[1], chat_template="chatml", tokenize=False, add_generation_prompt=True
    )
    assert (
        Tokenizer.from_dir(named, chat_template="chatml").apply_chat_template(CONVERSATIONS[1])
        == expected
    )
    chosen = Tokenizer.from_dir(named)  # as the trainer applies model.chat_template
    chosen.use_chat_template("chatml")
    assert chosen.apply_chat_template(CONVERSATIONS[1]) == expected

    legacy = _save_tokenizer(tmp_path / "legacy", None)
    cfg = json.loads((legacy / "tokenizer_config.json").read_text())
    cfg["chat_template"] = OLMO2_TEMPLATE
    (legacy / "tokenizer_config.json").write_text(json.dumps(cfg))
    ours, theirs = _both(legacy, CONVERSATIONS[1], True)
    assert ours == theirs

    # a chat_template.jinja beside the config entry wins, as in transformers
    (legacy / "chat_template.jinja").write_text(OLMO3_TEMPLATE)
    ours, theirs = _both(legacy, CONVERSATIONS[0], True)
    assert ours == theirs and ours.startswith("<|im_start|>system")


def test_a_checkpoint_without_a_template_is_an_error_not_a_fallback(tmp_path: Path) -> None:
    path = _save_tokenizer(tmp_path, None)
    tok = Tokenizer.from_dir(path)
    with pytest.raises(ChatTemplateError, match="has no chat template"):
        tok.apply_chat_template(CONVERSATIONS[0])
    # a template named by the spec (a .jinja file) is used instead
    (tmp_path / "mine.jinja").write_text(OLMO2_TEMPLATE)
    named = Tokenizer.from_dir(path, chat_template=str(tmp_path / "mine.jinja"))
    assert named.apply_chat_template(CONVERSATIONS[0]).startswith("<|endoftext|><|user|>")
    with pytest.raises(ChatTemplateError, match="neither a .jinja file"):
        Tokenizer.from_dir(path, chat_template="nope").apply_chat_template(CONVERSATIONS[0])


def test_builtin_layout_equals_transformers_rendering_of_its_export(tmp_path: Path) -> None:
    from runtime.models.tokenizer import build_builtin_tokenizer

    tok = build_builtin_tokenizer()
    tok.save(tmp_path)
    hf = transformers.AutoTokenizer.from_pretrained(str(tmp_path))
    for messages in CONVERSATIONS:
        for gen in (True, False):
            assert tok.apply_chat_template(messages, add_generation_prompt=gen) == (
                hf.apply_chat_template(messages, tokenize=False, add_generation_prompt=gen)
            )
