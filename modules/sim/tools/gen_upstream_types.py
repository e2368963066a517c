#!/usr/bin/env python3
"""Generate talos-sim's table of upstream Talos machine-config Go types.

Usage (from the repository root):

    python3 modules/sim/tools/gen_upstream_types.py MIRROR TAG > modules/sim/src/decode/config-types-TAG.json
    python3 modules/sim/tools/gen_upstream_types.py --module DIR TAG > modules/sim/src/decode/config-types-TAG.json

MIRROR is a (bare) git clone of siderolabs/talos, TAG a tag in it.  Nothing is
checked out: files are read with `git show TAG:PATH`.  With --module, DIR is
the module github.com/siderolabs/talos/pkg/machinery at TAG as the Go module
cache holds it (`go mod download github.com/siderolabs/talos/pkg/machinery@TAG`),
for releases the git snapshot lacks; only machinery's own files are read.

Why this exists: talos-sim must reject machine configs exactly where real Talos
does.  Real Talos decodes every YAML document into a Go struct picked from its
document registry and then runs `xyaml.CheckUnknownKeys` (siderolabs/gen), a
reflection walk that compares mapping keys with struct fields.  The simulator
cannot run Go, so it needs the shape of those structs as data.  This script
reads the Go sources and writes that data; it never copies Go code.

The output records facts (field names, Go types, yaml tags, which types have
custom unmarshalers) plus `check_keys`: the key set the check computes for a
struct (reflect.VisibleFields + yaml tag rules), so the simulator does not have
to re-implement Go's embedded-field promotion.

Only a small Go subset is parsed (declarations, type expressions, enough of
function bodies to find `registry.Register` calls); it is not a Go compiler.
"""

import json
import os
import re
import subprocess
import sys

TALOS_MODULE = "github.com/siderolabs/talos/"
MACHINERY = TALOS_MODULE + "pkg/machinery/"
CONFIG_TYPES = MACHINERY + "config/types/"
REGISTRY_PKG = MACHINERY + "config/internal/registry"

PREDECLARED = {
    "bool", "string", "int", "int8", "int16", "int32", "int64",
    "uint", "uint8", "uint16", "uint32", "uint64", "uintptr",
    "byte", "rune", "float32", "float64", "complex64", "complex128",
    "error", "any",
}

# External (non-talos) types cannot be read from the talos mirror.  What
# matters for strictness is their reflect kind (the check descends into
# structs, maps and slices; scalars are never checked), their fields if they
# are structs, and whether the YAML decoder handles them through
# encoding.TextUnmarshaler (go.yaml.in/yaml/v4 then rejects any non-scalar
# node with "cannot construct !!map into T (TextUnmarshaler)" before the check
# runs).  Facts below come from the Go standard library and from
# siderolabs/crypto x509 (v0.6.4 and its main branch agree; talos pins v0.6.5).
EXTERNAL_NOTES = {
    "net/netip.Addr": {"go_kind": "struct", "unmarshal_text": True,
                       "note": "scalar only: TextUnmarshaler, the decoder rejects mappings/sequences"},
    "net/netip.Prefix": {"go_kind": "struct", "unmarshal_text": True,
                         "note": "scalar only: TextUnmarshaler, the decoder rejects mappings/sequences"},
    "net/netip.AddrPort": {"go_kind": "struct", "unmarshal_text": True,
                           "note": "scalar only: TextUnmarshaler, the decoder rejects mappings/sequences"},
    "time.Duration": {"go_kind": "int64",
                      "note": "scalar leaf; the YAML library parses duration strings (\"5s\") itself"},
    "os.FileMode": {"go_kind": "uint32", "note": "scalar leaf (integer)"},
    "net.HardwareAddr": {"go_kind": "[]byte",
                         "note": "byte slice; only reached as the underlying type of nethelpers.HardwareAddr, "
                                 "whose UnmarshalText makes it scalar only"},
    "net/url.URL": {"go_kind": "struct",
                    "note": "exported fields (Scheme, Opaque, User, Host, Path, ...) are promoted into meta.URL and "
                            "v1alpha1.Endpoint, but their UnmarshalYAML decodes a string only, so a mapping fails "
                            "decoding before the check could accept those keys"},
    "github.com/google/cel-go/cel.Ast": {"go_kind": "struct",
                                         "note": "only an unexported field of cel.Expression (TextUnmarshaler, "
                                                 "scalar only)"},
    # siderolabs/crypto: structs with json tags only, so the check's keys
    # are the lowercased Go names; their UnmarshalYAML(func) decodes an
    # auxiliary struct with the same yaml keys and ignores others.
    "github.com/siderolabs/crypto/x509.PEMEncodedCertificateAndKey": {
        "go_kind": "struct", "unmarshal_yaml": "func", "check_keys": {"crt": "[]byte", "key": "[]byte"},
        "note": "struct {Crt, Key []byte} (json tags only): the check accepts keys crt and key"},
    "github.com/siderolabs/crypto/x509.PEMEncodedCertificate": {
        "go_kind": "struct", "unmarshal_yaml": "func", "check_keys": {"crt": "[]byte"},
        "note": "struct {Crt []byte} (json tag only): the check accepts key crt"},
    "github.com/siderolabs/crypto/x509.PEMEncodedKey": {
        "go_kind": "struct", "unmarshal_yaml": "func", "check_keys": {"key": "[]byte"},
        "note": "struct {Key []byte} (json tag only): the check accepts key key"},
}
UNKNOWN_EXTERNAL = {"go_kind": "unknown",
                    "note": "not described; the check reflects on the real type: mappings are walked only if it "
                            "is a struct or map, sequences only if it is a slice"}


