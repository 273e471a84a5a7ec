#!/usr/bin/env bash
# fedcore-sim across 3 MPI ranks on this machine: rank 0 hosts the server and 2 of the 6
# sites, ranks 1 and 2 host 2 sites each, whose connections reach rank 0's server over
# loopback mutual TLS. Passes when both rounds committed with all 6 sites taking part.
#   sim_mpi_test.sh MPIEXEC FEDCORE_SIM
set -euo pipefail
mpiexec=$1
sim=$2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$mpiexec" --allow-run-as-root --oversubscribe -n 3 --mca btl tcp,self --mca btl_tcp_if_include lo \
  "$sim" --mpi --dataset breast-cancer --model logreg --clients 6 --rounds 2 --lr 0.1 --batch 16 \
  --seed 7 --out "$out" --quiet
rounds="$out/rounds.csv"
[[ -f $rounds ]] || { echo "no rounds.csv: rank 0 wrote no report" >&2; exit 1; }
col=$(head -1 "$rounds" | tr ',' '\n' | grep -n '^participants$' | cut -d: -f1)
participants=$(tail -n +2 "$rounds" | cut -d, -f"$col" | tr '\n' ' ')
echo "rounds.csv participants per round: $participants"
[[ $participants == "6 6 " ]] || { echo "expected 6 participants in each of 2 rounds" >&2; exit 1; }
echo "sim across 3 ranks: ok"
