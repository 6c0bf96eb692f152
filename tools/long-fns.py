#!/usr/bin/env python3
"""Lists functions in shipped code longer than a limit (default 100 lines) that have no
comment saying why: issue 23's rule. A function passes when a line of its doc comment (or a
comment just above it) starts with `Long:`. Test modules (`#[cfg(test)]`), `tests/`,
`benches/` and the dev-only crates are skipped. Exit 1 when any is found."""
import os, re, sys

LIMIT = int(sys.argv[1]) if len(sys.argv) > 1 else 100
ROOTS = ["src"] + [os.path.join("crates", c, "src") for c in sorted(os.listdir("crates"))
                   if c not in ("sim",)]
FN = re.compile(r"^(\s*)(pub(\([a-z]+\))? )?(async )?(const )?(unsafe )?fn ([a-z_0-9]+)")


def has_body(lines, i):
    """False for a declaration without a body (a trait method's `fn ...;`): its signature
    ends with `;` before any `{`, and the next `}` at its indent is someone else's."""
    for line in lines[i:]:
        code = line.split("//")[0].rstrip()
        if "{" in code:
            return True
        if code.endswith(";"):
            return False
    return False


found = []
for root in ROOTS:
    for dirpath, _, files in os.walk(root):
        for f in files:
            if not f.endswith(".rs") or f == "tests.rs":
                continue
            path = os.path.join(dirpath, f)
            lines = open(path, encoding="utf-8").read().split("\n")
            test_from = next((i for i, l in enumerate(lines) if l.startswith("#[cfg(test)]")), len(lines))
            for i, line in enumerate(lines[:test_from]):
                m = FN.match(line)
                if not m or not has_body(lines, i):
                    continue
                indent = m.group(1)
                # a declaration without a body (a trait's) ends with `;` before any `{`
                k = i
                while k < len(lines) and "{" not in lines[k] and not lines[k].rstrip().endswith(";"):
                    k += 1
                if k < len(lines) and "{" not in lines[k]:
                    continue
                # the body ends at the first line that is `indent}` after the signature
                end = next((j for j in range(i + 1, len(lines)) if lines[j] == indent + "}"), None)
                if end is None or end - i + 1 <= LIMIT:
                    continue
                j = i - 1
                doc = []
                while j >= 0 and lines[j].strip().startswith(("///", "//", "#[")):
                    doc.append(lines[j]); j -= 1
                if any("Long:" in d for d in doc):
                    continue
                found.append((end - i + 1, path, i + 1, m.group(7)))
for n, path, line, name in sorted(found, reverse=True):
    print(f"{n:5} {path}:{line} {name}")
sys.exit(1 if found else 0)
