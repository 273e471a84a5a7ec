#!/usr/bin/env python3
"""Checks the source layout rules of docs/architecture.md ("Source layout"):

1. Every quoted #include is a path from the repository root that exists.
2. Libraries depend downwards only: shared/ includes only shared/; server/, client/,
   distributed/ and tools/ include shared/ and themselves; sim/ may add server/ and
   client/; tests/ and bench/ may include anything.
3. A library's detail/ headers are included only from its own folder.
4. Namespaces follow folders: code in shared/<lib>/ is in fedcore::<lib> (shared/util is
   the vocabulary every library uses and lives in fedcore itself), server/<lib>/ in
   fedcore::<lib>, client/, sim/, distributed/ and python/ (the SDK's
   bindings, which may include client/) in fedcore::<folder>.

Prints each violation as path:line: message and exits 1 if there is any.
"""
import os
import re
import subprocess
import sys

ALLOWED = {
    "shared": {"shared"},
    "server": {"shared", "server"},
    "client": {"shared", "client"},
    "distributed": {"shared", "distributed"},
    "tools": {"shared", "tools"},
    "sim": {"shared", "server", "client", "sim"},
    "python": {"shared", "client", "python"},
}
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')
NAMESPACE = re.compile(r"^namespace (fedcore(?:::[a-z_]+)*) \{")


def expected_namespace(path):
    parts = path.split("/")
    if parts[0] == "shared" and len(parts) > 2:
        return "fedcore" if parts[1] in ("util", "asio") else "fedcore::" + parts[1]
    if parts[0] == "server" and len(parts) > 2:
        return "fedcore::" + parts[1]
    if parts[0] in ("client", "sim", "distributed", "python"):
        return "fedcore::" + parts[0]
    return None


def main():
    root = subprocess.check_output(["git", "rev-parse", "--show-toplevel"], text=True).strip()
    os.chdir(root)
    files = subprocess.check_output(
        ["git", "ls-files", "*.cpp", "*.hpp", "*.cpp.in"], text=True).split()
    problems = []
    for path in files:
        top = path.split("/")[0]
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
        for number, line in enumerate(lines, 1):
            m = INCLUDE.match(line)
            if m:
                target = m.group(1)
                where = f"{path}:{number}"
                if not os.path.isfile(target):
                    problems.append(f"{where}: \"{target}\" is not a path from the repository root")
                    continue
                target_top = target.split("/")[0]
                if top in ALLOWED and target_top not in ALLOWED[top]:
                    problems.append(f"{where}: {top}/ may not include {target} (layering)")
                if "/detail/" in target and os.path.dirname(os.path.dirname(target)) != \
                        os.path.dirname(path).removesuffix("/detail"):
                    problems.append(f"{where}: {target} is private to its library")
            n = NAMESPACE.match(line)
            expected = expected_namespace(path)
            if n and expected and not (n.group(1) == expected or
                                       n.group(1).startswith(expected + "::")):
                problems.append(f"{path}:{number}: namespace {n.group(1)} in a file of "
                                f"{os.path.dirname(path)}/ (expected {expected})")
    for p in problems:
        print(p)
    if problems:
        print(f"check_layout: {len(problems)} problem(s)", file=sys.stderr)
        return 1
    print(f"check_layout: {len(files)} files follow the layout rules")
    return 0


if __name__ == "__main__":
    sys.exit(main())
