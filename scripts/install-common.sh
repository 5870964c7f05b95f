# Shared by setup-env.sh and setup-sglang-env.sh (sourced, not run): the checks before a first install (a
# checkout path without whitespace, the disk space), and pip's output shown without the wheel-store notes.

# This machine's pip configuration names local wheel-store folders for every package; pip prints one
# "WARNING: Location ... is ignored" line per package it does not find there (over a hundred per install).
wheel_store_notes='^WARNING: Location .* is ignored'

# require_plain_path WHO: fail, before anything is installed, when the checkout's path has whitespace. vLLM's
# CPU engine compiles its kernels with commands that split such a path (upstream), so a run in that checkout
# fails most engine gates as if the change broke them (39 "regressions" on a path with one space).
require_plain_path() {
    local who="$1"
    case "$PWD" in
        *[[:space:]]*)
            echo "$who: the checkout's path has whitespace: '$PWD'. vLLM's CPU engine compiles its kernels with" \
                 "commands that split such a path (an upstream limit), and the gates would fail as if the change" \
                 "broke them. Clone or move the checkout to a path without spaces and rerun; nothing was" \
                 "installed." >&2
            exit 2 ;;
    esac
}

# require_free_space WHO TARGET INSTALLED_MB DOWNLOAD_MB
# Fail before installing, naming the folder, the figures and the fix, when TARGET's filesystem cannot hold
# what is still to install (INSTALLED_MB less what TARGET already holds) plus, where pip's temporary folder
# is on the same filesystem, the wheels pip downloads first (DOWNLOAD_MB). Without this check a full disk
# shows up minutes later as "[Errno 28] No space left on device" deep in pip's output, with a
# half-installed environment left behind.
require_free_space() {
    local who="$1" target="$2" installed_mb="$3" download_mb="$4"
    local tmp="${TMPDIR:-/tmp}" parent have_mb=0 need_mb free_mb tmp_free_mb downloads_here_mb=0
    parent="$(dirname "$(realpath -m "$target")")"
    if [ -d "$target" ]; then
        have_mb=$(du -sm "$target" | cut -f1)
    fi
    if [ "$(stat -c %d "$parent")" = "$(stat -c %d "$tmp")" ]; then
        downloads_here_mb="$download_mb"
    else
        tmp_free_mb=$(df -Pm "$tmp" | awk 'NR == 2 {print $4}')
        if [ "$tmp_free_mb" -lt "$download_mb" ]; then
            echo "$who: pip's temporary folder $tmp has $tmp_free_mb MB free; the install downloads about" \
                 "$download_mb MB there first. Free space there, or point TMPDIR at a larger folder, and rerun." >&2
            exit 1
        fi
    fi
    need_mb=$(( (installed_mb > have_mb ? installed_mb - have_mb : 0) + downloads_here_mb ))
    free_mb=$(df -Pm "$parent" | awk 'NR == 2 {print $4}')
    if [ "$free_mb" -lt "$need_mb" ]; then
        echo "$who: not enough disk space to install $target: about $need_mb MB needed" \
             "(${installed_mb} MB installed, ${have_mb} MB already there," \
             "${downloads_here_mb} MB of downloads in $tmp), $free_mb MB free. Free space on that filesystem" \
             "(another checkout's .venv and .venv-sglang take about 11 GB together) and rerun; nothing was" \
             "installed." >&2
        exit 1
    fi
}

# pip_logged WHO WHAT COMMAND...: run COMMAND (pip) with its output kept aside; show that output without the
# wheel-store notes, and on failure say what failed, naming a full disk when that is the cause.
pip_logged() {
    local who="$1" what="$2" log status=0
    shift 2
    log="$(mktemp)"
    "$@" > "$log" 2>&1 || status=$?
    if [ "$status" -eq 0 ]; then
        grep -v -E "$wheel_store_notes" "$log" || true
    else
        grep -v -E "$wheel_store_notes" "$log" >&2 || true
        if grep -q "No space left on device" "$log"; then
            echo "$who: installing $what failed: the disk filled up ($(df -Pm . | awk 'NR == 2 {print $4}') MB" \
                 "free now). Free space and rerun: pip keeps what it already installed." >&2
        else
            echo "$who: installing $what failed (pip's output above)" >&2
        fi
        rm -f "$log"
        exit 1
    fi
    rm -f "$log"
}
