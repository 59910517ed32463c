"""Secrets never reach a manifest, recipes are catalog names, explain reads only the compiled
spec, and output.root is normalised before it is checked (reproducers from the tracker)."""

from __future__ import annotations

import copy
import os
from pathlib import Path

import pytest

from compiler.diagnostics import render_all
from compiler.manifest.explain import explain_manifest_field
from compiler.pipeline import compile_spec
from compiler.spec.secrets import credential_reason
from contract.canonical import canonical_bytes, digest_of

ROOT = Path(__file__).resolve().parents[2]
BASE = """schema_version = 1
name = "safety"
[model]
source = "builtin:tiny"
[data]
tasks = [{task = "gsm8k"}]
[output]
root = "runs/x"
"""


def _compile(tmp_path: Path, extra: str = "", overrides: tuple[str, ...] = ()) -> object:
    spec = tmp_path / "spec.toml"
    spec.write_text(BASE + extra)
    return compile_spec(str(spec), list(overrides))


def _codes(result: object) -> list[str]:
    return [d.code for d in result.errors]  # type: ignore[attr-defined]


TOKEN = "hf_" + "aB3dE5gH7jK9mN1pQ3sT5vW7yZ"


@pytest.mark.parametrize(
    "extra",
    [
        f'[launch]\nenv = {{ API_KEY = "{TOKEN}" }}\n',
        '[launch]\nenv = { HF_AUTH = "x" }\n',
        '[launch]\nenv = { API_KEY = "plain" }\n',
        f'[launch]\nenv = {{ NOTHING_HERE = "{TOKEN}" }}\n',
        f'[launch]\nsecrets = {{ HF_TOKEN = "{TOKEN}" }}\n',
        '[judges.j]\nmode = "external"\nendpoint = "https://j.example/v1?api_key=abc123"\n'
        'model = "m"\n',
        '[judges.j]\nmode = "external"\nendpoint = "https://user:pw@j.example/v1"\nmodel = "m"\n',
        '[native.sglang]\napi_key = "anything"\n',
        f'name2 = "x"\n[tracking]\nwandb_project = "{TOKEN}"\n',
    ],
    ids=[
        "env-value",
        "env-name-auth",
        "env-name-api-key",
        "value-anywhere",
        "secret-value-as-name",
        "url-query-key",
        "url-userinfo",
        "native-api-key",
        "other-field",
    ],
)
def test_credentials_are_refused_and_masked(tmp_path: Path, extra: str) -> None:
    result = _compile(tmp_path, extra)
    assert not result.ok  # type: ignore[attr-defined]
    shown = render_all(result.errors, result.sources)  # type: ignore[attr-defined]
    for secret in (TOKEN, "abc123", "user:pw", "anything"):
        assert secret not in shown
    assert all(d.span is not None for d in result.errors)  # type: ignore[attr-defined]


def test_credential_in_an_override_is_masked(tmp_path: Path) -> None:
    result = _compile(tmp_path, overrides=(f'launch.env.FOO="{TOKEN}"',))
    assert "secret-in-spec" in _codes(result)
    assert TOKEN not in render_all(result.errors, result.sources)  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "value",
    [
        "allenai/Olmo-3-1025-7B-Instruct-SFT",
        "/weka/oe-training-default/ai2-llm/checkpoints/OLMo-3-7B/step1000-hf",
        "0123456789abcdef0123456789abcdef01234567",
        "Qwen/Qwen3-32B",
        "https://judge.example:8000/v1",
        "550e8400-e29b-41d4-a716-446655440000",
    ],
)
def test_ordinary_values_are_not_credentials(value: str) -> None:
    assert credential_reason(value) is None


@pytest.mark.parametrize("name", ["/etc/hostname", "../x", "../../specs/examples/quickstart"])
def test_recipe_is_a_catalog_name_never_a_path(tmp_path: Path, name: str) -> None:
    result = _compile(tmp_path, "")
    spec = tmp_path / "spec.toml"
    spec.write_text(f'recipe = "{name}"\n' + BASE)
    result = compile_spec(str(spec))
    assert _codes(result) == ["unknown-recipe"]
    assert result.recipe is None


@pytest.mark.parametrize(
    ("root", "ok"),
    [
        ("/", False),
        ("/etc", False),
        ("/proc/self", False),
        ("/weka/x/../../etc", False),
        ("/tmp", False),
        ("/usr/local/run", False),
        ("/tmp/my-run", True),
        ("/weka/oe-training-default/me/runs/x", True),
    ],
)
def test_output_root_is_normalised_and_system_dirs_refused(
    tmp_path: Path, root: str, ok: bool
) -> None:
    result = _compile(tmp_path, overrides=(f'output.root="{root}"',))
    assert ("output-root-system" not in _codes(result)) == ok
    if not ok:
        (diag,) = [d for d in result.errors if d.code == "output-root-system"]  # type: ignore[attr-defined]
        assert diag.span is not None and diag.span.source == "override 1"


def test_weka_mount_check_normalises_paths(tmp_path: Path) -> None:
    extra = '[launch]\nweka_mounts = [{weka = "b", mount_path = "/weka/b"}]\n'
    result = _compile(tmp_path, extra, ('output.root="/weka/b/../../etc/x"',))
    assert "output-root-system" in _codes(result)


def test_explain_reads_only_the_compiled_spec(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    m = compile_spec("specs/examples/quickstart.toml").manifest()
    good = tmp_path / "good.json"
    good.write_bytes(canonical_bytes(m))
    assert "| lr = " in explain_manifest_field(good, "optimizer.lr")

    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET-LINE\n" * 60)
    for target in ("/proc/self/environ", str(secret)):
        forged = copy.deepcopy(m)
        forged["provenance"]["optimizer.lr"]["span"]["file"] = target
        forged["provenance"]["optimizer.lr"]["span"]["line"] = 1
        forged["source"]["path"] = target  # the file the manifest names: still not read
        forged["digest"] = digest_of({k: v for k, v in forged.items() if k != "digest"})
        path = tmp_path / "forged.json"
        path.write_bytes(canonical_bytes(forged))
        out = explain_manifest_field(path, "optimizer.lr")
        assert "TOP-SECRET" not in out and "PATH=" not in out and "|" not in out
        os.unlink(path)


def test_native_options_named_like_tokens_are_not_credentials() -> None:
    from compiler.spec.secrets import scan

    options = {"bucket_time_to_first_token": [0.1, 1.0], "speculative_token_map": "m.json"}
    found, _ = scan({"native": {"sglang": options}}, lambda path: None)
    assert found == []
    found, _ = scan({"native": {"sglang": {"ssl_keyfile_password": "x"}}}, lambda path: None)
    assert [d.code for d in found] == ["secret-in-spec"]


def test_rlc_run_signs_when_a_key_is_set(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from compiler.manifest.trust import load_trusted, signature_path
    from rlc_cli.commands.run import compile_for_run

    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("RLC_SIGNING_KEY", "k")
    root = tmp_path / "run"
    path = compile_for_run("specs/examples/quickstart.toml", (f'output.root="{root}"',), "text")
    assert signature_path(path).is_file()
    assert load_trusted(path, {"RLC_SIGNING_KEY": "k"})
