#!/usr/bin/env bash
# Install what the zarr-mount build and test suite need on a fresh Debian 12 machine.
# Idempotent: every step checks first and is skipped when already done.
#
#   scripts/setup.sh     system packages; the test venv .venv (tests/python/requirements.txt);
#                        one reader venv .venv-NAME per tests/python/venvs/NAME.txt; the
#                        JavaScript readers (tests/js: npm ci into tests/js/node_modules)
#   ZM_SETUP_READERS=0 scripts/setup.sh    system packages and .venv only
#
# Each requirements file names the Python versions it installs on, preferred first, in a line
# "# python: 3.13 3.12"; the first one found ($(pyenv root)/versions, then PATH) is used. A venv
# whose requirements file or interpreter changed is rebuilt from scratch (the hash of both is in
# VENV/.zm-setup-ok). A new reader venv is one more file in tests/python/venvs/.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WANT_READERS="${ZM_SETUP_READERS:-1}"

for arg in "$@"; do
    case "$arg" in
        -h | --help)
            sed -n '2,14p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
            exit 0
            ;;
        *)
            echo "setup.sh: unknown argument: $arg" >&2
            exit 2
            ;;
    esac
done

step() { printf 'setup: %-28s %s\n' "$1" "$2"; }
START=$SECONDS

# ---------------------------------------------------------------- system packages
# g++: libfuzzer-sys compiles libFuzzer (scripts/fuzz.sh).
# prometheus: its promtool checks the /metrics scrape (tests/it/metrics.rs).
# gdal-bin, libtiff-tools: GDAL and libtiff open the flat view's TIFFs (test_flat_tiff.py).
# man-db: `man -l` reads the generated man page (tests/it/service.rs).
# rclone: `rclone serve http`, the peer of scripts/bench_serve.py --s3.
APT_PACKAGES=(fuse3 libblosc-dev pkg-config systemd g++ prometheus gdal-bin libtiff-tools man-db rclone)
# A Debian python3 makes venvs only with python3-venv (pyenv's interpreters need nothing).
if ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
    APT_PACKAGES+=(python3-venv)
fi
missing=()
for pkg in "${APT_PACKAGES[@]}"; do
    # not `dpkg -s | grep -q`: under pipefail, grep quitting early fails the pipe (SIGPIPE)
    if [[ "$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null)" != "install ok installed" ]]; then
        missing+=("$pkg")
    fi
