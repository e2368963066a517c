#!/usr/bin/env python3
"""Cross-check a generated config-types table against upstream's JSON schema.

Usage (from the repository root):

    python3 modules/sim/tools/check_upstream_types.py \\
        modules/sim/src/decode/config-types-v1.13.9.json ../shared/talos/config.schema.v1.13.6.json

Why: the table is produced by parsing Go sources with a small hand-written
parser, so an independent source is needed to catch parser mistakes.  The
upstream JSON schema is generated from the same structs by a different tool
(docgen), so the key paths reachable per document kind should agree, except
where docgen deliberately differs (hidden `docgen:nodoc` fields, documents it
does not emit).  Every difference is printed with a hint; judging it is left
to the reader.

Paths look like `machine.network.interfaces[].addresses[].address`; `[]`
stands for any list element and `*` for any mapping key.
"""

import json
import re
import sys

MAX_DEPTH = 40  # the structs are not recursive, but guard against cycles anyway


def split_type(expr):
    """One level of a Go type expression: (kind, inner) ."""
    if expr.startswith("*"):
        return "ptr", expr[1:]
    if expr.startswith("[]"):
        return "slice", expr[2:]
    if expr.startswith("map["):
        depth, i = 0, 3
        while True:
            c = expr[i]
            depth += c == "["
            depth -= c == "]"
            if depth == 0:
                return "map", expr[i + 1:]
            i += 1
    return "name", expr


class TablePaths:
    """Key paths the table says CheckUnknownKeys accepts."""

    def __init__(self, table):
        self.types = table["types"]
        self.external = {e["name"]: e for e in table["external"]}
        self.labels = {}  # path -> why it is special (hidden, unexported, custom)

    def walk(self, expr, prefix, paths, stack, label=None):
        if len(stack) > MAX_DEPTH:
            return
        kind, inner = split_type(expr)
        if kind == "ptr":
            return self.walk(inner, prefix, paths, stack, label)
        if kind == "slice":
            return self.walk(inner, prefix + "[]", paths, stack, label)
        if kind == "map":
            self.add(prefix + ".*", paths, label)
            return self.walk(inner, prefix + ".*", paths, stack, label)
        if expr in self.external:
            ext = self.external[expr]
            for key in ext.get("check_keys", {}):
                self.add(f"{prefix}.{key}", paths, label)
            return
        entry = self.types.get(expr)
        if entry is None or expr in stack:
            return  # basic type, any, or a cycle
        if entry.get("unmarshal_text"):
            return  # the decoder accepts scalars only, keys never reach the check
        if entry["custom"]:
            label = label or f"under custom UnmarshalYAML of {expr}"
        if entry["kind"] != "struct":
            return self.walk(entry["underlying"], prefix, paths, stack + [expr], label)
        check = entry["check_keys"]
        if "inline_map" in check:
            # the struct is checked as the inline map itself
            return self.walk(check["inline_map"], prefix, paths, stack + [expr], label)
        hidden = {f["key"] for f in self.all_fields(expr) if f.get("nodoc")}
        unexported = {f["key"] for f in self.all_fields(expr) if not f["exported"]}
        for key, ftype in check["keys"].items():
            path = f"{prefix}.{key}" if prefix else key
            sub = label
            if key in unexported:
                sub = sub or "unexported Go field (the check accepts its lowercased name, the decoder ignores it)"
            elif key in hidden:
                sub = sub or "docgen:nodoc field (hidden from docs/schema)"
            self.add(path, paths, sub)
            self.walk(ftype, path, paths, stack + [expr], sub)

    def all_fields(self, expr):
        # own fields plus those promoted from embedded talos structs
        entry = self.types.get(expr, {})
        for f in entry.get("struct", []):
            yield f
            if f["embedded"]:
                yield from self.all_fields(f["type"].lstrip("*"))

    def add(self, path, paths, label):
        paths.add(path)
        if label and path not in self.labels:
            self.labels[path] = label


class SchemaPaths:
    def __init__(self, schema):
        self.defs = schema["$defs"]

    def walk(self, node, prefix, paths, stack):
        if len(stack) > MAX_DEPTH or not isinstance(node, dict):
            return
        if "$ref" in node:
            name = node["$ref"].split("/")[-1]
            if name in stack:
                return
            return self.walk(self.defs[name], prefix, paths, stack + [name])
        for branch in node.get("oneOf", []) + node.get("anyOf", []) + node.get("allOf", []):
            self.walk(branch, prefix, paths, stack)
        for key, sub in node.get("properties", {}).items():
            path = f"{prefix}.{key}" if prefix else key
            paths.add(path)
            self.walk(sub, path, paths, stack)
        extra = [node.get("additionalProperties")] + list(node.get("patternProperties", {}).values())
        if (node.get("type") == "object" and "properties" not in node and "additionalProperties" not in node
                and "patternProperties" not in node):
            extra.append(True)  # a free-form object: any key, like map[string]any
        for sub in extra:
            if sub is True or isinstance(sub, dict):
                paths.add(prefix + ".*")
                self.walk(sub if isinstance(sub, dict) else {}, prefix + ".*", paths, stack)
        if "items" in node:
            self.walk(node["items"], prefix + "[]", paths, stack)


def main(argv):
    if len(argv) != 3:
        sys.exit(f"usage: {argv[0]} TABLE.json SCHEMA.json")
    table = json.load(open(argv[1]))
    schema = json.load(open(argv[2]))
    roots = {ref["$ref"].split("/")[-1] for ref in schema.get("oneOf", [])}
    tp, sp = TablePaths(table), SchemaPaths(schema)
    differences = 0
    for doc in table["documents"]:
        name = doc["kind"] or "(legacy v1alpha1)"
        ours = set()
        tp.walk(doc["type"], "", ours, [])
        if doc["type"] not in sp.defs:
            print(f"== {name} ({doc['type']}): not in the schema at all "
                  f"({len(ours)} key paths in the table)")
            differences += 1
            continue
        if doc["type"] not in roots:
            print(f"-- {name}: {doc['type']} is in $defs but not a schema root (oneOf)")
        # the registry kind/apiVersion must be what the schema pins
        props = sp.defs[doc["type"]].get("properties", {})
        for field, ours_value in (("kind", doc["kind"]), ("apiVersion", doc["apiVersion"])):
            pinned = props.get(field, {}).get("enum")
            if pinned is not None and pinned != [ours_value]:
                print(f"== {name}: schema pins {field} to {pinned}, the registry has {ours_value!r}")
                differences += 1
        theirs = set()
        sp.walk({"$ref": "#/$defs/" + doc["type"]}, "", theirs, [])
        only_ours, only_theirs = sorted(ours - theirs), sorted(theirs - ours)
        if not only_ours and not only_theirs:
            continue
        print(f"== {name} ({doc['type']}): {len(ours & theirs)} paths agree")
        for path in only_ours:
            print(f"  + table only : {path}" + (f"    [{tp.labels[path]}]" if path in tp.labels else ""))
        for path in only_theirs:
            print(f"  - schema only: {path}")
        differences += len(only_ours) + len(only_theirs)
    table_types = {d["type"] for d in table["documents"]}
    for root in sorted(roots - table_types):
        print(f"== schema root {root} has no registered document in the table")
        differences += 1
    print(f"{differences} difference(s)")


if __name__ == "__main__":
    main(sys.argv)
