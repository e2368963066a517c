"""docs/architecture.md says only what the repository shows: a tidy check, in the spirit of rust-analyzer's.

The document's claims that a machine can check are checked here, so that a rename, a move or a new crate
fails a test instead of leaving the document wrong:

1. no line is longer than MAX_LINE characters (one sentence a line, file lists as short bullets);
2. every backticked path exists: one with a `/` (from the repository root, or under a crate's section from
   the crate's folder or its `src/`), and under a crate's section every backticked `<name>.rs`;
3. every workspace member (the root Cargo.toml's `[workspace] members`) has one section titled
   ### `modules/<dir>` (`<package name>`), and every such section names a member by its package name;
4. under a crate's section, a backticked CamelCase name (`Spec`, `Error<K>`, `ErrorKind::NotReady`,
   `Oracle::start`) is a `struct`, `enum`, `trait`, `type` or `union` defined in that crate's `src/`
   (a name qualified by a workspace crate, `ferro_ansible_protocol::Params`, in that crate's);
5. every line that starts **Architecture Invariant:** ends with how it is checked: `(checked by `<file>`)` naming
   existing files (`<file>::tests::<fn>` also names a function in it), or `(reviewer: `<command>`)`.

Not paths: anything with a space, a placeholder (`<name>`) or a glob; a first segment with a dot inside it
(`github.com/...`, `127.0.B.0/24`); what lies outside the repository (`../shared/...`); and what the build
makes (GENERATED). Names that are not Rust types (RPCs, Kubernetes kinds, COSI resources) are written
without backticks in a crate's section.

The checker takes the document's path and the repository root, so the tests below also feed it broken
copies and prove that each rule fires. It reads files only: no cluster, no build, no cargo.
"""

import re
import tomllib
from pathlib import Path

import pytest

from conftest import ROOT

DOC = ROOT / "docs" / "architecture.md"
MAX_LINE = 200
# Paths the document may name that no checkout holds: built by the build or the release.
GENERATED = ("bin/", "target/", "tests/output/", ".venv")
# Names from Rust's standard library that a crate's section may backtick.
STD_NAMES = {"Debug", "Display", "Option", "Result", "String", "Vec", "Box", "From", "Send", "Sync"}
MARKER = "**Architecture Invariant:**"

SECTION = re.compile(r"^### `modules/([^`/]+)` \(`([^`]+)`\)\s*$")
ANY_CRATE_HEADING = re.compile(r"^### `modules/")
HEADING = re.compile(r"^#{1,3} ")
BACKTICKED = re.compile(r"`([^`\n]+)`")
CAMEL = re.compile(r"^[A-Z][A-Za-z0-9]*[a-z][A-Za-z0-9]*$")
CHECKED_BY = re.compile(r"\(checked by ((?:`[^`]+`)(?:(?:, | and )`[^`]+`)*)\)\.?$")
REVIEWER = re.compile(r"\(reviewer: `[^`]+`\)\.?$")
DEFINITION = re.compile(r"^\s*(?:pub(?:\([\w:]+\))?\s+)?(?:unsafe\s+)?(?:struct|enum|trait|type|union)\s+([A-Za-z_]\w*)", re.M)


def workspace(root):
    """{member folder: package name} from the root manifest's members (globs expanded, excludes honoured)."""
    manifest = tomllib.loads((root / "Cargo.toml").read_text())["workspace"]
    excluded = {(root / e).resolve() for e in manifest.get("exclude", [])}
    members = {}
    for pattern in manifest["members"]:
        for folder in sorted(root.glob(pattern)):
            if (folder / "Cargo.toml").is_file() and folder.resolve() not in excluded:
                package = tomllib.loads((folder / "Cargo.toml").read_text())["package"]["name"]
                members[folder.relative_to(root).as_posix()] = package
    return members


def sections(lines):
    """(line number, heading, crate folder or None) for each line: the section it belongs to."""
    current, folder = None, None
    for number, line in enumerate(lines, 1):
        if HEADING.match(line):
            current = line
            match = SECTION.match(line)
            folder = f"modules/{match.group(1)}" if match else None
        yield number, line, current, folder


