"""The setup cell every lab starts with: the way in from a free cloud notebook (Colab, Kaggle), a no-op elsewhere.

``tools/make_labs.py`` puts :data:`SOURCE` right after each notebook's title (solutions and labs alike), so it is
the one place to change it. In a notebook opened on its own, with no copy of the course beside it, the cell
clones the course, runs ``tools/cloud_setup.py`` (installs what the image lacks, keeps its torch, prints the
doctor's report) and moves into ``labs/``; on a machine where the course is installed it only says so. The
next cell picks the track (``course.track()``: the GPU track where torch sees a CUDA GPU).
"""

from __future__ import annotations

import copy

CELL_ID = "cloud-setup"
#: Where the course is cloned from. The repository's address once it is public; until then a learner sets it here.
COURSE_URL = "<this repository's URL>"

SOURCE = f'''# Setup. On your own copy of the course this only checks. In a cloud notebook opened on its own (Colab, Kaggle),
# it clones the course, installs what the image lacks without touching its torch, and prints what the machine
# gives (about a minute: README, "In a cloud notebook"). Run it first.
import importlib.util
import os
import subprocess
import sys

COURSE_URL = "{COURSE_URL}"  # the course's git repository (the GitHub page you opened this notebook from)
_spec = importlib.util.find_spec("helpers")
if _spec is not None and os.path.exists(os.path.join(os.path.dirname(_spec.origin), "capability.py")):
    print("course found:", os.path.dirname(os.path.dirname(_spec.origin)))
else:
    home = os.path.abspath("gpu-timeline-labs")
    if not os.path.isdir(home):
        if COURSE_URL.startswith("<"):
            raise SystemExit("set COURSE_URL in this cell to the course's git URL, then run it again")
        subprocess.run(["git", "clone", "--depth", "1", "--quiet", COURSE_URL, home], check=True)
    subprocess.run([sys.executable, os.path.join(home, "tools", "cloud_setup.py")], check=True)
    sys.path.insert(0, home)
    importlib.invalidate_caches()
    os.chdir(os.path.join(home, "labs"))
if "google.colab" in sys.modules:  # Colab shows the interactive timeline once its widget manager is on
    from google.colab import output

    output.enable_custom_widget_manager()'''


def setup_cell() -> dict:
    return {"cell_type": "code", "execution_count": None, "id": CELL_ID, "metadata": {}, "outputs": [], "source": SOURCE}


def with_setup_cell(nb: dict) -> dict:
    """``nb`` with the setup cell as its second cell, after the lab's title (a markdown cell opening with a level-1
    heading), replacing an older copy of it; a notebook without such a title is returned as it is."""
    nb = copy.deepcopy(nb)
    cells = [c for c in nb["cells"] if c.get("id") != CELL_ID]
    first = cells[0] if cells else {}
    text = "".join(first.get("source", "")) if isinstance(first.get("source"), list) else first.get("source", "")
    if first.get("cell_type") != "markdown" or not text.startswith("# "):
        return nb
    nb["cells"] = cells[:1] + [setup_cell()] + cells[1:]
    return nb
