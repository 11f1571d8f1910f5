"""Import-only stand-in shared by the ``torchvision`` and ``torchaudio`` stubs (``rlsched serve-cpu``, the e2e
tier): every submodule imports, every attribute is an inert placeholder.

The serve path imports torchvision/torchaudio at module level, but a CPU-only machine has no wheel
of either that loads against torch 2.13 (see docs/e2e.md). Nothing the CPU server runs calls them.
"""
import importlib.abc
import importlib.machinery
import sys
import types
from typing import Any


class _Meta(type):
    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return cls


class _Placeholder(metaclass=_Meta):
    def __init__(self, *args, **kwargs):
        pass

    def __getattr__(self, name):
        return _Placeholder

    def __call__(self, *args, **kwargs):
        raise RuntimeError("import-only stand-in (rlsched serve-cpu): torchvision/torchaudio are not installed here")


def _module_getattr(name):
    if name.startswith("__"):
        raise AttributeError(name)
    return _Placeholder


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, package: str) -> None:
        self.package = package

    def find_spec(self, fullname, path=None, target=None):
        if fullname.startswith(self.package + "."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = types.ModuleType(spec.name)
        module.__path__ = []
        module.__getattr__ = _module_getattr
        return module

    def exec_module(self, module):
        pass


def install(package: str, namespace: dict[str, Any]) -> None:
    """Make ``package`` (whose module globals are ``namespace``) and all its submodules stand-ins."""
    namespace["__version__"] = "0.0.0+stub"
    namespace["__getattr__"] = _module_getattr
    sys.meta_path.insert(0, _Finder(package))
