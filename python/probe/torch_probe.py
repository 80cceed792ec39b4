# SPDX-License-Identifier: BSD-3-Clause
"""What building chorus._C against this interpreter's torch needs, asked of torch itself.

Run by python/meson.build with the configured Python (under pip: the interpreter that builds).
Prints one `key<TAB>value` a line:

  version   torch's version without a local part (1.13.0a0, 2.6.0)
  abi       torch._C._GLIBCXX_USE_CXX11_ABI as 0 or 1 (-D_GLIBCXX_USE_CXX11_ABI=)
  include   a directory to add to the include path (several lines, in order)
  libdir    a directory holding libtorch.so and the other libraries _C links
  pybind11  "torch" when torch ships its own pybind11 headers (wheels do; they must be used),
            "system" when it does not (Debian: pybind11-dev)
  pybind11_define  NAME="value": a PYBIND11_* define torch's own extensions are built with
            (several lines; none from torch 2.10 on)

The headers are where torch.utils.cpp_extension.include_paths() says (a wheel or conda torch:
site-packages/torch/include). Debian's python3-torch points torch/include at /usr/include with
links that dangle without libtorch-dev; when the first include path lacks the headers, the
interpreter's own prefix (sys.prefix/include, sys.base_prefix/include) is tried. A directory
the compiler searches anyway (/usr/include) is never printed: passing it again breaks
libstdc++'s #include_next. Exits 1 with the reason on stderr when the headers or the libraries
are not there.
"""
import os
import sys

import torch
from torch.utils import cpp_extension

MARK = os.path.join("torch", "csrc", "distributed", "c10d", "Work.hpp")
LIBS = ("torch", "torch_cpu", "c10", "torch_python")
COMPILER_DEFAULTS = ("/usr/include", "/usr/local/include")


def include_dirs():
    torch_paths = cpp_extension.include_paths()
    roots = torch_paths[:1] + [os.path.join(p, "include") for p in (sys.prefix, sys.base_prefix)]
    for root in roots:
        if not os.path.isfile(os.path.join(root, MARK)):
            continue
        # torch's list when it holds the headers (root, root/torch/csrc/api/include, ...), else
        # the same layout under the fallback root.
        dirs = torch_paths if root == torch_paths[0] else [
            root, os.path.join(root, "torch", "csrc", "api", "include")]
        dirs = [d for d in dirs if os.path.isdir(d)
                and os.path.realpath(d) not in COMPILER_DEFAULTS]
        return root, dirs
    sys.exit(f"torch {torch.__version__} at {os.path.dirname(torch.__file__)}: no C++ headers "
             f"({MARK} is in none of {roots}); Debian: install libtorch-dev")


def library_dir():
    for d in cpp_extension.library_paths():
        if all(os.path.exists(os.path.join(d, f"lib{name}.so")) for name in LIBS):
            return d
    sys.exit(f"torch {torch.__version__}: lib{{{','.join(LIBS)}}}.so not all in "
             f"{cpp_extension.library_paths()}")


def main():
    root, dirs = include_dirs()
    print("version\t" + torch.__version__.split("+")[0])
    print("abi\t" + str(int(torch._C._GLIBCXX_USE_CXX11_ABI)))
    for d in dirs:
        print("include\t" + d)
    print("libdir\t" + library_dir())
    # Only torch's own include directory counts (a fallback root may hold pybind11-dev's).
    has_pybind11 = (root == cpp_extension.include_paths()[0]
                    and os.path.isfile(os.path.join(root, "pybind11", "pybind11.h")))
    print("pybind11\t" + ("torch" if has_pybind11 else "system"))
    # pybind11 keeps its type registry under a key made of the compiler, standard library and
    # C++ ABI; an extension whose key differs from torch's cannot see torch's classes
    # ("referenced unknown base type c10d::Backend"). torch before 2.10 says what it was built
    # with (its wheels before 2.7: _cxxabi1011, which g++ 12 would not name on its own), and its
    # own extensions are compiled with the same defines; later torches leave it to pybind11.
    for name in ("COMPILER_TYPE", "STDLIB", "BUILD_ABI"):
        value = getattr(torch._C, f"_PYBIND11_{name}", None)
        if value:
            print(f"pybind11_define\tPYBIND11_{name}=\"{value}\"")


if __name__ == "__main__":
    main()
