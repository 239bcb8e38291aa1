"""A made-up class for the similarity tests: ``ana`` wrote her own cells, ``ben`` handed in ana's work with every
variable renamed, comments changed and cells reordered, and ``cleo`` and ``dan`` solved the same exercises each on
their own (the sample lab of helpers/labs.py, with written answers)."""

from __future__ import annotations

from helpers.labs import cell, code

ANA = {
    "p1-answer": '''def scale(x, k):
    """x * k as float64; x has shape (n,)."""
    arr = np.asarray(x, dtype=float)
    result = np.empty_like(arr)
    for index in range(arr.shape[0]):
        result[index] = arr[index] * k
    return result''',
    "p2-answer": '''def total(x):
    running = 0.0
    for value in np.asarray(x, dtype=float).ravel():
        running = running + float(value)
    return float(running)''',
    "extra": '''# my own test of scale
def check_my_scale():
    samples = [[1, 2, 3], [0.5, -1.5], []]
    for sample in samples:
        expected = [value * 3.0 for value in sample]
        got = list(scale(sample, 3.0))
        print(sample, got, expected, got == expected)
check_my_scale()''',
    "p2-why": "Floating-point addition is not associative, so summing in another order can round differently; "
              "for exact reals the order of the sum does not matter because addition is associative.",
}

BEN = {   # ana's, renamed and re-commented; her test cell moved to the end
    "p1-answer": '''def scale(x, k):
    """x * k as float64; x has shape (n,)."""
    a = np.asarray(x, dtype=float)
    out = np.empty_like(a)
    for i in range(a.shape[0]):
        out[i] = a[i] * k   # multiply each one
    return out''',
    "p2-answer": '''def total(x):
    acc = 0.0
    for v in np.asarray(x, dtype=float).ravel():
        acc = acc + float(v)
    return float(acc)''',
    "extra": '''def test_scale_by_hand():
    cases = [[1, 2, 3], [0.5, -1.5], []]
    for c in cases:
        want = [e * 3.0 for e in c]
        have = list(scale(c, 3.0))
        print(c, have, want, have == want)
test_scale_by_hand()''',
    "p2-why": "Floating-point addition is not associative, so summing in a different order can round "
              "differently; for exact real numbers the order does not matter because addition is associative.",
}

CLEO = {
    "p1-answer": '''def scale(x, k):
    return np.multiply(np.asarray(x, dtype=np.float64), float(k))''',
    "p2-answer": '''def total(x):
    import math
    return math.fsum(np.asarray(x, dtype=float).tolist())''',
    "extra": '''xs = np.linspace(0, 1, 5)
print("scale ok:", np.allclose(scale(xs, 2), xs * 2))
print("total ok:", abs(total(xs) - xs.sum()) < 1e-12)''',
    "p2-why": "Because the grader sums with np.sum, which adds in pairs; any grouping gives the same exact "
              "result since + is associative, though the rounding of floats may differ in the last bit.",
}

DAN = {
    "p1-answer": '''def scale(x, k):
    values = [float(v) for v in x]
    return np.array([v * k for v in values])''',
    "p2-answer": '''def total(x):
    return float(sum(float(v) for v in np.ravel(x)))''',
    "extra": '''for trial in range(3):
    data = np.random.default_rng(trial).normal(size=10)
    assert np.isclose(total(data), np.sum(data))
    assert np.allclose(scale(data, -2.0), -2.0 * data)
print("my own tests pass")''',
    "p2-why": "Addition of real numbers is associative and commutative, hence the total is independent of the "
              "order; I checked it on three random arrays in my test cell.",
}

STUDENTS = {"ana": ANA, "ben": BEN, "cleo": CLEO, "dan": DAN}


def handin(released, answers: dict[str, str], extra_last: bool = False):
    """The released lab (a copy) with ``answers`` filled in and the student's extra cell after Part 1 (or, with
    ``extra_last``, before the report cell at the end)."""
    import copy

    nb = copy.deepcopy(released)
    for cell_id in ("p1-answer", "p2-answer"):
        cell(nb, cell_id).source = answers[cell_id]
    why = next((c for c in nb.cells if c.get("id") == "p2-why"), None)
    if why is not None:
        why.source = answers["p2-why"]
    at = len(nb.cells) - 1 if extra_last else next(i for i, c in enumerate(nb.cells) if c.get("id") == "p1-answer") + 1
    nb.cells.insert(at, code("student-extra", answers["extra"]))
    return nb


def class_notebooks(released) -> dict:
    return {name: handin(released, answers, extra_last=name == "ben") for name, answers in STUDENTS.items()}


FILLER = ("basically", "really", "actually", "kind", "of", "just", "quite", "well")


def rewrite(answers: dict[str, str]) -> dict[str, str]:
    """A mechanical rewrite of a copied hand-in that hides it from plain fingerprints (issue 25's trial): every
    name read through an identity function, a no-op statement after each statement, filler words in answers."""
    import ast

    class Through(ast.NodeTransformer):
        def visit_Name(self, node):
            if isinstance(node.ctx, ast.Load) and node.id not in ("ident", "range", "print"):
                return ast.Call(ast.Name("ident", ast.Load()), [node], [])
            return node

    def pad(body):
        out = []
        for stmt in body:
            for field in ("body", "orelse", "finalbody"):
                if isinstance(getattr(stmt, field, None), list) and getattr(stmt, field):
                    setattr(stmt, field, pad(getattr(stmt, field)))
            out += [stmt, ast.Expr(ast.Constant(None))]
        return out

    out = {}
    for key, text in answers.items():
        if key.startswith("p") and key.endswith("why"):
            words = text.split()
            out[key] = " ".join(w + " " + FILLER[i % len(FILLER)] for i, w in enumerate(words))
            continue
        tree = Through().visit(ast.parse(text))
        tree.body = pad(tree.body)
        out[key] = ast.unparse(ast.fix_missing_locations(tree))
    out["extra"] = "def ident(v):\n    return v\n\n" + out["extra"]
    return out
