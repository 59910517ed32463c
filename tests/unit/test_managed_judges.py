"""Managed judges are started by the runtime on their planned port and answer the
OpenAI-compatible chat route (embedded engine where SGLang is absent)."""

from __future__ import annotations

import socket
import sys
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest
from compiled_run import compile_manifest, with_managed_judge

from contract.run import parse
from runtime.config import RunConfig
from runtime.node.judges import planned_judges, start_managed_judges
from runtime.node.launch_argv import SubstitutionError, judge_process
from runtime.node.supervisor import Supervisor


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cfg(
    tmp_path: Path,
    port: int,
    prepared_dir: str = "/weka/judges/tiny",
    env: dict[str, str] | None = None,
) -> RunConfig:
    """A compiled CPU run with a managed judge placed on ``port`` (managed judges are placed
    on GPUs by the compiler; here the plan is edited to hold one on this CPU machine)."""
    m = compile_manifest(tmp_path)
    with_managed_judge(
        m,
        "j",
        port,
        verifier="quality",
        prepared_dir=prepared_dir,
        max_context_length=256,
        max_concurrent_calls=4,
    )
    m["config"]["runtime"]["startup_timeout_s"] = 120
    m["commands"]["judges"]["j"]["env"].update(env or {})
    return RunConfig.from_contract(parse(m))


def test_planned_judge_command_lines(tmp_path: Path) -> None:
    """The judge runs its compiled command line (the engine ``judges.NAME.engine`` names) on
    its planned port; a manifest whose judge lacks that port is refused, naming it."""
    from compiler.resolve.argv import judge_process as compiled_judge

    cfg = _cfg(tmp_path, 31000)
    [j] = planned_judges(cfg.spec, cfg.placement)
    embedded, env = judge_process(cfg, j.name, j.port)
    assert embedded[0] == sys.executable and env == {}
    assert embedded[1:] == cfg.contract.commands.judges["j"].argv[1:]
    assert "runtime.engines.embedded" in embedded and "--served-model-name" in embedded
    assert embedded[embedded.index("--port") + 1] == "31000"
    assert embedded[embedded.index("--model-path") + 1] == "/weka/judges/tiny"
    config = cfg.contract.config.model_dump(mode="json")
    config["judges"]["j"]["engine"] = "sglang"
    sglang = compiled_judge(config, {"name": "j", "node": 0, "gpus": [2, 3], "port": 31000})
    assert "sglang.launch_server" in sglang["argv"] and "judge-model" in sglang["argv"]
    assert sglang["argv"][sglang["argv"].index("--revision") + 1] == "0" * 40
    assert sglang["argv"][sglang["argv"].index("--tp-size") + 1] == "2"
    assert sglang["env"] == {"CUDA_VISIBLE_DEVICES": "2,3"}

    m = compile_manifest(tmp_path / "bad")
    with_managed_judge(m, "j", 31000, verifier="quality")
    argv = m["commands"]["judges"]["j"]["argv"]
    del argv[argv.index("--port") : argv.index("--port") + 2]
    bad = RunConfig.from_contract(parse(m))
    with pytest.raises(SubstitutionError, match="judge 'j': .* no --port value"):
        judge_process(bad, "j", 31000)


@pytest.mark.slow
def test_runtime_starts_a_managed_judge_that_answers_chat(tmp_path: Path) -> None:
    from runtime.models import load_model, save_native

    judge_dir = save_native(load_model("builtin:tiny"), tmp_path / "judge")
    port = _free_port()
    # a compiled variable (as CUDA_VISIBLE_DEVICES on GPUs) reaches the judge as it stands
    cfg = _cfg(tmp_path, port, str(judge_dir.resolve()), env={"RLC_JUDGE_MARK": "compiled"})
    binding = cfg.judge_bindings["quality"]
    assert binding.url == f"http://127.0.0.1:{port}"
    sup = Supervisor(log_dir=tmp_path / "logs")
    runner = SimpleNamespace(cfg=cfg, sup=sup, ident=SimpleNamespace(rank=0))
    try:
        urls = start_managed_judges(runner)  # type: ignore[arg-type]
        assert urls == [binding.url]
        child = sup.get("judge:j")
        assert child is not None
        compiled = cfg.contract.commands.judges["j"]
        assert _cmdline(child.pid) == [sys.executable, *compiled.argv[1:]]
        assert (
            b"\0RLC_JUDGE_MARK=compiled\0"
            in b"\0" + Path(f"/proc/{child.pid}/environ").read_bytes()
        )
        reply = httpx.post(
            f"{binding.url}/v1/chat/completions",
            json={
                "model": "judge-model",
                "messages": [{"role": "user", "content": "rate: 2+2=4"}],
                "max_tokens": 4,
                "temperature": 0.0,
            },
            timeout=60,
        )
        assert reply.status_code == 200, reply.text
        body = reply.json()
        assert body["model"] == "judge-model"
        assert isinstance(body["choices"][0]["message"]["content"], str)
        assert body["usage"]["completion_tokens"] >= 1
    finally:
        sup.shutdown()


def _cmdline(pid: int) -> list[str]:
    return [a.decode() for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if a]


def test_no_thinking_chat_template_reaches_the_request() -> None:
    from runtime.rewards.judge import JudgeVerifier

    sent: list[dict[str, object]] = []

    class Capture:
        def post(self, url: str, json: dict[str, object], timeout: float) -> httpx.Response:
            sent.append(json)
            return httpx.Response(500, request=httpx.Request("POST", url))

    for template, expected in (("qwen3-no-thinking", {"enable_thinking": False}), (None, None)):
        v = JudgeVerifier({"url": "http://127.0.0.1:9", "chat_template": template, "retries": 0})
        v._client = Capture()  # type: ignore[assignment]
        v._complete([{"role": "user", "content": "x"}])
        assert sent[-1].get("chat_template_kwargs") == expected
