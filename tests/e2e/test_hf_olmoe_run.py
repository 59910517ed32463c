"""`rlc run` from an OLMoE-shaped HF checkpoint written by transformers, router replay on,
then the final export and `rlc export` of the newest checkpoint load in transformers."""

from __future__ import annotations

from pathlib import Path

import pytest
from rt_helpers import SMALL, compile_manifest, make_hf_checkpoint, records, run

pytestmark = pytest.mark.slow

N = 3


def test_olmoe_hf_source_trains_with_router_replay_and_exports(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    src = make_hf_checkpoint(tmp_path / "olmoe", "olmoe", "--experts", "4", "--top-k", "2")
    overrides = (
        *SMALL,
        f"training.num_rollouts={N}",
        f'model.source="{src}"',
        "trainer.router_replay=true",
        "output.export_hf=true",
        "inference.num_engines=1",
    )
    manifest = compile_manifest(tmp_path, overrides)
    code, out = run(manifest, "--resume", "never", timeout=240)
    assert code == 0, out[-3000:]
    root = tmp_path / "run"
    got = records(root)
    assert [r["collection"] for r in got] == list(range(N))
    decisions = [v for r in got for k, v in r.items() if k.endswith("replay/decisions")]
    assert decisions and all(d > 0 for d in decisions), sorted(got[-1])

    from click.testing import CliRunner

    from rlc_cli.main import cli
    from runtime.models import load_model

    exported = tmp_path / "rlc-export"
    args = ["export", str(root), "--out", str(exported)]
    first = CliRunner().invoke(cli, args)
    assert first.exit_code == 0, first.output
    again = CliRunner().invoke(cli, args)  # never overwrites what is there
    assert again.exit_code == 2 and "not an empty directory" in again.output
    missing = CliRunner().invoke(cli, [*args[:3], str(tmp_path / "x"), "--step", "99"])
    assert missing.exit_code == 2 and "no complete checkpoint of step 99" in missing.output
    newest = sorted((root / "checkpoints").glob("step-*"))[-1]
    ours = load_model(str(newest / "model")).model
    x = torch.randint(0, 60, (2, 16), generator=torch.Generator().manual_seed(0))
    for hf_dir in (exported, root / "export-hf"):
        hf = transformers.AutoModelForCausalLM.from_pretrained(str(hf_dir), dtype=torch.float32)
        with torch.no_grad():
            diff = (hf.eval()(x).logits - ours(x)).abs().max().item()
        assert diff < 1e-4, (hf_dir, diff)
