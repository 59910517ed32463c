"""`rlc status [NAME]`: launch receipts and, where Beaker is reachable, job state."""

from __future__ import annotations

import datetime as dt
import sys
from pathlib import Path

import click

from rlc_cli.commands._common import EXIT_USER, guarded, read_format_option


@click.command("status")
@click.argument("name", required=False)
@click.option("--receipts-dir", type=click.Path(file_okay=False, path_type=Path), default=None)
@click.option("--no-remote", is_flag=True, help="Do not ask Beaker for job state.")
@read_format_option
@guarded
def command(name: str | None, receipts_dir: Path | None, no_remote: bool, fmt: str) -> None:
    """List launches (newest last); with NAME, only that run's."""
    from rich.console import Console
    from rich.table import Table

    from rlc_cli.launch.beaker import job_state
    from rlc_cli.launch.receipts import read_receipts
    from rlc_cli.launch.receipts import receipts_dir as default_dir

    directory = receipts_dir or default_dir()
    receipts = read_receipts(directory, name)
    if not receipts:
        what = f"for {name!r} " if name else ""
        click.echo(f"rlc: no launch receipts {what}in {directory}", err=True)
        if fmt == "json":
            click.echo("[]")
        sys.exit(EXIT_USER if name else 0)
    if not no_remote and any(r.experiment_id and not r.dry_run for r in receipts):
        from rlc_cli.extras import require_extra

        require_extra("launch", "status")  # --no-remote lists the receipts without it
    if fmt == "json":
        import dataclasses
        import json

        rows = []
        for r in receipts:
            row = dataclasses.asdict(r)
            row["state"] = r.state if no_remote else job_state(r)
            rows.append(row)
        click.echo(json.dumps(rows, indent=2, sort_keys=True))
        return
    table = Table(title=f"launches ({directory})")
    for col in ("name", "launch", "when (UTC)", "manifest", "experiment", "state"):
        table.add_column(col)
    for r in receipts:
        when = dt.datetime.fromtimestamp(r.created_unix, dt.UTC).strftime("%Y-%m-%d %H:%M")
        state = r.state if no_remote else job_state(r)
        table.add_row(
            r.name, r.launch_id[:8], when, r.manifest_digest[:19], r.experiment_id or "-", state
        )
    Console().print(table)
