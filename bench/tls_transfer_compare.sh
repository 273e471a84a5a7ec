#!/usr/bin/env bash
# TLS transfer against AES-128-GCM, side by side in one run (issue 3's benchmark), and the
# ceiling this machine puts on any TLS over loopback.
#   bench/tls_transfer_compare.sh [BUILD_DIR] [REPEATS]
# Each repeat runs `openssl speed -evp aes-128-gcm` (16 KiB blocks, one core), then a 40 MB
# frame stream over Fedcore's TLS channel and over its plain-TCP channel, back to back, so
# the ratio compares figures taken under the same load.
#
# The ceiling: a TLS byte costs its sender one AES-GCM pass plus the kernel's send, and its
# receiver the kernel's receive plus one AES-GCM pass. The plain-TCP run measures the
# kernel's part (CPU per MB on each side, user + system); `openssl speed` the AES part.
# With two cores shared by both ends, no TLS implementation can move more than
# 2 / (tcp sender + tcp receiver + 2 x AES) per second, whatever its own overheads.
set -euo pipefail
build=${1:-build/release}
repeats=${2:-3}
bench=$build/bench/federation_bench
printf '| repeat | AES-128-GCM MB/s | TLS channel MB/s | ratio | TCP channel MB/s | TLS ceiling MB/s | ceiling ratio |\n'
printf '|---|---|---|---|---|---|---|\n'
for ((r = 1; r <= repeats; r++)); do
  aes=$(openssl speed -evp aes-128-gcm -seconds 2 -bytes 16384 2>/dev/null |
    awk '/^AES-128-GCM/ { sub(/k$/, "", $2); printf "%.0f", $2 / 1000 }')
  tls=$("$bench" transfer 40 26)
  tcp=$("$bench" transfer-tcp 40 26)
  python3 - "$r" "$aes" "$tls" "$tcp" <<'PY'
import re, sys
r, aes, tls, tcp = sys.argv[1], float(sys.argv[2]), sys.argv[3], sys.argv[4]
def rate(text):
    return float(re.search(r"([\d.]+) MB/s", text)[1])
def cpu(text):
    m = re.search(r"sender ([\d.]+) ms, receiver ([\d.]+) ms", text)
    return float(m[1]) + float(m[2])
tls_rate, tcp_rate = rate(tls), rate(tcp)
kernel_ms = cpu(tcp)                     # both sides' CPU per MB of plain TCP
crypto_ms = 2 * 1000.0 / aes             # one encryption and one decryption per MB
ceiling = 2 * 1000.0 / (kernel_ms + crypto_ms)
print(f"| {r} | {aes:,.0f} | {tls_rate:,.0f} | {tls_rate / aes:.2f} | {tcp_rate:,.0f} | {ceiling:,.0f} | {ceiling / aes:.2f} |")
PY
done
