"""A real `kibotos dev` for the SDK's tests: its own state directory and
free ports, real VMs (as test/e2e starts it).

KIBOTOS_BIN names the kibotos binary (scripts/test-sdk-py.sh builds it with
kibotos-guest beside it); KIBOTOS_CACHE, when set, is where dev keeps the
kernel package it downloads, so repeated runs download it once.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest

SDK = Path(__file__).resolve().parent.parent
REPO = SDK.parent.parent
sys.path.insert(0, str(SDK))

from kibotos import Kibotos  # noqa: E402

READY = "ready; Ctrl-C stops"
# The first start builds the default platform and template.
READY_TIMEOUT = 300
# A create that no node can take fails at PLACING after this, so the error
# test's refusal comes quickly.
PLACEMENT_TIMEOUT = "3s"


@dataclass
class Dev:
    home: Path  # KIBOTOS_HOME: dev writes config.env here

    def client(self, **kw) -> Kibotos:
        return Kibotos(config_file=self.home / "config.env", **kw)


@pytest.fixture(scope="session")
def dev():
    # Not pytest's tmp_path: it keeps the last runs' directories, and dev's
    # state holds a kernel, an image and block files.
    home = Path(tempfile.mkdtemp(prefix="kibotos-sdk-py-"))
    binary = os.environ.get("KIBOTOS_BIN") or str(REPO / "bin" / "kibotos")
    env = dict(os.environ, KIBOTOS_HOME=str(home))
    env.pop("KIBOTOS_CONFIG", None)
    log = open(home / "dev.log", "wb")
    proc = subprocess.Popen(
        [binary, "dev", "--workspace-listen", "127.0.0.1:0", "--operator-listen", "127.0.0.1:0",
         "--node-listen", "127.0.0.1:0", "--placement-timeout", PLACEMENT_TIMEOUT],
        env=env, stdout=subprocess.PIPE, stderr=log, text=True,
    )
    ready = threading.Event()

    def read_stdout():
        for line in proc.stdout:
            if line.rstrip("\n") == READY:
                ready.set()
        # Drained to the end so dev never blocks on a full pipe.

    threading.Thread(target=read_stdout, daemon=True).start()
    try:
        if not ready.wait(READY_TIMEOUT) or proc.poll() is not None:
            pytest.fail(f"kibotos dev not ready: {(home / 'dev.log').read_text()[-4000:]}")
        yield Dev(home=home)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        _kill_vms_of(home)
        shutil.rmtree(home, ignore_errors=True)


def _kill_vms_of(home: Path) -> None:
    """VMs outlive the node agent by design: end the QEMU processes this
    test's dev started (their command lines name its state directory)."""
    for pid_dir in Path("/proc").iterdir():
        if not pid_dir.name.isdigit():
            continue
        try:
            cmdline = (pid_dir / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "qemu-system" in cmdline and str(home) in cmdline:
            try:
                os.kill(int(pid_dir.name), signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.fixture(scope="session")
def client(dev):
    with dev.client() as k:
        yield k
