"""ansible-doc on the installed collection: every sidecar in plugins/modules documents its module.

`ansible-doc -l` is not tested: ansible-core (2.19 to 2.22) drops extensionless binary modules from the
list with a "documentation formatting error" warning, although the per-module commands below work.
"""

import json
import pathlib
import runpy
import subprocess

import pytest
import yaml

from conftest import ROOT, Ansible, _required_env

SIDECARS = sorted((ROOT / "plugins" / "modules").glob("*.yml"))
FRAGMENT = yaml.safe_load(
    runpy.run_path(str(ROOT / "plugins" / "doc_fragments" / "connection.py"))["ModuleDocFragment"].DOCUMENTATION
)


def ansible_doc(tmp_path, *args):
    ansible = Ansible(tmp_path)
    return subprocess.run(
        [str(ansible.bin / "ansible-doc"), *args], env=ansible.env(), capture_output=True, text=True, timeout=120
    )


def test_every_sidecar_is_installed_beside_its_binary():
    assert SIDECARS, "no sidecar docs in plugins/modules"
    collections = pathlib.Path(_required_env("FERRO_COLLECTIONS_PATH"))
    modules = collections / "ansible_collections" / "ferro" / "talos" / "plugins" / "modules"
    for sidecar in SIDECARS:
        assert (modules / sidecar.name).is_file(), f"{sidecar.name} is not in the installed collection"
        assert (modules / sidecar.stem).is_file(), f"{sidecar.stem} has docs but no binary"


def test_the_connection_fragment_is_valid_yaml():
    assert {"node", "endpoint", "talosconfig", "connect_timeout"} <= set(FRAGMENT["options"])
    assert FRAGMENT["options"]["node"]["required"] is True
    assert FRAGMENT["notes"]


@pytest.mark.parametrize("sidecar", SIDECARS, ids=lambda p: p.stem)
def test_ansible_doc_shows_the_module(sidecar, tmp_path):
    name = sidecar.stem
    source = yaml.safe_load(sidecar.read_text())
    doc = source["DOCUMENTATION"]
    assert doc["module"] == name

    text = ansible_doc(tmp_path, f"ferro.talos.{name}")
    assert text.returncode == 0, text.stderr
    header = text.stdout.splitlines()[0]
    assert header.startswith(f"> MODULE ferro.talos.{name} (") and header.endswith(f"/plugins/modules/{name}.yml)"), header
    for section in ("OPTIONS", "EXAMPLES", "RETURN VALUES"):
        assert section in text.stdout, f"ansible-doc {name} has no {section}"

    snippet = ansible_doc(tmp_path, "-s", f"ferro.talos.{name}")
    assert snippet.returncode == 0, snippet.stderr
    assert snippet.stdout.startswith(f"- name: {doc['short_description']}\n  {name}:\n"), snippet.stdout[:200]

    as_json = ansible_doc(tmp_path, "-j", f"ferro.talos.{name}")
    assert as_json.returncode == 0, as_json.stderr
    entry = json.loads(as_json.stdout)[f"ferro.talos.{name}"]
    shown = entry["doc"]
    assert shown["module"] == name
    assert shown["collection"] == "ferro.talos"
    assert shown["short_description"] == doc["short_description"]
    assert set(doc.get("options", {})) <= set(shown["options"])
    assert set(entry["return"] or {}) == set(source.get("RETURN") or {})
    assert f"ferro.talos.{name}" in entry["examples"]

    if "ferro.talos.connection" in doc.get("extends_documentation_fragment", []):
        # The fragment's options and notes are merged in; the module's own entries win on conflict.
        for option, spec in FRAGMENT["options"].items():
            assert option in shown["options"], f"{name}: fragment option {option} not merged"
            if option not in doc.get("options", {}):
                assert shown["options"][option]["type"] == spec["type"]
        for note in FRAGMENT["notes"]:
            assert note in shown["notes"]


def test_metadata_dump_lists_every_module(tmp_path):
    dump = ansible_doc(tmp_path, "--metadata-dump", "--no-fail-on-errors", "ferro.talos")
    assert dump.returncode == 0, dump.stderr
    modules = json.loads(dump.stdout)["all"]["module"]
    assert sorted(modules) == sorted(f"ferro.talos.{p.stem}" for p in SIDECARS)
    for name, entry in modules.items():
        assert "error" not in entry, f"{name}: {entry.get('error')}"


