"""tools/release and the three ways a user pins a release: tarball by path, tarball by URL, git tag.

Each test works on a private clone of the repository with its own version, so the real repository's
branches and tags are never touched. Binaries come from the already-built FERRO_TARGET_DIR (no cargo).
"""

import contextlib
import http.server
import json
import os
import pathlib
import stat
import subprocess
import tarfile
import threading

import pytest
import yaml

from conftest import ROOT, Ansible

VERSION = "99.1.0"
TAG = f"v{VERSION}"
BRANCH = "release-test"
GIT_USER = ["-c", "user.name=ferro release test", "-c", "user.email=release-test@invalid"]


def git(repo, *args):
    proc = subprocess.run(["git", *GIT_USER, *args], cwd=repo, capture_output=True, text=True)
    assert proc.returncode == 0, f"git {' '.join(args)} failed:\n{proc.stdout}{proc.stderr}"
    return proc.stdout.strip()


# The one program that runs every module, for every platform a release ships.
PROGRAMS = ("ferro-talos-linux-aarch64", "ferro-talos-linux-x86_64")


def sidecar_names(repo):
    return sorted(p.stem for p in (repo / "plugins" / "modules").glob("*.yml"))


class Release:
    def __init__(self, repo, dist, env):
        self.repo = repo
        self.dist = dist
        self.env = env
        self.tarball = dist / f"ferro-talos-{VERSION}.tar.gz"

    def run(self, *args):
        return subprocess.run(
            ["tools/release", *args], cwd=self.repo, env=self.env, capture_output=True, text=True, timeout=600
        )


def cargo_target_dir(release_dir):
    """Cargo's target directory from the release directory the binaries are in: target/release, or
    target/<triple>/release when the tests run the static build (tools/test)."""
    parent = pathlib.Path(release_dir).parent
    return parent.parent if parent.name.endswith("-linux-musl") else parent


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    target = os.environ.get("FERRO_TARGET_DIR")
    if not target:
        pytest.fail("FERRO_TARGET_DIR is not set: run the tests through `make test`", pytrace=False)
    base = tmp_path_factory.mktemp("release")
    repo = base / "repo"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(repo)], check=True)
    git(repo, "checkout", "-q", "-B", BRANCH)  # a branch of our own, even if ROOT is on a detached HEAD
    # Share the project's venv; an old mtime on the clone's requirements keeps setup-python from reinstalling.
    (repo / ".venv").symlink_to(ROOT / ".venv")
    os.utime(repo / "tools" / "requirements.txt", (0, 0))

    galaxy = repo / "galaxy.yml"
    text = galaxy.read_text()
    current = yaml.safe_load(text)["version"]
    galaxy.write_text(text.replace(f"version: {current}\n", f"version: {VERSION}\n", 1))
    # A release has one summary: the test's own replaces any the fragments already hold.
    for fragment in (repo / "changelogs" / "fragments").glob("*.yml"):
        if "release_summary" in (yaml.safe_load(fragment.read_text()) or {}):
            git(repo, "rm", "-q", str(fragment.relative_to(repo)))
    (repo / "changelogs" / "fragments" / "release-test.yml").write_text(
        "---\nrelease_summary: Release made by the release test.\n"
    )
    git(repo, "add", "galaxy.yml", "changelogs/fragments/release-test.yml")
    git(repo, "commit", "-q", "-m", f"test: version {VERSION}")

    env = dict(os.environ)
    env.update(
        {
            "CARGO_TARGET_DIR": str(cargo_target_dir(target)),
            "DIST_DIR": str(base / "dist"),
            "GIT_AUTHOR_NAME": "ferro release test",
            "GIT_AUTHOR_EMAIL": "release-test@invalid",
            "GIT_COMMITTER_NAME": "ferro release test",
            "GIT_COMMITTER_EMAIL": "release-test@invalid",
        }
    )
    rel = Release(repo, base / "dist", env)
    rel.before = git(repo, "rev-parse", "HEAD")
    proc = rel.run(VERSION, "--no-cargo")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rel.stdout = proc.stdout
    return rel


