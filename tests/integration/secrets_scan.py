"""Every value of a secrets bundle in every form it could leak in, and a search for them."""

import base64

import yaml

PUBLIC = {"id", "crt"}


def secret_forms(bundle_text):
    """Raw values, base64-decoded PEM text and each PEM body line of every secret in the bundle."""
    bundle = yaml.safe_load(bundle_text)
    forms = set()

    def walk(node, key=None):
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, k)
        elif isinstance(node, str) and key not in PUBLIC:
            forms.add(node)
            try:
                decoded = base64.b64decode(node, validate=True).decode()
            except Exception:
                return
            if "-----BEGIN" in decoded:
                forms.add(decoded.strip())
                body = [line for line in decoded.splitlines() if line and not line.startswith("-----")]
                forms.add("".join(body))
                forms.update(line for line in body if len(line) >= 16)

    walk(bundle)
    return {f for f in forms if len(f) >= 8}


def leaks(text, forms):
    """The secret forms found in `text` (empty when nothing leaked)."""
    return sorted(f for f in forms if f in text)
