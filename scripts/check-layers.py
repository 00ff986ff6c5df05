#!/usr/bin/env python3
"""The include-layer check: no source file in src/ includes a header from a layer above its own.

The layers and what each may include are read from the table under "## Layers" in
docs/architecture.md, so the document and the check cannot disagree. The rules:
  - src/ has no .c or .h files at its top level, and its folders are flat;
  - every folder of src/ is a row of the table, and every row is a folder;
  - a project include is written "folder/name.h" (or a header generated into build/gen/:
    "version.h", "openapi_yaml.h", "ui_assets.h"),
    names an existing header, and its folder is the includer's own or one its row allows;
  - no include circle between modules. A module is foo.c + foo.h, together with the files
    it is cut into: foo_bar.{c,h} whose header one of its files includes (api.c includes
    api_internal.h, so api_local.c and api_proxy.c are api's). Its files may include each
    other; two modules may not, directly or through others;
  - a command (cli/cmd_*.c) includes no other command's header: shared code lives in a
    cli_ helper or in a layer below;
  - every allocation goes through base/mem: no malloc, calloc, realloc, strdup, strndup or
    asprintf outside base/mem.c (free() stays for what a library allocated, such as
    json_dumps' text).

Usage: check-layers.py [--root DIR]   check the tree at DIR (default: this repository)
       check-layers.py --self-test    check that each rule refuses a tree that breaks it
Exit status: 0 clean, 1 violations (one line each, file:line: what), 2 no usable layer table.
"""
import argparse
import pathlib
import re
import sys
import tempfile

# build/gen/, by the Makefile: version.h from scripts/pins.env, openapi_yaml.h from
# docs/openapi.yaml, ui_assets.h from ui/; below every layer
GENERATED = {"version.h", "openapi_yaml.h", "ui_assets.h"}
ROW = re.compile(r"^\|\s*`([a-z0-9_]+)/`\s*\|[^|]*\|([^|]*)\|\s*$")
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]*)"')
BARE_ALLOC = re.compile(r"(?<![\w.>])(malloc|calloc|realloc|strdup|strndup|v?asprintf)\s*\(")
ALLOCATOR = "base/mem.c"


class TableError(Exception):
    pass


def read_layers(doc):
    """Returns {folder: set of folders it may include} from the '## Layers' table of doc."""
    if not doc.is_file():
        raise TableError(f"{doc}: missing; it holds the layer table")
    layers, in_section = {}, False
    for line in doc.read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            in_section = line.startswith("## Layers")
            continue
        m = ROW.match(line) if in_section else None
        if m:
            layers[m.group(1)] = set(re.findall(r"`([a-z0-9_]+)`", m.group(2)))
    if not layers:
        raise TableError(f"{doc}: no layer table (rows '| `folder/` | owns | may include |') "
                         "under '## Layers'")
    for folder, allowed in layers.items():
        unknown = sorted(allowed - layers.keys())
        if unknown:
            raise TableError(f"{doc}: layer `{folder}/` may include `{unknown[0]}`, which is not a row")
    return layers


def check_includes(root, path, folder, layers):
    """Yields one message per include of path that breaks the rules."""
    rel = path.relative_to(root)
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        m = INCLUDE.match(line)
        if not m or m.group(1) in GENERATED:
            continue
        target = m.group(1)
        parts = target.split("/")
        where = f"{rel}:{lineno}: #include \"{target}\""
        if len(parts) != 2 or parts[0] not in layers:
            yield f"{where}: write project includes as \"folder/name.h\" with a folder of src/"
        elif not (root / "src" / target).is_file():
            yield f"{where}: no such header src/{target}"
        elif parts[0] != folder and parts[0] not in layers[folder]:
            allowed = ", ".join(sorted(layers[folder])) or "no other folder"
            yield (f"{where}: goes up a layer ({folder}/ may include {allowed}; "
                   f"see docs/architecture.md, Layers)")


def read_includes(src):
    """Returns {stem: set of project stems it includes} for every file of src ("serve/api")."""
    graph = {}
    for path in src.glob("*/*.[ch]"):
        stem = str(path.relative_to(src).with_suffix(""))
        targets = graph.setdefault(stem, set())
        for line in path.read_text(encoding="utf-8").splitlines():
            m = INCLUDE.match(line)
            if m and m.group(1).endswith(".h") and m.group(1).count("/") == 1:
                targets.add(m.group(1)[:-2])
    return graph


