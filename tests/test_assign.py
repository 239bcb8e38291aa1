"""Unit tests of xlalab.grading.assign on small notebooks made in the test (fast, no kernel)."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest

from xlalab import cli
from xlalab.grading import assign

from helpers import SAMPLE, SAMPLE_URL, check, code, md, sample_solution


def student(nb=None):
    return assign.student_notebook(nb or sample_solution(), SAMPLE_URL, SAMPLE)


def by_id(nb, cell_id):
    return next(c for c in nb.cells if c.id == cell_id)


def test_inline_answer_becomes_stub_at_the_begin_indentation():
    src = "def f(x):\n    y = 1\n    # BEGIN SOLUTION\n    return x + y\n    # END SOLUTION\n\nprint('kept')"
    assert assign.strip_inline(src) == ("def f(x):\n    y = 1\n    # YOUR CODE HERE\n    raise NotImplementedError\n"
                                        "\nprint('kept')")


def test_two_inline_blocks_and_top_level_block():
    src = "# BEGIN SOLUTION\na = 1\n# END SOLUTION\nb = 2\nif b:\n\t# BEGIN SOLUTION\n\tc = 3\n\t# END SOLUTION"
    assert assign.strip_inline(src) == ("# YOUR CODE HERE\nraise NotImplementedError\nb = 2\nif b:\n"
                                        "\t# YOUR CODE HERE\n\traise NotImplementedError")


@pytest.mark.parametrize("src", ["# BEGIN SOLUTION\nx = 1", "x = 1\n# END SOLUTION",
                                 "# BEGIN SOLUTION\n# BEGIN SOLUTION\n# END SOLUTION"])
def test_unbalanced_markers_are_refused(src):
    with pytest.raises(assign.FormatError):
        assign.strip_inline(src)


def test_student_version_strips_answers_and_hidden_checks():
    nb = student()
    ids = [c.id for c in nb.cells]
    assert "p1-hidden" not in ids and "p2-hidden" not in ids
    assert "BEGIN SOLUTION" not in by_id(nb, "p1-answer").source
    assert "raise NotImplementedError" in by_id(nb, "p1-answer").source
    assert by_id(nb, "p2-answer").source == assign.ANSWER_STUB
    assert by_id(nb, "p2-why").source == assign.ANSWER_BOX
    text = assign.dumps(nb)
    for secret in ("np.asarray(x, dtype=float) * k", "np.sum(x)", "associative", "default_rng", "hidden",
                   "mutations"):
        assert secret not in text, secret


def test_visible_checks_are_kept_verbatim_with_metadata():
    sol, nb = sample_solution(), student()
    assert by_id(nb, "p1-check").source == by_id(sol, "p1-check").source
    assert by_id(nb, "p1-check").metadata == {"xlalab": {"check": "p1-scale", "points": 2}}


def test_repository_url_is_substituted_in_the_setup_cell():
    setup = by_id(student(), "setup")
    assert SAMPLE_URL in setup.source and assign.REPOSITORY_TOKEN not in setup.source
    assert setup.metadata == {"xlalab": {"setup": True}}


def test_repository_url_comes_from_config(tmp_path):
    (tmp_path / "_config.yml").write_text("repository:\n  url: https://example.org/r\n  branch: main\n")
    assert assign.repository_url(tmp_path) == "https://example.org/r"


def test_notebook_metadata_is_minimal():
    sol = sample_solution()
    sol.metadata["instructor_notes"] = "secret"
    nb = student(sol)
    assert nb.metadata["xlalab"] == {"lab": SAMPLE}
    assert "instructor_notes" not in nb.metadata and "mutations" not in json.dumps(nb.metadata)
    assert nb.nbformat == 4 and nb.nbformat_minor == 5


def test_outputs_and_execution_counts_are_cleared():
    sol = sample_solution()
    c = by_id(sol, "p1-check")
    c.outputs = [nbformat.v4.new_output("stream", name="stdout", text="hi")]
    c.execution_count = 7
    c.metadata["execution"] = {"iopub.status.busy": "2026-01-01"}
    data = json.loads(assign.dumps(student(sol)))
    cell = next(x for x in data["cells"] if x["id"] == "p1-check")
    assert cell["outputs"] == [] and cell["execution_count"] is None and "execution" not in cell["metadata"]


def test_output_is_deterministic_whatever_the_metadata_order():
    a = sample_solution()
    b = sample_solution()
    # Same content, keys inserted in another order.
    for cell in b.cells:
        cell.metadata = dict(reversed(list(cell.metadata.items())))
        if "xlalab" in cell.metadata:
            cell.metadata["xlalab"] = dict(reversed(list(cell.metadata["xlalab"].items())))
    b.metadata = dict(reversed(list(b.metadata.items())))
    ta, tb = assign.dumps(student(a)), assign.dumps(student(b))
    assert ta == tb
    assert ta.endswith("}\n") and not ta.endswith("\n\n")
    assert assign.dumps(nbformat.reads(ta, as_version=4)) == ta  # a fixed point


@pytest.mark.parametrize("meta, header", [
    ({"check": "a", "points": 2}, "# CHECK a (3 points)"),
    ({"check": "a", "points": 2}, "# CHECK b (2 points)"),
    ({"check": "a", "points": 2}, "assert True"),
    ({"check": "a", "points": 0}, "# CHECK a (0 points)"),
])
def test_header_must_match_metadata(meta, header):
    nb = nbformat.v4.new_notebook(cells=[code("c", header + "\nassert True", **meta)])
    with pytest.raises(assign.FormatError):
        assign.checks(nb)


def test_duplicate_check_ids_are_refused():
    nb = nbformat.v4.new_notebook(cells=[check("a", "x", 1, "pass"), check("b", "x", 1, "pass")])
    with pytest.raises(assign.FormatError, match="duplicate"):
        assign.checks(nb)


def test_checks_lists_points_and_hidden():
    found = assign.checks(sample_solution())
    assert [(c.check, c.points, c.hidden) for c in found] == [
        ("p1-scale", 2, False), ("p1-scale-random", 2, True), ("p2-total", 1, False), ("p2-total-random", 1, True)]


def test_main_writes_labs_and_check_detects_drift(sample_root: Path, capsys):
    root = str(sample_root)
    assert cli.main(["assign", "--root", root, "--check"]) == 1  # labs/ missing
    assert cli.main(["assign", "--root", root]) == 0
    lab = sample_root / "labs" / f"{SAMPLE}.ipynb"
    first = lab.read_bytes()
    assert cli.main(["assign", "--root", root, "--check"]) == 0
    assert cli.main(["assign", "--root", root]) == 0 and lab.read_bytes() == first  # idempotent
    lab.write_text(lab.read_text().replace("Part 1", "Part One"))  # a hand edit
    assert cli.main(["assign", "--root", root, "--check"]) == 1
    assert cli.main(["assign", "--root", root]) == 0 and lab.read_bytes() == first
    sol = sample_root / "solutions" / f"{SAMPLE}.ipynb"
    nb = assign.read(sol)
    nb.cells.insert(0, md("new", "A new paragraph."))
    nbformat.write(nb, str(sol))  # the source changed, labs/ not regenerated
    assert cli.main(["assign", "--root", root, "--check"]) == 1
    (sample_root / "labs" / "lab77_orphan.ipynb").write_text("{}")
    assert cli.main(["assign", "--root", root]) == 0
    assert cli.main(["assign", "--root", root, "--check"]) == 1  # a lab without a solution
    assert "lab77_orphan" in capsys.readouterr().err


def test_main_refuses_a_bad_solution(sample_root: Path, capsys):
    sol = sample_root / "solutions" / f"{SAMPLE}.ipynb"
    nb = assign.read(sol)
    by_id(nb, "p1-check").source = by_id(nb, "p1-check").source.replace("(2 points)", "(5 points)")
    nbformat.write(nb, str(sol))
    assert cli.main(["assign", "--root", str(sample_root)]) == 2
    assert "p1-scale" in capsys.readouterr().err


def test_submissions_with_the_same_file_name_get_distinct_students(tmp_path):
    from xlalab.grading.submissions import expand_submissions

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    one, two = tmp_path / "a" / "lab01_timing.ipynb", tmp_path / "b" / "lab01_timing.ipynb"
    names = [n for n, _ in expand_submissions([one, two, one], "lab01_timing")]
    assert len(set(names)) == 3
    assert names[1] == "b" and names[0].startswith("a") and names[2].startswith("a")   # folder names (issue 26)
