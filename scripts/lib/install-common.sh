# Shared by scripts/install.sh and scripts/uninstall.sh (sourced, not run): the options both
# take and the paths both must agree on, so an uninstall removes exactly what was installed.
#
# Callers set SCRIPT (their name, for messages) and start with PREFIX=/usr/local PREFIX_GIVEN=0
# DRY=0 DESTDIR=${DESTDIR:-}.

# parse_common_arg ARGS...: take --prefix/--dry-run from the front of ARGS; sets CONSUMED to
# the number of arguments used (0: not one of ours).
parse_common_arg() {
    case "$1" in
        --prefix) PREFIX="${2:?--prefix needs a directory}"; PREFIX_GIVEN=1; CONSUMED=2 ;;
        --prefix=*) PREFIX="${1#*=}"; PREFIX_GIVEN=1; CONSUMED=1 ;;
        --dry-run | -n) DRY=1; CONSUMED=1 ;;
        *) CONSUMED=0 ;;
    esac
}

# set_install_paths: check PREFIX, then set BINDIR, DOCDIR, CONFDIR, UNITDIR, HELPER,
# HELPER_LINK, UNITS (the systemd units, from systemd/), ENV_EXAMPLES (their example env
# files, to DOCDIR), and GENERATED (each file `zarr-mount --generate-docs` writes, with where it goes). With the default prefix the unit goes to /etc/systemd/system and the mount(8)
# helper to /sbin; with an explicit one both go below PREFIX, plus a /sbin link to the helper.
set_install_paths() {
    [[ "$PREFIX" == /* ]] || { echo "$SCRIPT: --prefix must be an absolute path" >&2; exit 2; }
    PREFIX="${PREFIX%/}"
    BINDIR="$PREFIX/bin"
    DOCDIR="$PREFIX/share/doc/zarr-mount"
    CONFDIR="/etc/zarr-mount"
    UNITS=(zarr-mount@.service zarr-mount-serve@.service)
    ENV_EXAMPLES=(example.env serve-example.env)
    GENERATED=(
        "zarr-mount.1=$PREFIX/share/man/man1/zarr-mount.1"
        "zarr-mount.bash=$PREFIX/share/bash-completion/completions/zarr-mount"
        "_zarr-mount=$PREFIX/share/zsh/site-functions/_zarr-mount"
        "zarr-mount.fish=$PREFIX/share/fish/vendor_completions.d/zarr-mount.fish"
    )
    if ((PREFIX_GIVEN)); then
        UNITDIR="$PREFIX/lib/systemd/system"
        HELPER="$PREFIX/sbin/mount.fuse.zarr-mount"
        HELPER_LINK="/sbin/mount.fuse.zarr-mount"
    else
        UNITDIR="/etc/systemd/system"
        HELPER="/sbin/mount.fuse.zarr-mount"
        HELPER_LINK=""
    fi
}

# run CMD...: run it, or with --dry-run print it.
run() {
    if ((DRY)); then
        printf '+'; printf ' %q' "$@"; printf '\n'
    else
        "$@"
    fi
}

# usage_from_header: print the calling script's header comment (after the #! line).
usage_from_header() {
    awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "${BASH_SOURCE[1]}"
}