# ---------------------------------------------------------------------------
# git access

class Repo:
    def __init__(self, path, tag):
        self.path, self.tag = path, tag
        self._files = None

    def git(self, *args):
        return subprocess.run(["git", "-C", self.path] + list(args), check=True,
                              capture_output=True).stdout.decode("utf-8")

    def files(self):
        if self._files is None:
            self._files = self.git("ls-tree", "-r", "--name-only", self.tag).splitlines()
        return self._files

    def package_files(self, directory):
        # Files directly in the directory (a Go package), without tests:
        # test files never reach the decoder.
        prefix = directory.rstrip("/") + "/"
        return [f for f in self.files()
                if f.startswith(prefix) and "/" not in f[len(prefix):]
                and f.endswith(".go") and not f.endswith("_test.go")]

    def show(self, path):
        return self.git("show", f"{self.tag}:{path}")


class ModuleDir:
    """The machinery module unpacked in the Go module cache, read as if it were
    pkg/machinery/ of the talos repository at `tag`."""

    PREFIX = "pkg/machinery/"

    def __init__(self, path, tag):
        self.path, self.tag = path, tag
        self._files = None

    def files(self):
        if self._files is None:
            found = []
            for root, _dirs, names in os.walk(self.path):
                rel = os.path.relpath(root, self.path)
                for name in names:
                    found.append(self.PREFIX + os.path.normpath(os.path.join(rel, name)))
            self._files = sorted(found)
        return self._files

    package_files = Repo.package_files

    def show(self, path):
        if not path.startswith(self.PREFIX):
            raise KeyError(f"{path} is outside pkg/machinery: not in the module")
        with open(os.path.join(self.path, path[len(self.PREFIX):]), encoding="utf-8") as f:
            return f.read()


# ---------------------------------------------------------------------------
# tokenizer (with Go's automatic semicolon insertion, which is what separates
# struct fields written one per line)

TOKEN_RE = re.compile(r"""
    (?P<ws>[ \t\r]+)
  | (?P<nl>\n)
  | (?P<lcomment>//[^\n]*)
  | (?P<bcomment>/\*.*?\*/)
  | (?P<raw>`[^`]*`)
  | (?P<str>"(?:[^"\\\n]|\\.)*")
  | (?P<rune>'(?:[^'\\\n]|\\.)+')
  | (?P<num>\.?[0-9][0-9a-zA-Z_.]*(?:[eEpP][+-][0-9]+)?i?)
  | (?P<ident>[A-Za-z_\u0080-\uffff][A-Za-z0-9_\u0080-\uffff]*)
  | (?P<op>\.\.\.|<<=|>>=|&\^=|&&|\|\||<-|\+\+|--|==|!=|<=|>=|:=|<<|>>|&\^|[-+*/%&|^]=|[-+*/%&|^<>=!~(){}\[\],;:.])
""", re.S | re.X)

GO_KEYWORDS = {
    "break", "case", "chan", "const", "continue", "default", "defer", "else", "fallthrough", "for", "func",
    "go", "goto", "if", "import", "interface", "map", "package", "range", "return", "select", "struct",
    "switch", "type", "var",
}
SEMI_AFTER_KEYWORD = {"break", "continue", "fallthrough", "return"}


class Tok:
    __slots__ = ("kind", "val", "line", "comment")

    def __init__(self, kind, val, line, comment):
        self.kind, self.val, self.line, self.comment = kind, val, line, comment

    def __repr__(self):
        return f"{self.kind}:{self.val!r}@{self.line}"


def tokenize(src):
    toks, pos, line, comments = [], 0, 1, []

    def needs_semi():
        # the Go spec's rule: after an identifier, literal, one of four
        # keywords or a closing bracket at the end of a line
        if not toks:
            return False
        t = toks[-1]
        if t.kind == "ident":
            return t.val not in GO_KEYWORDS or t.val in SEMI_AFTER_KEYWORD
        return t.kind in ("num", "str", "rune") or t.val in (")", "]", "}", "++", "--")

    while pos < len(src):
        m = TOKEN_RE.match(src, pos)
        if not m:
            raise SyntaxError(f"line {line}: cannot tokenize {src[pos:pos + 20]!r}")
        kind, val = m.lastgroup, m.group()
        pos = m.end()
        if kind == "ws":
            continue
        if kind == "nl" or (kind == "bcomment" and "\n" in val):
            if needs_semi():
                toks.append(Tok("op", ";", line, None))
            if kind == "bcomment":
                comments.append(val)
            line += val.count("\n")
            continue
        if kind in ("lcomment", "bcomment"):
            comments.append(val)
            continue
        if kind == "raw":
            kind = "str"
        # keywords and identifiers share a kind; the parser tells them apart.
        # Comments ride on the next token: field/type docs carry the
        # `docgen:nodoc` marker that explains fields missing from the schema.
        toks.append(Tok(kind, val, line, "\n".join(comments) if comments else None))
        comments = []
        line += val.count("\n")
    if needs_semi():
        toks.append(Tok("op", ";", line, None))
    toks.append(Tok("eof", "", line, None))
    return toks