def looks_like_path(token):
    if "/" not in token or any(c in token for c in " <>*{}$|\\\"'()"):
        return False
    first = token.split("/", 1)[0]
    if "." in first.strip("."):  # a domain or an address: github.com/..., talos.dev/..., 127.0.B.0/24
        return False
    return not token.startswith("../") and not token.startswith(GENERATED)


def path_exists(root, token, folder):
    relative = token.split("::", 1)[0].rstrip("/")
    bases = [root] + ([root / folder, root / folder / "src"] if folder else [])
    return any((base / relative).exists() for base in bases)


def crate_files(root, folder):
    """The names of the files in a crate's folder."""
    return {p.name for p in (root / folder).rglob("*") if p.is_file() and "target" not in p.relative_to(root).parts}


def defined_types(root, folder):
    """Every name a `struct`, `enum`, `trait`, `type` or `union` of a crate's `src/` defines."""
    return {name for p in (root / folder / "src").rglob("*.rs") for name in DEFINITION.findall(p.read_text(errors="replace"))}


def type_name(token, folder, libs):
    """(crate folder, CamelCase name) a backticked token names, or None when it names no Rust type."""
    if " " in token:
        return None
    segments = re.split(r"[(<]", token, maxsplit=1)[0].split("::")
    if segments[0] in libs:
        folder, segments = libs[segments[0]], segments[1:]
    for segment in segments:
        if CAMEL.match(segment):
            return folder, segment
        if segment[:1].isupper():
            return None
    return None


def check_invariant(root, line):
    if REVIEWER.search(line):
        return []
    checked = CHECKED_BY.search(line)
    if not checked:
        return ["does not end with (checked by `<test file>`) or (reviewer: `<command>`)"]
    problems = []
    for token in BACKTICKED.findall(checked.group(1)):
        path, _, function = token.partition("::")
        file = root / path
        if not file.is_file():
            problems.append(f"is checked by {path}, which is not a file")
        elif function and not re.search(rf"\bfn {re.escape(function.split('::')[-1])}\b", file.read_text()):
            problems.append(f"is checked by {token}, but {path} has no fn {function.split('::')[-1]}")
    return problems


def check(doc, root=ROOT):
    """Every problem of the document at `doc`, as "docs/architecture.md:LINE: what", for the repository at `root`."""
    lines = Path(doc).read_text().splitlines()
    members = workspace(root)
    libs = {package.replace("-", "_"): folder for folder, package in members.items()}
    types, files = {}, {}
    problems, seen = [], {}

    def problem(number, text):
        problems.append(f"{Path(doc).name}:{number}: {text}")

    for number, line, heading, folder in sections(lines):
        # Rule 1: short lines.
        if len(line) > MAX_LINE:
            problem(number, f"{len(line)} characters, more than {MAX_LINE}: one sentence a line, lists as bullets")
        # Rule 3: crate sections name members, by their package names.
        if ANY_CRATE_HEADING.match(line):
            match = SECTION.match(line)
            if not match:
                problem(number, "a crate's section is titled ### `modules/<dir>` (`<package name>`)")
            elif f"modules/{match.group(1)}" not in members:
                problem(number, f"modules/{match.group(1)} is not a workspace member")
            elif members[f"modules/{match.group(1)}"] != match.group(2):
                problem(number, f"modules/{match.group(1)} is the package {members[f'modules/{match.group(1)}']}, "
                                f"not {match.group(2)}")
            else:
                seen.setdefault(f"modules/{match.group(1)}", []).append(number)
        if folder not in members:
            folder = None
        # Rule 5: every invariant says how it is checked.
        if line.startswith(MARKER):
            for text in check_invariant(root, line):
                problem(number, f"invariant {text}")
        # The reviewer's command and the checking files are judged by rule 5 only.
        prose = REVIEWER.sub("", CHECKED_BY.sub("", line)) if line.startswith(MARKER) else line
        for token in BACKTICKED.findall(prose):
            # Rule 2: paths exist.
            if looks_like_path(token):
                if not path_exists(root, token, folder):
                    problem(number, f"`{token}` does not exist" + (f" (looked in {folder} too)" if folder else ""))
            elif folder and re.fullmatch(r"[\w-]+\.rs", token):
                if folder not in files:
                    files[folder] = crate_files(root, folder)
                if token not in files[folder]:
                    problem(number, f"`{token}` is no file of {folder}")
            # Rule 4: type names are defined where the section says.
            named = type_name(token, folder, libs) if folder else None
            if named and named[1] not in STD_NAMES:
                crate, name = named
                if crate not in types:
                    types[crate] = defined_types(root, crate)
                if name not in types[crate]:
                    problem(number, f"`{token}`: no struct, enum, trait, type or union {name} in {crate}/src")
    for folder, package in members.items():
        if folder not in seen:
            problem(len(lines), f"no section ### `{folder}` (`{package}`) for the workspace member")
        elif len(seen[folder]) > 1:
            problem(seen[folder][1], f"a second section for {folder}")
    return problems


