"""Every value of a secrets bundle in every form it could leak in, and a search for them."""

import base64

import yaml

PUBLIC = {"id", "crt"}


def _pem_forms(pem):
    """The whole PEM text, its body joined and each body line long enough not to match by chance."""
    body = [line for line in pem.splitlines() if line and not line.startswith("-----")]
    return {pem.strip(), "".join(body)} | {line for line in body if len(line) >= 16}


def secret_forms(bundle_text):
    """Raw values, base64-decoded PEM text and each PEM body line of every secret in the bundle; for
    the other secrets also the parts of the tokens (id.secret), their base64 and their bytes in hex."""
    bundle = yaml.safe_load(bundle_text)
    forms = set()

    def walk(node, key=None):
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, k)
        elif isinstance(node, str) and key not in PUBLIC:
            forms.add(node)
            try:
                raw = base64.b64decode(node, validate=True)
            except Exception:
                raw = None
            decoded = raw.decode(errors="replace") if raw else ""
            if "-----BEGIN" in decoded:
                forms.update(_pem_forms(decoded))
                return
            # Tokens (bootstrap, trustd) are "id.secret": the secret half alone is still a secret.
            forms.update(part for part in node.split(".") if len(part) >= 16)
            forms.add(base64.b64encode(node.encode()).decode())
            if raw:
                forms.add(raw.hex())

    walk(bundle)
    return {f for f in forms if len(f) >= 8}


def client_key_forms(talosconfig_text=None, kubeconfig_text=None):
    """The private keys a talosconfig (every context) and a kubeconfig (every user) hold, in the same
    forms: they are not in the bundle but are as secret as anything in it."""
    keys = []
    if talosconfig_text:
        doc = yaml.safe_load(talosconfig_text) or {}
        keys += [c["key"] for c in (doc.get("contexts") or {}).values() if c.get("key")]
    if kubeconfig_text:
        doc = yaml.safe_load(kubeconfig_text) or {}
        keys += [u["user"]["client-key-data"] for u in doc.get("users") or [] if u["user"].get("client-key-data")]
    forms = set()
    for key in keys:
        forms.add(key)
        forms.update(_pem_forms(base64.b64decode(key).decode()))
    return {f for f in forms if len(f) >= 8}


def leaks(text, forms):
    """The secret forms found in `text` (empty when nothing leaked)."""
    return sorted(f for f in forms if f in text)
