"""``make test-compat``: the course on other TensorFlow versions, each in its own Colab-like venv.

``python tests/scripts/compat_matrix.py .venv-compat/tf2.18.1 .venv-compat/tf2.19.1 ...`` (run by the course's own venv,
which drives the kernels: nbclient and nbval live there, not in the venvs under test). For each venv:

1. **Colab install path.** ``xlalab`` and ``xprof`` are uninstalled from the venv, then Lab 6's solution runs top
   to bottom in a kernel of that venv *without* the working tree on ``PYTHONPATH``: its setup cell installs the
   course exactly as in Colab (``pip install --no-deps`` of the working tree instead of the URL, then
   ``xlalab.compat.install_missing()``), and Part 6 needs ``xprof``. Then the profiler chapter's first capture
   (its cells up to the first ``profile.tool_names``; the book's ``glue`` stubbed) runs in the same kernel venv.
2. **Every chapter from its Colab button.** For each ``book/*.ipynb``, with ``xlalab`` uninstalled again: its first
   cell (the hidden setup cell of ``tests/scripts/chapter_setup.py``, installing a wheel built from the working tree
   where the chapter says ``git+<repository>``) and the imports of the chapter's own first code cell, in a fresh
   kernel of that venv started outside the repository (must pass); then that whole first code cell, recorded apart
   (a page may read the repository's files, which a Colab runtime does not have). The labs overview's only code reads
   ``solutions/`` at build time (a table removed from its page): there the setup cell alone runs.
3. **Unit tests** of the version-sensitive APIs (profiler, ``experimental_get_compiler_ir`` stages,
   ``sync_devices``, Keras mixed precision, the compat module) with that venv's pytest.
4. **Every solution notebook** under nbval (``--nbval-lax``: every check cell must pass) in that venv's kernel,
   at ``XLALAB_PROFILE=tiny``.

Writes ``results/compat/compat.json`` (one row per version, with seconds and the machine's load) and
``results/compat/compat.md`` (the table ``book/running_locally.md`` includes). Exits 1 if anything failed.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))
from scripts import chapter_setup  # noqa: E402  (tests/scripts/chapter_setup.py: the chapters' setup cell)

UNIT = ["tests/test_compat.py", "tests/test_profile.py", "tests/test_hlo_tf.py", "tests/test_bench.py",
        "tests/test_workloads.py"]
# bench's unit tests run on a scripted clock, so every one of them is version-sensitive only (none times the machine).
UNIT_K = "not slow"
KERNEL = "xlalab-compat"


def _run(cmd: list[str], env: dict | None = None, timeout: int = 1800) -> tuple[int, str]:
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    return done.returncode, (done.stdout + done.stderr)[-3000:]


def _versions(py: Path) -> dict[str, str]:
    code = ("import importlib.metadata as m, platform, json\n"
            "out = {'python': platform.python_version()}\n"
            f"for n in {PINNED!r}:\n"
            "    try:\n"
            "        out[n] = m.version(n)\n"
            "    except m.PackageNotFoundError:\n"
            "        out[n] = None\n"
            "print(json.dumps(out))")
    return json.loads(subprocess.run([str(py), "-c", code], capture_output=True, text=True, check=True).stdout)


# The packages whose versions the table shows (each pinned to Colab's in a compat venv: .ci/colab-tf<version>.txt).
PINNED = ("tensorflow", "keras", "numpy", "matplotlib", "ml_dtypes", "protobuf", "ipykernel")


def pin_source(tf_version: str) -> dict[str, str]:
    """The pin file of ``tf_version`` and the Colab runtime it copies (its first line), or {} where there is none."""
    path = REPO / ".ci" / f"colab-tf{tf_version}.txt"
    if not path.exists():
        return {}
    first = path.read_text().splitlines()[0].lstrip("# ").strip()
    return {"pin_file": str(path.relative_to(REPO)), "pinned_to": first}


def _kernelspec(venv: Path, pythonpath: str | None) -> dict[str, str]:
    """Write a kernelspec for ``venv``'s python; return the environment that makes Jupyter find it."""
    spec = venv / "share" / "jupyter" / "kernels" / KERNEL
    spec.mkdir(parents=True, exist_ok=True)
    env = {"XLALAB_PROFILE": "tiny", "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": pythonpath or ""}
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [str((venv / "bin" / "python").absolute()), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": f"xlalab compat {venv.name}", "language": "python", "env": env}))
    jenv = dict(os.environ)
    jenv["JUPYTER_PATH"] = str((venv / "share" / "jupyter").absolute())
    return jenv


def _execute(cells: list, venv: Path, timeout: int = 1500) -> str:
    """Run ``cells`` in a fresh kernel of ``venv`` (no working tree on its path); '' or the error's last lines."""
    jenv = _kernelspec(venv, None)
    nb = nbformat.v4.new_notebook(cells=cells, metadata={"kernelspec": {"name": KERNEL, "display_name": KERNEL}})
    old = dict(os.environ)
    os.environ.update(jenv)
    try:
        NotebookClient(nb, kernel_name=KERNEL, timeout=timeout, resources={"metadata": {"path": "/tmp"}}).execute()
    except Exception as err:  # noqa: BLE001 - any failure of the notebook is the result
        return f"{type(err).__name__}: {str(err)[-1500:]}"
    finally:
        os.environ.clear()
        os.environ.update(old)
    return ""


def colab_cells(source: str) -> list:
    """Lab 6's solution with its setup cell installing from the working tree, then the profiler's first capture."""
    lab = nbformat.read(REPO / "solutions" / "lab06_resnet.ipynb", as_version=4)
    cells = []
    for cell in lab.cells:
        if cell.cell_type != "code":
            continue
        new = nbformat.v4.new_code_cell(cell.source.replace("git+@REPOSITORY_URL@", source))
        cells.append(new)
    book = nbformat.read(REPO / "book" / "profiler.ipynb", as_version=4)
    cells.append(nbformat.v4.new_code_cell(
        "import sys, types  # the book's glue (myst_nb) is not what is tested here\n"
        "sys.modules.setdefault('myst_nb', types.SimpleNamespace(glue=lambda *a, **k: None))"))
    for cell in book.cells:
        if cell.cell_type != "code":
            continue
        cells.append(nbformat.v4.new_code_cell(cell.source))
        if "profile.tool_names(" in cell.source:
            break
    return cells


def _imports(source: str) -> str:
    """The top-level ``import`` and ``from ... import`` statements of a cell, in order (the rest left out)."""
    import ast

    tree = ast.parse(source)
    return "\n".join(ast.get_source_segment(source, node) or "" for node in tree.body
                     if isinstance(node, (ast.Import, ast.ImportFrom)))


def chapter_cells(path: Path, source: str) -> list:
    """The chapter's setup cell (installing from ``source`` instead of the repository URL), the imports of its
    first code cell, then that whole cell (which may read the repository's files, e.g. ``../results``)."""
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    if not code or not chapter_setup.is_setup(code[0]):
        raise AssertionError(f"{path.name}: its first cell is not the setup cell "
                             "(python tests/scripts/chapter_setup.py)")
    url = f"git+{chapter_setup.repository_url()}"
    assert url in code[0].source, f"{path.name}: the setup cell does not install {url}"
    cells = [nbformat.v4.new_code_cell(code[0].source.replace(url, source))]
    if path.stem != "labs_overview" and len(code) > 1:
        cells.append(nbformat.v4.new_code_cell(_imports(code[1].source)))
        cells.append(nbformat.v4.new_code_cell(code[1].source))
    return cells


def _execute_each(cells: list, venv: Path, timeout: int = 600) -> list[str]:
    """Run ``cells`` in one fresh kernel of ``venv`` (no working tree on its path), on past errors; each cell's
    error ('' where it ran)."""
    jenv = _kernelspec(venv, None)
    nb = nbformat.v4.new_notebook(cells=cells, metadata={"kernelspec": {"name": KERNEL, "display_name": KERNEL}})
    old = dict(os.environ)
    os.environ.update(jenv)
    try:
        NotebookClient(nb, kernel_name=KERNEL, timeout=timeout, allow_errors=True,
                       resources={"metadata": {"path": "/tmp"}}).execute()
    except Exception as err:  # noqa: BLE001 - a kernel that died or timed out fails every cell
        return [f"{type(err).__name__}: {str(err)[-1500:]}"] * len(cells)
    finally:
        os.environ.clear()
        os.environ.update(old)
    return ["; ".join(f"{o.ename}: {o.evalue}"[:300] for o in c.outputs if o.output_type == "error")
            for c in nb.cells]


def build_wheel(out: Path) -> Path:
    """A wheel of the working tree (what ``pip install --no-deps git+<repository>`` would install)."""
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(REPO)], check=True,
                   capture_output=True)
    return next(out.glob("xlalab-*.whl"))