def test_the_architecture_document_says_only_what_the_repository_shows():
    problems = check(DOC)
    assert not problems, "docs/architecture.md:\n" + "\n".join(problems)


def test_a_copy_as_it_is_has_no_problem(tmp_path):
    copy = tmp_path / "architecture.md"
    copy.write_text(DOC.read_text())
    assert check(copy) == []


def _replace(old, new):
    def edit(text):
        assert old in text, f"the document no longer holds {old!r}: pick another line for this case"
        return text.replace(old, new, 1)

    return edit


def _append(line):
    return lambda text: text + line + "\n"


def _insert(folder, line):
    """A line added to the end of the first paragraph of a crate's section."""

    def edit(text):
        lines = text.splitlines()
        heading = next(i for i, old in enumerate(lines) if old.startswith(f"### `{folder}` "))
        end = next(i for i in range(heading + 2, len(lines)) if not lines[i].strip())
        return "\n".join(lines[:end] + [line] + lines[end:]) + "\n"

    return edit


def _drop_section(folder):
    def edit(text):
        lines = text.splitlines()
        start = next(i for i, line in enumerate(lines) if line.startswith(f"### `{folder}` "))
        end = next(i for i in range(start + 1, len(lines)) if HEADING.match(lines[i]))
        return "\n".join(lines[:start] + lines[end:]) + "\n"

    return edit


UNDEFINED = "no struct, enum, trait, type or union"
# Each case: how to break the document, and the problem the checker must report.
BROKEN = {
    "1 a long line": (_append("A sentence " + "that goes on " * 20 + "too long."), "more than 200"),
    "2 a path that is gone": (
        _insert("modules/tasks", "`modules/tasks/src/talos_upgrade/request.rs` reads the options."),
        "`modules/tasks/src/talos_upgrade/request.rs` does not exist",
    ),
    "2 a crate path that is gone": (_insert("modules/sim", "`state/persist.rs` keeps it."), "`state/persist.rs` does not exist"),
    "2 a file name that is gone": (_insert("modules/config", "`null_items.rs` finds them."), "`null_items.rs` is no file"),
    "3 a member without a section": (_drop_section("modules/oneshot"), "no section ### `modules/oneshot`"),
    "3 a section for no member": (
        _append("\n### `modules/nothing` (`ferro-talos-nothing`)\n\nNothing."),
        "modules/nothing is not a workspace member",
    ),
    "3 a section under another package name": (
        _replace("### `modules/kube` (`ferro-talos-kube`)", "### `modules/kube` (`ferro-kube`)"),
        "is the package ferro-talos-kube, not ferro-kube",
    ),
    "3 a second section for a member": (
        _append("\n### `modules/kube` (`ferro-talos-kube`)\n\nAgain."),
        "a second section for modules/kube",
    ),
    "3 a section title out of shape": (
        _replace("### `modules/fixtures` (`ferro-talos-fixtures`)", "### `modules/fixtures` (tests only)"),
        "a crate's section is titled",
    ),
    "4 a type that is not there": (_insert("modules/tasks", "`ConnectionOptions` holds them."), f"{UNDEFINED} ConnectionOptions"),
    "4 a type of another crate": (_insert("modules/tasks", "`Params` is read once."), f"{UNDEFINED} Params in modules/tasks/src"),
    "4 a variant of a type that is not there": (_insert("modules/client", "`ErrorCode::NotReady`."), f"{UNDEFINED} ErrorCode"),
    "5 an invariant nothing checks": (
        _insert("modules/ansible", "**Architecture Invariant:** it is fast."),
        "does not end with (checked by",
    ),
    "5 an invariant checked by a file that is not there": (
        _insert("modules/ansible", "**Architecture Invariant:** it is fast (checked by `modules/ansible/tests/speed.rs`)."),
        "checked by modules/ansible/tests/speed.rs, which is not a file",
    ),
    "5 an invariant checked by a test that is not there": (
        _insert("modules/error", f"{MARKER} it is Go's (checked by `modules/error/src/lib.rs::tests::prints_like_go`)."),
        "has no fn prints_like_go",
    ),
}

