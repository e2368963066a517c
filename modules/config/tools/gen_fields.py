#!/usr/bin/env python3
"""Regenerates src/fields.rs: the fields of every typed Talos config document, as Talos's encoder
sees them.

Input: the tables of upstream's Go config types that modules/sim/tools/gen_upstream_types.py reads
from siderolabs/talos (pkg/machinery/config/types at v1.13.9 and v1.14.1). For each struct it
writes the fields in Go struct order (inline structs spliced in place, as go-yaml does), each with
the shape the encoder needs and what go-yaml's comment-free `yaml.Marshal` does with it when it is
unset: a field without `omitempty` is always written, at its zero value; an `omitempty` one is
dropped when go-yaml's `isZero` says it is empty. The two releases are merged: v1alpha1 structs in
1.13's order (1.14 hides most of them), the others in 1.14's, fields of one release only appended.

    python3 modules/config/tools/gen_fields.py modules/sim/src/decode > modules/config/src/fields.rs \
        && rustfmt --edition 2024 modules/config/src/fields.rs
"""
import json
import re
import sys

src = sys.argv[1]
A = json.load(open(f"{src}/config-types-v1.13.9.json"))
B = json.load(open(f"{src}/config-types-v1.14.1.json"))

NUMBERS = {"int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64",
           "uintptr", "byte", "float32", "float64"}

# The zero value go-yaml writes for an always-written enum: the enumer name of 0 (from the
# `//go:generate enumer` constant lists in pkg/machinery/nethelpers and resources/block).
ENUM_ZERO = {
    "resources/block.EncryptionProviderType": "none",
    "resources/block.FilesystemType": "none",
    "nethelpers.DefaultAction": "accept",
    "nethelpers.RoutingTable": "unspec",
    # nethelpers.Protocol has no constant for 0: enumer prints the fallback.
    "nethelpers.Protocol": "Protocol(0)",
    # pkg/machinery/resources/storage/lvmlogicalvolumetype.go (v1.14.1)
    "resources/storage.LVMLogicalVolumeType": "linear",
    # pkg/machinery/resources/storage/mdlevel.go, mdmetadata.go (v1.14.1)
    "resources/storage.MDLevel": "raid1",
    "resources/storage.MDMetadata": "1.0",
    # pkg/machinery/resources/block/volumetype.go
    "resources/block.VolumeType": "partition",
}

# Fields whose text the encoder renders specially.
SPECIAL = {
    ("v1alpha1.MachineFile", "permissions"): "Octal",
    ("v1alpha1.DiskPartition", "size"): "DiskSize",
    ("v1alpha1.ClusterInlineManifest", "contents"): "InlineContents",
}

# File modes that marshal as an octal literal (`0o644`): v1alpha1.FileMode, and 1.14's
# EtcFileMode (`MarshalYAML` writes `"0o" + octal` tagged `!!int`, types/runtime/etc_file.go).
OCTAL_MODES = ("v1alpha1.FileMode", "runtime.EtcFileMode")

# siderolabs/crypto's PEM types marshal through MarshalYAML and always write all their keys
# (x509/x509.go at v0.6.5): `crt` and `key`, or just one of them.
PEM = {
    "x509.PEMEncodedCertificateAndKey": ["crt", "key"],
    "x509.PEMEncodedCertificate": ["crt"],
    "x509.PEMEncodedKey": ["key"],
}


def table_types(t):
    return t["types"]


def lookup(name):
    """The type entry of either release (1.14 first: it has every type 1.13 has or a successor)."""
    return B["types"].get(name) or A["types"].get(name)


def strip_ptr(t):
    return t[1:] if t.startswith("*") else t


def is_args(name):
    return name in ("v1alpha1.Args", "meta.Args")


def is_unstructured(name):
    e = lookup(name)
    return bool(e and e.get("check_keys", {}).get("inline_map"))


def is_scalar_type(name):
    """Types the encoder writes as one scalar (their own MarshalText/MarshalYAML, or netip wrappers)."""
    e = lookup(name)
    if e is None:
        return True
    # A named list with its own UnmarshalYAML (ClusterInlineManifests) is still a list.
    if e["kind"] == "named" and e.get("underlying", "").startswith("[]") and e["underlying"] != "[]byte":
        return False
    return bool(e.get("unmarshal_text") or e.get("marshal_text") or e.get("marshal_yaml")
                or e.get("unmarshal_yaml")) and name not in PEM and not is_args(name)


def const_name(n):
    return "D_" + re.sub(r"[^A-Za-z0-9]", "_", n).upper()


emitted = {}   # struct name -> list of (key, shape, unset)
order = []