def go_unquote(lit):
    if lit.startswith("`"):
        return lit[1:-1]
    out, i, body = [], 0, lit[1:-1]
    simple = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "'": "'", "a": "\a", "b": "\b", "f": "\f", "v": "\v"}
    while i < len(body):
        c = body[i]
        if c == "\\" and i + 1 < len(body):
            n = body[i + 1]
            if n in simple:
                out.append(simple[n])
                i += 2
                continue
            if n in "xuU":
                width = {"x": 2, "u": 4, "U": 8}[n]
                out.append(chr(int(body[i + 2:i + 2 + width], 16)))
                i += 2 + width
                continue
            if n in "01234567":
                out.append(chr(int(body[i + 1:i + 4], 8)))
                i += 4
                continue
        out.append(c)
        i += 1
    return "".join(out)


def tag_lookup(tag, key):
    """reflect.StructTag.Lookup: conventional `k:"v" k2:"v2"` format."""
    i = 0
    while i < len(tag):
        while i < len(tag) and tag[i] == " ":
            i += 1
        j = i
        while j < len(tag) and tag[j] > " " and tag[j] not in ':"\x7f':
            j += 1
        if j == i or j + 1 >= len(tag) or tag[j] != ":" or tag[j + 1] != '"':
            return None
        name = tag[i:j]
        k = j + 1 + 1
        while k < len(tag) and tag[k] != '"':
            if tag[k] == "\\":
                k += 1
            k += 1
        if k >= len(tag):
            return None
        value = go_unquote(tag[j + 1:k + 1])
        if name == key:
            return value
        i = k + 1
    return None


# ---------------------------------------------------------------------------
# parser: declarations and type expressions
#
# Type expressions are tuples:
#   ("ident", name) / ("qual", pkgalias, name)   -- unresolved names
#   ("ptr", t) ("slice", t) ("array", n, t) ("map", k, v) ("chan", t)
#   ("struct", [field dicts]) ("iface", is_empty) ("func",)
#   ("generic", base, [args])

