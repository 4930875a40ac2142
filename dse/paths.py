"""Where dse's own files live: the config tree of the checkout (``conf/``)."""

from __future__ import annotations

from pathlib import Path

#: The primary configs of the entry points and the platforms (Hydra's config tree).
CONF_DIR = Path(__file__).resolve().parent.parent / "conf"
