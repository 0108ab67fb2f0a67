"""The template backend plugin for accelerator.

Importing this package loads nothing: accelerator calls
:func:`plugin_path` (the ``accelerator.backends`` entry point) at its first
probe and opens the shared object itself.
"""
from __future__ import annotations

import os
from importlib.machinery import EXTENSION_SUFFIXES

__all__ = ["plugin_path"]


def plugin_path() -> str:
    """The absolute path of the plugin's shared object (``_backend``,
    built beside this file)."""
    here = os.path.dirname(os.path.abspath(__file__))
    for suffix in EXTENSION_SUFFIXES:
        path = os.path.join(here, "_backend" + suffix)
        if os.path.exists(path):
            return path
    raise FileNotFoundError(f"no _backend shared object in {here} "
                            f"(looked for {', '.join(EXTENSION_SUFFIXES)})")