def test_release_refuses_a_version_galaxy_yml_does_not_have(release):
    proc = release.run("99.2.0", "--no-cargo")
    assert proc.returncode != 0
    assert f"galaxy.yml says version '{VERSION}', not '99.2.0'" in proc.stderr
    proc = release.run("v99", "--no-cargo")
    assert proc.returncode != 0
    assert "VERSION must look like 1.2.3" in proc.stderr


def test_release_refuses_an_existing_tag(release):
    head = git(release.repo, "rev-parse", "HEAD")
    proc = release.run(VERSION, "--no-cargo")
    assert proc.returncode != 0
    assert f"tag {TAG} already exists" in proc.stderr
    assert git(release.repo, "rev-parse", "HEAD") == head


def test_release_commits_the_changelog_and_tags_a_commit_with_binaries(release):
    repo = release.repo
    head = git(repo, "rev-parse", "HEAD")
    assert git(repo, "rev-parse", "HEAD~1") == release.before
    assert git(repo, "log", "-1", "--format=%s") == f"Release {VERSION}"
    assert git(repo, "symbolic-ref", "--short", "HEAD") == BRANCH
    assert git(repo, "status", "--porcelain", "--untracked-files=no") == ""

    changelog = yaml.safe_load((repo / "changelogs" / "changelog.yaml").read_text())
    assert changelog["releases"][VERSION]["changes"]["release_summary"] == "Release made by the release test."
    assert f"v{VERSION}" in (repo / "CHANGELOG.rst").read_text()
    assert not (repo / "changelogs" / "fragments" / "release-test.yml").exists()

    # The branch carries no binaries; the tag's commit adds exactly the binaries, executable.
    names = sidecar_names(repo)
    assert names, "no sidecar docs found"
    assert git(repo, "ls-tree", "--name-only", "HEAD", "bin/") == ""
    tagged = git(repo, "rev-parse", f"{TAG}^{{commit}}")
    assert git(repo, "rev-parse", f"{tagged}^") == head
    assert git(repo, "cat-file", "-t", f"refs/tags/{TAG}") == "tag", "the tag must be annotated"
    diff = git(repo, "diff-tree", "-r", "--no-commit-id", "--name-status", head, tagged).splitlines()
    assert sorted(diff) == sorted(f"A\tbin/{binary}" for binary in PROGRAMS)
    with tarfile.open(release.tarball) as tar:
        for binary in PROGRAMS:
            entry = git(repo, "ls-tree", tagged, f"bin/{binary}")
            assert entry.startswith("100755 blob "), entry
            member = tar.getmember(f"bin/{binary}")
            assert member.mode & 0o111, f"{binary} is not executable in the tarball"
            in_git = subprocess.run(
                ["git", "cat-file", "blob", f"{tagged}:bin/{binary}"], cwd=repo, capture_output=True
            ).stdout
            assert in_git == tar.extractfile(member).read(), f"{binary} differs between the tag and the tarball"
            assert in_git[:4] == b"\x7fELF"
    assert str(release.tarball) in release.stdout


@contextlib.contextmanager
def serve(directory):
    """An HTTP server for `directory` on 127.0.0.1 at a free port, stopped on exit."""
    handler = lambda *a, **kw: http.server.SimpleHTTPRequestHandler(*a, directory=str(directory), **kw)  # noqa: E731
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def install(tmp_path, requirement):
    """Install from a collections/requirements.yml holding `requirement`; returns the collections path."""
    project = tmp_path / "project"
    (project / "collections").mkdir(parents=True)
    req = project / "collections" / "requirements.yml"
    req.write_text(yaml.safe_dump({"collections": [requirement]}, sort_keys=False))
    collections = tmp_path / "collections"
    ansible = Ansible(tmp_path)
    proc = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "ansible-galaxy"), "collection", "install", "-r", str(req), "-p", str(collections)],
        cwd=project,
        env=ansible.env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"ferro.talos:{VERSION} was installed successfully" in proc.stdout, proc.stdout
    return collections


