"""Tokenizer wrapper: the builtin offline tokenizer and HF ``tokenizer.json`` files.

The builtin tokenizer is a hand-built BPE over printable ASCII whose pre-tokenizer keeps the
numbers 0..18 whole, so single-digit addition ("a+b=") is answered in one token. The digit
tokenizer (``builtin:tiny-digits``, the quickstart's) keeps only what that task needs: 26
tokens, so a random-init model samples the right answer and the stop token often enough for
GRPO to learn from its first collections. Both need no download and are deterministic.
"""

from __future__ import annotations

import json
import string
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tokenizers import Regex, decoders, models, pre_tokenizers
from tokenizers import Tokenizer as HFTokenizer

ENDOFTEXT = "<|endoftext|>"
PAD = "<|pad|>"
UNK = "<|unk|>"
SYSTEM = "<|system|>"
USER = "<|user|>"
ASSISTANT = "<|assistant|>"
SPECIAL_TOKENS = [ENDOFTEXT, PAD, UNK, SYSTEM, USER, ASSISTANT]

# Vocabulary is padded with reserved specials to a multiple of this, so the model's vocab
# equals the tokenizer's (no ids the tokenizer cannot decode).
VOCAB_MULTIPLE = 64

# Numbers that must be single tokens (sums of two digits), longest first for the regex.
_WHOLE_NUMBERS = [str(n) for n in range(10, 19)]
_SPLIT_PATTERN = r"1[0-8]|\d|[A-Za-z]+|\s|[^\sA-Za-z\d]"

# A small English vocabulary so chat prompts of math/instruction tasks are not all characters.
_WORDS = """
the a an and or of to in on at for with from by is are was were be been it this that these
those as if then else not no yes what which who how many much more less than each every all
some any one two three four five six seven eight nine ten hundred thousand answer question
solve compute calculate find give total sum difference product number numbers plus minus
times divided multiply add subtract equals equal is step think final result please write
user assistant system you your i we he she they them his her their has have had do does did
can could will would should may might must make made get got take took buy bought sell sold
cost costs price dollars cents money pay paid each per day days week weeks month year years
hour hours minute minutes time apples books students people friends total left remaining
more half twice double triple first second third last next after before while during between
respond response format words sentence sentences paragraph letter letters lowercase uppercase
only exactly least most end start include containing title json list bullet points code
function return input output print def test tests value values true false none
"""


def _builtin_vocab() -> tuple[dict[str, int], list[tuple[str, str]]]:
    """Specials, then printable chars, then whole numbers, then word merges (prefix chains)."""
    vocab: dict[str, int] = {}

    def add(tok: str) -> None:
        if tok not in vocab:
            vocab[tok] = len(vocab)

    for tok in SPECIAL_TOKENS:
        add(tok)
    for ch in string.printable:
        add(ch)
    merges: list[tuple[str, str]] = []
    for num in _WHOLE_NUMBERS:
        merges.append((num[0], num[1]))
        add(num)
    words = sorted(set(_WORDS.split()), key=lambda w: (len(w), w))
    for word in words:
        for i in range(2, len(word) + 1):
            piece = word[:i]
            if piece not in vocab:
                merges.append((word[: i - 1], word[i - 1]))
                add(piece)
    i = 0
    while len(vocab) % VOCAB_MULTIPLE:
        add(f"<|reserved_{i}|>")
        i += 1
    return vocab, merges


def build_builtin_tokenizer() -> Tokenizer:
    """The offline tokenizer used by every ``builtin:`` model."""
    vocab, merges = _builtin_vocab()
    model = models.BPE(vocab=vocab, merges=merges, unk_token=UNK, ignore_merges=False)
    tok = HFTokenizer(model)
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(_SPLIT_PATTERN), behavior="isolated")
    tok.decoder = decoders.Fuse()
    specials = SPECIAL_TOKENS + [t for t in vocab if t.startswith("<|reserved_")]
    tok.add_special_tokens(specials)
    return Tokenizer(tok, eos_token=ENDOFTEXT, pad_token=PAD, chat_template=None)


# The digit vocabulary: end of text, unknown, the sums 0..18, and the characters of "a+b=".
# Only end of text is a special token: every other id decodes to visible text, so a
# response cannot hide tokens from the verifier.
_DIGIT_CHARS = ["+", "-", "=", " ", "\n"]


