"""Build hook: ship the repository's ``envs/``, ``checkpoints/`` and ``agents/`` inside the wheel.

They stay top-level folders in the repository (the one source of truth that scripts,
docs and the other tools use) and are copied to ``rlsched/_data/`` at build time,
where ``rlsched.resources.data_dir`` finds them in an installed package. An editable
install reads the top-level folders directly, so nothing is copied there.
Both put ``rlsched-gymnasium.pth`` in site-packages (``rlsched.gymnasium_plugin``).
All other metadata is in pyproject.toml.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.editable_wheel import editable_wheel

SHIPPED = ("envs", "checkpoints", "agents")
PTH = "rlsched-gymnasium.pth"
"""Installed into site-packages: Gymnasium 1.x reads no entry points, so this registers rlsched's
environments once gymnasium is imported (``rlsched.gymnasium_plugin``)."""


class BuildPyWithData(build_py):
    def run(self) -> None:
        super().run()
        self.copy_file(str(Path(__file__).resolve().parent / PTH), str(Path(self.build_lib) / PTH), preserve_mode=0)
        if getattr(self, "editable_mode", False):
            return
        for name in SHIPPED:
            src = Path(__file__).resolve().parent / name
            dst = Path(self.build_lib) / "rlsched" / "_data" / name
            shutil.copytree(src, dst, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


class EditableWheelWithPth(editable_wheel):
    """An editable install (``pip install -e``) gets ``PTH`` too: its wheel holds what lands in this
    folder besides the link to the source tree."""

    def _install_namespaces(self, installation_dir: str, pth_prefix: str) -> None:
        super()._install_namespaces(installation_dir, pth_prefix)
        shutil.copy(Path(__file__).resolve().parent / PTH, Path(installation_dir) / PTH)


setup(cmdclass={"build_py": BuildPyWithData, "editable_wheel": EditableWheelWithPth})
