#!/usr/bin/env python3
"""Regenerates src/key_order.rs: the key order of every typed Talos config document.

The JSON schemas shipped with Talos list properties in Go struct order, which is the order the
comment-free encoder writes. Hidden/deprecated v1alpha1 fields are missing from the schemas, so they
are inserted here from config.md §3.7. Usage:
    python3 tools/gen_key_order.py ../../../shared/talos > src/key_order.rs && rustfmt --edition 2024 src/key_order.rs
"""
import json
import re
import sys

base = sys.argv[1]
new = json.load(open(f"{base}/config.schema.v1.14.0-rc.1.json"))["$defs"]
old = json.load(open(f"{base}/config.schema.v1.13.6.json"))["$defs"]

# Union: 1.14 order first, fields only known to 1.13 appended; the v1alpha1 structs come from 1.13
# (1.14 hides most of them).
defs = {}
for name in list(old) + [n for n in new if n not in old]:
    a = old.get(name, {}).get("properties", {})
    b = new.get(name, {}).get("properties", {})
    first, second = (a, b) if name.startswith("v1alpha1.") else (b, a)
    props = dict(first)
    for k, v in second.items():
        props.setdefault(k, v)
    defs[name] = props


def insert_after(def_name, after, fields):
    props = defs[def_name]
    items = list(props.items())
    idx = 0 if after is None else [k for k, _ in items].index(after) + 1
    for i, (k, v) in enumerate(fields):
        items.insert(idx + i, (k, v))
    defs[def_name] = dict(items)


LEAF = {}  # type unknown: written as found
STRMAP = {"patternProperties": {".*": {"type": "string"}}, "type": "object"}


def ref(n):
    return {"$ref": f"#/$defs/{n}"}


def seq(n):
    return {"type": "array", "items": ref(n)}


# Hidden v1alpha1 fields (config.md §3.7).
defs["v1alpha1.Registries"] = {"mirrors": {"type": "object", "patternProperties": {".*": ref("v1alpha1.RegistryMirror")}},
                               "config": {"type": "object", "patternProperties": {".*": ref("v1alpha1.RegistryConfig")}}}
defs["v1alpha1.RegistryMirror"] = {"endpoints": LEAF, "overridePath": LEAF, "skipFallback": LEAF}
defs["v1alpha1.RegistryConfig"] = {"tls": ref("v1alpha1.RegistryTLS"), "auth": ref("v1alpha1.RegistryAuth")}
defs["v1alpha1.RegistryTLS"] = {"clientIdentity": {"properties": {"crt": LEAF, "key": LEAF}}, "ca": LEAF,
                                "insecureSkipVerify": LEAF}
defs["v1alpha1.RegistryAuth"] = {"username": LEAF, "password": LEAF, "auth": LEAF, "identityToken": LEAF}
defs["v1alpha1.Network"] = {"hostname": LEAF, "interfaces": seq("v1alpha1.Device"), "nameservers": LEAF,
                            "searchDomains": LEAF, "extraHostEntries": LEAF, "kubespan": LEAF,
                            "disableSearchDomain": LEAF}
defs["v1alpha1.Device"] = {k: LEAF for k in ["interface", "deviceSelector", "addresses", "cidr", "routes", "bond",
                                              "bridge", "bridgePort", "vlans", "mtu", "dhcp", "ignore", "dummy",
                                              "dhcpOptions", "wireguard", "vip"]}
defs["v1alpha1.Device"]["deviceSelector"] = ref("v1alpha1.DeviceSelector")
defs["v1alpha1.Device"]["routes"] = seq("v1alpha1.Route")
defs["v1alpha1.Device"]["vlans"] = seq("v1alpha1.Vlan")
defs["v1alpha1.Device"]["vip"] = ref("v1alpha1.VIP")
defs["v1alpha1.DeviceSelector"] = {k: LEAF for k in ["busPath", "hardwareAddr", "permanentAddr", "pciID", "driver",
                                                      "physical"]}
defs["v1alpha1.Route"] = {k: LEAF for k in ["network", "gateway", "source", "metric", "mtu"]}
defs["v1alpha1.Vlan"] = {k: LEAF for k in ["addresses", "cidr", "routes", "dhcp", "vlanId", "mtu", "vip",
                                            "dhcpOptions"]}