def build_digits_tokenizer() -> Tokenizer:
    """The 26-token tokenizer of ``builtin:tiny-digits`` (single-digit arithmetic only)."""
    vocab: dict[str, int] = {}
    for piece in [ENDOFTEXT, UNK, *(str(n) for n in range(10)), *_DIGIT_CHARS, *_WHOLE_NUMBERS]:
        vocab[piece] = len(vocab)
    merges = [(num[0], num[1]) for num in _WHOLE_NUMBERS]
    model = models.BPE(vocab=vocab, merges=merges, unk_token=UNK, ignore_merges=False)
    tok = HFTokenizer(model)
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(_SPLIT_PATTERN), behavior="isolated")
    tok.decoder = decoders.Fuse()
    tok.add_special_tokens([ENDOFTEXT])
    return Tokenizer(tok, eos_token=ENDOFTEXT, pad_token=ENDOFTEXT, chat_template=None)


# Builtin models that use the digit tokenizer instead of the text one.
DIGIT_BUILTINS = frozenset({"tiny-digits"})

# The tool tokenizer (``builtin:tiny-tools``): digits, arithmetic, and the calculator call
# and tool-result tags of the default ``[environment]`` syntax as whole tokens, so a call
# (``</calculator>``) or the end of a tool result is one token a random-init model samples.
TOOL_TAGS = ["<calculator>", "</calculator>", "<output>", "</output>"]
_TOOL_CHARS = ["+", "-", "*", "=", " ", "\n"]
_TOOL_SPLIT = "|".join(tag.replace("/", "\\/") for tag in TOOL_TAGS) + r"|\d|\s|[^\s\d]"
TOOL_BUILTINS = frozenset({"tiny-tools"})


def build_tools_tokenizer() -> Tokenizer:
    """The 22-token tokenizer of ``builtin:tiny-tools`` (multi-digit arithmetic with a
    calculator tool). Every token but end of text decodes to visible text."""
    vocab: dict[str, int] = {}
    for piece in [ENDOFTEXT, UNK, *(str(n) for n in range(10)), *_TOOL_CHARS, *TOOL_TAGS]:
        vocab[piece] = len(vocab)
    backend = HFTokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex(_TOOL_SPLIT), behavior="isolated")
    backend.decoder = decoders.Fuse()
    backend.add_special_tokens([ENDOFTEXT])
    return Tokenizer(backend, eos_token=ENDOFTEXT, pad_token=ENDOFTEXT, chat_template=None)


def builtin_tokenizer(source: str) -> Tokenizer:
    """The tokenizer of a ``builtin:NAME[?overrides]`` source."""
    base = source.removeprefix("builtin:").partition("?")[0]
    if base in TOOL_BUILTINS:
        return build_tools_tokenizer()
    return build_digits_tokenizer() if base in DIGIT_BUILTINS else build_builtin_tokenizer()


def _render_default_chat(messages: Sequence[dict[str, str]], add_generation_prompt: bool) -> str:
    """Tulu/OLMo-style template: ``<|user|>\\n...\\n<|assistant|>\\n...<|endoftext|>``."""
    role_marker = {"system": SYSTEM, "user": USER, "assistant": ASSISTANT}
    parts: list[str] = []
    for msg in messages:
        marker = role_marker.get(msg["role"])
        if marker is None:
            raise ValueError(f"unknown chat role {msg['role']!r}")
        if msg["role"] == "assistant":
            parts.append(f"{marker}\n{msg['content']}{ENDOFTEXT}\n")
        else:
            parts.append(f"{marker}\n{msg['content']}\n")
    if add_generation_prompt:
        parts.append(f"{ASSISTANT}\n")
    return "".join(parts)


# The same template in jinja, written into exported tokenizer_config.json for transformers.
DEFAULT_CHAT_TEMPLATE_JINJA = (
    "{% for message in messages %}"
    "{% if message['role'] == 'system' %}{{ '<|system|>\\n' + message['content'] + '\\n' }}"
    "{% elif message['role'] == 'user' %}{{ '<|user|>\\n' + message['content'] + '\\n' }}"
    "{% elif message['role'] == 'assistant' %}"
    "{{ '<|assistant|>\\n' + message['content'] + eos_token + '\\n' }}"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}"
)


# Where a checkpoint keeps its chat templates, in the order transformers reads them: files
# in the directory take priority over the entries of tokenizer_config.json.
CHAT_TEMPLATE_FILE = "chat_template.jinja"
CHAT_TEMPLATE_DIR = "additional_chat_templates"
# The named special tokens transformers passes to every template (``special_tokens_map``).
SPECIAL_TOKEN_NAMES = (
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
)


class ChatTemplateError(ValueError):
    """A checkpoint has no usable chat template, or the named one does not exist."""


