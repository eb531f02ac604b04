"""The user docs against the code (audit 45, helper C): cheap checks of what README.md and docs/*.md
(but PERFORMANCE.md) state, beside tests/test_audit_docs.py (command lines and flags),
tests/test_docs_examples.py (the code blocks run) and tests/test_audit28_docs.py."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

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


# Run in a fresh interpreter that has imported only `embedscope` (and, for speed, the libraries under
# it): each check in a child forked from it, so that a module an earlier check loaded cannot make a
# later one pass. Its output: one line per name that does not resolve, "<check>\t<where>: <error>".
CHILD = """
import json, os, sys
import h5py, matplotlib, numpy, pandas, scipy.linalg, sklearn.metrics, torch  # noqa: F401
import embedscope
assert not [m for m in sys.modules if m.startswith("embedscope.")], "embedscope modules imported early"
checks = json.loads(sys.argv[1])
for check, groups in checks.items():
    for group in groups:  # one child per group: [[full name, where], ...]
        pid = os.fork()
        if pid == 0:
            for full, where in group:
                obj = embedscope
                try:
                    for part in full.split(".")[1:]:
                        obj = getattr(obj, part)
                except AttributeError as e:
                    print(f"{check}\t{where}: {e}", flush=True)
            os._exit(0)
        os.waitpid(pid, 0)
"""


def _doc_names() -> list[list[list[str]]]:
    names = {}
    for name, where in _dotted_names().items():
        head, _, rest = name.partition(".")
        full = name if head == "embedscope" else f"{PREFIX[head]}.{rest}"
        if full == "embedscope.cli" or full.startswith("embedscope.cli."):
            continue  # the command line is never loaded so (it takes Ctrl-C over when imported)
        names[full] = f"{where}: {name}"
    assert len(names) >= 40, len(names)  # the extraction found the docs' names
    # `embedscope.X` goes through embedscope's own __getattr__ alone: those share one child
    deep = [[[full, where]] for full, where in names.items() if full.count(".") >= 2]
    return deep + [[[full, where] for full, where in names.items() if full.count(".") < 2]]


def _package_modules() -> list[list[list[str]]]:
    groups = []
    for init in sorted((ROOT / "embedscope").glob("*/__init__.py")):
        pkg = init.parent.name
        if pkg == "cli":
            continue
        mods = sorted(p.stem if p.suffix == ".py" else p.name for p in init.parent.iterdir()
                      if not p.name.startswith("_") and (p.suffix == ".py" or (p / "__init__.py").exists()))
        groups.append([[f"embedscope.{pkg}.{m}", f"embedscope.{pkg}.{m}"] for m in mods])
    assert len(groups) >= 10 and any(full == "embedscope.store.saliency" for g in groups for full, _ in g)
    return groups


@pytest.fixture(scope="module")
def unresolved() -> dict[str, list[str]]:
    checks = {"docs": _doc_names(), "modules": _package_modules()}
    res = subprocess.run([sys.executable, "-c", CHILD, json.dumps(checks)], capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    out = {check: [] for check in checks}
    for line in res.stdout.splitlines():
        check, _, what = line.partition("\t")
        out[check].append(what)
    return out


def test_every_python_name_the_docs_cite_is_reachable_after_a_bare_import(unresolved):
    """docs/store.md named `store.saliency.match_rows` and `store.update_properties`, docs/saliency.md
    `embedscope.models.distances`: after `import embedscope` (docs/architecture.md: every module loads on
    first use, without an import of its own) the first and third were an AttributeError (the store and
    models packages did not load their modules so) and the second does not exist (it is
    `store.embeddings.update_properties`). Every dotted name the docs cite resolves, attribute by
    attribute, in a fresh interpreter."""
    assert not unresolved["docs"], "names the docs cite that do not resolve:\n" + "\n".join(unresolved["docs"])


def test_every_module_of_every_package_is_one_attribute_away_after_a_bare_import(unresolved):
    """docs/architecture.md: "Every other module loads the same way on first use, without an import of
    its own" (all but embedscope.cli). embedscope.store.saliency and embedscope.models.distances were an
    AttributeError after `import embedscope`: those two packages had no such loading. Each package's
    modules are looked up in a child of a fresh interpreter (one child per package)."""
    assert not unresolved["modules"], "modules that do not load on first use:\n" + "\n".join(unresolved["modules"])
