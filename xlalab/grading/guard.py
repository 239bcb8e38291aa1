"""The code the grader injects into a graded notebook (kernel side). See :mod:`xlalab.grading.build`.

``INIT`` is the source of the first cell: it snapshots what check cells rely on before any student code
runs and installs two functions under random names in ``builtins``: ``bind`` (a cell right after the setup
cell calls it to snapshot the modules the setup imported) and ``guard(check_id)``, the whole body of every
graded check cell. ``guard``:

1. puts back everything that was replaced since the snapshot (functions and classes in the namespaces of
   ``builtins``, ``math``, ``operator``, ``functools``, every ``numpy*`` and ``xlalab*`` module, ``tensorflow``
   and ``tf.debugging``/``tf.test``/``tf.math``; the code, defaults and keyword defaults of their Python
   functions; ``sys.modules`` entries; IPython's traceback display, custom exception handlers, input and AST
   transformers; the kernel's execute and send methods) and lists what it put back;
2. runs the check's source (held in its closure, not in the cell) in a copy of the user namespace in which
   module names bound by the setup cell point to the real modules and notebook definitions that shadow a
   builtin (``len = ...``) are set aside;
3. verifies nothing was replaced while the check ran, and appends ``{"check", "event": "start"|"end",
   "passed", "message", "notes"}`` to a log file whose path only the closure knows.

The grader scores a check only if nbval passed its cell *and* this log says it ended passed, so silencing
tracebacks (nbval sees no error) or transforming the cell away (no log line) earns nothing.
"""