defs["v1alpha1.Vlan"]["routes"] = seq("v1alpha1.Route")
defs["v1alpha1.Vlan"]["vip"] = ref("v1alpha1.VIP")
defs["v1alpha1.VIP"] = {"ip": LEAF, "equinixMetal": {"properties": {"apiToken": LEAF}},
                        "hcloud": {"properties": {"apiToken": LEAF}}}
defs["v1alpha1.Disk"] = {"device": LEAF, "partitions": seq("v1alpha1.Partition")}
defs["v1alpha1.Partition"] = {"size": LEAF, "mountpoint": LEAF}

insert_after("v1alpha1.Config", "debug", [("persist", LEAF)])
insert_after("v1alpha1.MachineConfig", "pods", [("network", ref("v1alpha1.Network")), ("disks", seq("v1alpha1.Disk"))])
insert_after("v1alpha1.MachineConfig", "files", [("env", STRMAP), ("time", LEAF)])
insert_after("v1alpha1.MachineConfig", "sysfs", [("registries", ref("v1alpha1.Registries")),
                                                ("systemDiskEncryption", LEAF)])
insert_after("v1alpha1.InstallConfig", "diskSelector", [("extraKernelArgs", LEAF)])
insert_after("v1alpha1.InstallConfig", "image", [("extensions", LEAF), ("bootloader", LEAF)])
insert_after("v1alpha1.FeaturesConfig", None, [("rbac", LEAF), ("stableHostname", LEAF)])
insert_after("v1alpha1.FeaturesConfig", "kubernetesTalosAPIAccess", [("apidCheckExtKeyUsage", LEAF)])
insert_after("v1alpha1.ClusterConfig", "inlineManifests", [])
insert_after("v1alpha1.ClusterConfig", "adminKubeconfig", [("allowSchedulingOnMasters", LEAF)])
insert_after("v1alpha1.EtcdConfig", "extraArgs", [("subnet", LEAF)])
insert_after("v1alpha1.APIServerConfig", "certSANs", [("disablePodSecurityPolicy", LEAF)])

# Where upstream's schemas and its Go types disagree, the Go types are what Talos decodes
# (siderolabs/talos at v1.13.9 and v1.14.0-rc.1):
# - `acceptedCAs` is `[]*x509.PEMEncodedCertificate` (a list of {crt}) in
#   pkg/machinery/config/types/v1alpha1/v1alpha1_types.go; a hand-written schema block calls it
#   one object.
for d in ("v1alpha1.MachineConfig", "v1alpha1.ClusterConfig"):
    if "acceptedCAs" in defs.get(d, {}):
        defs[d]["acceptedCAs"] = {"type": "array", "items": ref("v1alpha1.PEMEncodedCertificate")}
defs["v1alpha1.PEMEncodedCertificate"] = {"crt": {"type": "string"}}
# - ImageVerificationConfig is registered (pkg/machinery/config/types/security/image_verification.go)
#   but absent from both schemas (its file has no docgen:jsonschema marker).
defs["security.ImageVerificationConfigV1Alpha1"] = {
    "apiVersion": LEAF,
    "kind": {"enum": ["ImageVerificationConfig"]},
    "rules": seq("security.ImageVerificationRuleV1Alpha1"),
}
defs["security.ImageVerificationRuleV1Alpha1"] = {
    "image": {"type": "string"}, "skip": LEAF, "deny": LEAF,
    "keyless": ref("security.ImageKeylessVerifierV1Alpha1"),
    "publicKey": ref("security.ImagePublicKeyVerifierV1Alpha1"),
}
defs["security.ImageKeylessVerifierV1Alpha1"] = {"issuer": {"type": "string"}, "subject": {"type": "string"},
                                                  "subjectRegex": {"type": "string"}}
defs["security.ImagePublicKeyVerifierV1Alpha1"] = {"certificate": {"type": "string"}}
KIND_OF_EXTRA = {"security.ImageVerificationConfigV1Alpha1": "ImageVerificationConfig"}