def check_chapters(venv: Path, wheel: Path) -> tuple[dict[str, str], dict[str, str]]:
    """Each chapter in a fresh kernel of ``venv`` with xlalab uninstalled first: its setup cell and the imports of its
    first code cell ('pass' or the error), and, apart, whether that whole first cell runs outside a checkout."""
    py = venv / "bin" / "python"
    imports, whole = {}, {}
    for path in sorted((REPO / "book").glob("*.ipynb")):
        subprocess.run([str(py), "-m", "pip", "uninstall", "-q", "-y", "xlalab"], capture_output=True)
        errors = _execute_each(chapter_cells(path, str(wheel)), venv)
        imports[path.stem] = "; ".join(e for e in errors[:2] if e) or "pass"
        if len(errors) > 2:
            whole[path.stem] = errors[2] or "pass"
    return imports, whole


def check_venv(venv: Path, wheel: Path, chapters: bool = True) -> dict:
    """One compat venv: the Colab install path, (with ``chapters``) each chapter's first cells with the course not
    installed, the version-sensitive unit tests and every solution at the tiny profile."""
    py = venv / "bin" / "python"
    row: dict = {"venv": str(venv), **_versions(py), "seconds": {}}
    row.update(pin_source(row["tensorflow"]))
    t0 = time.time()
    subprocess.run([str(py), "-m", "pip", "uninstall", "-q", "-y", "xlalab", "xprof"], capture_output=True)
    err = _execute(colab_cells(str(REPO)), venv)
    row["colab_lab06_profiler"] = "pass" if not err else "fail"
    row["colab_error"] = err
    row["seconds"]["colab"] = round(time.time() - t0)

    if chapters:
        t0 = time.time()
        row["chapters"], row["chapters_first_cell"] = check_chapters(venv, wheel)
        row["seconds"]["chapters"] = round(time.time() - t0)
    else:
        row["chapters"], row["chapters_first_cell"] = {}, {}

    t0 = time.time()
    env = {**os.environ, "PYTHONPATH": str(REPO), "XLALAB_PROFILE": "tiny", "TF_CPP_MIN_LOG_LEVEL": "2"}
    rc, out = _run([str(py), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", UNIT_K, *UNIT], env=env)
    row["unit"] = "pass" if rc == 0 else "fail"
    row["unit_summary"] = out.strip().splitlines()[-1] if out.strip() else ""
    row["unit_error"] = "" if rc == 0 else out
    row["seconds"]["unit"] = round(time.time() - t0)
    _run([str(py), "-m", "xlalab", "hlo-census", "--record", str(REPO / "results" / "compat" / "fusion.json")], env=env)

    jenv = _kernelspec(venv, str(REPO))
    row["solutions"] = {}
    for nb in sorted((REPO / "solutions").glob("lab*.ipynb")):
        t0 = time.time()
        rc, out = _run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--nbval-lax",
                        "--nbval-kernel-name", KERNEL, "--nbval-cell-timeout", "1200", str(nb)], env=jenv)
        row["solutions"][nb.stem] = "pass" if rc == 0 else "fail"
        if rc:
            row.setdefault("solution_errors", {})[nb.stem] = out
        row["seconds"][nb.stem] = round(time.time() - t0)
    return row


