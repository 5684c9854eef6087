"""Where the project is: the directory holding template.yaml."""

from __future__ import annotations

import os
from pathlib import Path


def project_root() -> Path:
    """The directory holding template.yaml: CHANGEFLOW_ROOT, else the nearest one above the cwd."""
    if os.environ.get("CHANGEFLOW_ROOT"):
        return Path(os.environ["CHANGEFLOW_ROOT"]).resolve()
    here = Path.cwd().resolve()
    for folder in (here, *here.parents):
        if (folder / "template.yaml").is_file():
            return folder
    raise FileNotFoundError("no template.yaml here or above; run inside the project or set CHANGEFLOW_ROOT")
