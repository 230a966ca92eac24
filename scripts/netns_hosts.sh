#!/usr/bin/env bash
# Test "hosts" on this machine (2 to 32) for multi-host runs: network namespaces with
# their own hostname, joined to the root namespace by a bridge, each running a
# real sshd that accepts a key generated for the purpose. Needs root.
#
#   scripts/netns_hosts.sh up   STATE_DIR   # prints "host port key" lines
#   TNT_HOSTS=32 scripts/netns_hosts.sh up STATE_DIR  # more hosts (2 to 32; default 2),
#                                                     # set up in parallel
#   scripts/netns_hosts.sh down STATE_DIR
#   scripts/netns_hosts.sh shape STATE_DIR RATE   # e.g. 1gbit, 5gbit, or off; prints the
#                                                 # TCP rate measured tnt-h1 -> tnt-h2, bit/s
#   scripts/netns_hosts.sh cpu STATE_DIR CORES    # e.g. 0.5, 1, or off; prints the cores
#                                                 # a host's processes then get (measured)
#
# Shaping: a token bucket (tc tbf) on each host's egress, so each direction of the
# link carries at most RATE, as on a full-duplex NIC of that speed (this kernel has no
# netem: no delay can be added). The measurement is a plain TCP transfer (link_rate.py).
#
# CPU: the hosts share this machine's cores. `cpu` puts each host's sshd, and so every
# process started over ssh there (ranks, their threads), in cgroups of its own: a cpuset
# of ceil(CORES) cores, the hosts taking the machine's cores in turn (with more hosts than
# cores, hosts share a core, each within its quota), and a CFS quota of CORES per 10 ms
# period, so a host computes as a separate host of that size would, whatever the others
# do. The measurement: busy processes in host 1's cgroups (cpu_share.py).
#
# Hosts: 10.77.0.N (tnt-hN), N = 1, 2 (up to TNT_HOSTS), named so in /etc/hosts here too
# (as cluster nodes are; removed by `down`); the root namespace is 10.77.0.254 on bridge
# tnt0. Traffic stays on these addresses. The /24 has room for 253 hosts; 32 is what this
# machine holds with a TensorFlow rank on each (~0.4 GB a rank).
set -euo pipefail

ACTION=${1:?usage: netns_hosts.sh up|down STATE_DIR}
STATE=${2:?usage: netns_hosts.sh up|down STATE_DIR}
PORT=${TNT_SSH_PORT:-2222}
BRIDGE=tnt0  # same name as the hosts' interface: Horovod looks the NIC up on the driver too
MAX_HOSTS=32
# How many hosts: TNT_HOSTS at `up`, recorded in the state folder for the other actions.
COUNT=$(cat "$STATE/host_count" 2>/dev/null || echo "${TNT_HOSTS:-2}")
[ "$ACTION" != up ] || COUNT=${TNT_HOSTS:-2}
if ! [[ "$COUNT" =~ ^[0-9]+$ ]] || [ "$COUNT" -lt 2 ] || [ "$COUNT" -gt "$MAX_HOSTS" ]; then
  echo "TNT_HOSTS: 2 to $MAX_HOSTS hosts (got $COUNT)" >&2; exit 2
fi
mapfile -t HOSTS < <(seq "$COUNT")
HOSTS_TAG="# tntrun netns host"  # their names in this namespace's /etc/hosts, as on a cluster

CPU_PERIOD_US=10000  # a throttled host waits at most this long for its next share

# Host $1's cgroup folders: one under cgroup v2 (its cpu and cpuset controllers), or one
# in each of v1's cpu and cpuset hierarchies; nothing when the machine has neither.
host_cgroups() {
  if grep -qw cpu /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
    echo "/sys/fs/cgroup/tntrun-h$1"
  elif [ -f /sys/fs/cgroup/cpu/cpu.cfs_quota_us ] && [ -f /sys/fs/cgroup/cpuset/cpuset.cpus ]; then
    echo "/sys/fs/cgroup/cpu/tntrun-h$1 /sys/fs/cgroup/cpuset/tntrun-h$1"
  fi
}

