"""What the package's modules share: the error of a missing optional package, and lazy module attributes."""

import importlib


class MissingExtra(ImportError):
    """A package an optional feature needs is not installed; the message names what to `pip install`."""


def lazy_attributes(package: str, modules: dict[str, str]):
    """A module `__getattr__` (PEP 562) that imports `package.modules[name]` when `name` is first used."""

    def __getattr__(name: str):
        if name in modules:
            return getattr(importlib.import_module(f".{modules[name]}", package), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