# What the rules must let through: the same kinds of lines, true.
SOUND = {
    "a qualified type of another crate": _insert("modules/tasks", "`ferro_ansible_protocol::Params` is read once."),
    "a path from a crate's src": _insert("modules/sim", "`state/persistence.rs` keeps it."),
    "an invariant checked by a named test": _insert(
        "modules/error",
        f"{MARKER} it chains (checked by `modules/error/src/lib.rs::tests::prints_like_an_anyhow_context_chain`).",
    ),
    "an invariant with a reviewer's command": _insert(
        "modules/ansible", "**Architecture Invariant:** it is small (reviewer: `wc -l modules/ansible/src/*.rs`)."
    ),
}


@pytest.mark.parametrize("case", BROKEN, ids=str)
def test_each_rule_fails_on_a_broken_document(case, tmp_path):
    edit, expected = BROKEN[case]
    broken = tmp_path / "architecture.md"
    broken.write_text(edit(DOC.read_text()))
    problems = check(broken)
    assert any(expected in p for p in problems), f"{case}: expected a problem with {expected!r}, got {problems}"


@pytest.mark.parametrize("case", SOUND, ids=str)
def test_the_rules_let_true_lines_through(case, tmp_path):
    sound = tmp_path / "architecture.md"
    sound.write_text(SOUND[case](DOC.read_text()))
    assert check(sound) == []


def test_what_is_not_a_path_or_a_type_is_left_alone():
    assert not looks_like_path("github.com/siderolabs/talos/pkg/machinery")
    assert not looks_like_path("127.0.B.0/24")
    assert not looks_like_path("bin/ferro-talos-<os>-<arch>")
    assert not looks_like_path("../shared/talos/fixtures")
    assert not looks_like_path("target/upstream")
    assert not looks_like_path("tools/itest -k talos_apply")
    assert looks_like_path(".github/workflows/test.yml")
    assert looks_like_path("modules/sim/src/reboot.rs::tests::go_value_equality_decides")
    libs = {"ferro_ansible_protocol": "modules/ansible"}
    assert type_name("Error<K>", "modules/error", libs) == ("modules/error", "Error")
    assert type_name("ErrorKind::NotReady", "modules/client", libs) == ("modules/client", "ErrorKind")
    assert type_name("normalize::Rules", "modules/config", libs) == ("modules/config", "Rules")
    assert type_name("ferro_ansible_protocol::Params", "modules/tasks", libs) == ("modules/ansible", "Params")
    assert type_name("MODULES", "modules/tasks", libs) is None
    assert type_name("run_module", "modules/ansible", libs) is None
    assert type_name("impl TalosClient", "modules/client", libs) is None
