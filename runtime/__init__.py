"""rlc runtime: carries out a compiled manifest (engines, router, trainer, rewards)."""
