"""The trainer node's imports and the deep model-source check, while the engines start.

Importing torch and OLMo-core takes seconds (about 10 s of a warm ``gpu-dense`` start-up
on one NVIDIA H200 host, CUDA libraries included); the engines' own start-up takes longer
and runs in their processes. Doing the imports on a thread while the engines load takes
them off the start-up's critical path. The thread starts once the engine processes are
spawned (a fork while another thread loads shared libraries could deadlock the child
before its exec), and the main thread imports nothing from torch until it joins
(``result``), so the two never import the same module at once.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Sequence

# what the trainer node imports next: the trainer (torch, OLMo-core, FlexAttention)
TRAINER_MODULES = ("runtime.trainer.trainer",)


class Preload:
    """``loader.check_source`` (the architecture, through OLMo-core's configs), then
    ``modules``, on a daemon thread from ``start``; ``result`` re-raises what failed."""

    def __init__(self, source: str, hf_template: str | None, modules: Sequence[str] = ()) -> None:
        self.source, self.hf_template, self.modules = source, hf_template, tuple(modules)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="rlc-preload", daemon=True)

    def start(self) -> None:
        if self._thread.ident is None:
            self._thread.start()

    def _run(self) -> None:
        try:
            from runtime.models.loader import check_source

            check_source(self.source, hf_template=self.hf_template)
            for name in self.modules:
                importlib.import_module(name)
        except BaseException as exc:  # re-raised on the main thread by result()
            self._error = exc

    def result(self) -> None:
        """Wait for the thread (started here if it was not); raise ``ModelLoadError`` (or
        an import's failure)."""
        self.start()
        self._thread.join()
        if self._error is not None:
            raise self._error
