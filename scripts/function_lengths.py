#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Lists the longest functions of C++ files, or fails if one is longer than a bound.

  scripts/function_lengths.py [--max N] [--top K] PATH...

PATH: files or folders (their .cpp and .hpp files). A function's length is the lines from the
line of its opening brace to the line of its closing one, both counted (the signature left out);
lambdas and nested blocks count in the function around them. A heuristic, not a parser
(comments, literals and preprocessor lines are blanked first; a continued #define is not): a
brace block at namespace or class scope whose header (the text since the last ';', '{' or '}')
has a ')' is a function. With --max, exits 1 if any function is longer than N.
"""
import argparse
import os
import re
import sys


def strip(text):
    """Comments and string/char literals blanked, newlines kept (so line numbers hold)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("".join(ch if ch == "\n" else " " for ch in text[i:j]))
            i = j
        elif text.startswith('R"', i):
            m = re.match(r'R"([^(]*)\(', text[i:])
            end = text.find(")" + m.group(1) + '"', i) if m else -1
            j = n if end < 0 else end + len(m.group(1)) + 2
            out.append('""' + "".join(ch for ch in text[i:j] if ch == "\n"))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(c + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


SCOPE = re.compile(r"\b(namespace|class|struct|union|enum)\b")


def functions(path):
    with open(path, encoding="utf-8") as f:
        text = strip(f.read())
    # Preprocessor lines blanked too: `#if defined(X)` is no function header.
    text = re.sub(r"(?m)^[ \t]*#.*$", "", text)
    stack = []  # per open brace: 'scope', 'function' or 'block'
    header_start = 0
    line = 1
    starts = []  # (brace line, name) of open functions
    for i, c in enumerate(text):
        if c == "\n":
            line += 1
        elif c == "{":
            header = text[header_start:i]
            in_function = "function" in stack
            if in_function:
                kind = "block"
            elif SCOPE.search(header) and ")" not in header.split("{")[0]:
                kind = "scope"
            elif ")" in header and not re.search(r"=\s*$", header):
                kind = "function"
                m = re.search(r"([\w:~]+)\s*\(", header)
                starts.append((line, m.group(1) if m else "?"))
            else:
                kind = "block"
            stack.append(kind)
            if kind != "block" or in_function:
                header_start = i + 1
        elif c == "}":
            kind = stack.pop() if stack else "block"
            if kind == "function":
                first, name = starts.pop()
                yield name, first, line - first + 1
            # A brace initializer at scope level (a default argument `= {}`) does not end the
            # header it sits in.
            if kind != "block" or "function" in stack:
                header_start = i + 1
        elif c == ";":
            header_start = i + 1


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--max", type=int)
    parser.add_argument("--top", type=int, default=10)
    parser.add_argument("paths", nargs="+")
    args = parser.parse_args()
    files = []
    for p in args.paths:
        if os.path.isdir(p):
            for root, _, names in os.walk(p):
                files += [os.path.join(root, x) for x in names if x.endswith((".cpp", ".hpp"))]
        else:
            files.append(p)
    found = [(n, f"{path}:{line}", name) for path in sorted(files)
             for name, line, n in functions(path)]
    found.sort(reverse=True)
    for n, where, name in found[: args.top]:
        print(f"{n:5d}  {name}  {where}")
    if args.max is not None:
        over = [x for x in found if x[0] > args.max]
        if over:
            print(f"{len(over)} function(s) longer than {args.max} lines", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
