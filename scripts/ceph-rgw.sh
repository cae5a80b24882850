#!/usr/bin/env bash
# Start or stop a throw-away single-node Ceph cluster (mon + memstore osd + RGW) on loopback, for tests and demos.
#
#   scripts/ceph-rgw.sh start DIR [RGW_PORT] [ACCESS_KEY] [SECRET_KEY]
#   scripts/ceph-rgw.sh stop DIR
#
# start writes DIR/ceph.conf, starts the daemons (their data lives in RAM), creates an S3 user with the given keys,
# waits until RGW answers HTTP, then prints shell assignments on stdout and writes the same to DIR/env:
#   CEPH_RGW_ENDPOINT=http://127.0.0.1:PORT CEPH_RGW_ACCESS_KEY=... CEPH_RGW_SECRET_KEY=...
# Progress and errors go to stderr; on failure it prints the tail of the daemon logs, stops what it started and exits 1.
# Environment: CEPH_MON_PORT (default 3300), CEPH_RGW_START_TIMEOUT (seconds per wait step, default 60).
# stop kills the daemons by the PIDs recorded in DIR/*.pid (TERM, then KILL after 2 s: the data is thrown away
# anyway); it does not delete DIR.
set -euo pipefail

usage() {
    echo "usage: $0 start DIR [RGW_PORT] [ACCESS_KEY] [SECRET_KEY] | $0 stop DIR" >&2
    exit 2
}

log() { echo "ceph-rgw: $*" >&2; }

