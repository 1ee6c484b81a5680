#!/usr/bin/env bash
# Bring a checkout to the point where `make demo` and `make test` run; safe to run every time.
#
#   1. .venv       created with python3 -m venv if missing
#   2. packages    pip install -e '.[test,spark]', only when pyproject.toml changed since the
#                  last successful install (its hash is kept in .venv/.bootstrap-stamp)
#   3. ZooKeeper   apt-get install zookeeper default-jre-headless, only when
#                  /usr/share/java/zookeeper.jar is missing and we are root; a failure is
#                  reported and skipped (only the ZooKeeper tests need it). Never zookeeperd,
#                  which would start a system service on port 2181.
#   4. Chromium    apt-get install chromium chromium-driver, only when /usr/bin/chromium is
#                  missing and we are root (the status page tests drive a real headless
#                  browser, docs/operations.md §13); a failure is reported and skipped.
#   5. h2load      apt-get install nghttp2-client, only when h2load is missing and we are
#                  root (bench.namenode_ops drives gRPC calls with it); a failure is reported
#                  and skipped.
#   6. FUSE        apt-get install fuse3, only when fusermount3 or libfuse3.so.3 is missing
#                  and we are root (tests/powerloss mounts hadev.crashfs through mfusepy);
#                  a failure is reported and skipped.
#
# Concurrent runs in one checkout wait for each other (a lock on this script).
#
# Environment: PYTHON (default python3), HANAMENODE_EXTRAS (default test,spark),
# HANAMENODE_SKIP_APT=1 to leave system packages alone.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PYTHON=${PYTHON:-python3}
EXTRAS=${HANAMENODE_EXTRAS:-test,spark}
VENV=.venv
STAMP=$VENV/.bootstrap-stamp
ZK_JAR=/usr/share/java/zookeeper.jar

say() { echo "bootstrap: $*"; }

# One run at a time per checkout: two at once (two make targets, CI jobs sharing a checkout)
# would both pip install into one .venv and break it. A second run waits on a lock of this
# script (flock(1)); the lock goes with the process, whatever way it ends.
exec 9<scripts/bootstrap.sh
if ! flock --nonblock 9; then
    say "another bootstrap of this checkout is running; waiting for it"
    flock 9
fi

if [[ ! -x $VENV/bin/python ]]; then
    say "creating $VENV with $("$PYTHON" --version 2>&1)"
    "$PYTHON" -m venv "$VENV"
fi

want="$(sha256sum pyproject.toml | cut -d' ' -f1) extras=$EXTRAS"
if [[ ! -f $STAMP || "$(cat "$STAMP")" != "$want" ]]; then
    say "installing the project and its [$EXTRAS] dependencies into $VENV (pyproject.toml changed)"
    "$VENV/bin/python" -m pip install --disable-pip-version-check -q -e ".[$EXTRAS]"
    echo "$want" >"$STAMP"
else
    say "$VENV is up to date with pyproject.toml"
fi

# apt_install NAME PRESENT WHO_NEEDS_IT PACKAGE...: install PACKAGEs unless PRESENT (a test
# command) holds, HANAMENODE_SKIP_APT=1 or we are not root; a failure is reported, not fatal.
apt_install() {
    local name=$1 present=$2 needed_by=$3
    shift 3
    if eval "$present"; then
        say "$name found"
    elif [[ ${HANAMENODE_SKIP_APT:-0} == 1 ]]; then
        say "$name missing; HANAMENODE_SKIP_APT=1, not installing (needed by $needed_by)"
    elif [[ $(id -u) -ne 0 ]]; then
        say "$name missing and not root: run 'apt-get install -y $*' as root"
    else
        say "$name missing: apt-get update && apt-get install -y $*"
        if DEBIAN_FRONTEND=noninteractive apt-get update -q \
            && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@"; then
            say "$name installed"
        else
            say "WARNING: installing $name failed; continuing (only $needed_by need it)"
        fi
    fi
}

apt_install ZooKeeper "[[ -f $ZK_JAR ]]" "the ZooKeeper tests" zookeeper default-jre-headless
apt_install Chromium "command -v chromium >/dev/null && command -v chromedriver >/dev/null" \
    "the status page tests" chromium chromium-driver
apt_install h2load "command -v h2load >/dev/null" "bench.namenode_ops's h2load series" \
    nghttp2-client
apt_install FUSE "command -v fusermount3 >/dev/null && ldconfig -p | grep -c libfuse3.so.3 >/dev/null" \
    "the power-cut tests" fuse3