class Parser:
    def __init__(self, toks):
        self.t, self.i = toks, 0

    def peek(self, off=0):
        return self.t[self.i + off]

    def next(self):
        tok = self.t[self.i]
        self.i += 1
        return tok

    def at(self, val, off=0):
        tok = self.t[self.i + off]
        return tok.kind in ("op", "ident") and tok.val == val

    def expect(self, val):
        tok = self.next()
        if tok.val != val:
            raise SyntaxError(f"line {tok.line}: expected {val!r}, got {tok.val!r}")
        return tok

    def skip_balanced(self):
        """Skip a bracketed group starting at the current opening token."""
        pairs = {"(": ")", "[": "]", "{": "}"}
        start = self.i
        stack = [pairs[self.next().val]]
        while stack:
            tok = self.next()
            if tok.kind == "eof":
                raise SyntaxError("unbalanced brackets")
            if tok.kind == "op" and tok.val in pairs:
                stack.append(pairs[tok.val])
            elif tok.kind == "op" and tok.val == stack[-1]:
                stack.pop()
        return start, self.i

    # -- type expressions

    def parse_type(self):
        tok = self.peek()
        if tok.val == "*":
            self.next()
            return ("ptr", self.parse_type())
        if tok.val == "(":
            self.next()
            t = self.parse_type()
            self.expect(")")
            return t
        if tok.val == "[":
            self.next()
            if self.at("]"):
                self.next()
                return ("slice", self.parse_type())
            start = self.i
            while not self.at("]"):
                if self.peek().val in ("(", "[", "{"):
                    self.skip_balanced()
                else:
                    self.next()
            length = " ".join(x.val for x in self.t[start:self.i])
            self.expect("]")
            return ("array", length, self.parse_type())
        if tok.val == "map":
            self.next()
            self.expect("[")
            k = self.parse_type()
            self.expect("]")
            return ("map", k, self.parse_type())
        if tok.val == "chan" or tok.val == "<-":
            self.next()
            if self.at("<-") or self.at("chan"):
                self.next()
            return ("chan", self.parse_type())
        if tok.val == "func":
            self.next()
            self.skip_signature()
            return ("func",)
        if tok.val == "struct":
            self.next()
            return ("struct", self.parse_struct_body())
        if tok.val == "interface":
            self.next()
            start, end = self.skip_balanced()
            return ("iface", end - start == 2)
        if tok.kind == "ident":
            return self.parse_type_name()
        raise SyntaxError(f"line {tok.line}: unexpected {tok.val!r} in type")

    def parse_type_name(self):
        name = self.next().val
        if self.at("."):
            self.next()
            t = ("qual", name, self.next().val)
        else:
            t = ("ident", name)
        if self.at("["):
            # type arguments of an instantiated generic type
            self.next()
            args = [self.parse_type()]
            while self.at(","):
                self.next()
                args.append(self.parse_type())
            self.expect("]")
            t = ("generic", t, args)
        return t

    def skip_signature(self):
        # parameters, then optional results: a parenthesised list or one type
        self.skip_balanced()
        if self.at("("):
            self.skip_balanced()
        elif not (self.at("{") or self.at(";") or self.at(")") or self.at(",") or self.at("]")
                  or self.peek().kind == "str" or self.at("}") or self.at("=")):
            self.parse_type()

    def parse_struct_body(self):
        self.expect("{")
        fields = []
        while not self.at("}"):
            if self.at(";"):
                self.next()
                continue
            first = self.peek()
            comment = first.comment
            line = first.line
            # embedded field: [*]TypeName[.Name] followed by tag / ; / }
            if first.val == "*":
                self.next()
                t = ("ptr", self.parse_type_name())
                fields.append({"names": None, "type": t, "embedded": True})
            elif first.kind == "ident" and (self.at(".", 1) or self.at(";", 1) or self.at("}", 1)
                                           or self.peek(1).kind == "str"):
                t = self.parse_type_name()
                fields.append({"names": None, "type": t, "embedded": True})
            else:
                names = [self.next().val]
                while self.at(","):
                    self.next()
                    names.append(self.next().val)
                fields.append({"names": names, "type": self.parse_type(), "embedded": False})
            fields[-1]["comment"] = comment or ""
            fields[-1]["line"] = line
            fields[-1]["tag"] = go_unquote(self.next().val) if self.peek().kind == "str" else ""
        self.expect("}")
        return fields

    # -- top level

    def parse_file(self):
        f = {"package": None, "imports": {}, "types": {}, "consts": {}, "funcs": []}
        while self.peek().kind != "eof":
            tok = self.next()
            if tok.val == ";":
                continue
            if tok.val == "package":
                f["package"] = self.next().val
            elif tok.val == "import":
                self.group(lambda: self.import_spec(f))
            elif tok.val == "type":
                # a lone declaration's doc comment sits on the `type` keyword
                self.group(lambda: self.type_spec(f, tok.comment))
            elif tok.val == "const":
                self.group(lambda: self.const_spec(f))
            elif tok.val == "var":
                self.group(self.skip_spec)
            elif tok.val == "func":
                self.func_decl(f)
            else:
                raise SyntaxError(f"line {tok.line}: unexpected top-level {tok.val!r}")
        return f

    def group(self, spec):
        if self.at("("):
            self.next()
            while not self.at(")"):
                if self.at(";"):
                    self.next()
                    continue
                spec()
            self.next()
        else:
            spec()

    def skip_spec(self):
        while not (self.at(";") or self.at(")")):
            if self.peek().val in ("(", "[", "{"):
                self.skip_balanced()
            else:
                self.next()

    def import_spec(self, f):
        alias = None
        if self.peek().kind != "str":
            alias = self.next().val
        path = go_unquote(self.next().val)
        # blank imports (`_ "path"`, used by types.go to register every
        # document package) must not overwrite each other
        key = path if alias in (None, "_") else alias
        f["imports"][key] = path

    def type_spec(self, f, outer_comment=None):
        first = self.peek()
        name = self.next().val
        # generic type parameters: `[T any]` (an array length is `[N]`)
        if self.at("[") and self.peek(1).kind == "ident" and not self.at("]", 2):
            self.skip_balanced()
        alias = False
        if self.at("="):
            self.next()
            alias = True
        t = self.parse_type()
        comment = "\n".join(c for c in (outer_comment, first.comment) if c)
        f["types"][name] = {"type": t, "alias": alias, "comment": comment, "line": first.line}

    def const_spec(self, f):
        # only `Name = "literal"` / `Name = OtherConst` matter (document kinds)
        names = [self.next().val]
        while self.at(","):
            self.next()
            names.append(self.next().val)
        if not self.at("=") and not self.at(";") and not self.at(")"):
            self.parse_type()
        if self.at("="):
            self.next()
            start = self.i
            self.skip_spec()
            value = self.t[start:self.i]
            if len(names) == 1 and len(value) == 1:
                f["consts"][names[0]] = value[0]

    def func_decl(self, f):
        recv = None
        recv_ptr = False
        if self.at("("):
            start, end = self.skip_balanced()
            inner = [x for x in self.t[start + 1:end - 1] if x.kind == "ident"]
            # `(r *T)`, `(T)`, `(r T[K])`: the receiver base type is the
            # last identifier that is not a type parameter of a generic
            names = [x.val for x in inner]
            recv = names[1] if len(names) >= 2 else names[0]
            recv_ptr = any(x.val == "*" for x in self.t[start + 1:end - 1])
        name = self.next().val
        if self.at("["):
            self.skip_balanced()
        pstart, pend = self.i, None
        self.skip_signature()
        pend = self.i
        sig = " ".join(x.val for x in self.t[pstart:pend])
        body = None
        if self.at("{"):
            bstart, bend = self.skip_balanced()
            body = self.t[bstart:bend]
        f["funcs"].append({"recv": recv, "recv_ptr": recv_ptr, "name": name, "sig": sig, "body": body})


# ---------------------------------------------------------------------------
# packages and type resolution

class Package:
    def __init__(self, path, name, files):
        self.path, self.name, self.files = path, name, files
        self.types, self.consts, self.methods, self.funcs = {}, {}, {}, []