done
if ((${#missing[@]} == 0)); then
    step "apt packages" "ok (${APT_PACKAGES[*]})"
else
    if [[ $(id -u) -ne 0 ]]; then
        SUDO=(sudo)
    else
        SUDO=()
    fi
    step "apt packages" "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    "${SUDO[@]}" apt-get update -qq >/dev/null
    "${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    step "apt packages" "installed ${missing[*]}"
fi

if [[ -e /dev/fuse ]]; then
    step "/dev/fuse" "ok"
else
    step "/dev/fuse" "MISSING (mount tests will fail)"
fi

# ---------------------------------------------------------------- interpreters
PYENV_ROOT="${PYENV_ROOT:-$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")}"

# find_python MINOR...: the path of the first interpreter found of these versions (e.g. 3.13),
# newest patch release first; pyenv's versions, then PATH. Nothing printed: none found.
find_python() {
    local minor py
    for minor in "$@"; do
        for py in $(ls -d "$PYENV_ROOT/versions/$minor".*/bin/"python$minor" 2>/dev/null | sort -rV) \
            "$(command -v "python$minor" || true)"; do
            if [[ -x "$py" ]] &&
                [[ "$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)" == "$minor" ]]; then
                echo "$py"
                return
            fi
        done
    done
}

# python_versions REQUIREMENTS_FILE: the versions of its "# python:" line.
python_versions() {
    sed -n 's/^# python:[[:space:]]*//p' "$1" | head -n1
}

# ---------------------------------------------------------------- venvs
# make_venv DIR REQUIREMENTS_FILE: the venv DIR holds exactly what the file asks for.
make_venv() {
    local dir="$1" req="$2" name versions py key t0=$SECONDS
    name="$(basename "$dir")"
    versions="$(python_versions "$req")"
    if [[ -z "$versions" ]]; then
        step "$name" "FAILED: $req has no '# python: X.Y ...' line"
        return 1
    fi
    # shellcheck disable=SC2086 # one word per version
    py="$(find_python $versions)"
    if [[ -z "$py" ]]; then
        step "$name" "FAILED: no Python ${versions// / or } found (looked in $PYENV_ROOT/versions and PATH)"
        return 1
    fi
    key="$( { cat "$req"; "$py" -c 'import sys; print(sys.version)'; } | sha256sum | cut -d' ' -f1)"
    local marker="$dir/.zm-setup-ok"
    if [[ -x "$dir/bin/python" && -f "$marker" && "$(cat "$marker")" == "$key" ]]; then
        step "$name" "ok ($(installed_versions "$dir" "$req"))"
        return
    fi
    step "$name" "building with $("$py" --version 2>&1) from ${req#"$ROOT"/}"
    rm -rf "$dir"
    logged "$name" "the install" \
        bash -c '"$1" -m venv "$2" && "$2/bin/python" -m pip install --disable-pip-version-check -r "$3"' \
        _ "$py" "$dir" "$req" || return 1
    echo "$key" >"$marker"
    step "$name" "ready in $((SECONDS - t0)) s ($(installed_versions "$dir" "$req"))"
}

# logged NAME WHAT CMD...: run CMD with its output in a temp file; on failure say so for NAME and
# show the last lines of WHAT's output.
logged() {
    local name="$1" what="$2" log
    shift 2
    log="$(mktemp)"
    if ! "$@" >"$log" 2>&1; then
        step "$name" "FAILED (last lines of $what below)"
        tail -n 15 "$log" | sed "s/^/setup: $name: /"
        rm -f "$log"
        return 1
    fi
    rm -f "$log"
}

# installed_versions DIR REQUIREMENTS_FILE: "Python X.Y.Z, name==version ..." for the packages
# the file names.
installed_versions() {
    local names
    names="$(sed -e 's/#.*//' -e 's/[[:space:]]//g' -e 's/[][<>=!~;].*//' "$2" | grep -v '^$' |
        tr 'A-Z_' 'a-z-' | sort -u | paste -sd'|')"
    printf '%s, %s' "$("$1/bin/python" --version 2>&1)" \
        "$("$1/bin/python" -m pip list --format=freeze --disable-pip-version-check 2>/dev/null |
            awk -F'==' -v want="^($names)\$" 'tolower($1) ~ want { gsub("_", "-", $1); printf "%s%s %s", sep, $1, $2; sep = ", " }')"
}

# ---------------------------------------------------------------- JavaScript readers
# make_js DIR: DIR/node_modules holds exactly DIR/package-lock.json's packages.
make_js() {
    local dir="$1" key t0=$SECONDS
    if ! command -v npm >/dev/null; then
        step "js readers" "FAILED: npm not found (node >= 18 and npm are needed)"
        return 1
    fi
    key="$( { cat "$dir/package-lock.json"; node --version; } | sha256sum | cut -d' ' -f1)"
    local marker="$dir/node_modules/.zm-setup-ok"
    if [[ -f "$marker" && "$(cat "$marker")" == "$key" ]]; then
        step "js readers" "ok (node $(node --version), $(js_versions "$dir"))"
        return
    fi
    step "js readers" "installing ${dir#"$ROOT"/}/package-lock.json"
    logged "js readers" "npm ci" bash -c 'cd "$1" && npm ci --no-audit --no-fund' _ "$dir" || return 1
    echo "$key" >"$marker"
    step "js readers" "ready in $((SECONDS - t0)) s (node $(node --version), $(js_versions "$dir"))"
}

js_versions() {
    node -e 'const p = require(process.argv[1] + "/package.json");
        console.log(Object.keys(p.dependencies).map(d => d + " " +
            require(process.argv[1] + "/node_modules/" + d + "/package.json").version).join(", "))' "$1"
}

# ---------------------------------------------------------------- build them all
# At once: most of the time goes to downloads. Each job prints its own lines.
jobs_pids=()
make_venv "$ROOT/.venv" "$ROOT/tests/python/requirements.txt" &
jobs_pids+=($!)
if [[ "$WANT_READERS" == 1 ]]; then
    for req in "$ROOT"/tests/python/venvs/*.txt; do
        make_venv "$ROOT/.venv-$(basename "$req" .txt)" "$req" &
        jobs_pids+=($!)
    done
    make_js "$ROOT/tests/js" &
    jobs_pids+=($!)
else
    step "reader venvs, js readers" "skipped (ZM_SETUP_READERS=0: the tests that use them will fail)"
fi
failed=0
for pid in "${jobs_pids[@]}"; do
    wait "$pid" || failed=1
done
if ((failed)); then
    step "done" "FAILED after $((SECONDS - START)) s (see the FAILED lines above)"
    exit 1
fi
step "done" "in $((SECONDS - START)) s"
