# What building gangway needs beyond the Rust toolchain, installed when missing. Sourced by
# scripts/simulate, scripts/test and scripts/python-package, which then call `ensure_build_deps` and
# `cache_cxx_builds`.
#
# The LP/MILP solver, HiGHS (through good_lp and highs-sys), is C++ built from source: it needs cmake
# and a C++ compiler, and libclang for its generated bindings (bindgen). Where something is missing:
# - as root, or with passwordless sudo, apt installs it (cmake, g++, libclang-dev);
# - otherwise cmake and libclang come from PyPI into a virtualenv of build tools under
#   ~/.cache/gangway/build-tools (about 60 MB, once), put on PATH and LIBCLANG_PATH for this build.
#   A C++ compiler cannot be installed that way: the error says so.
# GANGWAY_BUILD_DEPS=user takes the second way even as root; GANGWAY_BUILD_TOOLS moves the virtualenv.
# Safe under `set -euo pipefail`, as its callers run.

_deps_say() { echo "gangway build: $*" >&2; }

_deps_have_cxx() {
    [[ -n "${CXX:-}" ]] || command -v c++ >/dev/null 2>&1 || command -v g++ >/dev/null 2>&1 ||
        command -v clang++ >/dev/null 2>&1
}

# Where clang-sys (bindgen's loader) finds libclang: LIBCLANG_PATH, or the system's library
# directories. A match must be a non-empty file (a dangling link is no library), and not
# libclang-cpp, clang's C++ library, which some images ship without libclang and clang-sys ignores.
_deps_have_libclang() {
    local dirs=(/usr/lib/llvm-*/lib /usr/lib/x86_64-linux-gnu /usr/lib/aarch64-linux-gnu /usr/lib64 /usr/local/lib)
    [[ -n "${LIBCLANG_PATH:-}" ]] && dirs=("$LIBCLANG_PATH")
    local dir f
    for dir in "${dirs[@]}"; do
        for f in "$dir"/libclang.so* "$dir"/libclang-*.so*; do
            [[ "${f##*/}" == libclang-cpp* ]] && continue
            [[ -s "$f" ]] && return 0
        done
    done
    return 1
}

# The missing pieces, as Debian packages.
_deps_missing() {
    local missing=()
    cmake --version >/dev/null 2>&1 || missing+=(cmake)
    _deps_have_cxx || missing+=(g++)
    _deps_have_libclang || missing+=(libclang-dev)
    echo "${missing[*]}"
}

# Puts the build-tools virtualenv (if any) on PATH and LIBCLANG_PATH.
_deps_use_tools() {
    local tools="$1"
    [[ -x "$tools/bin/cmake" ]] && export PATH="$tools/bin:$PATH"
    local lib
    lib="$(compgen -G "$tools/lib/python3*/site-packages/clang/native" | head -n 1 || true)"
    if [[ -n "$lib" ]] && ! _deps_have_libclang; then
        export LIBCLANG_PATH="$lib"
        # That libclang comes without clang's own headers (stddef.h, ...): the C compiler's stand in.
        local builtin
        builtin="$(cc -print-file-name=include 2>/dev/null || true)"
        if [[ -d "$builtin" ]]; then
            export BINDGEN_EXTRA_CLANG_ARGS="${BINDGEN_EXTRA_CLANG_ARGS:-} -I$builtin"
        fi
    fi
}

ensure_build_deps() {
    local tools="${GANGWAY_BUILD_TOOLS:-$HOME/.cache/gangway/build-tools}"
    local missing
    missing="$(_deps_missing)"
    [[ -z "$missing" ]] && return 0
    # A virtualenv of build tools from an earlier run.
    _deps_use_tools "$tools"
    missing="$(_deps_missing)"
    [[ -z "$missing" ]] && return 0

    local sudo=""
    local apt=0
    if [[ "${GANGWAY_BUILD_DEPS:-}" != user ]] && command -v apt-get >/dev/null 2>&1; then
        if [[ $(id -u) -eq 0 ]]; then
            apt=1
        elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
            apt=1
            sudo="sudo"
        fi
    fi
    if ((apt)); then
        _deps_say "installing $missing with apt-get"
        # shellcheck disable=SC2086 # one word per package
        $sudo apt-get update -q && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q $missing
    else
        local pip_packages=()
        [[ " $missing " == *" cmake "* ]] && pip_packages+=(cmake)
        [[ " $missing " == *" libclang-dev "* ]] && pip_packages+=(libclang)
        if ((${#pip_packages[@]})); then
            _deps_say "installing ${pip_packages[*]} from PyPI into $tools (no root for apt-get)"
            if ! { [[ -x "$tools/bin/pip" ]] || python3 -m venv "$tools"; }; then
                _deps_say "cannot make a virtualenv (python3 -m venv): install python3-venv, or $missing, first"
                return 1
            fi
            "$tools/bin/pip" install -q --disable-pip-version-check "${pip_packages[@]}"
            _deps_use_tools "$tools"
        fi
    fi
    missing="$(_deps_missing)"
    if [[ -n "$missing" ]]; then
        _deps_say "still missing: $missing. Install it (Debian: apt-get install $missing) and run this again."
        [[ " $missing " == *" g++ "* ]] && _deps_say "(a C++ compiler is not something pip can provide; or set CXX to one)"
        return 1
    fi
}

# HiGHS's C++ is most of a cold build: 6 of the 7 minutes of a cold `cargo clippy` on 2 cores
# (docs/PERFORMANCE.md). Where ccache is installed, cmake compiles it through ccache, so that a fresh
# clone, or `cargo clean`, on a machine that built it before takes seconds for it. A clone's build
# directory is another path each time, so paths under the checkout (the first argument) are hashed
# relative to it (CCACHE_BASEDIR). With `install`, as root or with passwordless sudo (and not
# GANGWAY_BUILD_DEPS=user), apt installs ccache where it is missing (about 2 MB). GANGWAY_CCACHE=no
# leaves ccache out; a launcher already set is kept.
cache_cxx_builds() {
    local checkout="$1" install="${2:-}"
    [[ "${GANGWAY_CCACHE:-}" == no ]] && return 0
    if [[ "$install" == install && "${GANGWAY_BUILD_DEPS:-}" != user ]] && ! command -v ccache >/dev/null 2>&1 &&
        command -v apt-get >/dev/null 2>&1; then
        local sudo=""
        [[ $(id -u) -eq 0 ]] || sudo="sudo"
        if [[ -z "$sudo" ]] || { command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; }; then
            _deps_say "installing ccache with apt-get (HiGHS's C++ is then compiled once per machine)"
            # From the package lists already there if they have it (seconds), else updated first.
            { DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q ccache ||
                { $sudo apt-get update -q && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q ccache; }; } >&2 ||
                _deps_say "could not install ccache: HiGHS is compiled in full"
        fi
    fi
    command -v ccache >/dev/null 2>&1 || return 0
    export CMAKE_C_COMPILER_LAUNCHER="${CMAKE_C_COMPILER_LAUNCHER:-ccache}"
    export CMAKE_CXX_COMPILER_LAUNCHER="${CMAKE_CXX_COMPILER_LAUNCHER:-ccache}"
    # Physical, as the build's own paths are (a checkout reached through a link would not match).
    CCACHE_BASEDIR="${CCACHE_BASEDIR:-$(cd "$checkout" && pwd -P)}"
    export CCACHE_BASEDIR
}
