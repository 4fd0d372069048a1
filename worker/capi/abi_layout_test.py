#!/usr/bin/env python3
"""Every struct of the C ABI (worker/capi/gradstream_c.h) has the same layout
as its ctypes mirror in python/gradstream/_lib.py: the same fields in the same
order, and the same size, field offsets and field sizes.

The C side is measured, not transcribed: the test reads the header's
`typedef struct gs_x { ... } gs_x;` blocks, writes a C program that prints
sizeof / offsetof of every field it found, compiles it with the C compiler
the build uses and runs it. So a field added to one side only fails here,
whether or not it changes the struct's size (a new int32 can hide in
padding). The mirror of gs_foo_bar is the ctypes.Structure named FooBar.

Usage: abi_layout_test.py --cc CC --source-dir DIR [--workdir DIR]
Exit 0: every struct agrees; 1: a difference (each one printed).
"""

import argparse
import ctypes
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def c_structs(header_text):
    """{struct name: [field names in order]} of the header's typedef'd structs."""
    structs = {}
    body_re = re.compile(r"typedef\s+struct\s+(\w+)\s*\{(.*?)\}\s*(\w+)\s*;", re.S)
    for m in body_re.finditer(strip_comments(header_text)):
        name, body, alias = m.group(1), m.group(2), m.group(3)
        if name != alias:
            raise ValueError("typedef struct %s { } %s: the test expects one name" % (name, alias))
        fields = []
        for decl in body.split(";"):
            decl = " ".join(decl.split())
            if not decl:
                continue
            # "uint64_t a, b" or "char name[16]": the names after the type.
            type_and_first, *more = [d.strip() for d in decl.split(",")]
            first = re.match(r"^.*?[\s*]+(\w+)\s*(\[[^\]]*\])?$", type_and_first)
            if first is None:
                raise ValueError("cannot read the field declaration '%s' of %s" % (decl, name))
            fields.append(first.group(1))
            for d in more:
                fields.append(re.match(r"^\**\s*(\w+)", d).group(1))
        structs[name] = fields
    return structs


def mirror_name(c_name):
    """gs_membership -> Membership, gs_pull_stats -> PullStats."""
    base = c_name[3:] if c_name.startswith("gs_") else c_name
    return "".join(part.capitalize() for part in base.split("_"))


def c_program(structs):
    lines = ["#include <stddef.h>", "#include <stdio.h>",
             '#include "worker/capi/gradstream_c.h"',
             "#define FIELD_SIZE(T, f) sizeof(((T*)0)->f)",
             "int main(void) {", '  printf("{");']
    for i, (name, fields) in enumerate(sorted(structs.items())):
        sep = "," if i else ""
        lines.append('  printf("%s\\"%s\\": {\\"size\\": %%zu, \\"fields\\": [", sizeof(%s));'
                     % (sep, name, name))
        for j, f in enumerate(fields):
            fsep = "," if j else ""
            lines.append('  printf("%s[\\"%s\\", %%zu, %%zu]", '
                         'offsetof(%s, %s), FIELD_SIZE(%s, %s));'
                         % (fsep, f, name, f, name, f))
        lines.append('  printf("]}");')
    lines += ['  printf("}\\n");', "  return 0;", "}"]
    return "\n".join(lines) + "\n"


def measure_c(cc, source_dir, structs, workdir):
    src = os.path.join(workdir, "abi_layout.c")
    exe = os.path.join(workdir, "abi_layout")
    with open(src, "w") as f:
        f.write(c_program(structs))
    subprocess.run([cc, "-std=c11", "-Wall", "-Werror", "-I", source_dir, "-o", exe, src],
                   check=True, timeout=120)
    out = subprocess.run([exe], check=True, capture_output=True, text=True, timeout=60).stdout
    return json.loads(out)


def load_lib_module(source_dir):
    # _lib.py by path: the package's __init__ imports torch, the mirror does not.
    path = os.path.join(source_dir, "python", "gradstream", "_lib.py")
    spec = importlib.util.spec_from_file_location("gradstream_lib_under_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def mirrors(module):
    return {name: obj for name, obj in vars(module).items()
            if isinstance(obj, type) and issubclass(obj, ctypes.Structure)
            and obj is not ctypes.Structure}


def compare(c_layout, py_classes):
    """Every difference between the measured C layout and the ctypes classes."""
    problems = []
    wanted = {mirror_name(c): c for c in c_layout}
    for c_name, layout in sorted(c_layout.items()):
        py_name = mirror_name(c_name)
        cls = py_classes.get(py_name)
        if cls is None:
            problems.append("%s has no ctypes mirror %s in _lib.py" % (c_name, py_name))
            continue
        c_fields = [f[0] for f in layout["fields"]]
        py_fields = [f[0] for f in cls._fields_]
        if c_fields != py_fields:
            problems.append("%s fields %s != %s fields %s" % (c_name, c_fields, py_name, py_fields))
        if layout["size"] != ctypes.sizeof(cls):
            problems.append("sizeof(%s) = %d != ctypes.sizeof(%s) = %d"
                            % (c_name, layout["size"], py_name, ctypes.sizeof(cls)))
        for field, offset, size in layout["fields"]:
            descr = getattr(cls, field, None)
            if descr is None or not hasattr(descr, "offset"):
                continue  # reported with the field lists above
            if (descr.offset, descr.size) != (offset, size):
                problems.append("%s.%s at offset %d size %d != %s.%s at offset %d size %d"
                                % (c_name, field, offset, size, py_name, field,
                                   descr.offset, descr.size))
    for py_name in sorted(set(py_classes) - set(wanted)):
        problems.append("ctypes %s in _lib.py mirrors no struct of gradstream_c.h" % py_name)
    return problems


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cc", required=True)
    parser.add_argument("--source-dir", required=True)
    parser.add_argument("--workdir", default=None)
    args = parser.parse_args()
    header = os.path.join(args.source_dir, "worker", "capi", "gradstream_c.h")
    with open(header) as f:
        structs = c_structs(f.read())
    if not structs:
        print("FAIL: found no typedef struct in %s" % header)
        return 1
    with tempfile.TemporaryDirectory(dir=args.workdir) as workdir:
        c_layout = measure_c(args.cc, args.source_dir, structs, workdir)
    py_classes = mirrors(load_lib_module(args.source_dir))
    for name, layout in sorted(c_layout.items()):
        print("%s: %d bytes, %s" % (name, layout["size"],
                                    ", ".join("%s@%d" % (f, o) for f, o, _ in layout["fields"])))
    problems = compare(c_layout, py_classes)
    for p in problems:
        print("FAIL: " + p)
    if not problems:
        print("OK: %d structs agree with their ctypes mirrors" % len(c_layout))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
