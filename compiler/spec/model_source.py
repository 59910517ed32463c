"""What the compiler can learn from a model source on disk, without torch or the runtime.

When ``model.source`` is readable at compile time, its ``config.json`` says whether the
runtime can load it and which family it is; an unloadable checkpoint is then a positioned
compile error instead of an engine traceback minutes later. An unreadable source (a cluster
path seen from a laptop) is checked at run time only.

``HF_FAMILIES`` mirrors ``runtime.models.hf.HF_FAMILIES`` (a unit test keeps them equal).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import Any

from contract.safe_read import JSON_LIMIT, read_regular_text

HF_FAMILIES: dict[str, str] = {
    "olmo2": "dense",
    "olmo3": "dense",
    "flex_olmo": "moe",
    "olmoe": "moe",
    "olmo_hybrid": "dense",
}
REFUSED_HF_TYPES: dict[str, str] = {}
#: why the pinned SGLang cannot serve a model with GatedDeltaNet (recurrent) layers
SGLANG_NO_RECURRENT = (
    "the pinned SGLang (0.5.23) has no olmo_hybrid model (OlmoHybridForCausalLM), so it "
    "cannot serve GatedDeltaNet layers"
)
NATIVE_META = "rlc_model.json"
NO_HF_EXPORT = {
    "moe": "shared-expert MoE blocks (builtin MoE models) have no transformers architecture",
    "hybrid_moe": "parallel dense+MoE (hybrid MoE) blocks have no transformers architecture",
}


# ``owner/name`` as written in a spec: a Hugging Face Hub id, which is never downloaded.
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*")


def hub_id_problem(written: str) -> str:
    """Why a missing source written as ``owner/name`` is refused ("" otherwise): the runtime
    reads directories only, and a Hub id is a relative path that nothing will create."""
    if not _HUB_ID.fullmatch(written) or written.startswith("builtin:"):
        return ""
    return (
        "no such directory, and Hugging Face Hub ids are not downloaded: "
        f"download it (huggingface-cli download {written} --local-dir DIR) and give DIR"
    )


# path -> identity of everything the last ``inspect`` looked at: the compile cache stores it
# and replays only while the checkpoint still looks the same.
_TOUCHED: dict[str, str] = {}


def identity(path: str) -> str:
    """A cheap fingerprint: names of a directory, size and mtime of a file, or absence."""
    try:
        if os.path.isdir(path):
            return "dir:" + "\0".join(sorted(os.listdir(path)))
        st = os.stat(path)
    except OSError:
        return "missing"
    return f"file:{st.st_size}:{st.st_mtime_ns}"


def touched() -> dict[str, str]:
    """What the last ``inspect`` read, as ``{path: identity}``."""
    return dict(_TOUCHED)


def _note(*paths: str) -> None:
    for p in paths:
        _TOUCHED[p] = identity(p)


def note_inputs(*paths: str) -> None:
    """Record other files a compile looked at (data files), for the compile cache."""
    _note(*paths)


@dataclass(frozen=True)
class SourceInfo:
    """``problem``: why the runtime cannot load it ("" when it can or we cannot tell);
    ``family``: dense/moe/hybrid_moe when known; ``export_problem``: why no HF export."""

    problem: str = ""
    family: str = ""
    export_problem: str = ""
    template_problem: str = ""
    shape: dict[str, int] = field(default_factory=dict)  # like BUILTIN_MODELS' sizes
    recurrent_layers: int = 0  # GatedDeltaNet layers (olmo_hybrid): state per sequence


def _read_json(path: str) -> dict[str, Any] | str:
    try:
        data = json.loads(read_regular_text(path, JSON_LIMIT))
    except (OSError, ValueError) as exc:
        return f"cannot read {os.path.basename(path)}: {exc}"
    return data if isinstance(data, dict) else f"{os.path.basename(path)} is not a JSON object"


def _hf_problem(cfg: dict[str, Any]) -> str:
    model_type = cfg.get("model_type")
    if model_type in REFUSED_HF_TYPES:
        return REFUSED_HF_TYPES[str(model_type)]
    if model_type not in HF_FAMILIES:
        return (
            f"HF model_type {model_type!r} is not supported (supported: {', '.join(HF_FAMILIES)})"
        )
    if cfg.get("attention_bias"):
        return "attention_bias = true is not supported"
    if model_type == "olmo_hybrid":
        types = _hybrid_layer_types(cfg)
        if isinstance(types, str):
            return types
    if cfg.get("clip_qkv") is not None:
        return "clip_qkv is not supported"
    params = cfg.get("rope_parameters") or {}
    if isinstance(params, dict) and "full_attention" in params:
        params = params["full_attention"]
    if cfg.get("rope_scaling") or (
        isinstance(params, dict) and params.get("rope_type", "default") != "default"
    ):
        return "RoPE scaling is not supported"
    return ""


def _hybrid_layer_types(cfg: dict[str, Any]) -> list[str] | str:
    """``layer_types`` of an olmo_hybrid config (transformers' default: every 4th layer
    attends), or why they are unusable."""
    try:
        n = int(cfg["num_hidden_layers"])
    except (KeyError, TypeError, ValueError):
        return "config.json has no usable num_hidden_layers"
    types = cfg.get("layer_types")
    if types is None:
        types = ["full_attention" if i % 4 == 3 else "linear_attention" for i in range(n)]
        if "full_attention" not in types:
            types[-1] = "full_attention"
    if not isinstance(types, list) or len(types) != n:
        return f"layer_types must list {n} layer kinds"
    if set(types) - {"linear_attention", "full_attention"}:
        return "layer_types may hold only 'linear_attention' and 'full_attention'"
    return [str(t) for t in types]


def _gdn_sizes(cfg: dict[str, Any], d: int, heads: int) -> tuple[int, int, int]:
    """(parameters, recurrent-state bytes, convolution-state elements) of one
    GatedDeltaNet layer (transformers' defaults for absent sizes)."""
    k_heads = int(cfg.get("linear_num_key_heads") or heads)
    v_heads = int(cfg.get("linear_num_value_heads") or heads)
    k_dim = int(cfg.get("linear_key_head_dim") or int(0.75 * d / k_heads))
    v_dim = int(cfg.get("linear_value_head_dim") or 2 * k_dim)
    conv = int(cfg.get("linear_conv_kernel_dim") or 4)
    key, value = k_heads * k_dim, v_heads * v_dim
    params = d * (2 * key + 2 * value + 2 * v_heads) + value * d + 2 * v_heads
    params += conv * (2 * key + value) + v_dim
    return params, v_heads * k_dim * v_dim * 4, (2 * key + value) * (conv - 1)


def hf_shape(cfg: dict[str, Any]) -> dict[str, int]:
    """Parameter count and the sizes the plan's memory estimate reads, from an HF config of a
    supported family (full-width QK norm, SwiGLU MLP or routed experts, no biases)."""
    try:
        d, layers = int(cfg["hidden_size"]), int(cfg["num_hidden_layers"])
        heads, vocab, inter = (
            int(cfg["num_attention_heads"]),
            int(cfg["vocab_size"]),
            int(cfg["intermediate_size"]),
        )
        kv = int(cfg.get("num_key_value_heads") or heads)
        head_dim = int(cfg.get("head_dim") or d // heads)
    except (KeyError, TypeError, ValueError):
        return {}
    q, k = heads * head_dim, kv * head_dim
    attn = d * q + 2 * d * k + q * d + q + k
    experts = int(cfg.get("num_experts") or 0)
    mlp = experts * (3 * d * inter + d) if experts else 3 * d * inter
    embed = vocab * d * (1 if cfg.get("tie_word_embeddings") else 2)
    types = _hybrid_layer_types(cfg) if cfg.get("model_type") == "olmo_hybrid" else []
    recurrent = sum(t == "linear_attention" for t in types)
    gdn_params, state_bytes, conv_elems = _gdn_sizes(cfg, d, heads) if recurrent else (0, 0, 0)
    params = embed + (layers - recurrent) * (attn + mlp + 2 * d) + d
    params += recurrent * (gdn_params + mlp + 2 * d)
    out = {"params": params, "layers": layers, "hidden": d, "kv_heads": kv, "head_dim": head_dim}
    if recurrent:
        # KV rows for the attention layers only; a fixed-size state per sequence for the rest
        out["kv_layers"] = layers - recurrent
        out["recurrent_layers"] = recurrent
        out["recurrent_state_bytes"] = recurrent * (state_bytes + 2 * conv_elems)
    out["vocab"] = vocab
    # MLP width one token passes through (the routed experts' sum for MoE)
    out["ffn_hidden"] = inter * (int(cfg.get("num_experts_per_tok") or 1) if experts else 1)
    if experts:
        out["experts"] = experts
        out["expert_params"] = layers * experts * 3 * d * inter
    return out


def tokenizer_model(path: str) -> str:
    """A fingerprint of the vocabulary in ``path/tokenizer.json`` ("" when unreadable):
    two checkpoints with different fingerprints tokenize differently."""
    import hashlib

    tok = os.path.join(path, "tokenizer.json")
    _note(tok)
    data = _read_json(tok) if os.path.isfile(tok) else ""
    if not isinstance(data, dict) or not isinstance(data.get("model"), dict):
        return ""
    body = json.dumps(data["model"], sort_keys=True).encode("utf-8")
    return hashlib.sha256(body).hexdigest()


def _has_weights(path: str) -> bool:
    return any(n.endswith(".safetensors") for n in os.listdir(path))


def _olmo_core_family(model: dict[str, Any]) -> tuple[str, str, str]:
    """(family, export problem, load problem) of an OLMo-core ``TransformerConfig`` dict."""
    block = model.get("block") or {}
    blocks = [block] if "name" in block else list(block.values())
    blocks = [b for b in blocks if isinstance(b, dict)]
    if any(str(b.get("name", "")).startswith("moe_hybrid") for b in blocks):
        return "hybrid_moe", NO_HF_EXPORT["hybrid_moe"], ""
    if any(b.get("feed_forward_moe") for b in blocks):
        shared = any((b.get("feed_forward_moe") or {}).get("shared_mlp") for b in blocks)
        return "moe", NO_HF_EXPORT["moe"] if shared else "", ""
    return "dense", "", ""


def _chat_template_names(path: str) -> list[str]:
    """The chat templates transformers would find here, by name: ``chat_template.jinja``
    ("default") and ``additional_chat_templates/NAME.jinja``, else ``tokenizer_config.json``'s
    entry (the runtime reads them so, ``runtime.models.tokenizer.read_chat_templates``)."""
    names = ("chat_template.jinja", "additional_chat_templates", "tokenizer_config.json")
    _note(*(os.path.join(path, n) for n in names))
    found = ["default"] if os.path.isfile(os.path.join(path, "chat_template.jinja")) else []
    extra = os.path.join(path, "additional_chat_templates")
    if os.path.isdir(extra):
        found += sorted(n.removesuffix(".jinja") for n in os.listdir(extra) if n.endswith(".jinja"))
    if found:
        return found
    cfg = _read_json(os.path.join(path, "tokenizer_config.json"))
    entry = cfg.get("chat_template") if isinstance(cfg, dict) else None
    if isinstance(entry, str) and entry:
        return ["default"]
    if isinstance(entry, list):
        return [str(t["name"]) for t in entry if isinstance(t, dict) and "name" in t]
    return []


def _builtin_template_problem(named: str | None) -> str:
    """A builtin model has no named chat templates: only a ``.jinja`` file can be chosen."""
    if not named:
        return ""
    if named.endswith(".jinja"):
        _note(named)
        return "" if os.path.isfile(named) else f"model.chat_template {named} does not exist"
    return (
        f"model.chat_template {named!r} names a template, but builtin models have none "
        "(give a .jinja file, or leave it unset)"
    )


def _tokenizer_problem(
    path: str, what: str, named: str | None = None, needs_template: bool = True
) -> str:
    if not os.path.isfile(os.path.join(path, "tokenizer.json")):
        return f"no tokenizer.json in {what} (the tokenizer travels with the model)"
    if named and named.endswith(".jinja"):
        _note(named)
        return "" if os.path.isfile(named) else f"model.chat_template {named} does not exist"
    templates = _chat_template_names(path) if needs_template or named else []
    if named and named not in templates:
        have = ", ".join(templates) or "none"
        return f"model.chat_template {named!r} is not one of {what}'s templates ({have})"
    if needs_template and not named and not templates:
        return (
            f"no chat template in {what} (chat_template.jinja, additional_chat_templates/ or "
            "tokenizer_config.json's chat_template): prompts would be formatted in a layout "
            "the model was not trained on; add the model's template as chat_template.jinja "
            "or name one in model.chat_template"
        )
    return ""


def inspect(
    source: str,
    fmt: str | None,
    hf_template: str | None,
    written: str = "",
    chat_template: str | None = None,
    *,
    fresh: bool = True,
    needs_template: bool = True,
) -> SourceInfo:
    """Check a (resolved) ``model.source`` directory; builtins and unreadable paths pass,
    except a missing one ``written`` in the spec as a Hub id (``owner/name``).
    ``fresh=False`` adds to what the last ``inspect`` touched (a second checkpoint of the
    same compile, e.g. the distillation teacher)."""
    if fresh:
        _TOUCHED.clear()
    if source.startswith("builtin:"):
        return SourceInfo(problem=_builtin_template_problem(chat_template))
    names = ("config.json", NATIVE_META, "tokenizer.json")
    _note(source, *(os.path.join(source, n) for n in names))
    if hf_template:
        _note(hf_template, os.path.join(hf_template, "tokenizer.json"))
    if not os.path.isdir(source):  # a file is readable now and wrong; absent may be remote
        if os.path.exists(source):
            return SourceInfo(problem="not a directory")
        return SourceInfo(problem=hub_id_problem(written))
    if os.path.isfile(os.path.join(source, NATIVE_META)):
        meta = _read_json(os.path.join(source, NATIVE_META))
        if isinstance(meta, str):
            return SourceInfo(problem=meta)
        family = str(meta.get("family", ""))
        return SourceInfo(family=family, export_problem=NO_HF_EXPORT.get(family, ""))
    cfg_path = os.path.join(source, "config.json")
    if not os.path.isfile(cfg_path):
        return SourceInfo(problem="not a model directory: no config.json")
    cfg = _read_json(cfg_path)
    if isinstance(cfg, str):
        return SourceInfo(problem=cfg)
    olmo_core = "model" in cfg and os.path.isdir(os.path.join(source, "model_and_optim"))
    if fmt == "olmo_core" or olmo_core:
        if not olmo_core:
            return SourceInfo(
                problem='model.format = "olmo_core" needs an OLMo-core checkpoint directory '
                "(config.json with a model section and model_and_optim/)"
            )
        if fmt != "olmo_core":
            return SourceInfo(
                problem='this is an OLMo-core checkpoint: set model.format = "olmo_core" '
                "and model.hf_template"
            )
        model = cfg["model"] if isinstance(cfg["model"], dict) else {}
        family, export, problem = _olmo_core_family(model)
        text = json.dumps(model).lower()
        recurrent = int("gated_delta" in text or "gateddeltanet" in text)
        template = ""
        if hf_template and os.path.isdir(hf_template):
            template = _tokenizer_problem(
                hf_template, "model.hf_template", chat_template, needs_template
            )
        elif hf_template and os.path.exists(hf_template):
            template = "model.hf_template is not a directory"
        return SourceInfo(problem, family, export, template, recurrent_layers=recurrent)
    problem = _hf_problem(cfg)
    if not problem and not _has_weights(source):
        problem = "no *.safetensors weights (only safetensors checkpoints are read)"
    if not problem:
        problem = _tokenizer_problem(
            source, "the checkpoint directory", chat_template, needs_template
        )
    if problem:
        return SourceInfo(problem=problem)
    family = HF_FAMILIES.get(str(cfg.get("model_type")), "")
    shape = hf_shape(cfg)
    return SourceInfo(family=family, shape=shape, recurrent_layers=shape.get("recurrent_layers", 0))
