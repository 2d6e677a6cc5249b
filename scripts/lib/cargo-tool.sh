# Sourced by scripts that need a tool built with `cargo install` (s3-server.sh, packages.sh):
# cargo_install CRATE VERSION BINARY MINUTES CARGO_ARGS... builds it once into
# $TOOLS/CRATE-VERSION (ignored by git), in a target dir of its own so that the build does not
# lock the project's, and one build at a time. Callers set TOOLS and SCRIPT (for messages).
# Exit status 3: it could not be installed (no network?).
cargo_install() {
    local crate="$1" version="$2" bin="$3" minutes="$4"
    shift 4
    if [[ -x "$bin" ]]; then
        return 0
    fi
    mkdir -p "$TOOLS"
    (
        flock 9
        if [[ ! -x "$bin" ]]; then
            echo "$SCRIPT: building $crate $version into $TOOLS (once, ~$minutes min)" >&2
            CARGO_TARGET_DIR="$TOOLS/$crate-build" cargo install -q "$crate@$version" --locked "$@" \
                --root "$TOOLS/$crate-$version" >&2 || exit 3
            rm -rf "$TOOLS/$crate-build"
        fi
    ) 9>"$TOOLS/.$crate-install.lock" || {
        echo "$SCRIPT: could not install $crate" >&2
        exit 3
    }
}