INIT = r'''# xlalab grader: snapshot of what the checks rely on (injected; not part of the lab)
def _xlalab_setup_guard(log_path, nb_path, bodies_json, visible, guard_name, bind_name):
    import builtins, functools, json, linecache, math, operator, os, sys, types
    import numpy, numpy.testing
    from IPython.core.inputtransformer2 import TransformerManager

    ip = get_ipython()
    bodies = json.loads(bodies_json)
    _open, _compile, _exec, _isinstance, _callable, _type = open, compile, exec, isinstance, callable, type
    _id, _dict, _list, _set, _str, _len, _sorted = id, dict, list, set, str, len, sorted
    _getattr, _setattr, _delattr, _vars = getattr, setattr, delattr, vars
    _dumps, _BaseException, _AssertionError = json.dumps, BaseException, AssertionError
    _Module, _Function = types.ModuleType, types.FunctionType
    _modules, _linecache = sys.modules, linecache.cache
    transformer = TransformerManager()
    MISSING = object()
    SKIP = {"__builtins__", "__loader__", "__spec__", "__cached__", "__file__", "__doc__", "__name__",
            "__package__", "__path__", "__warningregistry__", "__all__", "_", "__", "___",
            "input", "raw_input", "getpass"}  # ipykernel swaps input() on every execute request
    WATCH_EXACT = {"builtins", "math", "operator", "functools", "tensorflow", "keras"}
    WATCH_PREFIX = ("numpy", "xlalab")

    entries = []      # (label, namespace dict, key, original value)
    functions = []    # (label, function, code, defaults, kwdefaults)
    seen_ns = _set()
    seen_fn = _set()

    def watch_namespace(label, ns):
        if _id(ns) in seen_ns:
            return
        seen_ns.add(_id(ns))
        for key, value in _list(ns.items()):
            if key in SKIP or not (_callable(value) or _isinstance(value, _Module)):
                continue
            if "Lazy" in _type(value).__name__:  # lazy loaders replace themselves on first use
                continue
            entries.append((f"{label}.{key}", ns, key, value))
            if _isinstance(value, _Function) and _id(value) not in seen_fn:
                seen_fn.add(_id(value))
                functions.append((f"{label}.{key}", value, value.__code__, value.__defaults__,
                                  value.__kwdefaults__))

    def watch_modules():
        for name, module in _sorted(_list(_modules.items()), key=lambda kv: (kv[0].count("."), kv[0])):
            if not _isinstance(module, _Module):
                continue
            if name in WATCH_EXACT or name.split(".")[0] in WATCH_PREFIX:
                try:
                    watch_namespace(name, _vars(module))
                except TypeError:
                    pass
        tf = _modules.get("tensorflow")
        for sub in ("debugging", "test", "math", "experimental.numpy"):
            obj = tf
            for part in sub.split("."):
                obj = _getattr(obj, part, None) if obj is not None else None
            if obj is not None:
                try:
                    watch_namespace(f"tf.{sub}", _vars(obj))
                except TypeError:
                    pass

    # Attributes of IPython's shell and the kernel that decide whether an error reaches nbval.
    SHELL_ATTRS = ("showtraceback", "_showtraceback", "showsyntaxerror", "showindentationerror",
                   "run_cell", "run_cell_async", "run_ast_nodes", "run_code", "transform_cell",
                   "transform_ast", "CustomTB", "custom_exceptions", "InteractiveTB", "SyntaxTB")
    KERNEL_ATTRS = ("do_execute", "execute_request", "send_response", "_publish_execute_input")
    slots = []        # (label, owner dict, key, original or MISSING)
    for owner, names, label in ((ip, SHELL_ATTRS, "get_ipython()"),
                                (getattr(ip, "kernel", None), KERNEL_ATTRS, "get_ipython().kernel")):
        if owner is None:
            continue
        for name in names:
            slots.append((f"{label}.{name}", owner.__dict__, name, owner.__dict__.get(name, MISSING)))
        for cls in _type(owner).__mro__:
            for name in names:
                if name in cls.__dict__:
                    slots.append((f"{cls.__name__}.{name}", cls, name, cls.__dict__[name]))
    session = getattr(getattr(ip, "kernel", None), "session", None)
    if session is not None:
        slots.append(("get_ipython().kernel.session.send", session.__dict__, "send",
                      session.__dict__.get("send", MISSING)))
    lists = [(f"get_ipython().{name}", _getattr(ip, name)) for name in
             ("ast_transformers", "input_transformers_cleanup", "input_transformers_post")
             if _isinstance(_getattr(ip, name, None), _list)]
    list_snapshots = [(label, lst, _list(lst)) for label, lst in lists]
    modules_snapshot = {}
    bound = {}
    user_ns = ip.user_ns
    initial_ns = _dict(user_ns)
    builtin_names = {k for k in _vars(builtins) if not k.startswith("_")}

    watch_modules()

    def restore():
        """Put back whatever was replaced; return labels of what was."""
        notes = []
        for label, owner, key, original in slots:
            if _isinstance(owner, _type):
                current = owner.__dict__.get(key, MISSING)
                if current is not original:
                    notes.append(label)
                    if original is MISSING:
                        _delattr(owner, key)
                    else:
                        _setattr(owner, key, original)
            else:
                current = owner.get(key, MISSING)
                if current is not original:
                    notes.append(label)
                    if original is MISSING:
                        owner.pop(key, None)
                    else:
                        owner[key] = original
        for label, lst, items in list_snapshots:
            if _len(lst) != _len(items) or any(a is not b for a, b in zip(lst, items)):
                notes.append(label)
                lst[:] = items
        for label, ns, key, original in entries:
            if ns.get(key, MISSING) is not original:
                notes.append(label)
                ns[key] = original
        for label, fn, code, defaults, kwdefaults in functions:
            if fn.__code__ is not code or fn.__defaults__ is not defaults or fn.__kwdefaults__ is not kwdefaults:
                notes.append(label + " (its code or defaults)")
                fn.__code__, fn.__defaults__, fn.__kwdefaults__ = code, defaults, kwdefaults
        for name, module in modules_snapshot.items():
            if _modules.get(name) is not module:
                notes.append(f"sys.modules[{name!r}]")
                _modules[name] = module
        return notes

    def log(record):
        with _open(log_path, "a", encoding="utf-8") as f:
            f.write(_dumps(record) + "\n")

    def bind():
        """After the setup cell: snapshot the modules it imported and its module names."""
        watch_modules()
        modules_snapshot.update({k: v for k, v in _modules.items() if _type(v) is _Module})
        bound.update({k: v for k, v in user_ns.items() if _isinstance(v, _Module) and not k.startswith("_")})
        initial_ns.update(user_ns)

    def message(err):
        try:
            detail = _str(err).strip()
        except _BaseException:
            detail = ""
        text = f"{_type(err).__name__}: {detail}" if detail else _type(err).__name__
        lines = [line for line in text.splitlines() if line.strip()]
        return (lines[0] if lines else _type(err).__name__)[:500]

    def guard(check_id):
        notes = restore()
        log({"check": check_id, "event": "start", "notes": notes})
        body = bodies[check_id]
        filename = f"<check {check_id}>"
        if check_id in visible:
            _linecache[filename] = (_len(body), None, body.splitlines(True), filename)
        g = _dict(user_ns)
        aside = []
        for name in _list(g):
            if name in builtin_names and g[name] is not initial_ns.get(name, MISSING):
                del g[name]
                aside.append(name)
        for name, module in bound.items():
            if g.get(name) is not module:
                notes.append(f"the name {name!r} (rebound in the notebook)")
                g[name] = module
        if aside:
            notes.append("the notebook's own " + ", ".join(_sorted(aside)) + " (Python's builtins were used)")
        g["__builtins__"] = builtins
        try:
            code = _compile(transformer.transform_cell(body), filename, "exec")
            _exec(code, g)
        except _BaseException as err:
            restore()
            log({"check": check_id, "event": "end", "passed": False, "message": message(err), "notes": notes})
            raise
        during = restore()
        if during:
            text = ("AssertionError: the code this check called replaced " + ", ".join(during[:5])
                    + "; the check does not count")
            log({"check": check_id, "event": "end", "passed": False, "message": text, "notes": notes + during})
            raise _AssertionError(text)
        log({"check": check_id, "event": "end", "passed": True, "message": "", "notes": notes})
        for key, value in g.items():
            if key != "__builtins__" and key not in aside and user_ns.get(key, MISSING) is not value \
                    and key not in bound:
                user_ns[key] = value

    _setattr(builtins, guard_name, guard)
    _setattr(builtins, bind_name, bind)
    try:
        os.remove(nb_path)  # the graded notebook (with hidden checks) leaves the disk before student code runs
    except OSError:
        pass

_xlalab_setup_guard(%(args)s)
del _xlalab_setup_guard
'''
