"""The weight checksum's Triton kernel gives the torch path's sums bit for bit: under
Triton's interpreter on the CPU (``checksum_kernel_cases.py`` in a child process), compiled
for sm_90 here, and on a GPU against the CPU's digest where one is present."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from interpreted import run_interpreted  # noqa: E402

from runtime.publication.checksum import device_checksum  # noqa: E402


def test_kernel_sums_equal_the_torch_path_under_the_interpreter() -> None:
    results = run_interpreted("checksum_kernel_cases.py")
    assert len(results) > 70
    assert [case for case, same in results.items() if not same] == []


def test_kernel_compiles_for_hopper() -> None:
    """Compiled ahead of time for sm_90 to a cubin by Triton's own ptxas, for each word
    width the audit meets (bf16 and fp32 weights, int64 buffers, bytes)."""
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        pytest.skip("Triton's interpreter is on in this process")
    import triton

    if not (Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas").exists():
        pytest.skip("this Triton install carries no ptxas")
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, compile

    from runtime.publication import checksum_triton as ct

    fn = ct._word_sums
    consts = {"BLOCK": ct.BLOCK, "ITERS": ct.ITERS}
    for words in ("*i16", "*i32", "*i64", "*u8", "*i8"):
        types = {"words_ptr": words, "part_ptr": "*i64", "n": "i64"}
        types |= dict.fromkeys(("mix1", "seed1", "mix2", "seed2"), "i64")
        signature = {n: "constexpr" if n in consts else types[n] for n in fn.arg_names}
        src = ASTSource(fn=fn, signature=signature, constexprs=consts)
        kernel = compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": ct.NUM_WARPS})
        assert kernel.asm["cubin"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_gpu_digest_equals_the_cpu_digest() -> None:
    """A model's state on the GPU (the kernel) and on the CPU (torch ops): one digest, with
    and without the cast to the engine's dtype; a one-word change moves it."""
    g = torch.Generator().manual_seed(0)
    state = {
        "embed": torch.randn(5003, 257, generator=g),
        "norm": torch.randn(257, generator=g),
        "step": torch.tensor(12, dtype=torch.int64),
        "mask": torch.rand(999, generator=g) < 0.3,
    }
    on_gpu = {k: v.cuda() for k, v in state.items()}
    for dtype in (None, torch.bfloat16):
        assert device_checksum(on_gpu, dtype=dtype) == device_checksum(state, dtype=dtype)
    on_gpu["embed"][4000, 3] += 1.0
    assert device_checksum(on_gpu) != device_checksum(state)


def test_kernel_warm_up_is_for_gpus_only() -> None:
    from runtime.publication.checksum import wait_warm_up, warm_up_kernel

    assert warm_up_kernel("cpu") is None
    wait_warm_up()  # nothing started: returns at once


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_kernel_warms_up_once_per_process_and_device() -> None:
    from runtime.publication.checksum import warm_up_kernel

    first = warm_up_kernel("cuda:0")
    assert first is not None and warm_up_kernel(torch.device("cuda:0")) is first
    first.join()
    state = {"w": torch.randn(300, 7, device="cuda")}
    assert device_checksum(state) == device_checksum({"w": state["w"].cpu()})
