"""Native pass-through tables: generation (static reading), checking, argv, explain."""

from __future__ import annotations

import importlib.util
import json
import sys
import textwrap
from pathlib import Path

import pytest

from compiler.diagnostics import DiagnosticError, Span
from compiler.resources import native_dir
from compiler.spec.native_options import (
    OWNED,
    check_native,
    explain_native,
    flatten_options,
    load_native_table,
    sglang_argv,
)

ROOT = Path(__file__).resolve().parents[2]


def load_script(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def codes(diags):
    return [d.code for d in diags]


# -- the committed tables --------------------------------------------------------------


def test_sglang_table_is_pinned_and_has_provenance():
    raw = json.loads((native_dir() / "sglang.json").read_text())
    assert raw["version"] == "0.5.23" and raw["distribution"] == "sglang==0.5.23"
    assert "sglang/srt/server_args.py" in raw["source_sha256"]
    assert all(len(h) == 64 for h in raw["source_sha256"].values())
    t = load_native_table("sglang")
    assert len(t.options) > 300
    tp = t.options["tp_size"]
    assert tp.flag == "--tp-size" and "--tensor-parallel-size" in tp.aliases
    assert tp.type == "int" and tp.default == 1
    rep = t.options["radix_eviction_policy"]
    assert rep.choices and "lru" in rep.choices and rep.default == "lru"
    assert t.options["disable_radix_cache"].type == "bool"
    assert t.options["mem_fraction_static"].type == "float"
    assert t.options["mem_fraction_static"].nullable
    assert t.options["enable_dp_attention"].deprecated
    assert t.resolve("tensor-parallel-size") == "tp_size"
    assert t.resolve("--model") == "model_path"


def test_olmo_core_table_is_pinned():
    raw = json.loads((native_dir() / "olmo_core.json").read_text())
    assert raw["version"] == "3.0.0" and "note" in raw
    t = load_native_table("olmo_core")
    mode = t.options["ac_config.mode"]
    assert mode.default == "full" and mode.choices and "selected_blocks" in mode.choices
    assert t.options["dp_config.name"].choices == ("fsdp", "hsdp", "ddp")
    assert t.options["compile_model"].type == "bool"
    assert "rank_microbatch_size" not in t.options  # rlc owns it


@pytest.mark.parametrize("tool", ["sglang", "olmo_core"])
def test_every_owned_option_exists_in_its_table(tool):
    table = load_native_table(tool)
    missing = [k for k in OWNED[tool] if k not in table.options]
    assert not missing, f"OWNED names options the pinned {tool} does not have: {missing}"


def test_unknown_tool():
    with pytest.raises(DiagnosticError) as exc:
        load_native_table("sglng")
    assert "did you mean 'sglang'" in exc.value.diagnostics[0].help[0]
    assert codes(check_native("vllm", {})) == ["native-unknown-tool"]


# -- checking ---------------------------------------------------------------------------


def test_valid_sglang_options_pass():
    opts = {
        "max_prefill_tokens": 16384,
        "attention-backend": "fa3",
        "enable_metrics": True,
        "radix_eviction_policy": "lfu",
        "cuda_graph_bs_decode": [1, 2, 4],
        "schedule_conservativeness": 1,  # an int where a float is expected is fine
    }
    assert check_native("sglang", opts) == []


def test_unknown_option_positioned_with_did_you_mean():
    span = Span("spec.toml", 40, 1, 40, 20)
    (d,) = check_native("sglang", {"chunked_prefil_size": 1}, {"chunked_prefil_size": span})
    assert d.code == "native-unknown-option" and d.span == span
    assert "chunked_prefill_size" in d.help[0]
    (d,) = check_native("sglang", {"x": 1}, {"native.sglang.x": span})
    assert d.span == span


def test_type_and_choice_errors():
    ds = check_native(
        "sglang",
        {
            "max_prefill_tokens": "big",
            "enable_metrics": "yes",
            "decode_log_interval": 1.5,
            "cuda_graph_bs_decode": [1, "two"],
            "radix_eviction_policy": "lru2",
            "enable_metrics_for_all_schedulers": 1,
        },
    )
    assert codes(ds) == ["native-type"] * 4 + ["native-choice", "native-type"]
    assert "expects int" in ds[0].message and 'string "big"' in ds[0].message
    assert "did you mean 'lru'" in ds[4].help[0]


def test_owned_options_name_the_rlc_field():
    ds = check_native("sglang", {"tp_size": 2, "tensor_parallel_size": 2, "port": 1, "model": "x"})
    assert codes(ds) == ["native-owned"] * 4
    assert ds[0].help == ("set inference.tensor_parallel instead",)
    assert "model.source" in ds[3].help[0]
    # The owner table can be swapped (e.g. when [inference] does not set a value).
    assert check_native("sglang", {"tp_size": 2}, owned={}) == []


def test_deprecated_is_a_warning():
    (d,) = check_native("sglang", {"enable_dp_attention": True})
    assert d.severity == "warning" and d.code == "native-deprecated"


def test_olmo_core_nested_tables_are_flattened_and_checked():
    opts = {"dp_config": {"name": "hsdp", "shard_degree": 8}, "ac_config": {"mode": "ful"}}
    assert flatten_options("olmo_core", opts) == {
        "dp_config.name": "hsdp",
        "dp_config.shard_degree": 8,
        "ac_config.mode": "ful",
    }
    ds = check_native("olmo_core", opts, {"ac_config.mode": Span("s", 9, 8, 9, 13)})
    assert codes(ds) == ["native-owned"] * 3 and ds[2].span == Span("s", 9, 8, 9, 13)
    assert (
        check_native("olmo_core", {"dp_config": {"nme": "x"}})[0]
        .help[0]
        .startswith("did you mean 'dp_config.name'")
    )


def test_olmo_core_options_are_refused_the_trainer_does_not_read_them():
    """A checked `[native.olmo_core]` value would be silently ignored by the trainer (a
    dp_config would even promise a mesh it does not build): each is an error at its line,
    naming rlc's own field where there is one."""
    span = Span("s", 3, 1, 3, 15)
    ds = check_native(
        "olmo_core",
        {"dp_config": {"name": "ddp", "shard_degree": 4}, "compile_model": True},
        {"dp_config.name": span},
    )
    assert codes(ds) == ["native-owned", "native-owned", "native-not-applied"]
    assert ds[0].span == span and "trainer.expert_parallel" in ds[0].help[0]
    assert "HSDP across trainer nodes" in ds[1].help[0]
    assert "does not read [native.olmo_core]" in ds[2].help[0]
    (d,) = check_native("olmo_core", {"ac_config": {"mode": "full"}})
    assert d.code == "native-owned" and "trainer.activation_recompute" in d.help[0]
    assert "not applied:" in explain_native("olmo_core", "compile_model")


def test_bool_default_true_without_negation_cannot_be_turned_off(monkeypatch):
    import compiler.spec.native_options as native

    real = native.load_native_table("sglang")
    opts = dict(real.options)
    opts["always_on"] = native.NativeOption("always_on", "bool", "h", default=True, flag="--x")
    opts["switch"] = native.NativeOption(
        "switch", "bool", "h", default=True, flag="--switch", negatable=True
    )
    fake = native.NativeTable("sglang", real.version, real.distribution, "", opts, {})
    monkeypatch.setattr(native, "load_native_table", lambda name: fake)
    assert codes(native.check_native("sglang", {"always_on": False})) == ["native-type"]
    assert native.check_native("sglang", {"switch": False}) == []
    assert native.sglang_argv({"switch": False, "always_on": True}) == ["--x", "--no-switch"]


def test_olmo_core_false_bools_are_plain_values():
    """No command-line form to worry about: refused as not applied, not as a flag problem."""
    ds = check_native("olmo_core", {"dp_config": {"only_allreduce_last_microbatch": False}})
    assert codes(ds) == ["native-not-applied"]


# -- argv -------------------------------------------------------------------------------


def test_sglang_argv_rendering():
    t = load_native_table("sglang")
    negatable = next(k for k, o in t.options.items() if o.negatable)
    argv = sglang_argv(
        {
            "radix_eviction_policy": "lfu",
            "max-prefill-tokens": 4096,
            "enable_metrics": True,
            "disable_overlap_schedule": False,  # false store_true flag: omitted
            "cuda_graph_bs_decode": [1, 2, 4],
            "schedule_conservativeness": 0.5,
            negatable: False,
        }
    )
    flag = t.options[negatable].flag
    assert flag
    assert argv[argv.index("--max-prefill-tokens") + 1] == "4096"
    assert "--disable-overlap-schedule" not in argv
    i = argv.index("--cuda-graph-bs-decode")
    assert argv[i + 1 : i + 4] == ["1", "2", "4"]
    assert "--enable-metrics" in argv and argv[argv.index("--radix-eviction-policy") + 1] == "lfu"
    assert argv[argv.index("--schedule-conservativeness") + 1] == "0.5"
    assert "--no-" + flag[2:] in argv
    # Deterministic: key order of the input does not matter.
    assert sglang_argv({"enable_metrics": True, "max_prefill_tokens": 1}) == sglang_argv(
        {"max_prefill_tokens": 1, "enable_metrics": True}
    )
    with pytest.raises(ValueError):
        sglang_argv({"nope": 1})
    assert sglang_argv({"schedule_conservativeness": -0.5}) == ["--schedule-conservativeness=-0.5"]


def test_values_cannot_add_or_override_flags():
    """Each key is exactly one flag with its values: a list item or string that SGLang's
    parser would read as an option (``--model-path``, ``-x``) is refused at its line, and
    owned options are refused whatever spelling names them."""
    at = Span("s", 7, 1, 7, 30)
    ds = check_native(
        "sglang",
        {"cuda_graph_bs_decode": ["1", "--model-path", "/evil"]},
        {"cuda_graph_bs_decode": at},
    )
    assert codes(ds) == ["native-type"]  # a list of int: strings are not ints
    ds = check_native(
        "sglang",
        {"allowed_media_domains": ["a.org", "--model-path", "/evil"]},
        {"allowed_media_domains": at},
    )
    assert codes(ds) == ["native-flag-value"] and ds[0].span == at
    assert '"--model-path"' in ds[0].message
    (d,) = check_native("sglang", {"crash_dump_folder": "--port=1"})
    assert d.code == "native-flag-value"
    assert check_native("sglang", {"allowed_media_domains": ["-1", "a"]}) == []  # numbers pass
    assert codes(check_native("sglang", {"--model-path": "/x", "tensor-parallel-size": 2})) == [
        "native-owned",
        "native-owned",
    ]
    with pytest.raises(ValueError):  # the renderer refuses what the checker refuses
        sglang_argv({"allowed_media_domains": ["--host", "0.0.0.0"]})
    with pytest.raises(ValueError):
        sglang_argv({"model_path": "/x"})


def test_sglang_argv_json_values():
    t = load_native_table("sglang")
    json_opt = next(k for k, o in t.options.items() if o.type == "json" and o.flag)
    argv = sglang_argv({json_opt: {"b": 1, "a": [1]}})
    assert argv == [t.options[json_opt].flag, '{"a":[1],"b":1}']


# -- explain ----------------------------------------------------------------------------


def test_explain_native():
    text = explain_native("sglang", "radix_eviction_policy")
    assert text.splitlines()[0] == "native.sglang.radix_eviction_policy  (--radix-eviction-policy)"
    assert "sglang==0.5.23" in text and 'default: "lru"' in text and '"lfu"' in text
    assert "Least Recently Used" in text
    assert "owned by rlc: set inference.tensor_parallel" in explain_native("sglang", "tp_size")
    assert "--tensor-parallel-size" in explain_native("sglang", "tensor_parallel_size")
    with pytest.raises(DiagnosticError) as exc:
        explain_native("sglang", "radix_evict_policy")
    assert "native.sglang.radix_eviction_policy" in exc.value.diagnostics[0].help[0]
    assert "selected_blocks" in explain_native("olmo_core", "ac_config.mode")


# -- generators -------------------------------------------------------------------------

FAKE_SERVER_ARGS = """
from sglang.srt.arg_groups.choices import ATTN_CHOICES
from sglang.srt.arg_groups.fields.demo import Demo

class ServerArgs:
    @staticmethod
    def add_cli_args(parser):
        add_cli_args_from_dataclass(parser, ServerArgs)
        choices = set(ATTN_CHOICES)
        parser.add_argument("--sampling-backend", type=str, choices=choices, default=None,
                            help="Sampling kernels.")
        parser.add_argument("--config", type=str, help="config file")
        parser.add_argument("--old-flag", action=DeprecatedStoreTrueAction, new_flag="--x",
                            help="Deprecated. Use --x.")

_INPUT_NAMESPACES = [Demo]
"""

FAKE_FIELDS = """
import argparse
from typing import List, Literal, Optional
from sglang.srt.arg_groups.arg_utils import A, Arg
from sglang.srt.arg_groups.choices import ATTN_CHOICES

LOCAL = ["x", "y"]

class Demo(msgspec.Struct):
    _NS_PATH = "demo"
    tp_size: A[int, Arg(help="TP size.", aliases=["--tensor-parallel-size"])] = 1
    attention_backend: A[Optional[str], Arg(help="Attn " "kernels.", choices=ATTN_CHOICES + ["extra"])] = None
    mode: A[Literal["a", "b"], "Mode."] = "a"
    ratio: A[Optional[float], "Ratio."] = None
    flags: A[List[str], "Some flags."] = msgspec.field(default_factory=list)
    pick: A[str, Arg(help="Pick.", choices=LOCAL)] = "x"
    toggle: A[bool, Arg(help="Toggle.", action=argparse.BooleanOptionalAction)] = True
    big: A[int, Arg(help="Big.", type_parser=human_readable_int)] = 10 * 1000
    hidden: A[bool, Arg(no_cli=True)] = False
    sampling_backend: A[Optional[str], Arg(help="x", no_cli=True)] = None
    plain: Optional[str] = None
"""


def test_sglang_generator_reads_fields_statically(tmp_path):
    gen = load_script("gen_native_sglang")
    srt = tmp_path / "sglang" / "srt"
    (srt / "arg_groups" / "fields").mkdir(parents=True)
    (srt / "server_args.py").write_text(textwrap.dedent(FAKE_SERVER_ARGS))
    (srt / "arg_groups" / "choices.py").write_text('ATTN_CHOICES = ["fa3", "triton"]\n')
    (srt / "arg_groups" / "fields" / "demo.py").write_text(textwrap.dedent(FAKE_FIELDS))
    table = gen.generate(str(srt / "server_args.py"))
    o = table["options"]
    assert set(o) == {
        "tp_size", "attention_backend", "mode", "ratio", "flags", "pick", "toggle", "big",
        "sampling_backend", "old_flag",
    }  # fmt: skip
    assert o["tp_size"]["aliases"] == ["--tensor-parallel-size"] and o["tp_size"]["default"] == 1
    assert o["attention_backend"]["choices"] == ["fa3", "triton", "extra"]
    assert o["attention_backend"]["help"] == "Attn kernels."
    assert o["mode"]["choices"] == ["a", "b"] and o["mode"]["type"] == "str"
    assert o["ratio"]["type"] == "float" and o["ratio"]["nullable"]
    assert (
        o["flags"]["type"] == "list" and o["flags"]["default"] == [] and o["flags"]["nargs"] == "+"
    )
    assert o["pick"]["choices"] == ["x", "y"]
    assert o["toggle"]["negatable"] and o["toggle"]["default"] is True
    assert o["big"]["type"] == "int" and o["big"]["default"] == 10000
    assert o["sampling_backend"]["choices"] == ["fa3", "triton"]
    assert o["old_flag"]["deprecated"] and o["old_flag"]["type"] == "bool"
    assert "sglang/srt/arg_groups/fields/demo.py" in table["source_sha256"]


def test_sglang_table_regenerates_identically(tmp_path):
    from sglang_wheel import PIN, pinned_wheel

    assert PIN == "0.5.23"  # the version schemas/native/sglang.json was generated from
    wheel = pinned_wheel()
    gen = load_script("gen_native_sglang")
    out = tmp_path / "sglang.json"
    assert gen.main([str(wheel), "-o", str(out)]) == 0
    assert out.read_text() == (native_dir() / "sglang.json").read_text()


def test_olmo_core_table_regenerates_identically(tmp_path):
    spec = importlib.util.find_spec("olmo_core")
    if spec is None:
        pytest.skip("ai2-olmo-core not installed (runtime extra)")
    gen = load_script("gen_native_olmo_core")
    table = gen.generate(None)
    if table["version"] != "3.0.0":
        pytest.skip(f"installed ai2-olmo-core is {table['version']}, the table pins 3.0.0")
    out = tmp_path / "olmo_core.json"
    assert gen.main(["-o", str(out)]) == 0
    assert out.read_text() == (native_dir() / "olmo_core.json").read_text()
