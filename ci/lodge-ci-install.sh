#!/bin/sh
# The install step of lodge's CI templates: makes sure LODGE_BIN (default lodge) runs, bringing
# lodge onto the runner when it does not. The .deb to install is, in order:
#   1. one kept in the cache (LODGE_CI_CACHE) for this lodge version and distribution;
#   2. the release's lodge_VERSION_ARCH_DIST.deb for this runner (ARCH: dpkg --print-architecture,
#      DIST: ID and VERSION_ID of /etc/os-release, e.g. debian12, ubuntu24.04) under
#      LODGE_CI_RELEASE_URL, checked against the release's SHA256SUMS (a mismatch is an error:
#      never installed), then kept in the cache;
#   3. one built from lodge's source (LODGE_CI_SOURCE) with its scripts/package, kept in the cache,
#      so only the first run of a version builds.
# It is installed with `apt-get install ./lodge….deb` (which brings libpq, librabbitmq, … from
# the distribution) as root or with passwordless sudo; otherwise, or when LODGE_CI_INSTALL_DIR is
# set, extracted into LODGE_CI_INSTALL_DIR (dpkg-deb -x), its usr/bin to be put first on PATH:
# that directory is printed on stdout (nothing is printed when PATH needs no change) and added to
# $GITHUB_PATH for the steps after this one. One line on stderr says which way lodge came.
#   LODGE_CI_VERSION      the version to install (default: LODGE_CI_SOURCE's)
#   LODGE_CI_SOURCE       a checkout of lodge (default: the one this script is in, when it is one)
#   LODGE_CI_RELEASE_URL  the directory of the release's assets; default on GitHub: the action's
#                         repository's release vVERSION; unset elsewhere: no download
#   LODGE_CI_CACHE        the cache directory (default: RUNNER_TOOL_CACHE/lodge on GitHub,
#                         CI_PROJECT_DIR/.lodge-cache on GitLab)
#   LODGE_CI_INSTALL_DIR  extract there, even where apt-get could install (default: under the cache)
#   LODGE_CI_PACKAGE_BUILD_DIR  scripts/package's build tree (its PACKAGE_BUILD_DIR; default a
#                         directory of this run's, removed after)
# `lodge-ci-install.sh --plan` only says, as step outputs (GitHub: missing, version, dist, cache),
# whether lodge is missing and what the cache's key is made of; it installs nothing.
set -eu
lodge_ci_here=$(cd "$(dirname "$0")" && pwd)
. "$lodge_ci_here/lodge-ci-lib.sh"

# Does the lodge to run run?
lodge_ci_runs() {
    "$lodge_ci_bin" --version > /dev/null 2>&1
}

# The version in a lodge source tree's CMakeLists.txt (project(lodge VERSION x.y.z ...)).
lodge_ci_source_version() {
    sed -n 's/^project(lodge VERSION \([0-9][0-9.]*\).*/\1/p' "$1/CMakeLists.txt" 2> /dev/null | head -n 1
}

# The release assets' directory: LODGE_CI_RELEASE_URL, else on GitHub the action's own
# repository's release (github.action_repository, which a composite action's run steps may not
# see: then the repository is read from the action's path, …/_actions/OWNER/REPO/REF/ci/github).
lodge_ci_release_url() {
    if [ -n "${LODGE_CI_RELEASE_URL:-}" ]; then
        printf '%s\n' "${LODGE_CI_RELEASE_URL%/}"
        return 0
    fi
    repo=${LODGE_CI_ACTION_REPOSITORY:-}
    if [ -z "$repo" ] && [ -n "${GITHUB_ACTION_PATH:-}" ]; then
        repo=$(printf '%s\n' "$GITHUB_ACTION_PATH" | sed -n 's#.*/_actions/\([^/]*/[^/]*\)/[^/]*/ci/github/*$#\1#p')
    fi
    [ -z "$repo" ] || printf '%s\n' "https://github.com/$repo/releases/download/v$version"
}

