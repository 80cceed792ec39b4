# SPDX-License-Identifier: BSD-3-Clause
"""Checks the chorus package as this interpreter imports it (the build tree's with
PYTHONPATH=build/python, or a pip install): chorus.__version__ is the library's version
(_C.version(), and $CHORUS_VERSION when set: meson.build's), chorus/_C.pyi declares exactly what
_C exposes (names, each class's own members, the torch base class), py.typed is there, and
`python -m chorus.run --help` runs chorusrun (the one $CHORUS_CHORUSRUN names, when set).

    python3 package_check.py [EXPECTED_PACKAGE_DIR]

Prints one line starting PACKAGE_OK, or raises.
"""
import ast
import os
import subprocess
import sys


def stub_declarations(path):
    """{name: (kind, members, bases)} for the module-level names of a .pyi file."""
    decls = {}
    for node in ast.parse(open(path, encoding="utf-8").read()).body:
        if isinstance(node, ast.FunctionDef):
            decls[node.name] = ("function", set(), [])
        elif isinstance(node, ast.ClassDef):
            members = {n.name for n in node.body if isinstance(n, ast.FunctionDef)}
            decls[node.name] = ("class", members, [ast.unparse(b) for b in node.bases])
        elif isinstance(node, ast.AnnAssign):
            decls[node.target.id] = ("attribute", set(), [])
    return decls


def check_stubs(pkg, _C):
    decls = stub_declarations(os.path.join(pkg, "_C.pyi"))
    public = {n for n in dir(_C) if not n.startswith("_")}
    assert set(decls) == public, (f"_C.pyi declares {sorted(set(decls) - public)} that _C lacks "
                                  f"and lacks {sorted(public - set(decls))} that _C has")
    for name, (kind, members, bases) in decls.items():
        obj = getattr(_C, name)
        if kind == "class":
            own = {n for n in vars(obj) if not n.startswith("_")}
            stubbed = {m for m in members if not m.startswith("_")}
            assert own == stubbed, f"_C.{name}: stub members {sorted(stubbed)}, _C has {sorted(own)}"
            for base in bases:
                short = base.rsplit(".", 1)[-1]
                assert any(b.__name__ == short for b in obj.__mro__[1:]), \
                    f"_C.{name} does not derive from {base} (its bases: {obj.__mro__[1:]})"
        elif kind == "function":
            assert callable(obj), f"_C.{name} is not callable"
    return len(decls)


def main(argv):
    import chorus
    import chorus.torch  # noqa: F401 - registers the backend; loads _C
    from chorus import _C

    pkg = os.path.dirname(os.path.abspath(chorus.__file__))
    if argv:
        assert os.path.realpath(pkg) == os.path.realpath(argv[0]), \
            f"chorus imported from {pkg}, expected {argv[0]}"
    assert chorus.__version__ == _C.version(), \
        f"chorus.__version__ {chorus.__version__} but _C.version() {_C.version()}"
    want = os.environ.get("CHORUS_VERSION")
    assert not want or chorus.__version__ == want, \
        f"chorus.__version__ {chorus.__version__}, meson.build says {want}"
    assert os.path.isfile(os.path.join(pkg, "py.typed")), f"no py.typed in {pkg}"
    declared = check_stubs(pkg, _C)

    from chorus import run
    chorusrun = run.chorusrun_path()
    want_run = os.environ.get("CHORUS_CHORUSRUN")
    assert not want_run or os.path.realpath(chorusrun) == os.path.realpath(want_run), \
        f"chorus.run found {chorusrun}, expected {want_run}"
    r = subprocess.run([sys.executable, "-m", "chorus.run", "--help"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0 and "usage: chorusrun" in r.stdout, \
        f"python -m chorus.run --help: exit {r.returncode}\n{r.stdout}\n{r.stderr}"
    print(f"PACKAGE_OK chorus {chorus.__version__} at {pkg}; _C.pyi: {declared} names match _C; "
          f"py.typed; python -m chorus.run runs {chorusrun}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
