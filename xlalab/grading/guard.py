"""The code the grader injects into a graded notebook (kernel side). See :mod:`xlalab.grading.build`.

``INIT`` is the source of the first cell: it snapshots what check cells rely on before any student code
runs and installs two functions under random names in ``builtins``: ``bind`` (a cell right after the setup
cell calls it to snapshot the modules the setup imported) and ``guard(check_id, body, key)``, the whole body
of every graded check cell. The check's code and its key are not in the kernel before that cell runs: the
nbval plugin, in the pytest process, writes them into the cell as nbval sends it (:mod:`.nbval_plugin`).
``guard``:

1. puts back everything that was replaced since the snapshot (functions and classes in the namespaces of
   ``builtins``, ``math``, ``operator``, ``functools``, every ``numpy*`` and ``xlalab*`` module, ``tensorflow``
   and ``tf.debugging``/``tf.test``/``tf.math``; the code, defaults and keyword defaults of their Python
   functions; ``sys.modules`` entries; IPython's traceback display, custom exception handlers, input and AST
   transformers; the kernel's execute and send methods) and lists what it put back;
2. clears trace and profile functions (``sys.settrace``, ``sys.setprofile``, and for new threads) and refuses
   new ones while the check runs;
3. runs the check's code in a copy of the user namespace in which notebook definitions that shadow a builtin
   (``len = ...``) are set aside, compiled inside a function whose free variables hold the module names
   bound by the setup cell (``np``), every other module name it reads (``time``) and the given names of the
   released lab that the check reads (``SIZES``,
   re-evaluated from the released cell: literal assignments and plain functions), so that code called by the
   check cannot rebind them in the check's namespace;
4. verifies nothing was replaced while the check ran, and appends ``{"check", "event": "start"|"end",
   "passed", "message", "notes", "mac"}`` to a log file (``mac``: an HMAC with the check's key,
   :func:`xlalab.grading.run.guard_mac`).

The grader scores a check only if nbval passed its cell *and* this log says, with a valid MAC, that it ended
passed, so silencing tracebacks (nbval sees no error), transforming the cell away (no log line) or writing
the log (no key) earns nothing.
"""