class Universe:
    def __init__(self, repo):
        self.repo = repo
        self.packages = {}

    def package(self, import_path):
        if import_path in self.packages:
            return self.packages[import_path]
        directory = import_path[len(TALOS_MODULE):]
        files = self.repo.package_files(directory)
        if not files:
            raise KeyError(f"no Go files for {import_path} at {self.repo.tag}")
        pkg = None
        for path in files:
            parsed = Parser(tokenize(self.repo.show(path))).parse_file()
            if pkg is None:
                pkg = Package(import_path, parsed["package"], files)
            for name, decl in parsed["types"].items():
                decl["file"], decl["imports"] = path, parsed["imports"]
                pkg.types[name] = decl
            for name, tok in parsed["consts"].items():
                pkg.consts[name] = (tok, parsed["imports"])
            for fn in parsed["funcs"]:
                fn["file"], fn["imports"] = path, parsed["imports"]
                pkg.funcs.append(fn)
                if fn["recv"]:
                    pkg.methods.setdefault(fn["recv"], []).append(fn)
        self.packages[import_path] = pkg
        return pkg

    @staticmethod
    def is_upstream(import_path):
        return import_path.startswith(TALOS_MODULE)

    def qualifier(self, import_path):
        # config document packages are known by their Go package name (as in
        # upstream's JSON schema, e.g. "network.BondConfigV1Alpha1"); other
        # talos packages by their path below pkg/machinery, because several
        # share a package name (config/types/block vs resources/block).
        if import_path.startswith(CONFIG_TYPES):
            return self.package(import_path).name
        if import_path.startswith(MACHINERY):
            return import_path[len(MACHINERY):]
        return import_path[len(TALOS_MODULE):]

    def resolve(self, t, pkg, imports):
        """Turn an unresolved type expression into a resolved one.

        Resolved names: ("named", import_path, Name) for talos types,
        ("ext", written_alias, Name, import_path) for everything else,
        ("basic", name) for predeclared types.  Go type aliases are replaced
        by their target, as reflect (and so the check) never sees them.
        """
        kind = t[0]
        if kind == "ident":
            name = t[1]
            if name in pkg.types:
                return self.named(pkg, name)
            if name in PREDECLARED:
                return ("basic", "any") if name == "any" else ("basic", name)
            raise KeyError(f"unknown identifier {name} in {pkg.path}")
        if kind == "qual":
            alias, name = t[1], t[2]
            path = None
            for key, p in imports.items():
                if key == alias or (key == p and self.default_name(p) == alias):
                    path = p
            if path is None:
                raise KeyError(f"unknown package {alias} in {pkg.path}")
            if self.is_upstream(path):
                other = self.package(path)
                if name not in other.types:
                    raise KeyError(f"{path}.{name} not found")
                return self.named(other, name)
            return ("ext", alias, name, path)
        if kind == "generic":
            return ("generic", self.resolve(t[1], pkg, imports), [self.resolve(a, pkg, imports) for a in t[2]])
        if kind in ("ptr", "slice", "chan"):
            return (kind, self.resolve(t[1], pkg, imports))
        if kind == "array":
            return ("array", t[1], self.resolve(t[2], pkg, imports))
        if kind == "map":
            return ("map", self.resolve(t[1], pkg, imports), self.resolve(t[2], pkg, imports))
        if kind == "iface":
            return ("basic", "any") if t[1] else ("iface",)
        if kind == "struct":
            return ("struct", [dict(f, type=self.resolve(f["type"], pkg, imports)) for f in t[1]])
        return t

    def default_name(self, path):
        if self.is_upstream(path):
            return self.package(path).name
        last = path.rstrip("/").split("/")[-1]
        if re.fullmatch(r"v[0-9]+", last) and "/" in path:
            last = path.split("/")[-2]  # go.yaml.in/yaml/v4 -> yaml
        return last.split(".")[0].replace("-", "_")

    def named(self, pkg, name):
        decl = pkg.types[name]
        if decl["alias"]:
            return self.resolve(decl["type"], pkg, decl["imports"])
        return ("named", pkg.path, name)

    def render(self, t):
        kind = t[0]
        if kind == "basic":
            return t[1]
        if kind == "named":
            return f"{self.qualifier(t[1])}.{t[2]}"
        if kind == "ext":
            return f"{t[1]}.{t[2]}"
        if kind == "ptr":
            return "*" + self.render(t[1])
        if kind == "slice":
            return "[]" + self.render(t[1])
        if kind == "array":
            return f"[{t[1]}]" + self.render(t[2])
        if kind == "map":
            return f"map[{self.render(t[1])}]{self.render(t[2])}"
        if kind == "chan":
            return "chan " + self.render(t[1])
        if kind == "generic":
            return self.render(t[1]) + "[" + ",".join(self.render(a) for a in t[2]) + "]"
        if kind == "iface":
            return "interface{...}"
        if kind == "func":
            return "func(...)"
        if kind == "struct":
            return "struct{...}"
        raise ValueError(t)