def shape(t, owner, key):
    if (owner, key) in SPECIAL:
        return SPECIAL[(owner, key)]
    t = strip_ptr(t)
    if t in ("any", "interface{}"):
        return "Any"
    if t == "[]byte":
        return "Str"
    if t.startswith("[]"):
        inner = shape(t[2:], owner, key)
        return f"Seq(&{inner})"
    if t.startswith("map["):
        value = t.split("]", 1)[1]
        if value == "string":
            return "StrMap"
        vshape = shape(value, owner, key)
        if vshape.startswith("Struct("):
            return f"Map(&{vshape})"
        return "Any"
    if t == "string":
        return "Str"
    if t == "bool":
        return "Bool"
    if t in NUMBERS:
        return "Leaf"
    # named types
    if is_args(t):
        return "Args"
    if t in PEM:
        return f"Struct({const_name(t)})"
    if t in OCTAL_MODES:
        return "Octal"
    if t == "v1alpha1.DiskSize":
        return "DiskSize"
    e = lookup(t)
    if e is None:
        # External: netip, time.Duration, url.URL: written as text.
        return "Str"
    if is_unstructured(t):
        return "Any"
    if e["kind"] == "struct" and not is_scalar_type(t):
        visit(t)
        return f"Struct({const_name(t)})"
    if e["kind"] == "struct":
        return "Str" if t != "network.PortRange" else "Leaf"
    # named non-struct
    if is_scalar_type(t):
        return "Str"
    under = e.get("underlying", "")
    if under == "string":
        return "Str"
    return shape(under, owner, key)


def empty_kind(t):
    """How go-yaml's isZero judges a present value of an omitempty field of Go type t."""
    if t.startswith("*") or t in ("any", "interface{}"):
        return "Never"
    if t.startswith("[]"):
        return "List"
    if t.startswith("map["):
        return "Map"
    if t == "string":
        return "Text"
    if t == "bool":
        return "Bool"
    if t in NUMBERS:
        return "Number"
    if is_args(t) or is_unstructured(t):
        return "Map"
    e = lookup(t)
    if e is None or t in PEM:
        return "Custom"
    if e.get("is_zero"):
        return "Custom"
    if e["kind"] == "struct":
        return "Custom" if is_scalar_type(t) else "Struct"
    return empty_kind(e.get("underlying", "any"))


def zero_value(t, owner, key):
    """What go-yaml writes for an unset always-written field of Go type t."""
    if t.startswith("*") or t in ("any", "interface{}"):
        return "Null"
    if t == "[]byte":
        return "Text"
    if t.startswith("[]"):
        return "List"
    if t.startswith("map[") or is_args(t) or is_unstructured(t):
        return "Map"
    if t == "string":
        return "Text"
    if t == "bool":
        sys.exit(f"gen_fields: {owner}.{key}: an always-written bool; add Zero::False to encode.rs")
    if t in NUMBERS or t in OCTAL_MODES:
        return "Number"
    if t in ENUM_ZERO:
        return f'Literal("{ENUM_ZERO[t]}")'
    if t in PEM:
        return "Struct"
    e = lookup(t)
    if e is None or is_scalar_type(t):
        if e is not None and e["kind"] != "struct" and e.get("underlying") in NUMBERS | {"byte"}:
            sys.exit(f"gen_fields: {owner}.{key}: always-written enum {t} has no zero name in ENUM_ZERO")
        # MarshalText of an empty netip wrapper, meta.URL, a size: the empty string.
        return "Text"
    if e["kind"] == "struct":
        return "Struct"
    return zero_value(e.get("underlying", "any"), owner, key)


def unset(f):
    if f["omitempty"]:
        return f"Omit(Empty::{empty_kind(f['type'])})"
    return f"Write(Zero::{zero_value(f['type'], f['_owner'], f['key'])})"


def flat_fields(table, name):
    """The struct's fields in encoding order, inline structs spliced where they are embedded."""
    e = table["types"].get(name)
    if e is None or e["kind"] != "struct":
        return None
    out = []
    for f in e["struct"]:
        if f.get("inline") or (f.get("embedded") and f.get("promoted")):
            inner = strip_ptr(f["type"])
            sub = flat_fields(table, inner)
            if sub is not None:
                out.extend(sub)
            continue
        if not f.get("key") or not f.get("exported", True):
            continue
        out.append(dict(f, _owner=name))
    return out


