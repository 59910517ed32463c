"""Serving side of the rlc runtime: engines, their client, the router, process supervision.

- ``embedded/``: our generation server (``python -m runtime.engines.embedded --model SRC
  --port P``), SGLang's native HTTP subset over an OLMo-core model with a KV cache and
  continuous batching. ``embedded.launch.start_embedded`` starts one as a subprocess;
  ``embedded.inprocess.InProcessServer`` serves one on a thread (tests).
- ``sglang``: real SGLang servers from the compiled argv (``start_sglang``).
- ``router``: the real ``sglang-router`` in front of N engine URLs (``start_router``).
- ``client``: ``EngineClient`` / ``ClientSettings`` / ``Sample`` / ``EngineFailure``.
- ``process``: ``ServerProcess`` (log file, health wait, death detection, SIGTERM/SIGKILL).
"""