stop_cluster() {
    local dir=$1 pidfile pid
    shopt -s nullglob
    local pids=()
    for pidfile in "$dir"/*.pid; do
        pid=$(cat "$pidfile" 2>/dev/null || true)
        if [[ $pid =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null; then
            kill -TERM "$pid" 2>/dev/null || true
            pids+=("$pid")
        fi
        rm -f "$pidfile"
    done
    local deadline=$((SECONDS + 2))
    for pid in "${pids[@]}"; do
        while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null || true
    done
}

fail() {
    log "FAILED: $*"
    local f
    for f in "$DIR"/*.log; do
        [[ -f $f ]] || continue
        echo "---- last lines of $f ----" >&2
        tail -n 15 "$f" >&2
    done
    stop_cluster "$DIR"
    exit 1
}

# wait_for SECONDS DESCRIPTION COMMAND...: retry COMMAND every 0.25 s until it succeeds or time runs out.
wait_for() {
    local timeout=$1 what=$2
    shift 2
    local deadline=$((SECONDS + timeout))
    until "$@" >/dev/null 2>&1; do
        ((SECONDS < deadline)) || fail "timed out after ${timeout}s waiting for $what"
        sleep 0.25
    done
}

osd_up() { ceph -c "$CONF" --connect-timeout 5 osd stat 2>/dev/null | grep -q '1 up'; }

# Any HTTP answer counts (an anonymous GET / is 200 on RGW); python3 is there wherever the ceph CLI is.
rgw_answers() {
    python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2).read()' \
        "http://127.0.0.1:$PORT/"
}

start_cluster() {
    local fsid
    for tool in monmaptool ceph-authtool ceph-mon ceph-osd ceph radosgw radosgw-admin python3; do
        command -v "$tool" >/dev/null || { log "$tool is not installed (run scripts/install-system-deps.sh as root)"; exit 1; }
    done
    if [[ -e $DIR/ceph.conf ]]; then
        log "$DIR already holds a cluster; stop it and use an empty directory"
        exit 1
    fi
    mkdir -p "$DIR/mon/a" "$DIR/osd/0" "$DIR/run"
    DIR=$(cd "$DIR" && pwd)
    CONF=$DIR/ceph.conf
    fsid=$(cat /proc/sys/kernel/random/uuid)
    # One key = value per line: Ceph reads ';' as the start of a comment.
    cat >"$CONF" <<CONF
[global]
fsid = $fsid
mon host = v2:127.0.0.1:$MON_PORT
mon initial members = a
public addr = 127.0.0.1
auth cluster required = none
auth service required = none
auth client required = none
ms client mode = crc
ms mon client mode = crc
osd pool default size = 1
osd pool default min size = 1
mon allow pool size one = true
mon warn on pool no redundancy = false
osd crush chooseleaf type = 0
osd objectstore = memstore
memstore device bytes = 1073741824
osd pool default pg autoscale mode = off
osd pool default pg num = 8
osd pool default pgp num = 8
mon max pg per osd = 1000
run dir = $DIR/run
log file = $DIR/\$name.log
admin socket = $DIR/\$name.asok
pid file = $DIR/\$name.pid
keyring = $DIR/keyring

[mon.a]
mon data = $DIR/mon/a

[osd.0]
osd data = $DIR/osd/0

[client.rgw]
rgw frontends = beast endpoint=127.0.0.1:$PORT
CONF
    log "starting in $DIR (mon port $MON_PORT, RGW port $PORT)"
    monmaptool --create --add a "v2:127.0.0.1:$MON_PORT" --fsid "$fsid" "$DIR/monmap" >/dev/null 2>&1 \
        || fail "monmaptool could not create the monitor map"
    ceph-authtool --create-keyring "$DIR/keyring" --gen-key -n mon. --cap mon 'allow *' >/dev/null 2>&1 \
        || fail "ceph-authtool could not create the keyring"
    ceph-mon -c "$CONF" --mkfs -i a --monmap "$DIR/monmap" --keyring "$DIR/keyring" >>"$DIR/setup.log" 2>&1 \
        || fail "ceph-mon --mkfs failed"
    ceph-mon -c "$CONF" -i a >>"$DIR/setup.log" 2>&1 || fail "ceph-mon did not start"
    local osd_id
    osd_id=$(ceph -c "$CONF" --connect-timeout "$TIMEOUT" osd create 2>>"$DIR/setup.log") \
        || fail "the monitor did not answer 'ceph osd create'"
    [[ $osd_id == 0 ]] || fail "expected osd id 0, got '$osd_id'"
    ceph-osd -c "$CONF" -i 0 --mkfs >>"$DIR/setup.log" 2>&1 || fail "ceph-osd --mkfs failed"
    ceph-osd -c "$CONF" -i 0 >>"$DIR/setup.log" 2>&1 || fail "ceph-osd did not start"
    wait_for "$TIMEOUT" "the OSD to come up" osd_up
    log "osd up after ${SECONDS}s"
    radosgw -c "$CONF" -n client.rgw >>"$DIR/setup.log" 2>&1 || fail "radosgw did not start"
    wait_for "$TIMEOUT" "RGW to answer on http://127.0.0.1:$PORT/" rgw_answers
    radosgw-admin -c "$CONF" -n client.rgw user create --uid=test --display-name=test \
        --access-key="$ACCESS_KEY" --secret-key="$SECRET_KEY" >>"$DIR/setup.log" 2>&1 \
        || fail "radosgw-admin could not create the S3 user"
    {
        echo "CEPH_RGW_ENDPOINT=http://127.0.0.1:$PORT"
        echo "CEPH_RGW_ACCESS_KEY=$ACCESS_KEY"
        echo "CEPH_RGW_SECRET_KEY=$SECRET_KEY"
    } | tee "$DIR/env"
    log "ready after ${SECONDS}s"
}

[[ $# -ge 2 ]] || usage
ACTION=$1
DIR=$2
case $ACTION in
start)
    PORT=${3:-7480}
    ACCESS_KEY=${4:-testaccesskey}
    SECRET_KEY=${5:-testsecretkey}
    MON_PORT=${CEPH_MON_PORT:-3300}
    TIMEOUT=${CEPH_RGW_START_TIMEOUT:-60}
    start_cluster
    ;;
stop)
    [[ -d $DIR ]] || { log "no such directory: $DIR"; exit 1; }
    stop_cluster "$DIR"
    ;;
*) usage ;;
esac
