#!/usr/bin/env bash
# A throwaway PostgreSQL server for the tests and the benchmarks: a cluster of its own in a folder,
# reached over a unix socket in that folder (no TCP), trust authentication (but for the members of the role
# rocm_gate_password_users, who must give a password: the tests of refused credentials), superuser `postgres`.
#
#   scripts/postgres.sh start DIR [-c NAME=VALUE ...]   create the cluster (once) and start it; prints its URL
#   scripts/postgres.sh url DIR                         print the URL of the cluster in DIR
#   scripts/postgres.sh stop DIR                        stop it (DIR stays: delete it to drop the data)
#   scripts/postgres.sh available                       exit 0 where a server can be made here (initdb found)
#
#   export ROCM_GATE_TEST_POSTGRES="$(bash scripts/postgres.sh start /tmp/rocm-gate-pg)"
#
# The server refuses to run as root: as root the cluster belongs to the unprivileged user
# $ROCM_GATE_POSTGRES_USER (default `postgres`), so DIR must be a folder that user can reach (under /tmp,
# not under /root); otherwise it is the current user's. initdb, pg_ctl and postgres are taken from PATH,
# else from the newest /usr/lib/postgresql/*/bin. The tests' settings favour speed over durability
# (fsync off: the data is thrown away); a -c given after DIR overrides them (the benchmark turns fsync on).
# Collation: the cluster's default is ICU's en-US where the server has ICU (as a deployment's en_US.UTF-8
# would be), so the tests show the store's answers do not depend on it.
set -euo pipefail

usage() {
    echo "usage: scripts/postgres.sh start|stop|url DIR [-c NAME=VALUE ...] | available" >&2
    exit 2
}
[ $# -ge 1 ] || usage
action="$1"
dir="${2:-}"
[ "$action" = available ] || [ -n "$dir" ] || usage
shift $(( $# >= 2 ? 2 : 1 ))

bin=""
if command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1; then
    bin="$(dirname "$(realpath "$(command -v pg_ctl)")")"
else
    for candidate in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
        if [ -x "$candidate/initdb" ] && [ -x "$candidate/pg_ctl" ]; then
            bin="$candidate"
            break
        fi
    done
fi

url() {
    echo "postgresql://postgres@/postgres?host=$1"
}

# as the cluster's owner: the unprivileged user when we are root, else ourselves
owner="$(id -un)"
if [ "$(id -u)" -eq 0 ]; then
    owner="${ROCM_GATE_POSTGRES_USER:-postgres}"
fi
as_owner() {
    if [ "$(id -u)" -eq 0 ]; then
        if runuser="$(PATH="$PATH:/usr/sbin:/sbin" command -v runuser)"; then
            "$runuser" -u "$owner" -- "$@"
        else
            su "$owner" -s /bin/sh -c "$(printf '%q ' "$@")"
        fi
    else
        "$@"
    fi
}

case "$action" in
    available)
        [ -n "$bin" ] || exit 1
        if [ "$(id -u)" -eq 0 ] && ! id "$owner" >/dev/null 2>&1; then
            exit 1
        fi
        ;;
    url)
        url "$(realpath -m "$dir")"
        ;;
    start)
        if [ -z "$bin" ]; then
            echo "scripts/postgres.sh: no PostgreSQL here (initdb and pg_ctl are neither on PATH nor in" \
                 "/usr/lib/postgresql/*/bin): install it (Debian: apt-get install postgresql) or give a server's" \
                 "URL in ROCM_GATE_TEST_POSTGRES" >&2
            exit 1
        fi
        if [ "$(id -u)" -eq 0 ] && ! id "$owner" >/dev/null 2>&1; then
            echo "scripts/postgres.sh: PostgreSQL refuses to run as root, and there is no user '$owner' to run" \
                 "it as: create one (useradd --system $owner) or set ROCM_GATE_POSTGRES_USER" >&2
            exit 1
        fi
        mkdir -p "$dir"
        dir="$(realpath "$dir")"
        if [ "$(id -u)" -eq 0 ]; then
            chown "$owner" "$dir"
        fi
        chmod 0755 "$dir"
        if ! as_owner test -w "$dir"; then
            echo "scripts/postgres.sh: $dir: the user '$owner' who runs the server cannot write there (a folder" \
                 "above it is closed to that user): use a folder under /tmp" >&2
            exit 1
        fi
        if [ ${#dir} -gt 90 ]; then
            echo "scripts/postgres.sh: $dir: too long a path for the server's unix socket (at most 90" \
                 "characters here): use a shorter folder" >&2
            exit 1
        fi
        if [ ! -f "$dir/data/PG_VERSION" ]; then
            common=(-D "$dir/data" --auth=trust --username=postgres --encoding=UTF8 --no-instructions)
            if ! as_owner "$bin/initdb" "${common[@]}" --locale=C.UTF-8 --locale-provider=icu \
                    --icu-locale=en-US >"$dir/initdb.log" 2>&1; then
                as_owner "$bin/initdb" "${common[@]}" --locale=C.UTF-8 >"$dir/initdb.log" 2>&1 || {
                    echo "scripts/postgres.sh: initdb failed in $dir/data:" >&2
                    tail -5 "$dir/initdb.log" >&2
                    exit 1
                }
            fi
            # trust for everyone on the socket but the members of rocm_gate_password_users, who give a
            # password (the tests of refused credentials make such a role)
            as_owner sh -c "{ echo 'local all +rocm_gate_password_users scram-sha-256'; cat '$dir/data/pg_hba.conf'; } \
                >'$dir/data/pg_hba.new' && mv '$dir/data/pg_hba.new' '$dir/data/pg_hba.conf'"
        fi
        options="-c listen_addresses= -k $dir -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        options="$options -c max_connections=200"
        for extra in "$@"; do
            options="$options $extra"
        done
        if ! as_owner "$bin/pg_ctl" -D "$dir/data" status >/dev/null 2>&1; then
            as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -o "$options" -w -t 60 start \
                >/dev/null || {
                echo "scripts/postgres.sh: the server in $dir did not start; its log:" >&2
                tail -5 "$dir/server.log" >&2
                exit 1
            }
        fi
        psql=("$bin/psql" -q -X -t -A -d "$(url "$dir")" -c)
        if [ -z "$(as_owner "${psql[@]}" "SELECT 1 FROM pg_roles WHERE rolname = 'rocm_gate_password_users'")" ]; then
            as_owner "${psql[@]}" "CREATE ROLE rocm_gate_password_users NOLOGIN" >/dev/null
        fi
        url "$dir"
        ;;
    stop)
        dir="$(realpath -m "$dir")"
        if [ -n "$bin" ] && [ -f "$dir/data/PG_VERSION" ]; then
            as_owner "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null 2>&1 || true
        fi
        ;;
    *)
        usage
        ;;
esac
