"""Write a random-init HF checkpoint of an OLMo family with transformers' own classes.

    python scripts/make_hf_checkpoint.py --family olmoe --out DIR [--d-model 64 ...]

The checkpoint is what ``save_pretrained`` writes (safetensors + config.json) plus rlc's
builtin tokenizer, so ``model.source = DIR`` runs offline. Used by the HF end-to-end test
and the one-H200 OLMoE check (benchmarks/gpu/olmoe_hf.sh).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

FAMILIES = {
    "olmo2": ("Olmo2Config", "Olmo2ForCausalLM"),
    "olmo3": ("Olmo3Config", "Olmo3ForCausalLM"),
    "olmoe": ("OlmoeConfig", "OlmoeForCausalLM"),
    "flex_olmo": ("FlexOlmoConfig", "FlexOlmoForCausalLM"),
    # GatedDeltaNet layers beside attention ones (transformers' default: every 4th attends,
    # and always the last)
    "olmo_hybrid": ("OlmoHybridConfig", "OlmoHybridForCausalLM"),
}


def write(
    out: Path,
    family: str,
    *,
    d_model: int = 64,
    n_layers: int = 2,
    n_heads: int = 4,
    n_kv_heads: int | None = None,
    hidden: int = 48,
    experts: int = 4,
    top_k: int = 2,
    dtype: str = "float32",
    seed: int = 0,
) -> Path:
    import torch
    import transformers

    from runtime.models import build_builtin_tokenizer

    tok = build_builtin_tokenizer()
    cfg_name, model_name = FAMILIES[family]
    kw: dict[str, object] = dict(
        vocab_size=tok.vocab_size,
        hidden_size=d_model,
        intermediate_size=hidden,
        num_hidden_layers=n_layers,
        num_attention_heads=n_heads,
        num_key_value_heads=n_kv_heads or n_heads,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
        bos_token_id=None,
        max_position_embeddings=4096,
    )
    if family in ("olmoe", "flex_olmo"):
        kw.update(num_experts=experts, num_experts_per_tok=top_k)
    torch.manual_seed(seed)
    model = getattr(transformers, model_name)(getattr(transformers, cfg_name)(**kw))
    model.to(getattr(torch, dtype)).save_pretrained(str(out))
    tok.save(out)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--family", choices=sorted(FAMILIES), required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--n-layers", type=int, default=2)
    p.add_argument("--n-heads", type=int, default=4)
    p.add_argument("--hidden", type=int, default=48, help="MLP (per-expert) hidden size")
    p.add_argument("--experts", type=int, default=4)
    p.add_argument("--top-k", type=int, default=2)
    p.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    if a.out.exists() and any(a.out.iterdir()):
        print(f"make_hf_checkpoint: {a.out} is not empty", file=sys.stderr)
        return 2
    write(
        a.out,
        a.family,
        d_model=a.d_model,
        n_layers=a.n_layers,
        n_heads=a.n_heads,
        hidden=a.hidden,
        experts=a.experts,
        top_k=a.top_k,
        dtype=a.dtype,
        seed=a.seed,
    )
    print(f"wrote {a.family} checkpoint to {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
