"""Files the pages load: the stylesheet and script under ``/static/``, and the deep-zoom viewer under ``/viewer/``.

The viewer (OpenSeadragon) is installed from npm at set-up by ``scripts/install-viewer.sh`` and served from that folder
(``IMAGESVC_VIEWER_DIR``); it is never copied into this repository. Without it the reading page still shows the page
image and says that deep zoom is off.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from aiohttp import web

from imagesvc.errors import NotFound
from imagesvc.web.app_keys import SERVICES
from imagesvc.web.params import any_query
from imagesvc.web.responses import PublicFile

__all__ = ["STATIC", "VIEWER_READY", "VIEWER_SCRIPT", "static", "viewer", "viewer_folder", "viewer_ready"]

STATIC = Path(__file__).with_name("static")
CHECKOUT = Path(__file__).resolve().parents[2]
VIEWER_PACKAGE = Path("openseadragon") / "build" / "openseadragon"
VIEWER_SCRIPT = "openseadragon.min.js"
INSTALL_HINT = "Run scripts/install-openseadragon.py (make run does), then restart; or set IMAGESVC_VIEWER_DIR."
VIEWER_READY = web.AppKey("pages_viewer_ready", bool)  # looked up once at start: install, then restart
_TYPES = {".css": "text/css", ".js": "text/javascript", ".png": "image/png", ".svg": "image/svg+xml"}


def viewer_folder(settings: Any) -> Path:
    """Where OpenSeadragon's built files are, under ``IMAGESVC_VIEWER_DIR`` or the checkout's viewer/node_modules."""
    root = Path(settings.viewer_dir) if settings.viewer_dir else CHECKOUT / "viewer" / "node_modules"
    return root / VIEWER_PACKAGE


def viewer_ready(settings: Any) -> bool:
    return (viewer_folder(settings) / VIEWER_SCRIPT).is_file()


def _inside(root: Path, relative: str) -> Path | None:
    """``root/relative`` when it is a file inside ``root`` (no ``..``, no absolute path, no symlink out), else None."""
    try:
        path = (root / relative).resolve()
        path.relative_to(root.resolve())
    except (ValueError, OSError):
        return None
    return path if path.suffix in _TYPES and path.is_file() else None


async def _serve(root: Path, relative: str, cache: str) -> web.FileResponse | None:
    """The file under ``root``, sent once (see ``PublicFile``), or None."""
    path = await asyncio.to_thread(_inside, root, relative)
    if path is None:
        return None
    return PublicFile(path, headers={"Cache-Control": cache, "Content-Type": _TYPES[path.suffix]})


@any_query  # caches and pages add version strings to asset URLs
async def static(request: web.Request) -> web.StreamResponse:
    """``GET /static/{path}``: the pages' stylesheet and script (revalidated: they change with the code)."""
    relative = request.match_info["path"]
    response = await _serve(STATIC, relative, "public, max-age=300")
    if response is None:
        raise NotFound(f"No static file {relative!r}.", recovery=["The pages use /static/pages.css and pages.js."])
    return response


@any_query
async def viewer(request: web.Request) -> web.StreamResponse:
    """``GET /viewer/{path}``: OpenSeadragon's files, from the folder scripts/install-viewer.sh installed."""
    folder = viewer_folder(request.app[SERVICES].settings)
    relative = request.match_info["path"]
    response = await _serve(folder, relative, "public, max-age=86400")
    if response is not None:
        return response
    if not (folder / VIEWER_SCRIPT).is_file():
        # The folder's absolute path is the operator's business (doctor and the start-up log name it), not a caller's.
        raise NotFound(f"The deep-zoom viewer is not installed (no {VIEWER_SCRIPT}).", recovery=[INSTALL_HINT])
    raise NotFound(f"The viewer has no file {relative!r}.", recovery=[f"Its script is /viewer/{VIEWER_SCRIPT}."])
