"""Import-only stand-in (test-only): every submodule imports, every attribute is an inert placeholder.

The serve path imports torchvision/torchaudio at module level, but a CPU-only machine has no wheel
of either that loads against torch 2.13 (see docs/e2e.md). Nothing in the end-to-end tier calls them.
"""
import importlib.abc
import importlib.machinery
import sys
import types

__version__ = "0.0.0+stub"


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
        raise RuntimeError(f"{__name__} stand-in: not available in this test environment")


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    return _Placeholder


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        if fullname.startswith(__name__ + "."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = types.ModuleType(spec.name)
        module.__path__ = []
        module.__getattr__ = __getattr__
        return module

    def exec_module(self, module):
        pass


sys.meta_path.insert(0, _Finder())
