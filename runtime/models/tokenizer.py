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
    for tok in [ENDOFTEXT, UNK, *(str(n) for n in range(10)), *_DIGIT_CHARS, *_WHOLE_NUMBERS]:
        vocab[tok] = len(vocab)
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


class Tokenizer:
    """Thin, typed wrapper over a ``tokenizers.Tokenizer`` with eos/pad ids and chat template."""

    def __init__(
        self,
        backend: HFTokenizer,
        *,
        eos_token: str,
        pad_token: str | None,
        chat_template: str | None,
    ) -> None:
        self.backend = backend
        self.eos_token = eos_token
        self.pad_token = pad_token if pad_token is not None else eos_token
        self.chat_template = chat_template
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

    def apply_chat_template(
        self, messages: Sequence[dict[str, str]], *, add_generation_prompt: bool = True
    ) -> str:
        if self.chat_template is None:
            return _render_default_chat(messages, add_generation_prompt)
        import jinja2

        env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
        template = env.from_string(self.chat_template)
        return template.render(
            messages=list(messages),
            add_generation_prompt=add_generation_prompt,
            eos_token=self.eos_token,
            bos_token="",
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
            "bos_token": None,
            "unk_token": UNK if self.backend.token_to_id(UNK) is not None else None,
            "model_max_length": 1_000_000,
            "clean_up_tokenization_spaces": False,
            "added_tokens_decoder": added,
            "chat_template": self.chat_template or DEFAULT_CHAT_TEMPLATE_JINJA,
        }
        (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
        special_map = {"eos_token": self.eos_token, "pad_token": self.pad_token}
        (out / "special_tokens_map.json").write_text(json.dumps(special_map, indent=2) + "\n")

    @classmethod
    def from_dir(cls, path: str | Path) -> Tokenizer:
        """Load ``tokenizer.json`` (+ optional ``tokenizer_config.json``) from a directory."""
        root = Path(path)
        tok_file = root / "tokenizer.json"
        if not tok_file.is_file():
            raise FileNotFoundError(f"no tokenizer.json in {root}")
        backend = HFTokenizer.from_file(str(tok_file))
        cfg: dict[str, Any] = {}
        if (root / "tokenizer_config.json").is_file():
            cfg = json.loads((root / "tokenizer_config.json").read_text())
        eos = _token_str(cfg.get("eos_token")) or _guess_eos(backend)
        pad = _token_str(cfg.get("pad_token"))
        template = cfg.get("chat_template")
        if isinstance(template, list):  # named templates: take "default"
            template = next((t["template"] for t in template if t.get("name") == "default"), None)
        if template == DEFAULT_CHAT_TEMPLATE_JINJA:
            template = None  # our own template: render natively (no jinja dependency)
        return cls(backend, eos_token=eos, pad_token=pad, chat_template=template)


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