def read_chat_templates(root: Path, config: dict[str, Any] | None = None) -> dict[str, str]:
    """``{name: template}`` as transformers' ``from_pretrained`` loads them: ``chat_template.jinja``
    ("default") and ``additional_chat_templates/NAME.jinja``; only when neither exists, the
    ``chat_template`` entry of ``tokenizer_config.json`` (a string, or a list of named ones)."""
    templates: dict[str, str] = {}
    if (root / CHAT_TEMPLATE_FILE).is_file():
        templates["default"] = (root / CHAT_TEMPLATE_FILE).read_text(encoding="utf-8")
    if (root / CHAT_TEMPLATE_DIR).is_dir():
        for path in sorted((root / CHAT_TEMPLATE_DIR).glob("*.jinja")):
            templates[path.name.removesuffix(".jinja")] = path.read_text(encoding="utf-8")
    if templates:
        return templates
    entry = (config or {}).get("chat_template")
    if isinstance(entry, str):
        return {"default": entry}
    if isinstance(entry, list):
        return {str(t["name"]): str(t["template"]) for t in entry if isinstance(t, dict)}
    return {}


def select_chat_template(templates: dict[str, str], choice: str | None, where: str) -> str:
    """The template to render with: ``choice`` (a template name, or a path to a ``.jinja``
    file), else the default one; a checkpoint without any is an error, never a fallback."""
    if choice:
        if choice in templates:
            return templates[choice]
        path = Path(choice)
        if path.suffix == ".jinja" and path.is_file():
            return path.read_text(encoding="utf-8")
        have = ", ".join(sorted(templates)) or "none"
        raise ChatTemplateError(
            f"chat template {choice!r} is neither a .jinja file nor one of {where}'s "
            f"templates ({have})"
        )
    if "default" in templates:
        return templates["default"]
    if templates:
        raise ChatTemplateError(
            f"{where} has several chat templates and no default ({', '.join(sorted(templates))})"
        )
    raise ChatTemplateError(
        f"{where} has no chat template ({CHAT_TEMPLATE_FILE}, {CHAT_TEMPLATE_DIR}/ or "
        "tokenizer_config.json's chat_template): prompts would be formatted in a layout the "
        "model was not trained on"
    )


def render_chat_template(
    template: str,
    messages: Sequence[dict[str, str]],
    *,
    add_generation_prompt: bool,
    special_tokens: dict[str, str],
) -> str:
    """Render exactly as transformers' ``apply_chat_template(..., tokenize=False)`` does: its
    own renderer (sandboxed jinja, ``raise_exception``, ``strftime_now``, its ``tojson``),
    with the tokenizer's named special tokens."""
    from transformers.utils.chat_template_utils import render_jinja_template

    tokens: dict[str, Any] = dict(special_tokens)
    result: Any = render_jinja_template(  # (rendered chats, generation indices)
        conversations=[[dict(m) for m in messages]],
        chat_template=template,
        add_generation_prompt=add_generation_prompt,
        **tokens,
    )
    return str(result[0][0])