# Downloads the release's asset into the cache when the release has one for this runner and it
# matches SHA256SUMS; returns 1 (and sets why) when there is none. A mismatch fails the step.
lodge_ci_download() {
    base=$(lodge_ci_release_url)
    if [ -z "$base" ]; then
        why="no release to download from (LODGE_CI_RELEASE_URL is not set)"
        return 1
    fi
    dl=$tmp/release
    mkdir "$dl"
    if ! curl --silent --show-error --fail --location --retry 2 -o "$dl/SHA256SUMS" "$base/SHA256SUMS" 2> "$dl/curl.err"; then
        why="no release at $base ($(tail -n 1 "$dl/curl.err"))"
        return 1
    fi
    # sha256sum's lines: HASH, two blanks (or a blank and '*'), the file's name.
    want=$(awk -v n="$asset" '$2 == n || $2 == "*" n { print $1; exit }' "$dl/SHA256SUMS")
    if [ -z "$want" ]; then
        why="the release at $base has no $asset"
        return 1
    fi
    curl --silent --show-error --fail --location --retry 2 -o "$dl/$asset" "$base/$asset" ||
        lodge_ci_fail "could not download $base/$asset, which its SHA256SUMS lists"
    got=$(sha256sum "$dl/$asset" | cut -d' ' -f1)
    [ "$got" = "$want" ] ||
        lodge_ci_fail "$base/$asset does not match the release's SHA256SUMS (sha256 $got, listed $want): not installed"
    mkdir -p "$cache" && mv "$dl/$asset" "$cache/$asset"
}

# Builds the .deb from lodge's source with scripts/package into the cache.
lodge_ci_build() {
    if [ -z "$src" ] || [ ! -x "$src/scripts/package" ]; then
        lodge_ci_fail "lodge is not on PATH, $why, and there is no lodge source to build it from: set LODGE_CI_SOURCE to a checkout of lodge"
    fi
    echo "lodge-ci: building lodge $version from $src ($why); this takes minutes once, then the cache has it" >&2
    # Without root, the build dependencies come with sudo (scripts/package installs them as root).
    if [ -n "$sudo" ]; then $sudo "$src/scripts/deps" build >&2 || lodge_ci_fail "could not install lodge's build dependencies"; fi
    out=$tmp/package
    mkdir "$out"
    if ! PACKAGE_BUILD_DIR=${LODGE_CI_PACKAGE_BUILD_DIR:-$tmp/package-build} BUILD_DIR=$out \
        "$src/scripts/package" > "$out/stdout" 2> "$out/stderr"; then
        tail -n 30 "$out/stdout" "$out/stderr" >&2
        lodge_ci_fail "scripts/package failed building lodge $version (above, the end of its output)"
    fi
    built=$(tail -n 1 "$out/stdout")
    [ -f "$built" ] || lodge_ci_fail "scripts/package printed no .deb (its last line: $built)"
    mkdir -p "$cache" && cp "$built" "$cache/$asset.part" && mv "$cache/$asset.part" "$cache/$asset"
}

# Installs the .deb: apt-get as root or with passwordless sudo, else (or with LODGE_CI_INSTALL_DIR
# set) extracted; sets bin to the directory PATH needs first (empty with apt-get).
lodge_ci_install() {
    if [ -z "${LODGE_CI_INSTALL_DIR:-}" ] && { [ "$(id -u)" -eq 0 ] || [ -n "$sudo" ]; }; then
        # A fresh container has no package lists: apt-get update then, and once more.
        if ! $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$cache/$asset" >&2; then
            $sudo apt-get update -q >&2 || true
            $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$cache/$asset" >&2 ||
                lodge_ci_fail "apt-get could not install $cache/$asset"
        fi
        bin=
        how="installed with apt-get"
        return 0
    fi
    dir=${LODGE_CI_INSTALL_DIR:-$cache/${asset%.deb}}
    { mkdir -p "$dir" && dpkg-deb -x "$cache/$asset" "$dir"; } || lodge_ci_fail "could not extract $cache/$asset into $dir"
    dir=$(cd "$dir" && pwd)
    bin=$dir/usr/bin
    missing=$(ldd "$bin/lodge" 2>&1 | sed -n 's/^[[:space:]]*\([^[:space:]]*\) => not found.*/\1/p' | tr '\n' ' ')
    [ -z "$missing" ] ||
        lodge_ci_fail "lodge's shared libraries are missing on this runner: ${missing% } (install them, or run as root or with passwordless sudo, where apt-get brings them)"
    how="extracted into $dir"
}