def module_of(graph):
    """Returns {stem: the module it belongs to}: foo, or foo when foo's files include foo_bar.h."""
    owner = {stem: stem for stem in graph}
    for stem in sorted(graph, key=len):
        members, grown = {stem}, True
        while grown:
            grown = False
            for member in list(members):
                for t in graph.get(member, ()):
                    if t.startswith(stem + "_") and t in graph and t not in members:
                        members.add(t)
                        grown = True
        for member in members:
            if owner[member] == member:
                owner[member] = owner[stem]
    return owner


def check_circles(src):
    """Yields one message per include circle between modules of src."""
    graph = read_includes(src)
    owner = module_of(graph)
    edges = {}
    for stem, targets in graph.items():
        edges.setdefault(owner[stem], set()).update(
            owner.get(t, t) for t in targets if owner.get(t, t) != owner[stem])
    state, path = {}, []

    def visit(u):
        state[u] = 1
        path.append(u)
        for v in sorted(edges.get(u, ())):
            if state.get(v) == 1:
                yield "src/: include circle: " + " -> ".join(path[path.index(v):] + [v])
            elif v not in state:
                yield from visit(v)
        path.pop()
        state[u] = 2

    for u in sorted(edges):
        if u not in state:
            yield from visit(u)


def check_commands(src):
    """Yields one message per command that includes another command's header."""
    for path in sorted((src / "cli").glob("cmd_*.c")):
        for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            m = INCLUDE.match(line)
            if m and m.group(1).startswith("cli/cmd_") and m.group(1) != f"cli/{path.stem}.h":
                yield (f"src/cli/{path.name}:{lineno}: #include \"{m.group(1)}\": a command "
                       "includes another command; move what they share to a cli_ helper or below")


def check_allocations(src):
    """Yields one message per bare allocation outside base/mem.c (comments and strings skipped)."""
    for path in sorted(src.glob("*/*.[ch]")):
        rel = path.relative_to(src).as_posix()
        if rel == ALLOCATOR:
            continue
        text = re.sub(r'/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"',
                      lambda m: re.sub(r"[^\n]", " ", m.group(0)), path.read_text(encoding="utf-8"),
                      flags=re.S)
        for lineno, line in enumerate(text.splitlines(), 1):
            m = BARE_ALLOC.search(line)
            if m:
                yield (f"src/{rel}:{lineno}: {m.group(1)}(): allocate through base/mem.h "
                       "(mem_alloc, mem_strdup, ...)")


def check(root):
    """Returns the list of violations in the tree at root (empty when clean)."""
    layers = read_layers(root / "docs" / "architecture.md")
    src, problems = root / "src", []
    folders = {p.name for p in src.iterdir() if p.is_dir()}
    for name in sorted(layers.keys() - folders):
        problems.append(f"docs/architecture.md: layer `{name}/` has no folder src/{name}/")
    for path in sorted(src.rglob("*")):
        if path.suffix not in (".c", ".h") or not path.is_file():
            continue
        rel = path.relative_to(src)
        if len(rel.parts) != 2:
            where = "at the top of src/" if len(rel.parts) == 1 else "in a nested folder"
            problems.append(f"src/{rel}: a source file {where}; put it flat in its layer's folder")
        elif rel.parts[0] not in layers:
            problems.append(f"src/{rel}: folder src/{rel.parts[0]}/ is not a row of "
                            "docs/architecture.md's layer table")
        else:
            problems.extend(check_includes(root, path, rel.parts[0], layers))
    problems.extend(check_circles(src))
    problems.extend(check_allocations(src))
    if (src / "cli").is_dir():
        problems.extend(check_commands(src))
    return problems


def run(root):
    try:
        problems = check(root)
    except TableError as e:
        print(f"check-layers: {e}", file=sys.stderr)
        return 2
    for p in problems:
        print(p, file=sys.stderr)
    if problems:
        print(f"check-layers: {len(problems)} violation(s)", file=sys.stderr)
        return 1
    n = sum(1 for p in (root / "src").rglob("*") if p.suffix in (".c", ".h"))
    print(f"check-layers: {n} files in src/, no include goes up a layer or makes a circle, no allocation bypasses base/mem")
    return 0


# --- self-test: each rule must refuse a tree that breaks it -------------------------------

