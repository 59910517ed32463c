"""rlc plan SPEC: placement per node, batch geometry, lengths, async capacity, memory."""

from __future__ import annotations

import sys
from typing import Any

import click

from rlc_cli.commands._common import EXIT_USER, guarded, read_format_option
from rlc_cli.commands._spec_opts import report, run_compile, spec_options


@click.command("plan")
@spec_options
@read_format_option
@click.option("--json", "as_json", is_flag=True, hidden=True, help="Same as --format json.")
@click.option(
    "--effective",
    is_flag=True,
    help="Print every component's settings and every process's argv/env as the runtime "
    "would use them (JSON, as `python -m runtime.entrypoints.execute MANIFEST --print-effective`).",
)
@guarded
def command(
    spec: str, overrides: tuple[str, ...], fmt: str, as_json: bool, effective: bool
) -> None:
    """Show the effective plan of a spec without writing anything."""
    result = run_compile(spec, overrides)
    as_json = as_json or fmt == "json"
    fmt = "json" if as_json or effective else "text"
    if result.errors:
        report(result, fmt)
        sys.exit(EXIT_USER)
    if effective:
        import json

        from runtime.effective import effective as effective_view

        view = effective_view(result.manifest(), "{manifest}")
        view["diagnostics"] = [d.to_json() for d in result.diagnostics]
        click.echo(json.dumps(view, indent=2, sort_keys=True))
        return
    r = result.resolved
    if as_json:
        import json

        click.echo(
            json.dumps(
                {
                    "name": r.config["name"],
                    "plan": r.plan,
                    "config": r.config,
                    "paths": r.paths,
                    "diagnostics": [d.to_json() for d in result.diagnostics],
                },
                indent=2,
                sort_keys=True,
            )
        )
        return
    _render(r, result)


