"""The README's walk-through runs as written, in order (issue 17: a newcomer's first hour)."""

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _blocks(lang):
    text = (ROOT / "README.md").read_text()
    return re.findall(rf"```{lang}\n(.*?)```", text, flags=re.S)


def test_readme_first_lines_are_the_two_commands():
    first = (ROOT / "README.md").read_text().split("```")[1]
    assert [ln.split("#")[0].strip() for ln in first.strip().splitlines()] == ["make demo", "make test"]


def test_readme_walkthrough_and_python_run_in_order(tmp_path):
    (tmp_path / ".venv").symlink_to(Path(sys.prefix))
    env = {**os.environ, "MPLBACKEND": "Agg"}
    bash = _blocks("bash")
    assert len(bash) == 1, "one shell walk-through"
    res = subprocess.run(["bash", "-euo", "pipefail", "-c", bash[0]], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=1200)
    assert res.returncode == 0, res.stderr[-3000:]
    for f in ("margin.h5", "rmargin.h5", "eval.csv", "spectrum.png", "tsne.png", "yoked.png", "scatter.png",
              "neighbours.png", "agreement.png", "report.html"):
        assert (tmp_path / "walk" / f).stat().st_size > 0, f
    for i, src in enumerate(_blocks("python")):
        res = subprocess.run([sys.executable, "-c", src], cwd=tmp_path, env=env, capture_output=True, text=True,
                             timeout=300)
        assert res.returncode == 0, f"python block {i}: {res.stderr[-3000:]}"