# Host $1 gone: its sshd (and so new sessions), its cgroups, namespace and veth.
host_down() {
  local i=$1 cg
  if [ -f "$STATE/sshd.$i.pid" ]; then kill "$(cat "$STATE/sshd.$i.pid")" 2>/dev/null || true; fi
  for cg in $(host_cgroups "$i"); do  # empty once sshd has gone
    for _ in $(seq 20); do if [ ! -d "$cg" ] || rmdir "$cg" 2>/dev/null; then break; fi; sleep 0.1; done
  done
  ip netns del "tnt-h$i" 2>/dev/null || true
  rm -rf "/etc/netns/tnt-h$i"
  ip link del "tntv$i" 2>/dev/null || true
}

# Linux keeps one ARP table for all network namespaces, of at most 1,024 entries by default
# (gc_thresh3). Hosts that all talk to each other (Gloo's full mesh) need about COUNT^2: at
# 32 hosts the table overflowed (dmesg: "neighbor table overflow!") and a rank's connect to
# another host failed with "No route to host". `up` raises the limits for its hosts (never
# lowers them), keeping the machine's values in STATE; `down` puts them back.
NEIGH=/proc/sys/net/ipv4/neigh/default
neigh_up() {
  local need=$(( COUNT * COUNT + 256 )) t target now
  [ -f "$STATE/neigh_thresh" ] || cat "$NEIGH/gc_thresh1" "$NEIGH/gc_thresh2" "$NEIGH/gc_thresh3" \
    > "$STATE/neigh_thresh"
  for t in 1 2 3; do  # need, twice it, four times it
    target=$(( need << (t - 1) ))
    now=$(cat "$NEIGH/gc_thresh$t")
    [ "$now" -ge "$target" ] || echo "$target" > "$NEIGH/gc_thresh$t"
  done
}
neigh_down() {
  [ -f "$STATE/neigh_thresh" ] || return 0
  local t=1 value
  while read -r value; do echo "$value" > "$NEIGH/gc_thresh$t"; t=$(( t + 1 )); done \
    < "$STATE/neigh_thresh"
  rm -f "$STATE/neigh_thresh"
}

down() {
  local i
  for i in $(seq "$MAX_HOSTS"); do  # also those of an earlier `up` with more hosts
    host_down "$i" &
  done
  wait
  ip link del "$BRIDGE" 2>/dev/null || true
  neigh_down
  if grep -q "$HOSTS_TAG" /etc/hosts; then
    grep -v "$HOSTS_TAG" /etc/hosts > /etc/hosts.tntrun && cat /etc/hosts.tntrun > /etc/hosts
    rm -f /etc/hosts.tntrun
  fi
}

# Host $1 (its namespace made): on the bridge, its /etc/hosts, its sshd (own hostname), then the
# wait for its first ssh answer. Independent of the other hosts: they are set up in parallel.
host_up() {
  local i=$1 j ns="tnt-h$1"
  ip link add "tntv$i" type veth peer name tnt0 netns "$ns"
  ip link set "tntv$i" master "$BRIDGE" up
  ip -n "$ns" addr add "10.77.0.$i/24" dev tnt0
  ip -n "$ns" link set tnt0 up
  ip -n "$ns" link set lo up
  # `ip netns exec` mounts /etc/netns/<ns>/hosts over /etc/hosts: Gloo resolves hostnames.
  mkdir -p "/etc/netns/$ns"
  { echo "127.0.0.1 localhost"; for j in "${HOSTS[@]}"; do echo "10.77.0.$j tnt-h$j"; done; } \
    > "/etc/netns/$ns/hosts"
  cat > "$STATE/sshd.$i.conf" <<EOF
Port $PORT
ListenAddress 10.77.0.$i
HostKey $STATE/host_key
PidFile $STATE/sshd.$i.pid
AuthorizedKeysFile $STATE/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PermitUserEnvironment no
AcceptEnv *
EOF
  # Own UTS namespace, so each host has its own hostname.
  ip netns exec "$ns" unshare --uts sh -c \
    "hostname tnt-h$i && exec /usr/sbin/sshd -f $STATE/sshd.$i.conf -E $STATE/sshd.$i.log"
  for _ in $(seq 50); do
    ssh -q -o BatchMode=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null \
        -o ConnectTimeout=2 -i "$STATE/id_ed25519" -p "$PORT" "10.77.0.$i" true && return 0
    sleep 0.2
  done
  echo "host tnt-h$i: no ssh answer on 10.77.0.$i:$PORT (see $STATE/sshd.$i.log)" >&2
  return 1
}

