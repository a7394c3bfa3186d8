#!/usr/bin/env python3
"""Generates a stand-in provider library (docs/IBVERBS.md, "Symbol versions"): a C++ source that
defines every function the real library exports, each reporting "not supported", and the
version script that exports them with the real library's versions.

  generate.py --library /usr/lib/.../libmlx5.so.1 --header infiniband/mlx5dv.h
              --conventions conventions.txt --cxx c++ --readelf readelf
              --source out.cpp --map out.map

Inputs are the real library's export list (readelf) and the header's declarations (for each
function's return type and parameters). Nothing is guessed: a data symbol, an export the header
does not declare, a return type other than a pointer, int, bool or void, or a node with two
parents stops the generator with an error, so a newer rdma-core is noticed at build time.
"""

import argparse
import re
import subprocess
import sys

# How a function reports "not supported", by convention name (conventions.txt): the body
# and the return types it fits.
CONVENTIONS = {
    # pointer: "NULL is returned and errno is set" (mlx5dv_*(3), efadv_*(3)).
    "null_errno": ("errno = EOPNOTSUPP;\n  return nullptr;", "pointer"),
    # int: "0 on success, or the value of errno on failure"; errno is set too, as our
    # libibverbs does (docs/IBVERBS.md, "Errors").
    "errno_value": ("errno = EOPNOTSUPP;\n  return EOPNOTSUPP;", "int"),
    "minus_one_errno": ("errno = EOPNOTSUPP;\n  return -1;", "int ssize_t"),
    "minus_errno": ("errno = EOPNOTSUPP;\n  return -EOPNOTSUPP;", "int"),
    "false": ("return false;", "bool"),
    "nothing": ("", "void"),
}
# The convention of a return type when conventions.txt names none for the function.
DEFAULT_CONVENTION = {"pointer": "null_errno", "int": "errno_value", "bool": "false", "void": "nothing"}


class GenerateError(Exception):
    pass


def run(argv):
    done = subprocess.run(argv, check=False, capture_output=True, text=True)
    if done.returncode != 0:
        raise GenerateError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout


def read_exports(readelf, library):
    """{name: {"default": version, "compat": [versions]}} of the defined functions, and the
    version-definition nodes in order as (name, parent or None)."""
    nodes = read_version_nodes(readelf, library)
    node_names = {name for name, _ in nodes}
    exports = {}
    for line in run([readelf, "-W", "--dyn-syms", library]).splitlines():
        fields = line.split()
        if len(fields) < 8 or not fields[0].endswith(":") or fields[6] == "UND":
            continue
        kind, bind, symbol = fields[3], fields[4], fields[7]
        if bind not in ("GLOBAL", "WEAK"):
            continue
        if kind == "OBJECT" and fields[6] == "ABS" and symbol in node_names:
            continue  # the symbol the linker makes for each version node
        match = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)(@@?)([A-Za-z0-9_.]+)", symbol)
        if not match:
            raise GenerateError(f"{library}: export {symbol!r} has no version")
        name, at, version = match.groups()
        if kind != "FUNC":
            raise GenerateError(f"{library}: {symbol} is not a function ({kind}): cannot stand in")
        entry = exports.setdefault(name, {"default": None, "compat": []})
        if at == "@@":
            entry["default"] = version
        else:
            entry["compat"].append(version)
    for name, entry in exports.items():
        if entry["default"] is None:
            raise GenerateError(f"{library}: {name} has only non-default versions {entry['compat']}")
    if not exports:
        raise GenerateError(f"{library}: no exported function found (is it a stripped stub?)")
    return exports, nodes


def read_version_nodes(readelf, library):
    nodes = []
    in_definitions = False
    for line in run([readelf, "-W", "-V", library]).splitlines():
        if line.startswith("Version definition section"):
            in_definitions = True
            continue
        if in_definitions and line.startswith("Version ") and "section" in line:
            break
        if not in_definitions:
            continue
        definition = re.search(r"Flags: (\S+)\s+Index: \d+\s+Cnt: (\d+)\s+Name: (\S+)", line)
        if definition:
            flags, _count, name = definition.groups()
            if flags != "BASE":
                nodes.append([name, []])
            continue
        parent = re.search(r"Parent \d+: (\S+)", line)
        if parent and nodes:
            nodes[-1][1].append(parent.group(1))
    result = []
    for name, parents in nodes:
        if len(parents) > 1:
            raise GenerateError(f"{library}: version node {name} has several parents {parents}")
        result.append((name, parents[0] if parents else None))
    if not result:
        raise GenerateError(f"{library}: no version definitions")
    return result