INIT = r'''# xlalab grader: snapshot of what the checks rely on (injected; not part of the lab)
def _xlalab_setup_guard(log_path, visible, given, guard_name, bind_name):
    import ast, builtins, functools, hashlib, hmac, json, linecache, math, operator, os, sys, threading, types
    import numpy, numpy.testing
    from IPython.core.inputtransformer2 import TransformerManager

    ip = get_ipython()
    _settrace, _setprofile, _gettrace, _getprofile = sys.settrace, sys.setprofile, sys.gettrace, sys.getprofile
    _thr_settrace, _thr_setprofile = threading.settrace, threading.setprofile
    _hmac_new, _sha256, _repr = hmac.new, hashlib.sha256, repr
    _parse, _literal_eval, _walk = ast.parse, ast.literal_eval, ast.walk
    _open, _compile, _exec, _isinstance, _callable, _type = open, compile, exec, isinstance, callable, type
    _id, _dict, _list, _set, _str, _len, _sorted = id, dict, list, set, str, len, sorted
    _getattr, _setattr, _delattr, _vars = getattr, setattr, delattr, vars
    _dumps, _BaseException, _AssertionError = json.dumps, BaseException, AssertionError
    _Module, _Function, _Code, _tuple = types.ModuleType, types.FunctionType, types.CodeType, tuple
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

    def log(record, key):
        msg = f"{record['check']}\0{record['event']}\0{record.get('passed')!r}"
        record["mac"] = _hmac_new(key.encode(), msg.encode("utf-8", "backslashreplace"), _sha256).hexdigest()
        with _open(log_path, "a", encoding="utf-8", errors="backslashreplace") as f:
            f.write(_dumps(record) + "\n")

    def refuse(*args, **kwargs):
        raise PermissionError("a trace or profile function cannot be set while a graded check runs")

    TRACE_SLOTS = ((sys, "settrace"), (sys, "setprofile"), (threading, "settrace"), (threading, "setprofile"))

    def no_tracing():
        _settrace(None)
        _setprofile(None)
        _thr_settrace(None)
        _thr_setprofile(None)
        for owner, name in TRACE_SLOTS:
            _setattr(owner, name, refuse)

    def tracing_back():
        _setattr(sys, "settrace", _settrace)
        _setattr(sys, "setprofile", _setprofile)
        _setattr(threading, "settrace", _thr_settrace)
        _setattr(threading, "setprofile", _thr_setprofile)
        found = _gettrace() is not None or _getprofile() is not None
        _settrace(None)
        _setprofile(None)
        return found

    def names_read(tree):
        return {n.id for n in _walk(tree) if _isinstance(n, ast.Name) and _isinstance(n.ctx, ast.Load)}

    def names_stored(tree):
        out = _set()
        for n in _walk(tree):
            if _isinstance(n, ast.Name) and not _isinstance(n.ctx, ast.Load):
                out.add(n.id)
            elif _isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                out.add(n.name)
            elif _isinstance(n, (ast.Import, ast.ImportFrom)):
                for a in n.names:
                    out.add((a.asname or a.name).split(".")[0])
            elif _isinstance(n, ast.ExceptHandler) and n.name:
                out.add(n.name)
        return out

    def code_key(co):
        """A code object's instructions, names and constants, nested code included, without file or lines."""
        return (co.co_code, co.co_names, _tuple(code_key(c) if _isinstance(c, _Code) else c for c in co.co_consts))

    def same(a, b):
        try:
            if _isinstance(a, _Function) and _isinstance(b, _Function):
                return code_key(a.__code__) == code_key(b.__code__) and a.__defaults__ == b.__defaults__
            return _type(a) is _type(b) and _repr(a) == _repr(b)
        except _BaseException:
            return False

    def compiled(source, filename, protected):
        """The check's code as a function whose free variables are the protected names (None: plain code)."""
        tree = _parse(source, filename)
        stored = names_stored(tree)
        params = [n for n in _sorted(protected) if n not in stored]
        outer = ast.FunctionDef(name="__xlalab_outer__", args=ast.arguments(
            posonlyargs=[], args=[ast.arg(arg=n) for n in params], kwonlyargs=[], kw_defaults=[], defaults=[]),
            body=[], decorator_list=[], lineno=1, col_offset=0)
        inner_body = ([ast.Global(names=_sorted(stored), lineno=1, col_offset=0)] if stored else []) + \
            (tree.body or [ast.Pass(lineno=1, col_offset=0)])
        inner = ast.FunctionDef(name="__xlalab_check__", args=ast.arguments(
            posonlyargs=[], args=[], kwonlyargs=[], kw_defaults=[], defaults=[]), body=inner_body,
            decorator_list=[], lineno=1, col_offset=0)
        outer.body = [inner, ast.Return(value=ast.Name(id="__xlalab_check__", ctx=ast.Load()), lineno=1,
                                        col_offset=0)]
        module = ast.fix_missing_locations(ast.Module(body=[outer], type_ignores=[]))
        return _compile(module, filename, "exec"), params

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

    def guard(check_id, body, key):
        notes = restore()
        log({"check": check_id, "event": "start", "notes": notes}, key)
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
            source = transformer.transform_cell(body)
            try:
                read = names_read(_parse(source, filename))
            except SyntaxError:
                read = _set()
            protected = {n for n in read if n in bound or _isinstance(g.get(n), _Module)}
            for name in _sorted(n for n in given if n in read):
                had = g.get(name, MISSING)
                try:
                    _exec(_compile(given[name], f"<given {name}>", "exec"), g)
                except _BaseException:   # it needs a name the notebook does not have: keep the notebook's
                    if had is not MISSING:
                        g[name] = had
                    continue
                if had is MISSING or not same(had, g[name]):
                    notes.append(f"the given name {name!r} (changed in the notebook; the released one was used)")
                protected.add(name)
            try:
                code, params = compiled(source, filename, protected)
            except SyntaxError:
                code, params = _compile(source, filename, "exec"), None
        except _BaseException as err:
            log({"check": check_id, "event": "end", "passed": False, "message": message(err), "notes": notes}, key)
            raise
        no_tracing()
        try:
            if params is None:
                _exec(code, g)
            else:
                _exec(code, g)
                make = g.pop("__xlalab_outer__")
                make(*[g[n] for n in params])()
        except _BaseException as err:
            traced = tracing_back()
            restore()
            log({"check": check_id, "event": "end", "passed": False, "message": message(err), "notes": notes}, key)
            raise
        traced = tracing_back()
        during = restore()
        if traced:
            during.append("sys.settrace/sys.setprofile (a trace or profile function was set)")
        if during:
            text = ("AssertionError: the code this check called replaced " + ", ".join(during[:5])
                    + "; the check does not count")
            log({"check": check_id, "event": "end", "passed": False, "message": text, "notes": notes + during}, key)
            raise _AssertionError(text)
        log({"check": check_id, "event": "end", "passed": True, "message": "", "notes": notes}, key)
        for key_, value in g.items():
            if key_ != "__builtins__" and key_ not in aside and user_ns.get(key_, MISSING) is not value \
                    and key_ not in bound and key_ not in given and not key_.startswith("__xlalab"):
                user_ns[key_] = value

    _setattr(builtins, guard_name, guard)
    _setattr(builtins, bind_name, bind)

_xlalab_setup_guard(%(args)s)
del _xlalab_setup_guard
'''
