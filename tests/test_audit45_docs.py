"""The user docs against the code (audit 45, helper C): cheap checks of what README.md and docs/*.md
(but PERFORMANCE.md) state, beside tests/test_audit_docs.py (command lines and flags),
tests/test_docs_examples.py (the code blocks run) and tests/test_audit28_docs.py."""

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md"] + sorted(p for p in (ROOT / "docs").glob("*.md") if p.name != "PERFORMANCE.md")
# the short forms the docs use for a front door (`store.load`, `analyses.evaluate` ...)
PREFIX = {"store": "embedscope.store", "analyses": "embedscope.analyses", "metrics": "embedscope.metrics",
          "importers": "embedscope.importers", "viz": "embedscope.viz"}
NOT_PYTHON = re.compile(r"\.(py|md|h5|hdf5|pt|pth|csv|json|png|pdf|ipynb|c|yaml|tar)$")


def _dotted_names() -> dict[str, str]:
    """Every dotted Python name a doc cites in `code` (`embedscope.x.y`, `store.f`, ...) -> where."""
    found = {}
    for doc in DOCS:
        for ln, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
            for span in re.findall(r"`([^`]+)`", line):
                for name in re.findall(r"(?<![\w./-])((?:embedscope|store|analyses|metrics|importers|viz)"
                                       r"(?:\.[A-Za-z_]\w*)+)", span):
                    if not NOT_PYTHON.search(name):
                        found.setdefault(name, f"{doc.name}:{ln}")
    return found


def test_every_python_name_the_docs_cite_is_reachable_after_a_bare_import():
    """docs/store.md named `store.saliency.match_rows` and `store.update_properties`, docs/saliency.md
    `embedscope.models.distances`: after `import embedscope` (docs/architecture.md: every module loads on
    first use, without an import of its own) the first and third were an AttributeError (the store and
    models packages did not load their modules so) and the second does not exist (it is
    `store.embeddings.update_properties`). Every name cited resolves, attribute by attribute, in a fresh
    interpreter."""
    names = {}
    for name, where in _dotted_names().items():
        head, _, rest = name.partition(".")
        full = name if head == "embedscope" else f"{PREFIX[head]}.{rest}"
        if full == "embedscope.cli" or full.startswith("embedscope.cli."):
            continue  # the command line is never loaded so (it takes Ctrl-C over when imported)
        names[full] = f"{where}: {name}"
    assert len(names) >= 40, len(names)  # the extraction found the docs' names
    # each name in a child forked from an interpreter that has run only `import embedscope` (and loaded
    # the libraries underneath, for speed): a module of embedscope that an earlier name loaded must not
    # make a later one resolve
    # (`embedscope.X` goes through embedscope's own __getattr__ alone: those are resolved at the end)
    code = (
        "import json, os, sys\n"
        "import h5py, matplotlib, numpy, pandas, scipy.linalg, sklearn.metrics, torch  # noqa: F401\n"
        "import embedscope\n"
        "assert not [m for m in sys.modules if m.startswith('embedscope.')], 'imported before the check'\n"
        "names = json.loads(sys.argv[1])\n"
        "for full, where in sorted(names.items(), key=lambda kv: kv[0].count('.') < 2):\n"
        "    pid = os.fork() if full.count('.') >= 2 else 0\n"
        "    if pid == 0:\n"
        "        obj = embedscope\n"
        "        try:\n"
        "            for part in full.split('.')[1:]:\n"
        "                obj = getattr(obj, part)\n"
        "        except AttributeError as e:\n"
        "            print(f'{where}: {e}', flush=True)\n"
        "        if full.count('.') >= 2:\n"
        "            os._exit(0)\n"
        "    else:\n"
        "        os.waitpid(pid, 0)\n"
    )
    res = subprocess.run([sys.executable, "-c", code, json.dumps(names)], capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.strip() == "", f"names the docs cite that do not resolve:\n{res.stdout}"
