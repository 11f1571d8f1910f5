"""Build hook: ship the repository's ``envs/``, ``checkpoints/`` and ``agents/`` inside the wheel.

They stay top-level folders in the repository (the one source of truth that scripts,
docs and the other tools use) and are copied to ``rlsched/_data/`` at build time,
where ``rlsched.resources.data_dir`` finds them in an installed package. An editable
install reads the top-level folders directly, so nothing is copied there.
All other metadata is in pyproject.toml.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

SHIPPED = ("envs", "checkpoints", "agents")


class BuildPyWithData(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        for name in SHIPPED:
            src = Path(__file__).resolve().parent / name
            dst = Path(self.build_lib) / "rlsched" / "_data" / name
            shutil.copytree(src, dst, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


setup(cmdclass={"build_py": BuildPyWithData})