# What installs this runner's lodge: version, dist, arch, asset, cache and source.
lodge_ci_plan() {
    src=${LODGE_CI_SOURCE:-}
    if [ -z "$src" ] && [ -n "$(lodge_ci_source_version "$lodge_ci_here/..")" ]; then src=$lodge_ci_here/..; fi
    [ -z "$src" ] || src=$(cd "$src" && pwd) || lodge_ci_fail "LODGE_CI_SOURCE=$LODGE_CI_SOURCE: no such directory"
    version=${LODGE_CI_VERSION:-}
    if [ -n "$src" ]; then
        v=$(lodge_ci_source_version "$src")
        [ -n "$v" ] || lodge_ci_fail "$src is not a checkout of lodge (no project(lodge VERSION …) in its CMakeLists.txt)"
        [ -z "$version" ] || [ "$version" = "$v" ] ||
            lodge_ci_fail "LODGE_CI_VERSION is $version but the source in $src is lodge $v"
        version=$v
    fi
    command -v dpkg > /dev/null ||
        lodge_ci_fail "lodge is not on PATH and this runner has no dpkg (lodge's packages are for Debian and Ubuntu): install lodge before this step, or name it with LODGE_BIN"
    arch=$(dpkg --print-architecture)
    dist=$( (. /etc/os-release && printf '%s%s\n' "${ID:-}" "${VERSION_ID:-}"))
    cache=${LODGE_CI_CACHE:-${RUNNER_TOOL_CACHE:+$RUNNER_TOOL_CACHE/lodge}}
    cache=${cache:-${CI_PROJECT_DIR:+$CI_PROJECT_DIR/.lodge-cache}}
    cache=${cache:-${XDG_CACHE_HOME:-$HOME/.cache}/lodge-ci}
    case $cache in /*) ;; *) cache=$PWD/$cache ;; esac
    asset=lodge_${version}_${arch}_$dist.deb
}

plan=false
case ${1:-} in
--plan) plan=true ;;
'') ;;
*) lodge_ci_fail "usage: lodge-ci-install.sh [--plan]" ;;
esac

if lodge_ci_runs; then
    if [ "$plan" = true ]; then lodge_ci_output missing LODGE_CI_MISSING false; fi
    [ "$plan" = true ] || echo "lodge-ci: $("$lodge_ci_bin" --version 2>&1 | head -n 1) runs here: nothing to install" >&2
    exit 0
fi
case $lodge_ci_bin in
*/*) lodge_ci_fail "LODGE_BIN=$lodge_ci_bin does not run (leave LODGE_BIN at lodge for this step to install lodge)" ;;
esac
lodge_ci_plan
if [ "$plan" = true ]; then
    lodge_ci_output missing LODGE_CI_MISSING true
    lodge_ci_output version LODGE_CI_VERSION "$version"
    lodge_ci_output dist LODGE_CI_DIST "$dist"
    lodge_ci_output cache LODGE_CI_CACHE "$cache"
    exit 0
fi
[ -n "$version" ] ||
    lodge_ci_fail "lodge is not on PATH, and which lodge to install is not known: set LODGE_CI_VERSION and LODGE_CI_RELEASE_URL (a release's assets), or LODGE_CI_SOURCE (a checkout of lodge)"

sudo=
if [ "$(id -u)" -ne 0 ] && command -v sudo > /dev/null && sudo -n true 2> /dev/null; then sudo="sudo -n"; fi
# The downloads and the package's output: this run's own directory (jobs may share a runner).
tmp=$(mktemp -d "$(lodge_ci_tmp)/install.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
why=
if [ -f "$cache/$asset" ]; then
    from="the cached $cache/$asset"
elif lodge_ci_download; then
    from="the release's $asset ($base), its SHA-256 checked against SHA256SUMS, now cached in $cache"
else
    lodge_ci_build
    from="built from the source in $src ($why), now cached as $cache/$asset"
fi
lodge_ci_install
if [ -n "$bin" ]; then PATH=$bin:$PATH; fi
lodge_ci_runs || lodge_ci_fail "lodge was installed ($how) but does not run: $("$lodge_ci_bin" --version 2>&1 | head -n 3)"
# The steps after this one: GitHub's $GITHUB_PATH; GitLab's job shell puts stdout on PATH.
if [ -n "$bin" ]; then
    if [ -n "${GITHUB_PATH:-}" ]; then printf '%s\n' "$bin" >> "$GITHUB_PATH"; fi
    printf '%s\n' "$bin"
fi
echo "lodge-ci: lodge $version: $from; $how" >&2