# Fields whose Go type renders specially.
SPECIAL = {
    ("v1alpha1.MachineFile", "permissions"): "Octal",
    ("v1alpha1.Partition", "size"): "DiskSize",
    ("v1alpha1.ClusterInlineManifest", "contents"): "InlineContents",
}


def const_name(n):
    return "D_" + re.sub(r"[^A-Za-z0-9]", "_", n).upper()


def shape(def_name, field, p):
    if (def_name, field) in SPECIAL:
        return SPECIAL[(def_name, field)]
    if "$ref" in p:
        target = p["$ref"].split("/")[-1]
        return f"Struct({const_name(target)})" if defs.get(target) else "Leaf"
    if p.get("type") == "array":
        items = p.get("items", {})
        if "$ref" in items:
            target = items["$ref"].split("/")[-1]
            return f"Seq(&Struct({const_name(target)}))" if defs.get(target) else "Leaf"
        if items.get("type") == "object":
            return "Seq(&Any)"
        if items.get("type") == "string":
            return "Seq(&Str)"
        return "Leaf"
    if "properties" in p:
        inner = ", ".join(f'F("{k}", {shape(def_name, k, v)})' for k, v in p["properties"].items())
        return f"Struct(&[{inner}])"
    if "patternProperties" in p or "additionalProperties" in p:
        vals = list(p.get("patternProperties", {}).values()) or [p.get("additionalProperties")]
        v = vals[0] if vals else {}
        if isinstance(v, dict) and "$ref" in v:
            target = v["$ref"].split("/")[-1]
            return f"Map(&Struct({const_name(target)}))"
        return "StrMap"
    if p.get("type") == "object":
        return "Any"
    if p.get("type") == "string":
        return "Str"
    return "Leaf"


out = []
out.append("// @generated by tools/gen_key_order.py from the Talos v1.13.6 and v1.14.0-rc.1 JSON schemas")
out.append("// plus the hidden v1alpha1 fields listed in config.md §3.7 and the Go types' corrections noted")
out.append("// in the generator. Do not edit by hand.")
out.append("// Some nested structs are only reachable from kinds that embed them; keep them all.")
out.append("#![allow(dead_code)]")
out.append("")
out.append("use crate::encode::{F, Shape::*};")
out.append("")
for name, props in defs.items():
    if not props:
        continue
    fields = ",\n    ".join(f'F("{k}", {shape(name, k, v)})' for k, v in props.items())
    out.append(f"pub(crate) const {const_name(name)}: &[F] = &[\n    {fields},\n];")
    out.append("")

kinds = []
for name, props in defs.items():
    kind = props.get("kind")
    src = new.get(name) or old.get(name)
    enum = src.get("properties", {}).get("kind", {}).get("enum") if src else None
    if enum:
        for k in enum:
            kinds.append((k, const_name(name)))
for name, k in KIND_OF_EXTRA.items():
    kinds.append((k, const_name(name)))
# The schemas name the KubeSpan endpoints document `KubeSpanEndpoints`; the registry's kind is
# `KubeSpanEndpointsConfig` (pkg/machinery/config/types/network/kubespan_endpoints.go). Accept both.
if any(k == "KubeSpanEndpoints" for k, _ in kinds):
    kinds.append(("KubeSpanEndpointsConfig", dict(kinds)["KubeSpanEndpoints"]))
# The 1.14 schema names the install document's kind `UnattendedInstall`; generated configs say
# `UnattendedInstallConfig`. Accept both.
if any(k == "UnattendedInstall" for k, _ in kinds):
    kinds.append(("UnattendedInstallConfig", dict(kinds)["UnattendedInstall"]))
kinds.sort()
out.append("/// Multi-document kinds and their field order (`apiVersion`, `kind`, `name` included).")
out.append("pub(crate) const KINDS: &[(&str, &[F])] = &[")
for k, c in kinds:
    out.append(f'    ("{k}", {c}),')
out.append("];")
out.append("")
out.append("/// The v1alpha1 document.")
out.append(f"pub(crate) const V1ALPHA1: &[F] = {const_name('v1alpha1.Config')};")
print("\n".join(out))
