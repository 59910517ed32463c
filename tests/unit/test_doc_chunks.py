"""Chunked document attention: the same attention as the dense document mask, and chosen
only where it saves work."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("olmo_core")

import torch.nn.functional as F  # noqa: E402

from runtime.models import load_model  # noqa: E402
from runtime.models.attention import document_mask, set_attention_backend  # noqa: E402
from runtime.models.doc_chunks import (  # noqa: E402
    chunk_documents,
    chunked_attention,
    plan_doc_chunks,
)
from runtime.trainer import Sample, pack_samples  # noqa: E402


def test_chunks_group_whole_documents() -> None:
    assert chunk_documents([3, 4, 2, 9, 1, 1], 8) == [[3, 4], [2], [9], [1, 1]]
    assert chunk_documents([20], 8) == [[20]]  # never split: a longer document stands alone
    assert chunk_documents([], 8) == []


def _cu(doc_lens: list[int]) -> list[int]:
    cu = [0]
    for n in doc_lens:
        cu.append(cu[-1] + n)
    return cu


@pytest.mark.parametrize("window", [(-1, -1), (3, 0)])
def test_chunked_equals_dense_forward_and_backward(window: tuple[int, int]) -> None:
    g = torch.Generator().manual_seed(0)
    # two rows of 128 tokens: short documents, one longer than a chunk, a zero-length one
    row = [5, 3, 7, 0, 2, 6, 20, 4, 4, 1, 9, 8, 2, 11, 9, 10, 3, 6, 7, 11]
    assert sum(row) == 128
    docs = row + row[::-1]
    cu = _cu(docs)
    plan = plan_doc_chunks(cu, window, torch.device("cpu"), rows=2, chunk_tokens=16)
    assert plan is not None and plan.chunk_len == 20  # the long document sets the width
    shape = (2, 128, 4, 8)
    q, k, v = (torch.randn(shape, generator=g, requires_grad=True) for _ in range(3))
    up = torch.randn(shape, generator=g)

    out = chunked_attention(q, k, v, plan, scale=None, dropout_p=0.0)
    (out * up).sum().backward()
    grads = [t.grad.clone() for t in (q, k, v)]  # type: ignore[union-attr]
    for t in (q, k, v):
        t.grad = None

    mask = document_mask(torch.tensor(cu), 2, 128, window)
    ref = F.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=mask
    ).transpose(1, 2)
    (ref * up).sum().backward()
    assert torch.allclose(out, ref, atol=1e-5)
    for got, t in zip(grads, (q, k, v), strict=True):
        assert torch.allclose(got, t.grad, atol=1e-5)  # type: ignore[arg-type]


def test_dense_where_chunks_save_little() -> None:
    # one document filling the row: chunks would be the row itself
    assert plan_doc_chunks([0, 64], (-1, -1), torch.device("cpu"), rows=1) is None
    # two halves: half the dense scores, under the required saving
    assert plan_doc_chunks([0, 32, 64], (-1, -1), torch.device("cpu"), rows=1, chunk_tokens=32)
    assert plan_doc_chunks([0, 40, 64], (-1, -1), torch.device("cpu"), rows=1) is None


def test_packed_row_of_short_documents_matches_each_alone() -> None:
    """Through the model: a row packed with many short documents (the chunked path) gives
    each document the logits it gets alone, and its gradients match the dense mask's."""
    lm = load_model("builtin:tiny")
    set_attention_backend(lm.model, "sdpa")
    vocab = lm.tokenizer.vocab_size
    g = torch.Generator().manual_seed(3)
    lengths = [6, 9, 4, 30, 7, 5, 12, 8] * 6
    samples = []
    for n in lengths:
        ids = torch.randint(0, vocab, (n,), generator=g).tolist()
        samples.append(Sample(prompt_ids=ids[: n // 2], response_ids=ids[n // 2 :], advantage=1.0))
    (row,) = pack_samples(samples, max_tokens=4096)
    cu = _cu(row.doc_lens)
    assert plan_doc_chunks(cu, (-1, -1), torch.device("cpu"), rows=1) is not None
    kwargs = row.model_kwargs(torch.device("cpu"))
    packed = lm.model(row.input_ids[None], **kwargs)[0]
    with torch.no_grad():
        offset = 0
        for s in samples:
            ids = torch.tensor(s.prompt_ids + s.response_ids)[None]
            n = ids.shape[1]
            assert torch.allclose(packed[offset : offset + n], lm.model(ids)[0], atol=1e-5)
            offset += n
    packed.square().mean().backward()
    chunked = {n: p.grad.clone() for n, p in lm.model.named_parameters() if p.grad is not None}
    lm.model.zero_grad(set_to_none=True)

    import runtime.models.doc_chunks as doc_chunks

    saving = doc_chunks.MIN_SAVING
    doc_chunks.MIN_SAVING = float("inf")  # the dense mask for the same row
    try:
        lm.model(row.input_ids[None], **kwargs)[0].square().mean().backward()
    finally:
        doc_chunks.MIN_SAVING = saving
    for name, p in lm.model.named_parameters():
        if p.grad is not None:
            assert torch.allclose(chunked[name], p.grad, atol=1e-6), name