def visit(name):
    if name in emitted or name in PEM:
        return
    emitted[name] = None
    a = flat_fields(A, name)
    b = flat_fields(B, name)
    first, second = (a, b) if name.startswith("v1alpha1.") else (b, a)
    first = first or []
    second = second or []
    fields = []
    seen = {}
    for f in first:
        seen[f["key"]] = len(fields)
        fields.append([f, None])
    for f in second:
        if f["key"] in seen:
            fields[seen[f["key"]]][1] = f
        else:
            fields.append([f, None])
    rows = []
    for f, other in fields:
        primary = f
        s = shape(primary["type"], name, primary["key"])
        # The 1.13 and 1.14 rules, when the field exists in both and they differ.
        fa = next((x for x in (a or []) if x["key"] == f["key"]), None)
        fb = next((x for x in (b or []) if x["key"] == f["key"]), None)
        ua = unset(fa) if fa else None
        ub = unset(fb) if fb else None
        if ua and ub and ua != ub:
            u = f"Split(&{ua}, &{ub})"
        else:
            u = ua or ub
        rows.append((f["key"], s, u))
    emitted[name] = rows
    order.append(name)


documents = {}
for table in (A, B):
    for d in table["documents"]:
        if d.get("legacy"):
            continue
        documents.setdefault(d["kind"], d["type"])
legacy = "v1alpha1.Config"
visit(legacy)
for kind in sorted(documents):
    visit(documents[kind])

out = []
out.append("// @generated by tools/gen_fields.py from upstream's Go config types (siderolabs/talos")
out.append("// pkg/machinery/config/types at v1.13.9 and v1.14.1, as read by")
out.append("// modules/sim/tools/gen_upstream_types.py). Do not edit by hand.")
out.append("#![allow(dead_code)]")
out.append("")
out.append("use crate::encode::{Empty, F, Shape::*, Unset::*, Zero};")
out.append("")
for name, keys in PEM.items():
    rows = ", ".join(f'F("{k}", Str, Write(Zero::Text))' for k in keys)
    out.append(f"pub(crate) const {const_name(name)}: &[F] = &[{rows}];")
    out.append("")
for name in sorted(order):
    rows = emitted[name]
    if not rows:
        out.append(f"pub(crate) const {const_name(name)}: &[F] = &[];")
        out.append("")
        continue
    body = ",\n    ".join(f'F("{k}", {s}, {u})' for k, s, u in rows)
    out.append(f"/// `{name}`")
    out.append(f"pub(crate) const {const_name(name)}: &[F] = &[\n    {body},\n];")
    out.append("")
out.append("/// Registered document kinds (apiVersion v1alpha1) and their fields, `apiVersion` and `kind`")
out.append("/// included.")
out.append("pub(crate) const KINDS: &[(&str, &[F])] = &[")
for kind in sorted(documents):
    out.append(f'    ("{kind}", {const_name(documents[kind])}),')
out.append("];")
out.append("")
out.append("/// The v1alpha1 document.")
out.append(f"pub(crate) const V1ALPHA1: &[F] = {const_name(legacy)};")


def pointer_elements(name, prefix, seen, found):
    """Lists and maps of pointers under the struct `name` in 1.14's types: where 1.14's decoder
    refuses a null item (siderolabs/gen v0.8.8 xyaml.CheckNullElements). A list is `path[]`, a
    map's values `path.*`."""
    if name in seen:
        return
    for f in flat_fields(B, name) or []:
        path = f"{prefix}{f['key']}"
        t = strip_ptr(f["type"])
        while True:
            e = lookup(t)
            if e and e["kind"] == "named" and (e.get("underlying", "").startswith(("[]", "map["))):
                t = e["underlying"]
                continue
            break
        if t.startswith("[]"):
            element, path = t[2:], path + "[]"
        elif t.startswith("map["):
            element, path = t.split("]", 1)[1], path + ".*"
        else:
            element = None
        if element is not None:
            if element.startswith("*"):
                found.add(path)
            t = strip_ptr(element)
        if lookup(t) and lookup(t)["kind"] == "struct" and t not in PEM:
            pointer_elements(t, path + ".", seen | {name}, found)


refused = set()
pointer_elements(legacy, "", set(), refused)
for kind in sorted(documents):
    pointer_elements(documents[kind], kind + ".", set(), refused)
out.append("")
out.append("/// Lists (`path[]`) and maps (`path.*`) of pointers in Talos 1.14.1's types, whose null items")
out.append("/// its decoder refuses (`xyaml.CheckNullElements`, siderolabs/gen v0.8.8). Other documents'")
out.append("/// paths start with their kind.")
out.append("pub(crate) const NULL_REFUSED_1_14: &[&str] = &[")
for path in sorted(refused):
    out.append(f'    "{path}",')
out.append("];")
print("\n".join(out))
