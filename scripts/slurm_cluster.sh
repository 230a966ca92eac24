#!/usr/bin/env bash
# A real Slurm cluster on this machine: munge, slurmctld in this namespace and one
# slurmd in each network-namespace host of scripts/netns_hosts.sh (tnt-h1, tnt-h2),
# so a job spans two nodes with their own hostnames and addresses. Needs root and
# Debian's slurm-wlm and munge (scripts/setup_env.sh installs them when root).
#
#   scripts/slurm_cluster.sh up   DIR   # the netns hosts must be up; prints SLURM_CONF=...
#   scripts/slurm_cluster.sh down DIR
#
# Every Slurm command needs SLURM_CONF=DIR/slurm.conf in its environment. No
# accounting (sacct fails; submitit goes on without it). Jobs run as root.
set -euo pipefail

ACTION=${1:?usage: slurm_cluster.sh up|down DIR}
DIR=${2:?usage: slurm_cluster.sh up|down DIR}
NODES=(tnt-h1 tnt-h2)
ADDRS=(10.77.0.1 10.77.0.2)
CTL_ADDR=10.77.0.254
CPUS=${TNT_SLURM_CPUS:-2}  # per node; both nodes share this machine's cores

die() { echo "slurm_cluster.sh: $*" >&2; exit 1; }

stop_pidfile() {
  local file=$1 pid
  [ -f "$file" ] || return 0
  pid=$(cat "$file")
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
  rm -f "$file"
}

down() {
  for node in "${NODES[@]}"; do stop_pidfile "$DIR/slurmd-$node.pid"; done
  stop_pidfile "$DIR/slurmctld.pid"
}

start_munge() {
  if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then return 0; fi
  [ -f /etc/munge/munge.key ] || die "no /etc/munge/munge.key (apt-get install munge creates one)"
  mkdir -p /run/munge /var/log/munge /var/lib/munge
  chown munge:munge /run/munge /var/log/munge /var/lib/munge
  runuser -u munge -- /usr/sbin/munged
  for _ in $(seq 50); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && return 0; sleep 0.1; done
  die "munged does not answer (munge -n | unmunge)"
}

# Shell commands that mount this namespace's cgroup hierarchies (v1 controllers, v2) again.
cgroup_mounts() {
  local cmds="mount -t tmpfs cgroup_root /sys/fs/cgroup"
  while read -r _ target type options _; do
    case "$type" in
      cgroup) cmds+=" && mkdir -p $target && mount -t cgroup -o ${options#rw,relatime,} cgroup $target" ;;
      cgroup2) cmds+=" && mkdir -p $target && mount -t cgroup2 cgroup2 $target" ;;
    esac
  done < /proc/self/mounts
  echo "$cmds"
}

write_conf() {
  local ctl
  ctl=$(hostname -s)
  cat > "$DIR/slurm.conf" <<EOF
ClusterName=tntrun
SlurmctldHost=$ctl($CTL_ADDR)
AuthType=auth/munge
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
JobRequeue=1
KillWait=10
# A requeued job waits the credential lifetime before it runs again (120 s by default)
# and a pending job the next scheduling pass (60 s): short, so requeue tests take seconds.
AuthInfo=cred_expire=10
SchedulerParameters=sched_interval=2
InactiveLimit=0
MinJobAge=300
SchedulerType=sched/builtin
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool-%n
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd-%n.pid
SlurmctldLogFile=$DIR/slurmctld.log
SlurmdLogFile=$DIR/slurmd-%n.log
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
EOF
  for i in "${!NODES[@]}"; do
    echo "NodeName=${NODES[$i]} NodeAddr=${ADDRS[$i]} CPUs=$CPUS State=UNKNOWN" >> "$DIR/slurm.conf"
  done
  echo "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP" >> "$DIR/slurm.conf"
}

up() {
  [ "$(id -u)" = 0 ] || die "needs root"
  for tool in slurmctld slurmd munged sinfo; do
    command -v "$tool" >/dev/null || die "$tool missing: apt-get install slurm-wlm munge"
  done
  for node in "${NODES[@]}"; do
    ip netns list | grep -qw "$node" || die "network namespace $node missing: scripts/netns_hosts.sh up DIR first"
  done
  down
  if ss -ltn 2>/dev/null | grep -q ':6817 '; then
    die "port 6817 is taken (another slurmctld?): stop it first (scripts/slurm_cluster.sh down <its DIR>)"
  fi
  mkdir -p "$DIR/state"
  start_munge
  write_conf
  export SLURM_CONF=$DIR/slurm.conf
  slurmctld -c  # -c: a clean start, no jobs from an earlier cluster in DIR/state
  for node in "${NODES[@]}"; do
    mkdir -p "$DIR/spool-$node"
    # Inside the host's namespaces: its address, and its own hostname for Slurm and Horovod.
    # `ip netns exec` mounts a fresh /sys without cgroups, which slurmd needs: mount them again.
    ip netns exec "$node" unshare --uts sh -c "hostname $node && $(cgroup_mounts) && exec slurmd -N $node" \
      || die "slurmd on $node did not start: $(tail -n 3 "$DIR/slurmd-$node.log" 2>/dev/null)"
  done
  for _ in $(seq 100); do
    idle=$(sinfo -h -N -t idle -o %N 2>/dev/null | sort -u | wc -l)
    [ "$idle" = "${#NODES[@]}" ] && { echo "SLURM_CONF=$SLURM_CONF"; return 0; }
    sleep 0.2
  done
  sinfo -N >&2 || true
  tail -n 20 "$DIR/slurmctld.log" >&2 || true
  die "the nodes did not become idle within 20 s (logs in $DIR)"
}

case "$ACTION" in
  up) up ;;
  down) down ;;
  *) die "usage: slurm_cluster.sh up|down DIR" ;;
esac
