#!/usr/bin/env bash
# The Debian packages, installed for real (CI runs this as root on a throwaway machine):
#   1. cpack BUILD twice: as a "previous" version 0.0.99 and as the current one; the 0.0.99
#      packages carry the previous version's fedcore-server and fedcore-client binaries
#      (scripts/build_previous.sh: schema 5, protocol 1) in this tree's packaging, which
#      first shipped after that version;
#   2. install the previous fedcore-server and fedcore-client: the fedcore user, /etc/fedcore
#      and /var/lib/fedcore with their modes, the units with /usr/bin in ExecStart;
#   3. start both as their units would (as the fedcore user, in /var/lib/fedcore; no systemd
#      runs in CI), with a PKI from the packaged fedcore-pki, and run one round through the
#      REST API;
#   4. upgrade to the current packages over the running state: the new server migrates the
#      previous server's history (schema 5 -> the current one), keeps its run, and runs another round;
#   5. purge: the programs go, /var/lib/fedcore stays (docs/operations.md).
#   scripts/deb_test.sh BUILD --yes     (it installs into / and purges afterwards)
set -euo pipefail
build=${1:?usage: scripts/deb_test.sh BUILD --yes}
[[ "${2:-}" == "--yes" ]] || { echo "deb_test: installs packages into /; pass --yes" >&2; exit 2; }
[[ $(id -u) -eq 0 ]] || { echo "deb_test: needs root (dpkg -i)" >&2; exit 2; }
source_dir=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d /tmp/fedcore-deb.XXXXXX)
pids=()
created_user=0
getent passwd fedcore >/dev/null || created_user=1
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  dpkg --purge fedcore-server fedcore-client python3-fedcore >/dev/null 2>&1 || true
  rm -rf /etc/fedcore /var/lib/fedcore "$work"
  if ((created_user)); then deluser --system fedcore >/dev/null 2>&1 || true; fi
}
trap cleanup EXIT
fail() { echo "deb_test: FAIL: $*" >&2; for f in "$work"/*.log; do echo "--- $f"; tail -20 "$f"; done >&2; exit 1; }
for p in fedcore-server fedcore-client python3-fedcore; do
  if dpkg -s "$p" >/dev/null 2>&1; then fail "$p is already installed; not touching it"; fi
done

previous_binaries=$("$source_dir/scripts/build_previous.sh") || fail "building the previous version"
echo "deb_test: packaging $build"
(cd "$build" && cpack -D CPACK_PACKAGE_VERSION=0.0.99 -B "$work/previous" >/dev/null)
# The previous version's programs in the 0.0.99 packages (stripped, as CPack ships them).
for program in server client; do
  deb="$work/previous/fedcore-${program}_0.0.99_amd64.deb"
  tree="$work/previous/fedcore-$program"
  dpkg-deb -R "$deb" "$tree"
  install -m 0755 "$previous_binaries/$program/fedcore-$program" "$tree/usr/bin/fedcore-$program"
  strip "$tree/usr/bin/fedcore-$program"
  if [[ -f "$tree/DEBIAN/md5sums" ]]; then
    (cd "$tree" && find usr -type f -exec md5sum {} + | sort -k2 >DEBIAN/md5sums)
  fi
  dpkg-deb -b --root-owner-group "$tree" "$deb" >/dev/null
done
(cd "$build" && cpack -B "$work/current" >/dev/null)
version=$(ls "$work/current"/fedcore-server_*_amd64.deb | sed 's/.*fedcore-server_\(.*\)_amd64.deb/\1/')

echo "deb_test: installing 0.0.99"
dpkg -i "$work/previous"/fedcore-server_0.0.99_amd64.deb "$work/previous"/fedcore-client_0.0.99_amd64.deb \
  >"$work/dpkg.log" 2>&1 || fail "dpkg -i of the previous packages"
getent passwd fedcore >/dev/null || fail "no fedcore user"
[[ $(stat -c '%U:%G %a' /etc/fedcore) == "root:fedcore 750" ]] || fail "/etc/fedcore: $(stat -c '%U:%G %a' /etc/fedcore)"
[[ $(stat -c '%U:%G %a' /var/lib/fedcore) == "fedcore:fedcore 750" ]] || fail "/var/lib/fedcore: $(stat -c '%U:%G %a' /var/lib/fedcore)"
for unit in fedcore-server fedcore-client; do
  grep -q "^ExecStart=/usr/bin/$unit " "/usr/lib/systemd/system/$unit.service" || fail "$unit.service ExecStart"
  grep -q "^ProtectSystem=strict" "/usr/lib/systemd/system/$unit.service" || fail "$unit.service hardening"
done
if command -v systemd-analyze >/dev/null; then
  systemd-analyze verify /usr/lib/systemd/system/fedcore-server.service \
    /usr/lib/systemd/system/fedcore-client.service >"$work/verify.log" 2>&1 || fail "systemd-analyze verify"
fi

# A federation of one site, configured as an operator would.
pki=/etc/fedcore/pki
fedcore-pki --dir "$pki" init >/dev/null
fedcore-pki --dir "$pki" server fl >/dev/null
fedcore-pki --dir "$pki" client site-1 >/dev/null
chown -R root:fedcore "$pki" && chmod -R g+rX "$pki"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
port=$(free_port)
api_port=$(free_port)
token=$(openssl rand -hex 24)
sha=$(printf '%s' "$token" | sha256sum | cut -d' ' -f1)
cat >/etc/fedcore/server.json <<JSON
{"listen": "127.0.0.1", "port": $port, "database": "history.db", "checkpoint_dir": "checkpoints",
 "tls": {"ca": "$pki/ca.pem", "cert": "$pki/server/fl.pem", "key": "$pki/server/fl.key", "crl": "$pki/crl.pem"},
 "api": {"enabled": true, "listen": "127.0.0.1", "port": $api_port,
         "tokens": [{"name": "deb-test", "role": "admin", "created_ms": 1, "sha256": "$sha"}]}}
JSON
install -o fedcore -g fedcore -m 0640 "$source_dir/data/breast_cancer_wisconsin.csv" /var/lib/fedcore/site.csv
cat >/etc/fedcore/client.json <<JSON
{"server": "127.0.0.1", "port": $port, "server_name": "localhost",
 "tls": {"ca": "$pki/ca.pem", "cert": "$pki/clients/site-1.pem", "key": "$pki/clients/site-1.key"},
 "data": {"format": "csv", "path": "/var/lib/fedcore/site.csv"}}
JSON
chgrp fedcore /etc/fedcore/*.json && chmod 640 /etc/fedcore/*.json

api() { curl -sS --fail-with-body --max-time 10 --cacert "$pki/ca.pem" -H "Authorization: Bearer $token" "$@"; }
start() {  # as the units start them: the fedcore user, in the state directory
  (cd /var/lib/fedcore && exec runuser -u fedcore -- "/usr/bin/$1" --config "/etc/fedcore/$2.json") \
    >>"$work/$1.log" 2>&1 &
  pids+=($!)
}
stop_all() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  pids=()
}
wait_until() {  # wait_until SECONDS DESCRIPTION COMMAND...
  local deadline=$((SECONDS + $1)) what=$2; shift 2
  until "$@" >/dev/null 2>&1; do ((SECONDS < deadline)) || fail "$what: not within the limit"; sleep 0.2; done
}
online() { api "https://127.0.0.1:$api_port/api/v1/info" | grep -q '"online_clients":1'; }
run_finished() { api "https://127.0.0.1:$api_port/api/v1/runs/$1" | grep -q '"state":"finished"'; }
one_round() {
  api -X POST -H 'Content-Type: application/json' "https://127.0.0.1:$api_port/api/v1/runs" \
    -d '{"name": "deb-test", "model": {"type": "logreg"}, "rounds": 1, "feature_scaling": "site"}' \
    >"$work/run.json" || fail "POST /api/v1/runs: $(cat "$work/run.json")"
  local id
  id=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["id"])' "$work/run.json")
  wait_until 60 "run $id finished" run_finished "$id"
  echo "$id"
}

start fedcore-server server
start fedcore-client client
wait_until 30 "one site online" online
first=$(one_round)
echo "deb_test: run $first finished on $(dpkg-query -W -f='${Version}' fedcore-server)"
stop_all
user_version() { python3 -c 'import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute("PRAGMA user_version").fetchone()[0])' "$1"; }
[[ $(user_version /var/lib/fedcore/history.db) == 5 ]] ||
  fail "the previous server wrote schema $(user_version /var/lib/fedcore/history.db), not 5"

echo "deb_test: upgrading to $version"
dpkg -i "$work/current"/fedcore-server_"$version"_amd64.deb "$work/current"/fedcore-client_"$version"_amd64.deb \
  >>"$work/dpkg.log" 2>&1 || fail "dpkg -i of the current packages"
[[ $(dpkg-query -W -f='${Version}' fedcore-server) == "$version" ]] || fail "fedcore-server not upgraded"
[[ -f /var/lib/fedcore/history.db ]] || fail "the history did not survive the upgrade"
start fedcore-server server
start fedcore-client client
wait_until 30 "one site online after the upgrade" online
run_finished "$first" || fail "run $first is not in the history after the upgrade"
second=$(one_round)
echo "deb_test: run $second finished on $version; run $first still in the history"
current_schema=$(sed -n 's/^inline constexpr std::int64_t kSchemaVersion = \([0-9]*\);$/\1/p' \
  "$source_dir/server/store/schema.hpp")
[[ -n $current_schema && $(user_version /var/lib/fedcore/history.db) == "$current_schema" ]] ||
  fail "the history is at schema $(user_version /var/lib/fedcore/history.db) after the upgrade, not ${current_schema:-?}"
stop_all

if [[ -f "$work/current/python3-fedcore_${version}_amd64.deb" ]]; then
  dpkg -i "$work/current/python3-fedcore_${version}_amd64.deb" >>"$work/dpkg.log" 2>&1 ||
    fail "dpkg -i python3-fedcore"
  (cd / && env -u PYTHONPATH /usr/bin/python3 -c \
    'import fedcore; assert len(fedcore.layout_fingerprint([("w", (2, 3))])) == 16' ) ||
    fail "the installed fedcore package does not import"
  dpkg --purge python3-fedcore >>"$work/dpkg.log" 2>&1 || fail "dpkg --purge python3-fedcore"
  echo "deb_test: python3-fedcore $version imports from the system interpreter"
fi
dpkg --purge fedcore-server fedcore-client >>"$work/dpkg.log" 2>&1 || fail "dpkg --purge"
[[ ! -e /usr/bin/fedcore-server && ! -e /usr/lib/systemd/system/fedcore-server.service ]] || fail "files left by the purge"
[[ -f /var/lib/fedcore/history.db ]] || fail "the purge deleted the history"
echo "deb_test: ok (install the previous version, one round, upgrade migrating its history 5 -> $current_schema, another round, purge keeps the history)"
