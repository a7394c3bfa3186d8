#!/usr/bin/env bash
# docs/tour/README.md runs as written: its ```sh blocks, in order, in one shell, with only
# the names made unique (bridge, namespaces, vnics, subnet) and inside a private host
# namespace (so its nftables table is the test's own). Then the files the tour reads must
# say what the tour says: five RDMA WRITE First frames in the capture, the DMA lines, the
# nested ACK, the completion, the NAK and go-back-N retransmissions, exactly one frame
# dropped by nftables.
source "$(dirname "$0")/lib.sh"
TEST_DEADLINE=${RRDMA_TEST_DEADLINE:-400}
init_test to
require_system
for tool in ib_write_bw tshark nft; do
  command -v "$tool" >/dev/null || skip "no '$tool'"
done
TOUR="$(dirname "$0")/../../docs/tour/README.md"
[[ -r "$TOUR" ]] || fail "no $TOUR"
# The tour runs Debian's perftest over our libibverbs.so.1, which in a sanitizer build
# needs the ASan runtime preloaded: the tour's commands are run as written, so not here.
if grep -q libasan <<<"$(ldd "${RRDMA_BUILD_DIR:?}/lib/rrdma-ibverbs/libibverbs.so.1" 2>/dev/null)"; then
  skip "a sanitizer build (the tour's perftest cannot load an ASan libibverbs as written)"
fi
use_private_host

P="q$ID"  # replaces the tour's "tr" prefix: names stay short and unique
register_vnic "${P}vA"
register_vnic "${P}vB"
register_netns "${P}a"
register_netns "${P}b"
register_link "${P}br"

# The sh blocks, numbered, with the tour's names replaced.
awk '/^```sh$/ {block++; inside = 1; next} /^```$/ {inside = 0; next} inside {print > (dir "/block" block ".sh")}' \
  dir="$TMPD" "$TOUR"
for n in 1 2 3 4; do
  [[ -s "$TMPD/block$n.sh" ]] || fail "the tour has no sh block $n"
  sed -i -E "s/\btrbr\b/${P}br/g; s/\btr(\\\$n|a|b)\b/${P}\1/g; s/\bvt(A|B)\b/${P}v\1/g; s/10\.77\.0\./$NET./g; s/tour_loss/${P}_loss/g" \
    "$TMPD/block$n.sh"
done
log "the tour's commands (names: ${P}*, subnet $NET.0/24):"
sed 's/^/    /' "$TMPD/block1.sh" | head -n 3

run_blocks() {  # run_blocks N...: the blocks in one shell in $TMPD; output to $TMPD/tour.out
  local n script="$TMPD/run.sh"
  echo 'set -e' >"$script"
  for n in "$@"; do cat "$TMPD/block$n.sh" >>"$script"; done
  (cd "$TMPD" && PATH="$(dirname "$RRDMA_VNIC"):$PATH" host timeout 300 bash "$script") >>"$TMPD/tour.out" 2>&1 ||
    fail "tour blocks $*: exit $?: $(tail -n 20 "$TMPD/tour.out")"
}
run_blocks 1 2 3

log "what the tour shows is there"
# At least: packets sent while ARP resolved may have overflowed its queue and gone again.
expect_ge "$(tshark -r "$TMPD/write.pcap" -Y "infiniband.bth.opcode == 6" 2>/dev/null | wc -l)" 5 "RDMA WRITE First frames in write.pcap"
# One ACK per batch of frames the responder read (docs/TRANSPORT.md, "Held ACKs"): 1 to 5.
acks=$(tshark -r "$TMPD/write.pcap" -Y "infiniband.bth.opcode == 17" 2>/dev/null | wc -l)
expect_ge "$acks" 1 "Acknowledge frames in write.pcap"
expect_le "$acks" 5 "Acknowledge frames in write.pcap"
grep -q "frames_written=.* frames_dropped=0" "$TMPD/tour.out" || fail "no capture summary in the tour's output"
check() {  # check FILE ERE WHAT
  grep -qE -- "$2" "$TMPD/$1" || fail "$3: nothing in $1 matches '$2'"
}
check "${P}vA.trace" "^  dma   write 1024 bytes at 0x[0-9a-f]+ \(rkey 0x[0-9a-f]+\)$" "the DMA of a WRITE First"
check "${P}vA.trace" "^    roce  RC ACKNOWLEDGE qp 0x[0-9a-f]{6} psn [0-9]+ aeth\{syndrome 0x1f msn [0-9]+\} = ACK$" "the nested ACK"
check "${P}vB.trace" "^  verbs cqe send qp 0x[0-9a-f]{6} RDMA_WRITE success len 4096 wr_id 0x[0-9a-f]+$" "the completion"
check "${P}vB.trace" "state RTR -> RTS \(modify_qp\)$" "the QP's transitions"
check lossA.trace "out of sequence, NAK sent \(PSN beyond the expected one\)" "the NAK decision"
check lossA.trace "= NAK psn_sequence_error$" "the NAK on the wire"
check lossB.trace "retransmitted \(NAK PSN sequence error\)" "the retransmissions"
grep -qE "counter packets 1 bytes [0-9]+ drop" "$TMPD/tour.out" || fail "nftables did not drop exactly one frame: $(grep counter "$TMPD/tour.out")"

log "the tour's clean-up"
run_blocks 4
expect_vnic_gone "${P}vA"
expect_vnic_gone "${P}vB"
