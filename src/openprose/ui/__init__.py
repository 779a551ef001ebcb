"""``prose ui``: a local, read-only web view of a project's runs, live while they go on.

Loaded only by that command (``prose compile`` never imports it); needs Jinja2 (the ``ui``
extra). :func:`create_app` builds the Starlette application over opened state stores.
"""

from __future__ import annotations

from openprose.ui.app import create_app

__all__ = ["create_app"]
