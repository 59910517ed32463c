"""Process entry points: each module here is what `python -m` starts (the run, the evaluator,
the preparation job, the export, the bench table)."""