def markdown(rows: list[dict]) -> str:
    """The compatibility table of ``book/running_locally.md``, from compat.json's rows."""
    def mark(v: str) -> str:
        return {"pass": "passed", "fail": "**failed**"}.get(v, v)

    lines = ["| TensorFlow | pinned to | Keras | NumPy | Matplotlib | ml_dtypes | protobuf | ipykernel | Python | "
             "Colab install + Lab 6 + profiler capture | each chapter's first cells, course not installed | unit tests "
             "(version-sensitive) | every solution (tiny) | book build | minutes |",
             "|" + "---|" * 15]
    for r in rows:
        sols = r.get("solutions", {})
        failed = [k for k, v in sols.items() if v != "pass"]
        sol = ("make test" if r.get("note") else f"passed ({len(sols)} labs)" if sols and not failed else
               f"**failed**: {', '.join(failed)}" if failed else "not run")
        chs = r.get("chapters", {})
        bad = [k for k, v in chs.items() if v != "pass"]
        ch = ("make test (installed)" if r.get("note") else f"passed ({len(chs)} pages)" if chs and not bad else
              f"**failed**: {', '.join(bad)}" if bad else "not run (the newest compat version runs it)")
        needs = sorted(k for k, v in r.get("chapters_first_cell", {}).items() if v != "pass")
        if needs:
            ch += f"; whole first cell outside a checkout fails: {', '.join(needs)}"
        pinned = (f"Colab {r['pinned_to'].split('runtime version ', 1)[-1].split(' ', 1)[0]} (`{r['pin_file']}`)"
                  if r.get("pin_file") else "pip's newest (pyproject.toml)")
        lines.append(f"| {r['tensorflow']} | {pinned} | {r['keras']} | {r['numpy']} | {r.get('matplotlib') or '—'} | "
                     f"{r.get('ml_dtypes') or '—'} | {r.get('protobuf') or '—'} | {r.get('ipykernel') or '—'} | "
                     f"{r['python']} | {mark(r.get('colab_lab06_profiler', 'not run'))} | {ch} | "
                     f"{mark(r.get('unit', 'not run'))} | {sol} | {mark(r.get('book', 'not run (default only)'))} | "
                     f"{'—' if r.get('note') else format(sum(r.get('seconds', {}).values()) / 60, '.1f')} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    if argv == ["--table"]:  # rewrite compat.md from compat.json
        out = json.loads((REPO / "results" / "compat" / "compat.json").read_text())
        (REPO / "results" / "compat" / "compat.md").write_text(markdown(out["rows"]))
        return 0
    rows = []
    t_all = time.time()
    import tempfile

    wheel = build_wheel(Path(tempfile.mkdtemp(prefix="xlalab-wheel-")))
    venvs = [Path(a) for a in argv]
    for venv in venvs:
        t0 = time.time()
        # The chapters' Colab path runs in the last venv only (the newest compat TensorFlow, today's likeliest Colab
        # runtime): about 3-5 minutes a version, which CI's 60-minute budget on 2 cores cannot pay three times.
        # XLALAB_COMPAT_CHAPTERS=all runs it in every venv.
        every = os.environ.get("XLALAB_COMPAT_CHAPTERS") == "all"
        row = check_venv(venv, wheel, chapters=every or venv == venvs[-1])
        row["wall_seconds"] = round(time.time() - t0)
        row["load_average"] = [round(x, 2) for x in os.getloadavg()]
        rows.append(row)
        print(f"TensorFlow {row['tensorflow']}: colab {row['colab_lab06_profiler']}, chapters "
              f"{sum(v == 'pass' for v in row['chapters'].values())}/{len(row['chapters'])} pass, unit {row['unit']} "
              f"({row['unit_summary']}), solutions {row['solutions']}, {row['wall_seconds']} s", flush=True)
    # The default version: what `make test` runs (every test, the book built with -W); its result is CI's own.
    default = _versions(Path(sys.executable))
    rows.append({**default, "venv": ".venv", "colab_lab06_profiler": "not run (full install)",
                 "unit": "make test", "solutions": {}, "book": "make test", "seconds": {},
                 "note": "the default venv: every test and the book build run by `make test`"})
    rows[-1]["solutions"] = {}
    out = {"host": platform.node(), "cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
           "wall_seconds": round(time.time() - t_all), "rows": rows}
    (REPO / "results" / "compat").mkdir(parents=True, exist_ok=True)
    (REPO / "results" / "compat" / "compat.json").write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    (REPO / "results" / "compat" / "compat.md").write_text(markdown(rows))
    ok = all(r.get("colab_lab06_profiler") == "pass" and r.get("unit") == "pass"
             and all(v == "pass" for v in r["chapters"].values())
             and all(v == "pass" for v in r["solutions"].values()) for r in rows[:-1])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