up() {
  [ "$(id -u)" = 0 ] || { echo "netns_hosts.sh needs root" >&2; exit 1; }
  command -v /usr/sbin/sshd >/dev/null || { echo "sshd missing: apt-get install openssh-server" >&2; exit 1; }
  down
  mkdir -p "$STATE" /run/sshd
  echo "$COUNT" > "$STATE/host_count"
  [ -f "$STATE/id_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -f "$STATE/id_ed25519"
  [ -f "$STATE/host_key" ] || ssh-keygen -q -t ed25519 -N '' -f "$STATE/host_key"
  # New hosts at these addresses with this set-up's host key: forget the keys an earlier
  # set-up left in root's known_hosts (written by the StrictHostKeyChecking=no of
  # horovodrun's and tntrun's ssh), which ssh holds against a changed key and fails.
  if [ -f "$HOME/.ssh/known_hosts" ]; then
    for i in "${HOSTS[@]}"; do ssh-keygen -q -R "[10.77.0.$i]:$PORT" >/dev/null 2>&1 || true; done
  fi
  cp "$STATE/id_ed25519.pub" "$STATE/authorized_keys"
  chmod 600 "$STATE/authorized_keys"

  neigh_up
  ip link add "$BRIDGE" type bridge
  ip addr add 10.77.0.254/24 dev "$BRIDGE"
  ip link set "$BRIDGE" up
  for i in "${HOSTS[@]}"; do echo "10.77.0.$i tnt-h$i $HOSTS_TAG"; done >> /etc/hosts
  local i pids=() failed=0
  # The namespaces one after the other (the first `ip netns add` mounts /run/netns), the
  # rest in parallel: sshd's start and the first ssh answer are most of a host's set-up.
  for i in "${HOSTS[@]}"; do ip netns add "tnt-h$i"; done
  for i in "${HOSTS[@]}"; do host_up "$i" & pids+=($!); done
  for i in "${pids[@]}"; do wait "$i" || failed=1; done
  [ "$failed" = 0 ] || { echo "netns_hosts.sh: a host did not come up" >&2; exit 1; }
  for i in "${HOSTS[@]}"; do echo "10.77.0.$i $PORT $STATE/id_ed25519"; done
}

shape() {
  local rate=${1:?usage: netns_hosts.sh shape STATE_DIR RATE|off}
  for i in "${HOSTS[@]}"; do
    ip netns exec "tnt-h$i" tc qdisc del dev tnt0 root 2>/dev/null || true
    if [ "$rate" != off ]; then
      # burst: 4 ms of traffic (at least 64 KB), enough for the kernel's timer granularity;
      # latency bounds the queue. Both as tc takes them.
      local bits burst
      bits=$(python3 -c "import re,sys; m=re.fullmatch(r'([0-9.]+)([kmg]?)bit', sys.argv[1]); \
print(int(float(m[1]) * {'': 1, 'k': 1e3, 'm': 1e6, 'g': 1e9}[m[2]]))" "$rate") \
        || { echo "RATE: e.g. 1gbit, 500mbit or off (got $rate)" >&2; exit 2; }
      burst=$(( bits / 8 / 250 > 65536 ? bits / 8 / 250 : 65536 ))
      ip netns exec "tnt-h$i" tc qdisc add dev tnt0 root tbf rate "$rate" burst "$burst" latency 20ms
    fi
  done
  local port=5299 here
  here=$(dirname "$(readlink -f "$0")")
  ip netns exec tnt-h2 python3 "$here/link_rate.py" serve 10.77.0.2 $port &
  local server=$!
  ip netns exec tnt-h1 python3 "$here/link_rate.py" send 10.77.0.2 $port "${TNT_MEASURE_S:-2}"
  wait "$server"
}

cpu() {
  local cores=${1:?usage: netns_hosts.sh cpu STATE_DIR CORES|off}
  local quota=-1 own=0 cpus first cg parent
  local cpu_count; cpu_count=$(nproc)
  if [ "$cores" != off ]; then
    quota=$(python3 -c "import sys; q = round(float(sys.argv[1]) * $CPU_PERIOD_US); \
assert q >= 1000; print(q)" "$cores" 2>/dev/null) \
      || { echo "CORES: e.g. 0.5, 1, 2 or off (at least 0.1; got $cores)" >&2; exit 2; }
    own=$(( (quota + CPU_PERIOD_US - 1) / CPU_PERIOD_US ))  # cores of its own per host
  fi
  [ -n "$(host_cgroups 1)" ] || { echo "no cgroup cpu and cpuset controllers here" >&2; exit 1; }
  if [ -f /sys/fs/cgroup/cgroup.subtree_control ]; then  # v2: the root hands them down
    echo "+cpu +cpuset" > /sys/fs/cgroup/cgroup.subtree_control
  fi
  for i in "${HOSTS[@]}"; do
    # Cores of its own, round the machine's cores (with more hosts than cores, hosts share
    # a core, each within its quota); all cores when off or when they do not divide.
    cpus="0-$(( cpu_count - 1 ))"
    if [ "$own" -gt 0 ] && [ $(( cpu_count % own )) = 0 ]; then
      first=$(( (i - 1) * own % cpu_count ))
      cpus="$first-$(( first + own - 1 ))"
    fi
    for cg in $(host_cgroups "$i"); do
      mkdir -p "$cg"
      if [ -f "$cg/cpu.max" ]; then
        if [ "$quota" = -1 ]; then echo "max $CPU_PERIOD_US"; else echo "$quota $CPU_PERIOD_US"; fi > "$cg/cpu.max"
      fi
      if [ -f "$cg/cpu.cfs_quota_us" ]; then
        echo "$CPU_PERIOD_US" > "$cg/cpu.cfs_period_us"
        echo "$quota" > "$cg/cpu.cfs_quota_us"
      fi
      if [ -f "$cg/cpuset.cpus" ]; then
        parent=$(dirname "$cg")
        cat "$parent/cpuset.effective_mems" 2>/dev/null > "$cg/cpuset.mems" \
          || cat "$parent/cpuset.mems.effective" > "$cg/cpuset.mems"
        echo "$cpus" > "$cg/cpuset.cpus"
      fi
      echo "$(cat "$STATE/sshd.$i.pid")" > "$cg/cgroup.procs"  # new ssh sessions start in it
    done
  done
  # shellcheck disable=SC2046  # one argument per folder
  python3 "$(dirname "$(readlink -f "$0")")/cpu_share.py" "${TNT_MEASURE_S:-2}" $(host_cgroups 1)
}

case "$ACTION" in
  up) up ;;
  down) down ;;
  shape) shape "${3:-}" ;;
  cpu) cpu "${3:-}" ;;
  *) echo "usage: netns_hosts.sh up|down|shape|cpu STATE_DIR [RATE|CORES]" >&2; exit 2 ;;
esac
