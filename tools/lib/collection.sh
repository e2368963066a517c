# shellcheck shell=bash
# Sourced by tools/test, tools/itest, tools/demo and tools/molecule: the collection installed the way
# a user installs it, and the variables the tests and playbooks find it by.
#
#   build_collection OUT [collection/build options]  prints the tarball built into OUT/dist
#   install_collection TARBALL OUT                    installs it into a fresh OUT/collections and
#                                                     exports FERRO_COLLECTION_TARBALL and
#                                                     FERRO_COLLECTIONS_PATH (the tests' names for them)
#   release_dir [TRIPLE]                              prints where cargo put the release binaries
#
# Paths are absolute, so the tests may change directory. Run from the project's root with .venv set up.

build_collection() {
  local out=$1
  shift
  DIST_DIR=$out/dist collection/build "$@"
}

install_collection() {
  local tarball out
  tarball=$(realpath "$1")
  out=$2
  # Fresh every time: a collection left by an earlier install must never be the one tested.
  rm -rf "$out/collections"
  .venv/bin/ansible-galaxy collection install --force -p "$out/collections" "$tarball" >/dev/null
  export FERRO_COLLECTION_TARBALL=$tarball
  FERRO_COLLECTIONS_PATH=$(realpath "$out/collections")
  export FERRO_COLLECTIONS_PATH
}

release_dir() {
  local target
  target=$(realpath "${CARGO_TARGET_DIR:-target}")
  if [ -n "${1:-}" ]; then
    echo "$target/$1/release"
  else
    echo "$target/release"
  fi
}