def named_refs(t):
    """All named/external types mentioned in a resolved type expression."""
    kind = t[0]
    if kind in ("named", "ext"):
        yield t
    elif kind in ("ptr", "slice", "chan"):
        yield from named_refs(t[1])
    elif kind == "array":
        yield from named_refs(t[2])
    elif kind == "map":
        yield from named_refs(t[1])
        yield from named_refs(t[2])
    elif kind == "generic":
        yield from named_refs(t[1])
        for a in t[2]:
            yield from named_refs(a)
    elif kind == "struct":
        for f in t[1]:
            yield from named_refs(f["type"])


def deref(t):
    while t[0] == "ptr":
        t = t[1]
    return t


# ---------------------------------------------------------------------------
# the key rules of xyaml.CheckUnknownKeys (siderolabs/gen), restated:
#   - a field's key is its yaml tag name; a field without a yaml tag gets
#     strings.ToLower(GoFieldName) (this includes unexported fields);
#   - `yaml:"-"` fields are skipped;
#   - a tag with an empty name and options (`yaml:",omitempty"`) adds NO key;
#   - a `,inline` field whose type is a map turns the whole struct into that
#     map (any key accepted, values checked against the map's value type);
#     an inline struct adds no key of its own - its fields only count when it
#     is an embedded (anonymous) field, because reflect.VisibleFields promotes
#     them, tag or no tag;
#   - an embedded field without a yaml tag also adds its own lowercased type
#     name as a key, next to the promoted fields.

def yaml_tag_info(tag):
    value = tag_lookup(tag, "yaml")
    if value is None:
        value = ""
    name, _, opts = value.partition(",")
    options = opts.split(",") if opts else []
    return value, name, options


def field_go_name(field, t):
    if field["names"]:
        return field["names"]
    base = deref(t)
    if base[0] == "generic":
        base = base[1]
    return [base[2] if base[0] in ("named", "ext") else "?"]