def collapse_braces(text):
    """The text with everything inside {} removed (struct bodies, inline function bodies), so
    that only top-level declarations are left."""
    out = []
    depth = 0
    for char in text:
        if char == "{":
            if depth == 0:
                out.append("{")
            depth += 1
        elif char == "}":
            depth -= 1
            if depth < 0:
                raise GenerateError("unbalanced braces in the preprocessed header")
            if depth == 0:
                out.append("}")
        elif depth == 0:
            out.append(char)
    return "".join(out)


def top_level_statements(text):
    """Declarations split at ';' and after a function body ('{}' right after a ')')."""
    for statement in re.split(r";|(?<=\))\s*\{\}", collapse_braces(text)):
        statement = " ".join(statement.split())
        if statement:
            yield statement


def balanced_parentheses_end(text, start):
    depth = 0
    for index in range(start, len(text)):
        if text[index] == "(":
            depth += 1
        elif text[index] == ")":
            depth -= 1
            if depth == 0:
                return index
    raise GenerateError(f"unbalanced parentheses in {text!r}")


def read_declarations(cxx, header, names):
    """{name: (return type, parameter list)} of each name's declaration in the header."""
    # Preprocessed as C: in C++ the header's extern "C" { ... } would hide its declarations
    # inside braces.
    preprocessed = subprocess.run([cxx, "-x", "c", "-E", "-P", "-"], input=f"#include <{header}>\n",
                                  capture_output=True, text=True, check=False)
    if preprocessed.returncode != 0:
        raise GenerateError(f"cannot preprocess <{header}>: {preprocessed.stderr.strip()}")
    found = {}
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, sorted(names))) + r")\s*\(")
    for statement in top_level_statements(preprocessed.stdout):
        match = pattern.search(statement)
        if not match or statement.startswith("typedef") or "{" in statement:
            continue  # a static inline definition or a typedef is not the export
        name = match.group(1)
        close = balanced_parentheses_end(statement, match.end() - 1)
        returns = statement[:match.start()].strip()
        params = statement[match.end():close]
        tail = statement[close + 1:].strip()
        if tail and not re.fullmatch(r"(__attribute__\s*\(\(.*\)\)\s*)+", tail):
            raise GenerateError(f"<{header}>: cannot read the declaration of {name}: {statement!r}")
        returns = re.sub(r"^extern\s+", "", returns)
        # The C preprocessor made stdbool's bool into _Bool, which C++ does not know.
        returns, params = (re.sub(r"\b_Bool\b", "bool", text) for text in (returns, params))
        declaration = (returns, params)
        if name in found and found[name] != declaration:
            raise GenerateError(f"<{header}>: {name} is declared twice, differently")
        found[name] = declaration
    missing = sorted(set(names) - set(found))
    if missing:
        raise GenerateError(f"<{header}> declares no {', '.join(missing)}: cannot tell their return types")
    return found


def return_kind(name, returns):
    if returns.endswith("*"):
        return "pointer"
    kind = {"int": "int", "bool": "bool", "void": "void", "ssize_t": "ssize_t"}.get(returns)
    if kind is None:
        raise GenerateError(f"{name} returns {returns!r}: no rule for that return type")
    return kind


