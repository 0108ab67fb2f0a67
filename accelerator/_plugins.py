"""The backend plugins that installed distributions declare.

A distribution offers a backend plugin (docs/plugins.rst) through an
entry point of the ``accelerator.backends`` group::

    [project.entry-points."accelerator.backends"]
    mybackend = "mybackend:plugin_path"

The object the entry point names is the plugin's shared object: a path
(``str`` or ``os.PathLike``, absolute), or a callable of no arguments
that returns one.  The C core cannot call Python, so the module's C layer
calls :func:`discover` once, before the first probe (never at import),
and hands the core what it found; the core opens the files at the probe,
after the built-in backends and the plugins ``ACCELERATOR_BACKEND_PLUGINS``
names.

Listing entry points with ``importlib.metadata`` costs tens of
milliseconds (its import alone), so a cheap scan of the metadata folders
on ``sys.path`` comes first, and ``importlib.metadata`` is imported only
when some distribution may declare the group.
"""
from __future__ import annotations

import os
import sys
from typing import Any

GROUP = "accelerator.backends"

#: (label, path, origin, error): the entry point's name, the plugin's
#: shared object (None when the entry point named none), where it was
#: named (for the report) and why no path was found (None with a path)
Found = tuple[str, str | None, str, str | None]


def _may_declare() -> bool:
    """Whether any distribution on ``sys.path`` may declare the group:
    False only when no metadata folder's ``entry_points.txt`` names it
    and nothing but plain folders could hold distributions."""
    header = f"[{GROUP}]"
    for entry in sys.path:
        folder = entry or "."
        try:
            names = os.listdir(folder)
        except OSError:
            if os.path.isfile(folder):
                return True  # a zip or an egg: importlib.metadata reads it
            continue
        for name in names:
            if not name.endswith((".dist-info", ".egg-info")):
                continue
            try:
                with open(os.path.join(folder, name, "entry_points.txt"),
                          encoding="utf-8", errors="replace") as f:
                    if header in f.read():
                        return True
            except OSError:
                continue
    # Finders other than the path-based one may list distributions too.
    from importlib.machinery import PathFinder
    return any(getattr(finder, "find_distributions", None) is not None
               and finder is not PathFinder for finder in sys.meta_path)


def plugin_path(target: Any) -> str:
    """The absolute path an entry point's object gives: the object
    itself, or what it returns when called."""
    if callable(target):
        target = target()
    path = os.fspath(target)
    if not isinstance(path, str):
        raise TypeError(f"it gave a bytes path ({path!r}); expected a str")
    if not os.path.isabs(path):
        raise ValueError(f"it gave {path!r}, which is not an absolute path")
    # The core takes the path as UTF-8 text that ends at its first NUL.
    if "\0" in path:
        raise ValueError(f"it gave a path with a NUL character: {path!r}")
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"it gave a path that is not UTF-8: {path!r}"
                         ) from None
    return path


def discover() -> list[Found]:
    """Every entry point of the group, sorted by name, as the core takes
    it.  Never raises for one bad entry point: its error is its record."""
    if not _may_declare():
        return []
    from importlib.metadata import entry_points
    found: list[Found] = []
    for ep in sorted(entry_points(group=GROUP), key=lambda e: e.name):
        dist = getattr(ep, "dist", None)
        origin = f"entry point {ep.name} = {ep.value}"
        if dist is not None:
            origin += f" ({dist.name} {dist.version})"
        try:
            found.append((ep.name, plugin_path(ep.load()), origin, None))
        except Exception as exc:  # a broken plugin is refused, not raised
            found.append((ep.name, None, origin,
                          f"its entry point did not give the plugin's path: "
                          f"{type(exc).__name__}: {exc}"))
    return found
