"""Import-only ``torchvision`` and ``torchaudio`` for ``rlsched serve-cpu`` (and the e2e tier): this folder goes
first on the CPU server's ``PYTHONPATH`` (``cpu_server.STUBS``), so ``import torchvision`` finds them.

vLLM-Omni 0.30's serve path imports both at module level, and a CPU-only machine has no wheel of either that
loads against CPU torch 2.13 (docs/e2e.md). Nothing the CPU server runs calls them; a call raises.
Never put this folder on the path of a process that has the real packages."""
