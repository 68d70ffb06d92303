"""The README's ten-line program, run as a user runs it."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from conftest import REPO, SDK

QUICKSTART = SDK / "examples" / "quickstart.py"


def test_readme_shows_the_quickstart_verbatim():
    program = QUICKSTART.read_text()
    assert len(program.splitlines()) <= 10
    for readme in (REPO / "README.md", SDK / "README.md"):
        assert f"```python\n{program}```" in readme.read_text(), f"{readme} does not show {QUICKSTART} as it is"


def test_quickstart_runs(dev, client):
    # Nothing but the client configuration `kibotos dev` wrote tells it
    # where ctrl is, as for a user who ran `kibotos dev`.
    env = {k: v for k, v in os.environ.items() if not k.startswith("KIBOTOS_")}
    env.update(KIBOTOS_HOME=str(dev.home), PYTHONPATH=str(SDK))
    out = subprocess.run([sys.executable, str(QUICKSTART)], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    m = re.fullmatch(r"hello from (ws-[0-9a-f]+)\nhi from Python\n", out.stdout)
    assert m, out.stdout
    # The guest's hostname is its Workspace id; the program deleted it.
    assert client.workspaces.get(m.group(1)).state == "DELETED"
