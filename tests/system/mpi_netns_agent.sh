#!/usr/bin/env bash
# mpirun's launcher for tests/system/ucx_mpi.sh (`--mca plm_rsh_agent`): Open MPI runs
#   AGENT [OPTIONS] HOST COMMAND...
# as it would run ssh, to start its daemon (orted) on HOST. Our "hosts" are network
# namespaces on one machine: this runs COMMAND with /bin/sh, as ssh's remote shell would, in
# HOST's namespace and under `rrdma-vnic exec --dev` of HOST's vnic, so that the ranks orted
# starts there see that vnic and no other.
# RRDMA_MPI_HOSTS (inherited from mpirun) maps hosts: "ADDRESS NAMESPACE VNIC" entries
# separated by ';'. RRDMA_VNIC is the rrdma-vnic binary.
set -u -o pipefail
die() { echo "mpi_netns_agent: $*" >&2; exit 255; }  # 255: what ssh returns for its own errors

[[ -n "${RRDMA_VNIC:-}" && -x "${RRDMA_VNIC:-}" ]] || die "RRDMA_VNIC is not an executable: '${RRDMA_VNIC:-}'"
[[ -n "${RRDMA_MPI_HOSTS:-}" ]] || die "RRDMA_MPI_HOSTS is not set (\"ADDRESS NAMESPACE VNIC;...\")"
# ssh options Open MPI may add (-x: no X11 forwarding) come before the host.
while (( $# )) && [[ $1 == -* ]]; do shift; done
(( $# >= 2 )) || die "usage: mpi_netns_agent.sh [OPTIONS] HOST COMMAND..."
host=$1
shift

namespace="" vnic=""
IFS=';' read -ra entries <<<"$RRDMA_MPI_HOSTS"
for entry in "${entries[@]}"; do
  read -r address ns dev extra <<<"$entry"
  [[ -n "${address:-}" && -n "${ns:-}" && -n "${dev:-}" && -z "${extra:-}" ]] ||
    die "bad RRDMA_MPI_HOSTS entry '$entry' (expected ADDRESS NAMESPACE VNIC)"
  if [[ $address == "$host" ]]; then namespace=$ns; vnic=$dev; fi
done
[[ -n "$namespace" ]] || die "unknown host '$host' (RRDMA_MPI_HOSTS: $RRDMA_MPI_HOSTS)"
# ssh hands the remote shell its arguments joined by spaces; Open MPI quotes for that.
exec ip netns exec "$namespace" "$RRDMA_VNIC" exec --dev "$vnic" -- /bin/sh -c "$*"