def read_conventions(path, prefix):
    """{name: convention} of conventions.txt's lines for this library (names with prefix)."""
    conventions = {}
    with open(path, encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            fields = line.split()
            if len(fields) != 2 or fields[1] not in CONVENTIONS:
                raise GenerateError(f"{path}:{number}: expected 'FUNCTION CONVENTION', "
                                    f"CONVENTION one of {', '.join(CONVENTIONS)}")
            if fields[0].lstrip("_").startswith(prefix):
                conventions[fields[0]] = fields[1]
    return conventions


def choose_convention(name, returns, conventions):
    kind = return_kind(name, returns)
    convention = conventions.get(name, DEFAULT_CONVENTION.get(kind))
    if convention is None:
        raise GenerateError(f"{name} returns {returns}: conventions.txt must say how it fails")
    if kind not in CONVENTIONS[convention][1].split():
        raise GenerateError(f"conventions.txt: {name} returns {returns}, {convention} does not fit")
    return convention


def definition(returns, name, params, body, attributes=""):
    separator = "" if returns.endswith("*") else " "
    return f"{attributes}{returns}{separator}{name}({params}) {{\n  {body}\n}}\n" if body else \
        f"{attributes}{returns}{separator}{name}({params}) {{}}\n"


def generate_source(library, header, exports, declarations, conventions):
    out = [f"// Generated by verbs/app/ibverbs/standins/generate.py from {library} and <{header}>;",
           "// do not edit. Every function says \"not supported\" (conventions.txt, docs/IBVERBS.md).",
           "#include <errno.h>", "#include <stdbool.h>", "#include <stddef.h>", "",
           "#include <type_traits>", "",
           f"#include <{header}>", "",
           "// The parameters are the header's, named as there; no stand-in reads them.",
           '#pragma GCC diagnostic ignored "-Wunused-parameter"', "",
           "// C linkage whether or not the header says so.", 'extern "C" {', ""]
    export = '__attribute__((visibility("default"))) '
    for name in sorted(exports):
        returns, params = declarations[name]
        body = CONVENTIONS[choose_convention(name, returns, conventions)][0]
        if not exports[name]["compat"]:
            out.append(definition(returns, name, params, body, export))
            continue
        # Several versions of one name (rdma-core keeps mlx5dv_init_obj@MLX5_1.0 beside
        # @@MLX5_1.2): each is a function of its own local name bound to name@version (@@ for
        # the default) by .symver, as the version script alone can give a name one version.
        versions = [(exports[name]["default"], "@@")] + [(v, "@") for v in exports[name]["compat"]]
        for version, at in versions:
            local = f"rrdma_{name}_{version.replace('.', '_')}"
            out.append(f'{definition(returns, local, params, body, export)}'
                       f'static_assert(std::is_same_v<decltype(&{local}), decltype(&{name})>);\n'
                       f'__asm__(".symver {local}, {name}{at}{version}");\n')
    out.append('}  // extern "C"')
    return "\n".join(out) + "\n"


def generate_map(library, exports, nodes):
    names_by_node = {}
    for name, entry in exports.items():
        # A name with several versions (bound by .symver) is listed in each of their nodes,
        # or "local: *" would hide the others.
        for version in [entry["default"]] + entry["compat"]:
            names_by_node.setdefault(version, []).append(name)
    known = {node for node, _ in nodes}
    for version in names_by_node:
        if version not in known:
            raise GenerateError(f"{library}: version {version} is not one of its definitions")
    out = [f"/* Generated by verbs/app/ibverbs/standins/generate.py from {library}; do not edit.",
           "   Its version nodes, same inheritance, each function in the nodes it has a version in. */"]
    for index, (node, parent) in enumerate(nodes):
        names = "".join(f" {name};" for name in sorted(names_by_node.get(node, [])))
        body = f" global:{names}" if names else ""
        local = " local: *;" if index == 0 else ""
        out.append(f"{node} {{{body}{local} }}{' ' + parent if parent else ''};")
    return "\n".join(out) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--library", required=True, help="the real provider library (libmlx5.so.1)")
    parser.add_argument("--header", required=True, help="its header as included (infiniband/mlx5dv.h)")
    parser.add_argument("--prefix", required=True, help="its functions' prefix (mlx5dv_, efadv_)")
    parser.add_argument("--conventions", required=True, help="conventions.txt")
    parser.add_argument("--cxx", required=True, help="a compiler to preprocess the header with")
    parser.add_argument("--readelf", default="readelf")
    parser.add_argument("--source", required=True, help="the C++ source to write")
    parser.add_argument("--map", required=True, help="the version script to write")
    args = parser.parse_args()
    try:
        exports, nodes = read_exports(args.readelf, args.library)
        declarations = read_declarations(args.cxx, args.header, exports.keys())
        conventions = read_conventions(args.conventions, args.prefix)
        stale = sorted(set(conventions) - set(exports))
        if stale:
            raise GenerateError(f"conventions.txt names {', '.join(stale)}, which {args.library} does not export")
        source = generate_source(args.library, args.header, exports, declarations, conventions)
        version_script = generate_map(args.library, exports, nodes)
    except (GenerateError, OSError) as error:
        print(f"generate.py: {error}", file=sys.stderr)
        return 1
    for path, text in ((args.source, source), (args.map, version_script)):
        with open(path, "w", encoding="utf-8") as out:
            out.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