def assert_installed_and_working(release, collections, tmp_path, sample):
    installed = collections / "ansible_collections" / "ferro" / "talos"
    manifest = json.loads((installed / "MANIFEST.json").read_text())
    assert manifest["collection_info"]["version"] == VERSION
    for name in sidecar_names(release.repo):
        assert (installed / "plugins" / "modules" / name).is_file(), f"{name} module file missing"
        assert (installed / "plugins" / "modules" / f"{name}.yml").is_file()
    for binary in PROGRAMS:
        path = installed / "bin" / binary
        assert path.is_file(), f"{binary} missing"
        assert stat.S_IMODE(path.stat().st_mode) == 0o755, f"{binary} is not executable"
    assert not (installed / "modules").exists(), "Rust sources must not be installed"

    ansible = Ansible(tmp_path)
    ansible.collections = str(collections)
    doc = subprocess.run(
        [str(ansible.bin / "ansible-doc"), "-j", "ferro.talos.talos_config"],
        env=ansible.env(),
        capture_output=True,
        text=True,
    )
    assert doc.returncode == 0, doc.stderr
    assert str(installed) in json.loads(doc.stdout)["ferro.talos.talos_config"]["doc"]["filename"]

    dest = tmp_path / "worker.yaml"
    run = ansible.run(
        f"""
- hosts: localhost
  gather_facts: false
  tasks:
    - name: render
      ferro.talos.talos_config:
        secrets_file: {sample.secrets}
        machine_type: worker
        cluster_name: base
        cluster_endpoint: https://base:6443
        kubernetes_version: 1.28.0
        talos_version: v1.13
        install_image: ""
        install_disk: ""
        validate: false
        dest: {dest}
"""
    )
    assert run.rc == 0, run.output
    assert run.task("render")["result"]["changed"] is True
    # The same bytes the build's own binary rendered from the same inputs.
    assert dest.read_text() == sample.worker.read_text()


def test_install_release_tarball_by_file_path(release, tmp_path, sample):
    collections = install(tmp_path, {"name": str(release.tarball), "type": "file"})
    assert_installed_and_working(release, collections, tmp_path, sample)


def test_install_release_tarball_by_url(release, tmp_path, sample):
    with serve(release.dist) as base_url:
        url = f"{base_url}/{release.tarball.name}"
        collections = install(tmp_path, {"name": url, "type": "url"})
    assert_installed_and_working(release, collections, tmp_path, sample)


def test_install_from_git_tag(release, tmp_path, sample):
    collections = install(tmp_path, {"name": f"git+file://{release.repo}", "type": "git", "version": TAG})
    assert_installed_and_working(release, collections, tmp_path, sample)


def test_install_from_a_branch_without_binaries_has_none(release, tmp_path):
    """Why the tag exists: main itself carries no binaries, so a branch install has no runnable modules."""
    project = tmp_path / "project"
    project.mkdir()
    ansible = Ansible(tmp_path)
    proc = subprocess.run(
        [
            str(ROOT / ".venv" / "bin" / "ansible-galaxy"),
            "collection",
            "install",
            f"git+file://{release.repo},{BRANCH}",
            "-p",
            str(tmp_path / "collections"),
        ],
        cwd=project,
        env=ansible.env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    installed = tmp_path / "collections" / "ansible_collections" / "ferro" / "talos"
    assert not (installed / "bin").exists()
    # A module then says what is missing and how to get it.
    ansible.collections = str(tmp_path / "collections")
    run = ansible.run(
        """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: render
      ferro.talos.talos_config:
        secrets_file: /nonexistent/secrets.yaml
"""
    )
    assert run.rc != 0
    msg = run.task("render")["result"]["msg"]
    assert "has no module program for this controller" in msg and "make build" in msg, msg



def test_changelog_fragments_are_valid():
    """Every fragment waiting for the next release parses and uses a section changelogs/config.yaml knows."""
    lint = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "antsibull-changelog"), "lint"], cwd=ROOT, capture_output=True, text=True
    )
    assert lint.returncode == 0 and lint.stdout.strip() == "", lint.stdout + lint.stderr