class Tokenizer:
    """Thin, typed wrapper over a ``tokenizers.Tokenizer`` with eos/pad ids and chat template.

    ``chat_template=None`` is the builtin models' own layout (rendered natively, equal to
    ``DEFAULT_CHAT_TEMPLATE_JINJA`` under transformers); every other template is rendered by
    transformers. ``template_error`` is raised at the first render of a checkpoint that has
    no template.
    """

    def __init__(
        self,
        backend: HFTokenizer,
        *,
        eos_token: str,
        pad_token: str | None,
        chat_template: str | None,
        special_tokens: dict[str, str] | None = None,
        template_error: str | None = None,
        chat_templates: dict[str, str] | None = None,
        source: str = "the tokenizer",
    ) -> None:
        self.backend = backend
        self.chat_templates = dict(chat_templates or {})
        self.source = source
        self.eos_token = eos_token
        self.pad_token = pad_token if pad_token is not None else eos_token
        self.chat_template = chat_template
        self.template_error = template_error
        self.special_tokens = dict(special_tokens or {"eos_token": eos_token})
        eos = backend.token_to_id(eos_token)
        if eos is None:
            raise ValueError(f"eos token {eos_token!r} is not in the tokenizer vocabulary")
        self.eos_token_id: int = eos
        pad = backend.token_to_id(self.pad_token)
        self.pad_token_id: int = pad if pad is not None else eos

    @property
    def vocab_size(self) -> int:
        return int(self.backend.get_vocab_size(with_added_tokens=True))

    def encode(self, text: str, *, add_special_tokens: bool = False) -> list[int]:
        return list(self.backend.encode(text, add_special_tokens=add_special_tokens).ids)

    def decode(self, ids: Sequence[int], *, skip_special_tokens: bool = True) -> str:
        return str(self.backend.decode(list(ids), skip_special_tokens=skip_special_tokens))

    def token_to_id(self, token: str) -> int | None:
        return self.backend.token_to_id(token)

    def use_chat_template(self, choice: str) -> None:
        """Render with ``choice`` (``model.chat_template``: one of the checkpoint's template
        names, or a ``.jinja`` file) instead of the default template."""
        self.chat_template = select_chat_template(self.chat_templates, choice, self.source)
        self.template_error = None

    def apply_chat_template(
        self, messages: Sequence[dict[str, str]], *, add_generation_prompt: bool = True
    ) -> str:
        if self.template_error is not None:
            raise ChatTemplateError(self.template_error)
        if self.chat_template is None:
            return _render_default_chat(messages, add_generation_prompt)
        return render_chat_template(
            self.chat_template,
            messages,
            add_generation_prompt=add_generation_prompt,
            special_tokens=self.special_tokens,
        )

    def save(self, out_dir: str | Path) -> None:
        """Write ``tokenizer.json`` + ``tokenizer_config.json`` + ``special_tokens_map.json``."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        self.backend.save(str(out / "tokenizer.json"))
        added = {
            str(self.backend.token_to_id(t.content)): {
                "content": t.content,
                "lstrip": False,
                "normalized": False,
                "rstrip": False,
                "single_word": False,
                "special": True,
            }
            for t in self.backend.get_added_tokens_decoder().values()
        }
        config: dict[str, Any] = {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "eos_token": self.eos_token,
            "pad_token": self.pad_token,
            "bos_token": self.special_tokens.get("bos_token"),
            "unk_token": UNK if self.backend.token_to_id(UNK) is not None else None,
            "model_max_length": 1_000_000,
            "clean_up_tokenization_spaces": False,
            "added_tokens_decoder": added,
        }
        # the template where transformers writes it now (and reads it first)
        (out / CHAT_TEMPLATE_FILE).write_text(
            self.chat_template or DEFAULT_CHAT_TEMPLATE_JINJA, encoding="utf-8"
        )
        (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
        special_map = {"eos_token": self.eos_token, "pad_token": self.pad_token}
        (out / "special_tokens_map.json").write_text(json.dumps(special_map, indent=2) + "\n")

    @classmethod
    def from_dir(cls, path: str | Path, *, chat_template: str | None = None) -> Tokenizer:
        """Load ``tokenizer.json`` with the special tokens and chat templates beside it, as
        transformers would (``chat_template``: a template name or ``.jinja`` path to use
        instead of the default one)."""
        root = Path(path)
        tok_file = root / "tokenizer.json"
        if not tok_file.is_file():
            raise FileNotFoundError(f"no tokenizer.json in {root}")
        backend = HFTokenizer.from_file(str(tok_file))
        cfg: dict[str, Any] = {}
        if (root / "tokenizer_config.json").is_file():
            cfg = json.loads((root / "tokenizer_config.json").read_text())
        if (root / "special_tokens_map.json").is_file():  # legacy: config entries win
            legacy = json.loads((root / "special_tokens_map.json").read_text())
            cfg = {**{k: v for k, v in legacy.items() if k in SPECIAL_TOKEN_NAMES}, **cfg}
        eos = _token_str(cfg.get("eos_token")) or _guess_eos(backend)
        pad = _token_str(cfg.get("pad_token"))
        special = {k: v for k in SPECIAL_TOKEN_NAMES if (v := _token_str(cfg.get(k)))}
        special.setdefault("eos_token", eos)
        templates = read_chat_templates(root, cfg)
        template: str | None = None
        error: str | None = None
        try:
            template = select_chat_template(templates, chat_template, str(root))
        except ChatTemplateError as exc:
            error = str(exc)
        if template == DEFAULT_CHAT_TEMPLATE_JINJA and eos == ENDOFTEXT:
            template = None  # the builtin layout: rendered natively
        return cls(
            backend,
            eos_token=eos,
            pad_token=pad,
            chat_template=template,
            special_tokens=special,
            template_error=error,
            chat_templates=templates,
            source=str(root),
        )


def _token_str(value: Any) -> str | None:
    if isinstance(value, dict):
        return value.get("content")
    return value if isinstance(value, str) else None


def _guess_eos(backend: HFTokenizer) -> str:
    for cand in (ENDOFTEXT, "</s>", "<|im_end|>", "<eos>"):
        if backend.token_to_id(cand) is not None:
            return cand
    raise ValueError("tokenizer has no eos token and tokenizer_config.json names none")


def number_token_ids(tok: Tokenizer, upto: int = 18) -> dict[int, int]:
    """Map n -> token id for the single-token numbers 0..upto (raises if one is split)."""
    out: dict[int, int] = {}
    for n in range(upto + 1):
        ids = tok.encode(str(n))
        if len(ids) != 1:
            raise ValueError(f"number {n} is not a single token: {ids}")
        out[n] = ids[0]
    return out