SELF_TEST_DOC = """# t
## Layers
| folder | owns | may include |
|---|---|---|
| `base/` | the bottom | nothing |
| `plan/` | above base | `base` |
| `side/` | beside plan | `base` |
| `cli/` | commands | `base` |
## Next
| `ghost/` | outside the section, ignored | `base` |
"""
SELF_TEST_TREE = {
    "src/base/mem.h": "",
    "src/base/mem.c": '#include "base/mem.h"\n',
    "src/plan/plan.h": '#include "base/mem.h"\n',
    "src/plan/plan.c": ('#include "plan/plan.h"\n#include "plan/fit.h"\n#include "plan/plan_cut.h"\n'
                        '#include "version.h"\n#include <stdio.h>\n'),
    "src/plan/plan_cut.h": "",
    "src/plan/fit.h": "",
    "src/side/side.c": '#include "base/mem.h"\n',
    "src/cli/cmd_a.h": "",
    "src/cli/cmd_b.h": "",
}
SELF_TEST_CASES = [  # (file added or replaced, its text, the message expected or None)
    ("src/base/mem.c", '#include "plan/plan.h"\n',
     'src/base/mem.c:1: #include "plan/plan.h": goes up a layer (base/ may include no other folder'),
    ("src/side/side.c", '\n  # include "plan/plan.h"\n',
     'src/side/side.c:2: #include "plan/plan.h": goes up a layer (side/ may include base'),
    ("src/plan/plan.c", '#include "mem.h"\n', 'write project includes as "folder/name.h"'),
    ("src/plan/plan.c", '#include "../base/mem.h"\n', 'write project includes as "folder/name.h"'),
    ("src/plan/plan.c", '#include "base/nope.h"\n', "no such header src/base/nope.h"),
    ("src/plan/fit.c", '#include "plan/plan.h"\n',
     "src/: include circle: plan/fit -> plan/plan -> plan/fit"),
    ("src/plan/plan_cut.c", '#include "plan/plan.h"\n', None),  # a cut of plan: no circle
    ("src/cli/cmd_a.c", '#include "cli/cmd_a.h"\n#include "cli/cmd_b.h"\n',
     'src/cli/cmd_a.c:2: #include "cli/cmd_b.h": a command includes another command'),
    ("src/side/side.c", '#include "base/mem.h"\nchar *f(void) { return strdup("x"); }\n',
     "src/side/side.c:2: strdup(): allocate through base/mem.h"),
    ("src/side/side.c", '/* calloc(1, 2) in a comment */\nconst char *s = "malloc(3)";\n'
     'void *g(void) { return mem_calloc(1, 2); }\n', None),
    ("src/loose.c", "", "src/loose.c: a source file at the top of src/"),
    ("src/plan/deep/x.h", "", "src/plan/deep/x.h: a source file in a nested folder"),
    ("src/extra/x.c", "", "folder src/extra/ is not a row"),
    ("docs/architecture.md", SELF_TEST_DOC.replace("## Next", "| `zz/` | x | `base` |\n## Next"),
     "layer `zz/` has no folder src/zz/"),
    ("docs/architecture.md", SELF_TEST_DOC.replace("## Next", "| `yy/` | x | `nope` |\n## Next"),
     "layer `yy/` may include `nope`, which is not a row"),
    ("docs/architecture.md", "# no table\n", "no layer table"),
]


def make_tree(root, extra=None):
    files = dict(SELF_TEST_TREE, **{"docs/architecture.md": SELF_TEST_DOC})
    files.update(extra or {})
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")


def self_test():
    failures = []
    with tempfile.TemporaryDirectory() as d:
        make_tree(pathlib.Path(d))
        got = check(pathlib.Path(d))  # also proves a row outside '## Layers' (ghost/) is ignored
        if got:
            failures.append(f"the clean tree was refused: {got}")
    for name, text, expected in SELF_TEST_CASES:
        with tempfile.TemporaryDirectory() as d:
            root = pathlib.Path(d)
            make_tree(root, {name: text})
            try:
                got = check(root)
            except TableError as e:
                got = [str(e)]
            if expected is None and got:
                failures.append(f"{name} with {text!r}: expected no violation, got {got}")
            elif expected is not None and not any(expected in g for g in got):
                failures.append(f"{name} with {text!r}: expected '{expected}', got {got}")
    for f in failures:
        print(f"check-layers self-test: {f}", file=sys.stderr)
    print(f"check-layers self-test: {len(SELF_TEST_CASES) + 1 - len(failures)} of "
          f"{len(SELF_TEST_CASES) + 1} cases as expected")
    return 1 if failures else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", type=pathlib.Path, default=pathlib.Path(__file__).resolve().parent.parent)
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args()
    return self_test() if args.self_test else run(args.root)


if __name__ == "__main__":
    sys.exit(main())
