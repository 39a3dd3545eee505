"""The notebook kernel `make install` registers belongs to its checkout (issue 27): two
clones on one machine each run their notebooks on their own .venv, whatever kernel of the
same name a user-wide registration (an older install) left behind."""

from __future__ import annotations

import json
import os
import subprocess
import sysconfig
import venv
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
KERNEL = "delta-barrier"
FIND_KERNEL = (
    "from jupyter_client.kernelspec import KernelSpecManager; "
    f"print(KernelSpecManager().get_kernel_spec({KERNEL!r}).argv[0])"
)


def test_two_checkouts_each_run_their_own_venv(tmp_path):
    home = tmp_path / "home"
    stale = home / ".local" / "share" / "jupyter" / "kernels" / KERNEL
    stale.mkdir(parents=True)
    (stale / "kernel.json").write_text(
        json.dumps(
            {"argv": ["/elsewhere/.venv/bin/python"], "display_name": "x", "language": "python"}
        )
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("JUPYTER") and k != "MAKEFLAGS"}
    env["HOME"] = str(home)
    for name in ("a", "b"):
        checkout = tmp_path / name
        venv.create(checkout / ".venv", with_pip=False)
        (site,) = (checkout / ".venv" / "lib").glob("python*/site-packages")
        (site / "project.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
        made = subprocess.run(
            ["make", "-f", str(REPO / "Makefile"), "kernel"],
            cwd=checkout,
            env=env,
            capture_output=True,
            text=True,
        )
        assert made.returncode == 0, made.stderr
    for name in ("a", "b"):
        python = tmp_path / name / ".venv" / "bin" / "python"
        found = subprocess.run(
            [python, "-c", FIND_KERNEL], env=env, capture_output=True, text=True, check=True
        )
        assert Path(found.stdout.strip()) == python
    assert not (tmp_path / "a" / ".venv" / "share").samefile(tmp_path / "b" / ".venv" / "share")


def test_the_notebook_names_the_checkouts_kernel():
    metadata = json.loads((REPO / "notebooks" / "explore.ipynb").read_text())["metadata"]
    assert metadata["kernelspec"]["name"] == KERNEL
    assert "--sys-prefix" in (REPO / "Makefile").read_text()
    assert "--user" not in (REPO / "Makefile").read_text()