@pytest.mark.parametrize("core", ["2.19", "2.20", "2.21"])
def test_sanity_ignores_skip_validate_modules_for_every_binary(core):
    """validate-modules crashes reading an ELF file, so each binary needs a `!skip` (see tools/sanity)."""
    ignore = ROOT / "tests" / "sanity" / f"ignore-{core}.txt"
    lines = [line for line in ignore.read_text().splitlines() if line.strip() and not line.startswith("#")]
    skips = sorted(line for line in lines if line.endswith(" validate-modules!skip"))
    assert skips == sorted(f"plugins/modules/{p.stem} validate-modules!skip" for p in SIDECARS)


def test_the_installed_collection_carries_its_licence_lint_and_sanity_configuration():
    """What a user's own ansible-test sanity and ansible-lint runs need sits where they look for it in the
    installed collection, and Galaxy shows where the docs, the issues and the licence are."""
    installed = pathlib.Path(_required_env("FERRO_COLLECTIONS_PATH")) / "ansible_collections" / "ferro" / "talos"
    for name in ["LICENSE", ".ansible-lint", *(str(p.relative_to(ROOT)) for p in (ROOT / "tests" / "sanity").iterdir())]:
        assert (installed / name).is_file(), f"{name} is not in the installed collection"
        assert (installed / name).read_bytes() == (ROOT / name).read_bytes(), name
    assert "GNU GENERAL PUBLIC LICENSE" in (installed / "LICENSE").read_text()
    info = json.loads((installed / "MANIFEST.json").read_text())["collection_info"]
    assert info["license"] == ["GPL-3.0-or-later"]
    for key in ("repository", "documentation", "homepage", "issues"):
        assert info[key] and info[key].startswith("https://"), key
    # Nothing of the build's own machinery is shipped.
    for absent in ("tests/integration", "tools", "modules", "Cargo.toml", ".ci"):
        assert not (installed / absent).exists(), absent
    assert not list(installed.rglob("__pycache__"))


# Set only by the collection's action plugin, never by users (modules/tasks/src/shared/connection.rs), so
# undocumented on purpose.
INTERNAL_OPTIONS = {"secrets_file_decrypted"}


def documented_options(doc):
    """A sidecar's options with the connection fragment merged in, as ansible-doc merges them."""
    options = {}
    if "ferro.talos.connection" in doc.get("extends_documentation_fragment", []):
        options.update(FRAGMENT["options"])
    options.update(doc.get("options") or {})
    return options


def spec_mismatches(where, documented, code):
    """What the documentation says differently from the argument spec the code validates against."""
    found = []
    code = {k: v for k, v in code.items() if k not in INTERNAL_OPTIONS}
    for name in sorted(set(documented) ^ set(code)):
        found.append(f"{where}{name}: {'documented only' if name in documented else 'in the code only'}")
    for name in sorted(set(documented) & set(code)):
        doc, spec = documented[name], code[name]
        said = {
            "type": doc.get("type", "str"),
            "required": doc.get("required", False),
            "choices": doc.get("choices"),
            "elements": doc.get("elements"),
            "aliases": doc.get("aliases"),
        }
        taken = {key: spec.get(key) for key in said}
        taken["required"] = spec["required"]
        if not spec.get("no_log"):
            said["default"], taken["default"] = doc.get("default"), spec.get("default")
        for key in said:
            if said[key] != taken[key]:
                found.append(f"{where}{name}: {key} is documented as {said[key]!r}, the code has {taken[key]!r}")
        if "suboptions" in doc or "suboptions" in spec:
            found += spec_mismatches(f"{where}{name}.", doc.get("suboptions") or {}, spec.get("suboptions") or {})
    return found


def test_every_module_documents_the_options_its_code_takes():
    """Each sidecar's options (and sub-options), with their types, defaults, choices and requiredness, are the
    ones the program validates against (`ferro-talos --argument-specs`)."""
    program = pathlib.Path(_required_env("FERRO_TARGET_DIR")) / "ferro-talos"
    specs = json.loads(subprocess.run([str(program), "--argument-specs"], capture_output=True, text=True,
                                      check=True, timeout=30).stdout)
    assert sorted(specs) == sorted(p.stem for p in SIDECARS)
    found = []
    for sidecar in SIDECARS:
        doc = yaml.safe_load(sidecar.read_text())["DOCUMENTATION"]
        found += spec_mismatches(f"{sidecar.stem}: ", documented_options(doc), specs[sidecar.stem])
    assert found == [], "\n".join(found)
