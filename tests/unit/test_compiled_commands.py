"""The manifest is what runs: the runtime starts engines and router with the compiled argv
(only the documented substitutions), and the embedded engine honours what it is given."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from runtime.node.launch_argv import SubstitutionError, substitute

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = "specs/examples/quickstart.toml"


def _manifest(*overrides: str, tmp: Path | None = None) -> dict[str, Any]:
    from compiler.pipeline import compile_spec

    extra = [f'output.root="{tmp}"'] if tmp is not None else []
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        result = compile_spec(QUICKSTART, [*overrides, *extra])
        assert not result.errors, [d.message for d in result.errors]
        return result.manifest()
    finally:
        os.chdir(cwd)


def _flag(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


# ---- the substitution function -------------------------------------------------------------


def test_substitute_interpreter_placeholders_and_picked_ports() -> None:
    argv = ["python", "-m", "x", "--port", "30000", "--peer", "http://{host:1}:9", "{manifest}"]
    out = substitute(argv, python="/venv/py", manifest="/m.json", hosts={1: "10.0.0.2"},
                     values={"--port": "41234"})  # fmt: skip
    assert out == [
        "/venv/py",
        "-m",
        "x",
        "--port",
        "41234",
        "--peer",
        "http://10.0.0.2:9",
        "/m.json",
    ]
    assert substitute(["python3", "--port=1"], python="p", values={"--port": "2"}) == [
        "p",
        "--port=2",
    ]
    urls = ["--worker-urls", "http://a:1", "http://b:2", "--policy", "random"]
    assert substitute(["r", *urls], lists={"--worker-urls": ["http://c:3"]}) == [
        "r", "--worker-urls", "http://c:3", "--policy", "random",
    ]  # fmt: skip
    assert substitute(["/usr/bin/python", "a"]) == ["/usr/bin/python", "a"]  # not a bare name


@pytest.mark.parametrize(
    ("argv", "kw"),
    [
        (["python", "-m", "x"], {"values": {"--port": "1"}}),  # never adds a flag
        (["python", "--port"], {"values": {"--port": "1"}}),  # no value to replace
        (["python", "{manifest}"], {}),
        (["python", "{host:3}"], {"hosts": {0: "a"}}),
        ([], {}),
    ],
)
def test_substitute_refuses_what_it_cannot_substitute(argv: list[str], kw: Any) -> None:
    with pytest.raises(SubstitutionError):
        substitute(argv, **kw)


# ---- the user's experiment -----------------------------------------------------------------


def test_seed_and_token_pool_reach_the_engine_command_lines() -> None:
    from contract.run import parse
    from runtime.config import RunConfig
    from runtime.node.launch_argv import engine_process

    m = _manifest("inference.seed=99", "inference.max_total_tokens=64")
    cfg = RunConfig.from_contract(parse(m))
    for e in cfg.placement.engines:
        argv, _ = engine_process(cfg, e.model_copy(update={"port": 40000 + e.id}))
        assert _flag(argv, "--random-seed") == "99" and _flag(argv, "--max-total-tokens") == "64"
        assert argv[2:] == list(cfg.engine_argv[e.id][2:4]) + argv[4:]
        assert argv[0] == sys.executable


def test_the_embedded_engine_parses_every_option_the_compiler_emits_for_it() -> None:
    pytest.importorskip("torch")
    from compiler.resolve.argv import embedded_engine_argv
    from runtime.engines.embedded.__main__ import build_parser

    config = _manifest(
        "inference.chunked_prefill_size=96",
        "inference.radix_cache=true",
        'inference.kv_cache_dtype="fp8_e4m3"',
    )["config"]
    gpu = embedded_engine_argv(config, {"port": 1, "device": "cuda"}, "127.0.0.1")
    args = build_parser().parse_args(gpu[3:])
    assert (args.seed, args.max_total_tokens, args.prefill_tokens) == (17, 524288, 96)
    assert (args.mem_fraction_static, args.cuda_graph_max_bs, args.radix_cache) == (0.4, 64, True)
    assert args.kv_cache_dtype == "fp8_e4m3"
    cpu = embedded_engine_argv(config, {"port": 1, "device": "cpu"}, "127.0.0.1")
    assert "--mem-fraction-static" not in cpu and "--cuda-graph-max-bs" not in cpu
    # the default (the model's dtype) is the engine's own default: no flag
    plain = embedded_engine_argv(_manifest()["config"], {"port": 1, "device": "cuda"}, "h")
    assert "--kv-cache-dtype" not in plain
    assert build_parser().parse_args(plain[3:]).kv_cache_dtype == "auto"


def test_sglang_takes_the_kv_cache_dtype_from_its_field_not_from_native() -> None:
    from compiler.pipeline import compile_spec

    result = compile_spec(
        ROOT / "specs/examples/gpu-dense.toml",
        ['inference.engine="sglang"', 'inference.kv_cache_dtype="fp8_e5m2"'],
    )
    assert not result.errors, [d.message for d in result.errors]
    argv = result.manifest()["commands"]["engine_argv"][0]
    assert argv[:3] == ["python", "-m", "sglang.launch_server"]
    assert _flag(argv, "--kv-cache-dtype") == "fp8_e5m2"
    # and [native.sglang] cannot set it behind the field's back
    owned = compile_spec(
        ROOT / "specs/examples/gpu-dense.toml",
        ['inference.engine="sglang"', 'native.sglang.kv_cache_dtype="fp8_e4m3"'],
    )
    assert [(d.code, d.help) for d in owned.errors] == [
        ("native-owned", ("set inference.kv_cache_dtype instead",))
    ]


# ---- the running processes -----------------------------------------------------------------


def _cmdline(pid: int) -> list[str]:
    raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    return [a.decode() for a in raw.split(b"\0") if a]


def _generate(url: str, ids: list[int], n: int) -> list[int]:
    body = {"input_ids": ids, "sampling_params": {"max_new_tokens": n, "temperature": 1.0}}
    r = httpx.post(f"{url}/generate", json=body, timeout=60)
    r.raise_for_status()
    return list(r.json()["output_ids"])


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="needs /proc")
def test_running_engines_and_router_have_the_compiled_argv_and_honour_it(tmp_path: Path) -> None:
    """The node starts engines and router exactly as compiled (``ps`` shows the manifest's
    argv); the engines run with the seed and KV token pool of the spec."""
    pytest.importorskip("torch")
    from contract.run import parse
    from runtime.config import RunConfig
    from runtime.entrypoints.execute import NodeRunner
    from runtime.node.launch_argv import engine_process
    from runtime.node.placement import node_identity, roles_for
    from runtime.node.registry import LocalRegistry

    def start(seed: int, *extra: str) -> NodeRunner:
        manifest = _manifest(
            f"inference.seed={seed}",
            "inference.max_total_tokens=128",
            *extra,
            tmp=tmp_path / str(seed),
        )
        cfg = RunConfig.from_contract(parse(manifest))
        ident = node_identity({})
        runner = NodeRunner(cfg, roles_for(cfg.placement, ident), ident)
        runner.registry = LocalRegistry()
        return runner

    runners = [start(99), start(5, "inference.num_engines=1")]
    try:
        for r in runners:
            r.start_engines()
        first = runners[0]
        first.lookup_engines()
        first.start_router()
        children = {c.name: c for c in first.sup.children}
        for e in first.engines:
            want, _ = engine_process(first.cfg, e, manifest="")
            assert _cmdline(children[f"engine:{e.id}"].pid) == want
            compiled = list(first.cfg.engine_argv[e.id])
            got = _cmdline(children[f"engine:{e.id}"].pid)
            # verbatim but for the interpreter and the port the node picked
            assert got[1:] == [str(e.port) if a == _flag(compiled, "--port") else a
                               for a in compiled[1:]]  # fmt: skip
        # sglang-router renames its own process (setproctitle "sglang::router") once it
        # has parsed its arguments: what it was started with is the supervisor's record
        assert _cmdline(children["router"].pid) in (["sglang::router"], children["router"].argv)
        router, compiled = children["router"].argv, list(first.cfg.router_argv)
        metrics = _flag(router, "--prometheus-port")
        want = [sys.executable, *compiled[1 : compiled.index("--worker-urls") + 1]]
        want[want.index("--port") + 1] = str(first.router_port)
        want[want.index("--prometheus-port") + 1] = metrics
        assert router == [*want, *first.engine_urls]
        info = httpx.get(f"{first.engine_urls[0]}/get_server_info", timeout=10).json()
        assert (info["random_seed"], info["max_total_num_tokens"]) == (99, 128)
        assert info["kv_cache_slots"] == 2  # 128 tokens: two 64-token contexts
        other = runners[1]
        other.lookup_engines()
        # same weights (seeded by data.seed), other sampling seed: other samples
        prompt = [1, 2, 3]
        a = _generate(first.engine_urls[0], prompt, 40)
        b = _generate(other.engine_urls[0], prompt, 40)
        assert a != b
    finally:
        for r in runners:
            r.sup.shutdown()


def test_the_backend_is_chosen_once_from_inference_engine() -> None:
    from compiler.resolve.argv import SGLANG_ENGINE_ENV, engine_env
    from runtime.engines.backend import backend_for

    embedded, sglang = backend_for("embedded"), backend_for("sglang")
    # an evaluator's engine gets the server's own switches, the same a rollout engine has
    # compiled beside its GPUs
    assert embedded.env() == {} and sglang.env() == SGLANG_ENGINE_ENV
    plan = {"placement": {"engines": [{"gpus": [2, 3]}]}}
    assert engine_env({"inference": {"engine": "sglang"}}, plan) == [
        {"SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION": "false", "CUDA_VISIBLE_DEVICES": "2,3"}
    ]
    assert (embedded.snapshot_format, sglang.snapshot_format) == ("native", "hf")
    assert (embedded.checksum_audit, sglang.checksum_audit) == (True, False)
    from contract.spec.evaluation import EvaluationSection
    from contract.spec.inference import InferenceSection

    tp2, extra = InferenceSection(tensor_parallel=2), EvaluationSection(server_args=["--x"])
    assert sglang.ranks_per_engine(tp2) == 2
    assert embedded.ranks_per_engine(tp2) == 1
    assert sglang.eval_server_args(extra) == ["--x"]
    assert embedded.eval_server_args(extra) == []
    with pytest.raises(ValueError):
        backend_for("vllm")


def test_print_effective_shows_the_users_experiment(tmp_path: Path) -> None:
    """``python -m runtime.entrypoints.execute M --print-effective``: the engines' command lines carry
    the overridden seed and token pool, and the rollout samples with that seed."""
    import json
    import subprocess

    manifest = _manifest(
        "inference.seed=99",
        "inference.max_total_tokens=64",
        "trainer.cpu_processes=2",
        tmp=tmp_path,
    )
    from compiler.manifest.manifest import write_manifest

    path = write_manifest(manifest, tmp_path / "manifest.json")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-m", "runtime.entrypoints.execute", str(path), "--print-effective"],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=300, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    view = json.loads(out.stdout)
    for name in ("engine:0", "engine:1"):
        argv = view["processes"][name]["argv"]
        assert _flag(argv, "--random-seed") == "99" and _flag(argv, "--max-total-tokens") == "64"
    assert view["processes"]["trainer"]["argv"][-1] == str(path.resolve())
    rank = view["processes"]["trainer_rank"]  # compiled; run-time values stay placeholders
    assert rank["argv"][1:] == ["-m", "runtime.trainer.ranks", str(path.resolve())]
    assert rank["env"] == manifest["commands"]["trainer_rank"]["env"]
    assert {n: p["env"] for n, p in view["processes"].items() if n.startswith("engine:")} == {
        "engine:0": {},
        "engine:1": {},
    }
    assert view["components"]["rollout"]["sampling_seed"] == 99
    assert view["settings"]["inference"]["engine"] == "embedded"


# ---- every process kind: argv and environment compiled -----------------------------------


def test_named_placeholders_in_argv_and_env() -> None:
    from runtime.node.launch_argv import substitute_env

    named = {"rank": "3", "trainer_port": "29500"}
    assert substitute(["python", "x", "--r={rank}"], python="p", named=named) == ["p", "x", "--r=3"]
    env = {"RANK": "{rank}", "RUN": "node{rank}", "MASTER_PORT": "{trainer_port}", "K": "v"}
    assert substitute_env(env, named) == {
        "RANK": "3", "RUN": "node3", "MASTER_PORT": "29500", "K": "v",
    }  # fmt: skip
    with pytest.raises(SubstitutionError, match="unknown placeholder"):
        substitute_env({"A": "{nope}"}, named)
    with pytest.raises(SubstitutionError, match="no value"):
        substitute_env({"A": "{local_rank}"}, named)
    # JSON in an argument is not a placeholder
    assert substitute(["x", '{"rope_scaling":{"factor":4.0}}']) == [
        "x",
        '{"rope_scaling":{"factor":4.0}}',
    ]


def test_trainer_ranks_and_engines_have_compiled_argv_and_env() -> None:
    m = _manifest("trainer.cpu_processes=2")
    cmds = m["commands"]
    assert cmds["engine_env"] == [{} for _ in cmds["engine_argv"]]  # CPU engines: no GPUs
    assert cmds["trainer_rank"] == {
        "argv": ["python", "-m", "runtime.trainer.ranks", "{manifest}"],
        "env": {
            "RANK": "{rank}", "LOCAL_RANK": "{local_rank}", "WORLD_SIZE": "2",
            "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "{node_rank}",
            "MASTER_ADDR": "{trainer_addr}", "MASTER_PORT": "{trainer_port}",
            "TORCHELASTIC_RUN_ID": "node{node_rank}", "OMP_NUM_THREADS": "{cpu_threads}",
        },
    }  # fmt: skip
    assert "trainer_rank" not in _manifest()["commands"]  # one rank: the trainer itself


def test_a_managed_judge_is_compiled_with_its_engine_and_gpus(tmp_path: Path) -> None:
    """On a GPU run a managed judge is SGLang by default (derived, with provenance), on its
    planned GPUs; ``judges.NAME.engine`` chooses the embedded engine instead."""
    from compiler.pipeline import compile_spec

    spec = tmp_path / "judge.toml"
    spec.write_text(
        (ROOT / "specs/examples/gpu-dense.toml").read_text().replace('"../../runs', '"runs')
        + '[judges.j]\nmode = "managed"\nmodel = "Qwen/Qwen3-8B"\nrevision = "'
        + "a" * 40
        + '"\nprepared_dir = "/data/judge"\n[rubrics.r]\n'
        + 'profile = "open-instruct/general-quality"\n'
        + '[judging.bindings.quality]\njudge = "j"\nrubric = "r"\n'
    )
    for overrides, engine, kind in (
        ([], "sglang", "derived"),
        (['judges.j.engine="embedded"'], "embedded", "override"),
    ):
        result = compile_spec(str(spec), overrides)
        assert not result.errors, [d.message for d in result.errors]
        m = result.manifest()
        assert m["config"]["judges"]["j"]["engine"] == engine
        assert m["provenance"]["judges.j.engine"]["kind"] == kind
        [placed] = m["plan"]["placement"]["judges"]
        judge = m["commands"]["judges"]["j"]
        assert judge["env"] == {"CUDA_VISIBLE_DEVICES": ",".join(map(str, placed["gpus"]))}
        assert _flag(judge["argv"], "--port") == str(placed["port"])
        module = "sglang.launch_server" if engine == "sglang" else "runtime.engines.embedded"
        assert judge["argv"][:3] == ["python", "-m", module]


def test_trainer_ranks_without_their_compiled_command_are_refused(tmp_path: Path) -> None:
    from contract.run import Process
    from runtime.trainer.ranks import RankFailure, start_ranks

    kw: dict[str, Any] = {"node_rank": 0, "nprocs": 2, "addr": "127.0.0.1", "port": 1}
    with pytest.raises(RankFailure, match="no trainer rank command line"):
        start_ranks(None, "/m.json", log_dir=tmp_path, **kw)
    unknown = Process(argv=["python", "-m", "runtime.trainer.ranks"], env={"X": "{gpu}"})
    with pytest.raises(RankFailure, match=r"unknown placeholder \{gpu\}"):
        start_ranks(unknown, "/m.json", log_dir=tmp_path, **kw)
