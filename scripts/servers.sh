#!/usr/bin/env bash
# Installs the Debian packages of the servers the tests start themselves: PostgreSQL and Redis.
# Idempotent: does nothing (not even `apt-get update`) when both are already there.
# The tests never use a system cluster or the system Redis on 6379 that the packages may start:
# tests/servers.py runs its own servers on free loopback ports in temporary directories.
set -euo pipefail

have_redis() {
  command -v redis-server >/dev/null 2>&1 || [ -x /usr/bin/redis-server ]
}

have_postgres() {
  local f
  for f in /usr/lib/postgresql/*/bin/initdb; do
    [ -x "$f" ] && return 0
  done
  return 1
}

if have_redis && have_postgres; then
  exit 0
fi

missing=()
have_postgres || missing+=("postgresql")
have_redis || missing+=("redis-server")
echo "servers.sh: installing missing Debian packages: ${missing[*]}"

if [ "$(id -u)" -eq 0 ]; then
  as_root=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true >/dev/null 2>&1; then
  as_root=(sudo -n)
else
  echo "servers.sh: need root (or password-less sudo) to install: ${missing[*]}" >&2
  echo "servers.sh: run as root: apt-get install postgresql redis-server" >&2
  exit 1
fi

if ! command -v apt-get >/dev/null 2>&1; then
  echo "servers.sh: apt-get not found; install PostgreSQL and Redis by hand" >&2
  exit 1
fi

# Keep the packages' post-install scripts from failing when there is no init system
# (containers): policy-rc.d exit 101 forbids starting services, which we never need anyway.
policy=/usr/sbin/policy-rc.d
made_policy=0
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' | "${as_root[@]}" tee "$policy" >/dev/null
  "${as_root[@]}" chmod 755 "$policy"
  made_policy=1
fi
cleanup() {
  if [ "$made_policy" -eq 1 ]; then
    "${as_root[@]}" rm -f "$policy"
  fi
}
trap cleanup EXIT

"${as_root[@]}" apt-get update -qq
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
  apt-get install -y -qq --no-install-recommends postgresql redis-server

if ! have_redis || ! have_postgres; then
  echo "servers.sh: install finished but redis-server or initdb is still missing" >&2
  exit 1
fi
echo "servers.sh: PostgreSQL and Redis are installed"
