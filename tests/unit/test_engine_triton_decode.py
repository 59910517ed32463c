"""The split-KV Triton decode attention (``--attention-backend triton``): each row attends
exactly its own entries, and the engine's decode step gives SDPA's logits with it, eagerly
and through the compiled regions (one block trace for windowed and full layers). On the
CPU the kernels run under Triton's interpreter in a child process
(``triton_decode_cases.py``); on a GPU the captured, compiled step is compared too."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("olmo_core")
pytest.importorskip("triton")

from decode_runs import captured_logits  # noqa: E402
from interpreted import run_interpreted  # noqa: E402

from runtime.engines.embedded.forward import InferenceModel  # noqa: E402
from runtime.engines.embedded.tiny import build_tiny  # noqa: E402


@pytest.fixture(scope="module")
def interpreted() -> dict:
    return run_interpreted("triton_decode_cases.py")


def test_kernel_attends_exactly_each_rows_entries(interpreted: dict) -> None:
    """Ragged rows, window starts, grouped and single KV heads, a head size of 48."""
    for case, err in interpreted["kernel"].items():
        assert err < (1e-5 if case.endswith("float32") else 0.02), (case, err)


def test_rows_read_a_shared_prompt_from_its_holders_row(interpreted: dict) -> None:
    """Entries below ``shared[b]`` come from row ``src[b]``: the output equals, bit for
    bit, the kernel's over rows that each hold a copy (the follower rows' own prompt
    entries are NaN, so a read of them would show), with one chunk a row or several,
    windows from inside and past the prompt, and bf16, float32 and FP8 caches."""
    shared = interpreted["shared"]
    for case, err in shared.items():
        if case.endswith("reference"):
            assert err < (1e-5 if case.startswith("float32") else 0.02), (case, err)
        else:
            assert err == 0.0, (case, err)


def test_decode_step_gives_sdpa_logits(interpreted: dict) -> None:
    model = interpreted["model"]
    assert model["window"] < 1e-5 and model["gqa"] < 1e-5
    # an FP8 cache: the kernel's in-load conversion gives SDPA's logits over the same values
    assert model["fp8"] < 1e-5
    assert model["compiled_on"] == 1.0 and model["compiled"] < 1e-5
    # the bounds are tensors, so windowed and full layers share one block trace (+ the head)
    assert model["compiled_frames"] == 2


def test_small_batches_split_their_rows(interpreted: dict) -> None:
    splits = {int(k): v for k, v in interpreted["splits"].items()}
    assert splits[1] > splits[2] >= splits[64] == splits[256] == 1


def _signature(fn, types: dict[str, str], constexprs: dict) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return {n: "constexpr" if n in constexprs else types.get(n, "i32") for n in fn.arg_names}


@pytest.mark.parametrize("kv", ["*bf16", "*fp8e4nv", "*fp8e5"])
@pytest.mark.parametrize("group", [1, 4])
def test_kernels_compile_for_hopper(group: int, kv: str) -> None:
    """Both kernels, each variant the engine launches (one chunk a row or several; MHA and
    grouped heads; a bf16 or an FP8 cache), compiled ahead of time for sm_90 down to a
    cubin by Triton's own ptxas: the GPU compile runs here, where no GPU does."""
    if interpreter_on():
        pytest.skip("Triton's interpreter is on in this process")
    import triton

    if not (Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas").exists():
        pytest.skip("this Triton install carries no ptxas")
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, compile

    from runtime.engines.embedded import triton_decode as td

    target = GPUTarget("cuda", 90, 32)
    block, stages = td.launch_config(2 if kv == "*bf16" else 1)
    for whole in (True, False):
        buffers = "*bf16" if whole else "*fp32"
        types = {
            **dict.fromkeys(("q_ptr", "out_ptr"), "*bf16"),
            **dict.fromkeys(("k_ptr", "v_ptr"), kv),
            **dict.fromkeys(("lo_ptr", "hi_ptr", "src_ptr", "shared_ptr"), "*i64"),
            **dict.fromkeys(("part_ptr", "lse_ptr"), buffers),
            "scale_log2": "fp32",
        }
        consts = {
            "GROUP": group,
            "HEAD_DIM": 128,
            "D_PAD": 128,
            # the block and stages the op launches with for this cache type
            "BLOCK": block,
            "STAGES": stages,
            "WHOLE": whole,
        }
        fn = td._split_kv_attention
        # what Triton's launcher specializes on the engine's caches: every pointer and
        # stride a multiple of 16 (head dims of 64 or 128)
        attrs = {
            (i,): [["tt.divisibility", 16]]
            for i, name in enumerate(fn.arg_names)
            if name.endswith("_ptr") or name.startswith("stride")
        }
        src = ASTSource(
            fn=fn, signature=_signature(fn, types, consts), constexprs=consts, attrs=attrs
        )
        kernel = compile(src, target=target, options={"num_warps": td.NUM_WARPS})
        assert kernel.asm["cubin"]
        assert_sixteen_byte_kv_loads(kernel.asm["ptx"])
    consts = {"HEAD_DIM": 128, "D_PAD": 128, "S_PAD": 4}
    types = {"part_ptr": "*fp32", "lse_ptr": "*fp32", "out_ptr": "*bf16"}
    fn = td._split_kv_merge
    src = ASTSource(fn=fn, signature=_signature(fn, types, consts), constexprs=consts)
    assert compile(src, target=target, options={"num_warps": 4}).asm["cubin"]


def assert_sixteen_byte_kv_loads(ptx: str) -> None:
    """The cache is read 16 bytes a thread at a time (vector loads, or ``cp.async`` copies
    of 16 bytes where loads are pipelined): a change that hides the rows' alignment from
    Triton (a per-entry offset it cannot prove a multiple of 16) falls back to one load per
    element, several times slower on a kernel that only streams memory."""
    narrow = re.findall(r"ld\.global(?:\.\w+)*\.[bsu](?:8|16)\b", ptx)
    assert not narrow, f"element-wise cache loads: {sorted(set(narrow))}"
    vector = re.findall(r"ld\.global(?:\.\w+)*\.v4\.b32", ptx)
    copies = re.findall(r"cp\.async\.\w+\.shared\.global \[[^]]*\], \[[^]]*\], 0x10", ptx)
    assert vector or copies, "no 16-byte loads of the cache"


def interpreter_on() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def test_triton_decode_needs_a_gpu_outside_the_interpreter() -> None:
    if interpreter_on():
        pytest.skip("Triton's interpreter is on in this process")
    loaded = build_tiny("dense", seed=1)
    with pytest.raises(ValueError, match="needs --device cuda"):
        InferenceModel(loaded.model, max_slots=1, capacity=32, decode_attention="triton")


def test_default_decode_attention_follows_the_device() -> None:
    """The kernel on a GPU, SDPA on a CPU (no Triton kernel runs there)."""
    from runtime.engines.embedded.forward import default_decode_attention

    assert default_decode_attention(torch.device("cuda")) == "triton"
    assert default_decode_attention(torch.device("cpu")) == "sdpa"
    loaded = build_tiny("dense", seed=1)
    assert InferenceModel(loaded.model, max_slots=1, capacity=32).decode_attention == "sdpa"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the compiled kernel needs a GPU")
@pytest.mark.parametrize("kv_dtype", [None, torch.float8_e4m3fn], ids=["bf16", "fp8"])
def test_captured_triton_decode_matches_sdpa_on_gpu(kv_dtype: torch.dtype | None) -> None:
    """The kernel inside the compiled, captured step against SDPA's (bf16), with one graph
    per batch size for every length; with an FP8 cache both read the same stored values."""
    torch._dynamo.reset()
    loaded = build_tiny("dense", seed=2, window=130, n_layers=4)
    loaded.model.to(device="cuda", dtype=torch.bfloat16)
    outs = {}
    for attention in ("sdpa", "triton"):
        # 60 steps: rows cross 64-entry blocks and the 256-entry SDPA bucket
        outs[attention], im = captured_logits(loaded, attention, steps=60, kv_dtype=kv_dtype)
        assert im.kv_dtype == (kv_dtype or torch.bfloat16)
        if attention == "triton":
            assert {length for _, length in im.graph_keys()} == {im.cache_len}
    # greedy paths may part where two logits tie in bf16: compare the first steps closely
    assert (outs["sdpa"][:8] - outs["triton"][:8]).abs().max().item() < 0.05
