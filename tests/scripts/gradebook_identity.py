"""Grade one fixed small class with the xlalab of a given tree, or compare two such runs' outputs file by file.

Used to show that a refactoring of ``xlalab/grading`` leaves gradebooks byte-identical (issue 37)::

    python tests/scripts/gradebook_identity.py grade --tree /tmp/before --out /tmp/run-before
    python tests/scripts/gradebook_identity.py grade --tree .           --out /tmp/run-after
    python tests/scripts/gradebook_identity.py compare /tmp/run-before /tmp/run-after

``grade`` writes the hand-ins (from the tree's own ``solutions/`` and ``labs/``) into ``<out>/handins``, then runs
``python -m xlalab grade`` in a child process whose ``PYTHONPATH`` is the tree (so the grader, and the jail it
binds, import that tree's xlalab), with ``XLALAB_PROFILE=tiny`` and the master seed fixed (``secrets.randbits``
patched in the grading process: each run then derives the same check seeds). The class, Lab 1:

- ``alice``: the solution, byte for byte (graded; the row notes a copy of the instructor's source);
- ``bob``: the released lab, blank;
- ``carol``: not a notebook (a row with the reason);
- ``dave``: the solution whose kernel dies after the first check (``os._exit``);
- ``erin``: the solution with its first visible check cell changed (tampering: the released cell is used).

``compare`` prints every file of the two outputs that differs and exits 1 if one does, 0 if all are equal.
``report.html`` is compared without its section "Time per submission" (measured seconds); ``.xlalab-gradebook``
is a random token made for each new output folder (it differs by design). The grader's spool (``<out>/state``,
``XLALAB_GRADER_STATE``) is not compared: it holds measured times.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

LAB = "lab01_timing"
SEED = 0x5EED_1234_5678

_GRADE = """
import secrets, sys
secrets.randbits = lambda k: %d
from xlalab.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _cell(source: str, cell_id: str) -> dict:
    return {"cell_type": "code", "id": cell_id, "metadata": {}, "source": source, "outputs": [],
            "execution_count": None}


def write_class(tree: Path, folder: Path) -> None:
    """The five hand-ins of the class, from ``tree``'s solution and released lab."""
    folder.mkdir(parents=True, exist_ok=True)
    solution = (tree / "solutions" / f"{LAB}.ipynb").read_bytes()
    (folder / "alice.ipynb").write_bytes(solution)
    (folder / "bob.ipynb").write_bytes((tree / "labs" / f"{LAB}.ipynb").read_bytes())
    (folder / "carol.ipynb").write_text("this is not a notebook\n", encoding="utf-8")
    nb = json.loads(solution)
    checks = [i for i, c in enumerate(nb["cells"]) if c.get("metadata", {}).get("xlalab", {}).get("check")
              and not c["metadata"]["xlalab"].get("hidden")]
    dying = json.loads(solution)
    dying["cells"].insert(checks[0] + 1, _cell("import os\nos._exit(3)", "student-dies"))
    (folder / "dave.ipynb").write_text(json.dumps(dying, indent=1), encoding="utf-8")
    tampered = json.loads(solution)
    cell = tampered["cells"][checks[0]]
    src = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
    cell["source"] = src + "\npass  # changed by the student"
    (folder / "erin.ipynb").write_text(json.dumps(tampered, indent=1), encoding="utf-8")


def grade(tree: Path, out: Path) -> int:
    tree, out = tree.resolve(), out.resolve()
    handins = out / "handins"
    write_class(tree, handins)
    # the grader's private spool in the output folder too (not in ~/.local/state, where it would stay)
    env = {**os.environ, "PYTHONPATH": str(tree), "XLALAB_PROFILE": "tiny", "XLALAB_GRADER_STATE": str(out / "state")}
    cmd = [sys.executable, "-c", _GRADE % SEED, "grade", LAB, str(handins), "--out", str(out / "grades"),
           "--source", str(tree / "solutions"), "--cell-timeout", "300", "--timeout", "900", "--memory-gb", "6"]
    where = subprocess.run([sys.executable, "-c", "import xlalab; print(xlalab.__file__)"], env=env, cwd=tree,
                           capture_output=True, text=True, check=True).stdout.strip()
    print(f"grading with {where}", flush=True)
    return subprocess.run(cmd, env=env, cwd=tree, check=False).returncode


def _normal(path: Path) -> bytes:
    """The bytes of ``path`` as compared: the report without its times."""
    data = path.read_bytes()
    if path.name == "report.html":   # its time section: measured seconds (a histogram, the median, the slowest)
        return re.sub(rb"<h2>Time per submission</h2>.*?(?=<h2>)", b"", data, flags=re.S)
    return data


def compare(a: Path, b: Path) -> int:
    """Print each differing file of the two grading outputs; 1 if one differs."""
    ga, gb = a / "grades", b / "grades"
    names = sorted({p.relative_to(ga) for p in ga.rglob("*") if p.is_file()}
                   | {p.relative_to(gb) for p in gb.rglob("*") if p.is_file()})
    bad = 0
    for name in names:
        pa, pb = ga / name, gb / name
        if not pa.exists() or not pb.exists():
            print(f"only in {'second' if not pa.exists() else 'first'}: {name}")
            bad += 1
            continue
        if name.name == ".xlalab-gradebook":   # a random token made for each new output folder
            print(f"random token (differs by design): {name}")
            continue
        raw = pa.read_bytes() == pb.read_bytes()
        same = raw or _normal(pa) == _normal(pb)
        print(f"{'identical' if raw else 'same after removing times' if same else 'DIFFERENT'}: {name}")
        bad += not same
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    g = sub.add_parser("grade")
    g.add_argument("--tree", type=Path, required=True)
    g.add_argument("--out", type=Path, required=True)
    c = sub.add_parser("compare")
    c.add_argument("first", type=Path)
    c.add_argument("second", type=Path)
    args = p.parse_args(argv)
    if args.command == "grade":
        return grade(args.tree, args.out)
    return compare(args.first, args.second)


if __name__ == "__main__":
    sys.exit(main())
