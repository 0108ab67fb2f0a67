"""``python -m accelerator``: the environment report (see ``_report``)."""
from __future__ import annotations

from ._report import main

if __name__ == "__main__":
    raise SystemExit(main())