def _runs(gpus: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """Collapse consecutive GPUs whose roles continue one another (trainer:0..7 -> one row)."""

    def split(role: str) -> tuple[str, int | None]:
        kind, _, idx = role.partition(":")
        return kind, int(idx) if idx.isdigit() else None

    out: list[list[Any]] = []  # [first_gpu, last_gpu, first_roles, last_roles]
    for g in gpus:
        roles = [split(r) for r in g["roles"]]
        if out:
            run = out[-1]
            prev = run[3]
            if (
                g["gpu"] == run[1] + 1
                and len(prev) == len(roles)
                and all(
                    a[0] == b[0] and a[1] is not None and b[1] == a[1] + 1
                    for a, b in zip(prev, roles, strict=True)
                )
            ):
                run[1], run[3] = g["gpu"], roles
                continue
        out.append([g["gpu"], g["gpu"], roles, roles])
    rows = []
    for first, last, r0, r1 in out:
        span = str(first) if first == last else f"{first}-{last}"
        names = [
            f"{k}:{a}" if a == b else f"{k}:{a}-{b}" for (k, a), (_, b) in zip(r0, r1, strict=True)
        ]
        rows.append((span, ", ".join(n.replace(":None", "") for n in names)))
    return rows


def _kv_table(title: str, rows: list[tuple[str, Any]]) -> Any:
    from rich.table import Table

    t = Table(title=title, show_header=False, title_justify="left", box=None, pad_edge=False)
    t.add_column(style="bold")
    t.add_column()
    for k, v in rows:
        t.add_row(k, "-" if v is None else str(v))
    return t


def _render(r: Any, result: Any) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    c, plan = r.config, r.plan
    p = plan["placement"]
    head = f"[bold]{c['name']}[/bold]  model {c['model']['source']} ({c['model']['architecture']})"
    if c.get("recipe"):
        head += f"  recipe {c['recipe']}"
    console.print(head)
    nodes = Table(title="placement", title_justify="left")
    for col in ("node", "gpu", "roles"):
        nodes.add_column(col)
    for n in p["nodes"]:
        for gpus, roles in _runs(n["gpus"]):
            nodes.add_row(str(n["node"]), gpus, roles)
        if n["cpu_roles"]:
            nodes.add_row(str(n["node"]), "cpu", ", ".join(n["cpu_roles"]))
    console.print(nodes)
    console.print(
        f"replicas {p['replicas']} x {p['gpus_per_replica']} GPUs = {p['allocated_gpus']} allocated, "
        f"{p['used_gpus']} used, {p['unused_gpus']} unused"
    )
    b, ln, a, m = plan["batch"], plan["lengths"], plan["async"], plan["memory"]
    console.print(
        _kv_table(
            "batch geometry",
            [
                (
                    "prompts x samples",
                    f"{b['prompts_per_collection']} x {b['samples_per_prompt']} = {b['samples_per_collection']}",
                ),
                ("global batch", b["global_batch_size"]),
                ("optimizer steps / collection", b["optimizer_steps_per_collection"]),
                ("total optimizer steps", b["total_optimizer_steps"]),
                ("trainer world", b["trainer_world_size"]),
                ("scoring pass", plan["scoring_pass"]["reason"]),
            ],
        )
    )
    console.print(
        _kv_table(
            "lengths",
            [
                ("context", ln["max_context_length"]),
                ("prompt / response", f"{ln['max_prompt_length']} / {ln['max_response_length']}"),
                ("packing budget", ln["packing_max_tokens"]),
                (
                    "token pool / engine",
                    f"{ln['token_pool']} ({ln['full_context_slots_per_engine']} full contexts)",
                ),
            ],
        )
    )
    console.print(
        _kv_table(
            "async capacity",
            [
                ("enabled", a["enabled"]),
                ("engines / usable slots", f"{a['engines']} / {a['usable_slots']}"),
                (
                    "producer budget",
                    f"{a['producer_sample_budget']} samples ({a['producer_group_budget']} groups)",
                ),
                (
                    "completed buffer",
                    f"{a['completed_buffer_groups']} groups ({a['completed_buffer_samples']} samples)",
                ),
                ("max policy lag", a["max_policy_lag"]),
                (
                    "correction / publication",
                    f"{a['off_policy_correction']} / {a['publication_mode']}",
                ),
            ],
        )
    )
    _render_teacher(console, c, p, m)
    if m["known"]:
        console.print(
            _kv_table(
                "memory estimate (GiB)",
                [
                    ("trainer per GPU", m["trainer_gib_per_gpu"]),
                    ("engine per GPU", m["engine_gib_per_gpu"]),
                    ("colocated per GPU", m["colocated_gib_per_gpu"]),
                    ("GPU memory", m["gpu_memory_gib"]),
                ],
            )
        )
        if not m.get("shape_known", True):
            console.print(
                "memory estimate: weights and optimizer states only (the model's shape was "
                "not readable at compile time)"
            )
        for title, parts in (
            ("trainer parts (GiB)", m.get("trainer_parts_gib") or {}),
            ("engine parts (GiB)", m.get("engine_parts_gib") or {}),
        ):
            if parts:
                console.print(
                    _kv_table(title, [(k.replace("_", " "), v) for k, v in parts.items()])
                )
    else:
        console.print("memory estimate: unknown (set model.num_params for a non-builtin model)")
    if result.diagnostics:
        report(result, "text")


def _render_teacher(console: Any, c: dict[str, Any], p: dict[str, Any], m: dict[str, Any]) -> None:
    """On-policy distillation: where the teacher is served, its loss and its memory."""
    placed = p.get("teacher")
    if placed is None:
        return
    t, d = c["teacher"], c["distillation"]
    where = f"node {placed['node']}, " + (
        f"GPUs {', '.join(str(g) for g in placed['gpus'])}" if placed["gpus"] else "CPU"
    )
    rows: list[tuple[str, Any]] = [
        ("source", t["source"]),
        ("server", f"{t['engine']} ({where}), {t['max_running_requests']} slots"),
        ("context", t["max_context_length"]),
        ("loss", f"{d['loss']} x {d['coef']}, reward weight {d['reward_weight']}"),
        ("memory per GPU (GiB)", m.get("teacher_gib_per_gpu")),
        ("memory budget (GiB)", m.get("teacher_budget_gib")),
    ]
    console.print(_kv_table("distillation teacher", rows))
