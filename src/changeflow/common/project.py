"""Where the project is: the directory holding template.yaml."""

from __future__ import annotations

import os
from pathlib import Path

from .errors import ProjectNotFound


def project_root() -> Path:
    """The directory holding template.yaml: CHANGEFLOW_ROOT, else the nearest one above the cwd;
    ``ProjectNotFound`` (one line, exit status 2 on the command line) when there is none."""
    if os.environ.get("CHANGEFLOW_ROOT"):
        root = Path(os.environ["CHANGEFLOW_ROOT"]).resolve()
        if not (root / "template.yaml").is_file():
            raise ProjectNotFound(f"CHANGEFLOW_ROOT is {str(root)!r}, which holds no template.yaml")
        return root
    here = Path.cwd().resolve()
    for folder in (here, *here.parents):
        if (folder / "template.yaml").is_file():
            return folder
    raise ProjectNotFound(f"no template.yaml in {str(here)!r} or above it: run inside the project "
                          "(the directory of template.yaml) or set CHANGEFLOW_ROOT")