class Generator:
    def __init__(self, repo):
        self.repo = repo
        self.u = Universe(repo)
        self.types = {}      # rendered name -> entry
        self.external = {}   # rendered name -> entry

    # -- methods (own + promoted through embedded talos types)

    def method_kinds(self, pkg_path, name, seen=None):
        seen = seen or set()
        if (pkg_path, name) in seen:
            return {}
        seen.add((pkg_path, name))
        pkg = self.u.package(pkg_path)
        found = {}
        for fn in pkg.methods.get(name, []):
            if fn["name"] == "UnmarshalYAML":
                found["unmarshal_yaml"] = "node" if "Node" in fn["sig"] else "func"
            elif fn["name"] == "UnmarshalText":
                found["unmarshal_text"] = True
            # How the encoder writes and omits the type (what the config crate's table needs):
            # go-yaml calls MarshalYAML / MarshalText and IsZero when the method set has them.
            elif fn["name"] in ("MarshalYAML", "MarshalText", "IsZero"):
                key = {"MarshalYAML": "marshal_yaml", "MarshalText": "marshal_text", "IsZero": "is_zero"}[fn["name"]]
                found[key] = "pointer" if fn.get("recv_ptr") else "value"
            elif fn["name"] == "Name" and fn["sig"].replace(" ", "").startswith("()string"):
                found["name_method"] = True
        decl = pkg.types[name]
        t = self.u.resolve(decl["type"], pkg, decl["imports"])
        if t[0] == "struct":
            for f in t[1]:
                if not f["embedded"]:
                    continue
                base = deref(f["type"])
                if base[0] == "named":
                    for k, v in self.method_kinds(base[1], base[2], seen).items():
                        found.setdefault(k, v)
                elif base[0] == "ext":
                    note = EXTERNAL_NOTES.get(f"{base[3]}.{base[2]}", {})
                    for k in ("unmarshal_text", "unmarshal_yaml"):
                        if note.get(k):
                            found.setdefault(k, note[k])
        return found

    # -- walking

    def add_type(self, ref):
        if ref[0] == "ext":
            key = self.u.render(ref)
            if key not in self.external:
                note = EXTERNAL_NOTES.get(f"{ref[3]}.{ref[2]}", UNKNOWN_EXTERNAL)
                self.external[key] = dict({"unmarshal_text": False, "unmarshal_yaml": False}, **note,
                                          name=key, import_path=ref[3])
            return []
        key = self.u.render(ref)
        if key in self.types:
            return []
        pkg = self.u.package(ref[1])
        decl = pkg.types[ref[2]]
        t = self.u.resolve(decl["type"], pkg, decl["imports"])
        methods = self.method_kinds(ref[1], ref[2])
        entry = {
            "package": ref[1],
            "source": f"{decl['file']}:{decl['line']}",
            "reflect_name": f"{pkg.name}.{ref[2]}",
            "custom": "unmarshal_yaml" in methods,
            "unmarshal_yaml": methods.get("unmarshal_yaml", False),
            "unmarshal_text": methods.get("unmarshal_text", False),
        }
        for k in ("marshal_yaml", "marshal_text", "is_zero"):
            if k in methods:
                entry[k] = methods[k]
        if "docgen:nodoc" in decl["comment"].replace("docgen: nodoc", "docgen:nodoc"):
            entry["nodoc"] = True
        self.types[key] = entry
        if t[0] == "struct":
            entry["kind"] = "struct"
            entry["struct"], entry["skipped"] = self.struct_fields(t[1])
            if methods.get("name_method"):
                entry["name_method"] = True
            return list(named_refs(t))
        entry["kind"] = "interface" if t[0] == "iface" else "named"
        entry["underlying"] = self.u.render(t)
        return list(named_refs(t))

    def struct_fields(self, fields):
        out, skipped = [], []
        for f in fields:
            raw, name, options = yaml_tag_info(f["tag"])
            for go_name in field_go_name(f, f["type"]):
                exported = go_name[:1].isupper()
                rec = {
                    "go_name": go_name,
                    "type": self.u.render(f["type"]),
                    "omitempty": "omitempty" in options,
                    "inline": "inline" in options,
                    "flow": "flow" in options,
                    "embedded": f["embedded"],
                    "exported": exported,
                }
                if raw == "-":
                    skipped.append(dict(rec, key=None, tag=raw))
                    continue
                if raw == "":
                    rec["key"] = go_name.lower()
                elif name:
                    rec["key"] = name
                else:
                    # `yaml:",opts"`: the check adds no key (the YAML library
                    # itself would use the lowercased Go name)
                    rec["key"] = None
                if raw:
                    rec["tag"] = raw
                if "docgen:nodoc" in f["comment"].replace("docgen: nodoc", "docgen:nodoc"):
                    rec["nodoc"] = True
                if f["embedded"]:
                    base = deref(f["type"])
                    rec["promoted"] = base[0] in ("named", "ext") and self.is_struct(base)
                out.append(rec)
        return out, skipped

    def is_struct(self, ref):
        if ref[0] == "ext":
            return EXTERNAL_NOTES.get(f"{ref[3]}.{ref[2]}", UNKNOWN_EXTERNAL)["go_kind"] == "struct"
        pkg = self.u.package(ref[1])
        decl = pkg.types[ref[2]]
        return self.u.resolve(decl["type"], pkg, decl["imports"])[0] == "struct"

    def resolved_struct(self, ref):
        pkg = self.u.package(ref[1])
        decl = pkg.types[ref[2]]
        t = self.u.resolve(decl["type"], pkg, decl["imports"])
        return t[1] if t[0] == "struct" else None

    # -- what CheckUnknownKeys accepts for a struct

    def visible_fields(self, ref):
        """reflect.VisibleFields, over the parsed sources.

        Returns (fields in VisibleFields order, external embedded types whose
        promoted fields could not be listed).  Same-depth name clashes cancel
        each other, a shallower field hides a deeper one.
        """
        result, by_name, unresolved, visiting = [], {}, [], set()

        def walk(ref, depth):
            if ref in visiting:
                return
            visiting.add(ref)
            for f in self.resolved_struct(ref):
                for go_name in field_go_name(f, f["type"]):
                    add = True
                    if go_name in by_name:
                        old = result[by_name[go_name]]
                        if old["depth"] == depth:
                            old["hidden"] = True
                            add = False
                        elif depth < old["depth"]:
                            old["hidden"] = True
                        else:
                            add = False
                    if add:
                        by_name[go_name] = len(result)
                        result.append({"name": go_name, "field": f, "depth": depth, "hidden": False})
                    if f["embedded"]:
                        base = deref(f["type"])
                        if base[0] == "named" and self.resolved_struct(base) is not None:
                            walk(base, depth + 1)
                        elif base[0] == "ext" and self.is_struct(base):
                            unresolved.append(self.u.render(f["type"]))
            visiting.discard(ref)

        walk(ref, 0)
        return [r for r in result if not r["hidden"]], unresolved

    def check_keys(self, ref):
        fields, unresolved = self.visible_fields(ref)
        keys = {}
        for vf in fields:
            f = vf["field"]
            raw, name, options = yaml_tag_info(f["tag"])
            if raw == "-":
                continue
            if raw == "":
                keys[vf["name"].lower()] = self.u.render(f["type"])
                continue
            if "inline" in options and self.is_map(f["type"]):
                return {"inline_map": self.u.render(f["type"])}
            if name:
                keys[name] = self.u.render(f["type"])
        result = {"keys": dict(sorted(keys.items()))}
        if unresolved:
            result["unresolved_embedded"] = unresolved
        return result

    def is_map(self, t):
        if t[0] == "map":
            return True
        if t[0] == "named":
            pkg = self.u.package(t[1])
            decl = pkg.types[t[2]]
            return self.u.resolve(decl["type"], pkg, decl["imports"])[0] == "map"
        return False

    # -- document registry

    def documents(self):
        types_pkg = self.u.package(CONFIG_TYPES.rstrip("/"))
        registering = set()
        for fname in types_pkg.files:
            imports = Parser(tokenize(self.repo.show(fname))).parse_file()["imports"]
            registering.update(p for p in imports.values() if p.startswith(CONFIG_TYPES))
        docs = []
        for path in sorted(registering):
            pkg = self.u.package(path)
            for fn in pkg.funcs:
                if fn["name"] == "init" and fn["recv"] is None and fn["body"]:
                    docs.extend(self.register_calls(pkg, fn))
        return docs

    def const_value(self, pkg, tok):
        # follow `const A = B` chains within the package down to the literal
        for _ in range(10):
            if tok.kind == "str":
                return go_unquote(tok.val)
            if tok.kind == "ident" and tok.val in pkg.consts:
                tok = pkg.consts[tok.val][0]
                continue
            break
        raise KeyError(f"cannot resolve document kind {tok.val} in {pkg.path}")

    def register_calls(self, pkg, fn):
        body, out = fn["body"], []
        reg_alias = [a for a, p in fn["imports"].items() if p == REGISTRY_PKG]
        reg_alias = reg_alias[0] if reg_alias and reg_alias[0] != REGISTRY_PKG else "registry"
        for i in range(len(body) - 3):
            if not (body[i].val == reg_alias and body[i + 1].val == "." and body[i + 2].val == "Register"):
                continue
            kind_tok = body[i + 4]
            if body[i + 5].val == ".":
                raise NotImplementedError("document kind from another package")
            kind = self.const_value(pkg, kind_tok)
            # scan the constructor literal: `case "v1alpha1": return &T{}` or
            # an unconditional `return &T{}` (any version)
            j = i + 4
            while body[j].val != "{":
                j += 1
            versions, k, end, depth = None, j, j, 0
            while True:
                tok = body[end]
                if tok.val == "{":
                    depth += 1
                elif tok.val == "}":
                    depth -= 1
                    if depth == 0:
                        break
                end += 1
            while k < end:
                tok = body[k]
                if tok.val == "case":
                    versions, k = [], k + 1
                    while body[k].val != ":":
                        if body[k].kind == "str":
                            versions.append(go_unquote(body[k].val))
                        k += 1
                elif tok.val == "default":
                    versions = "default"
                elif tok.val == "return" and body[k + 1].val == "&":
                    ref = self.u.resolve(("ident", body[k + 2].val), pkg, fn["imports"])
                    tname = self.u.render(ref)
                    if versions is None:
                        out.append({"kind": kind, "apiVersion": "*", "type": tname, "ref": ref, "file": fn["file"]})
                    elif versions != "default":
                        for v in versions:
                            out.append({"kind": kind, "apiVersion": v, "type": tname, "ref": ref, "file": fn["file"]})
                k += 1
        return out

    NAME_REQUIRED_RE = re.compile(r'"([a-z]+ )*name (is required|must be specified|cannot be empty)"')

    def name_required(self, ref, source_file):
        """Evidence that validation rejects a missing document name.

        Heuristic: an error string like "name is required" in the file that
        declares the document.  No evidence does not prove the name optional.
        """
        pkg = self.u.package(ref[1])
        for fn in pkg.funcs:
            if fn["file"] != source_file or not fn["body"]:
                continue
            for tok in fn["body"]:
                if tok.kind == "str" and self.NAME_REQUIRED_RE.fullmatch(tok.val):
                    return go_unquote(tok.val)
        return None

    # -- main

    def run(self):
        docs = self.documents()
        queue = [d["ref"] for d in docs]
        while queue:
            queue.extend(self.add_type(queue.pop()))
        for key, entry in self.types.items():
            if entry["kind"] == "struct":
                name = key.split(".")[-1]
                entry["check_keys"] = self.check_keys(("named", entry["package"], name))
        documents = []
        for d in docs:
            entry = self.types[d["type"]]
            if d["kind"] == "v1alpha1":
                # registered as kind "v1alpha1"; decoder.go reaches it for
                # documents without apiVersion/kind (legacy machine config)
                rec = {"apiVersion": "", "kind": "", "type": d["type"], "legacy": True,
                       "registry_kind": d["kind"], "registry_versions": d["apiVersion"]}
            else:
                rec = {"apiVersion": d["apiVersion"], "kind": d["kind"], "type": d["type"]}
            rec["source"] = d["file"]
            keys = entry.get("check_keys", {}).get("keys", {})
            rec["name_key"] = "name" in keys
            rec["named_document"] = bool(entry.get("name_method"))
            evidence = self.name_required(d["ref"], entry["source"].split(":")[0])
            rec["name_required"] = evidence is not None
            if evidence:
                rec["name_required_evidence"] = evidence
            documents.append(rec)
        documents.sort(key=lambda r: (r.get("legacy", False), r["kind"], r["apiVersion"]))
        # the strictness rules live in these two modules, so say which
        # versions this tag was built with
        deps = {}
        for line in self.repo.show("pkg/machinery/go.mod").splitlines():
            parts = line.split()
            if parts and parts[0] in ("github.com/siderolabs/gen", "go.yaml.in/yaml/v4") and len(parts) >= 2:
                deps[parts[0]] = parts[1]
        return {
            "dependencies": deps,
            "generated_from": f"siderolabs/talos {self.repo.tag} pkg/machinery/config/types "
                              f"(by modules/sim/tools/gen_upstream_types.py)",
            "documents": documents,
            "types": dict(sorted(self.types.items())),
            "external": sorted(self.external.values(), key=lambda e: e["name"]),
        }


def main(argv):
    if len(argv) == 4 and argv[1] == "--module":
        source = ModuleDir(argv[2], argv[3])
    elif len(argv) == 3:
        source = Repo(argv[1], argv[2])
    else:
        sys.exit(f"usage: {argv[0]} TALOS_GIT_MIRROR TAG | --module MACHINERY_MODULE_DIR TAG")
    out = Generator(source).run()
    json.dump(out, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main(sys.argv)
