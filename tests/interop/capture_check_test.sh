#!/usr/bin/env bash
# rrdma_capture_check must refuse what it exists to catch: one flipped bit in one RoCE
# frame of a golden rxe capture (a bad ICRC), an expected sender that sent nothing, and a
# UDP source port other than ours for the connection.
# Environment: RRDMA_CAPTURE_CHECK (the checker), RRDMA_TEST_DATA_DIR (tests/data).
set -u -o pipefail

fail() { echo "FAIL [capture_check_test]: $*" >&2; exit 1; }

readonly CHECK=${RRDMA_CAPTURE_CHECK:?} GOLDEN=${RRDMA_TEST_DATA_DIR:?}/rxe_send_bw.pcapng
TMPD=$(mktemp -d /tmp/rrdma-capture-check.XXXXXX)
trap 'rm -rf -- "$TMPD"' EXIT

"$CHECK" "$GOLDEN" --expect-source 10.77.0.2 --expect-source 10.77.0.3 >"$TMPD/good.out" 2>&1 ||
  fail "the golden capture does not pass: $(cat "$TMPD/good.out")"
grep -q "^roce frames [1-9][0-9]* good, 0 bad" "$TMPD/good.out" || fail "no good frames counted: $(cat "$TMPD/good.out")"

rc=0
"$CHECK" "$GOLDEN" --expect-source 10.77.0.9 >"$TMPD/absent.out" 2>&1 || rc=$?
[[ $rc == 1 ]] || fail "an absent sender: exit $rc, expected 1"
grep -q "no RoCE frame from 10.77.0.9" "$TMPD/absent.out" || fail "the absent sender is not named"

# Every capture of tests/data has QPN 0x11 at both ends: a pair that is not the capture's
# gives another UDP source port, and every RC frame is refused.
"$CHECK" "$GOLDEN" --qp-pair 0x11 0x11 >"$TMPD/pair.out" 2>&1 || fail "the right QP pair is refused: $(cat "$TMPD/pair.out")"
rc=0
"$CHECK" "$GOLDEN" --qp-pair 0x11 0x12 >"$TMPD/pair.out" 2>&1 || rc=$?
[[ $rc == 1 ]] || fail "a wrong QP pair: exit $rc, expected 1"
grep -q "UDP source port is not" "$TMPD/pair.out" || fail "a wrong QP pair: the frames are not named"

# Flip one bit 70 bytes into the first Enhanced Packet Block's frame (block type 6; the
# frame starts 28 bytes into the block): past the Ethernet, IPv4 and UDP headers, inside
# the BTH or payload the ICRC covers.
python3 - "$GOLDEN" "$TMPD/corrupt.pcapng" <<'EOF' || fail "cannot make the corrupted capture"
import struct, sys
data = bytearray(open(sys.argv[1], "rb").read())
offset = 0
while offset + 8 <= len(data):
    block_type, length = struct.unpack_from("<II", data, offset)
    if block_type == 6:
        data[offset + 28 + 70] ^= 0x10
        break
    if length < 12:
        sys.exit("bad block length")
    offset += length
else:
    sys.exit("no packet block")
open(sys.argv[2], "wb").write(data)
EOF
rc=0
"$CHECK" "$TMPD/corrupt.pcapng" >"$TMPD/corrupt.out" 2>&1 || rc=$?
[[ $rc == 1 ]] || fail "a corrupted frame: exit $rc, expected 1: $(cat "$TMPD/corrupt.out")"
grep -q "^frame 1: " "$TMPD/corrupt.out" || fail "frame 1 is not named: $(cat "$TMPD/corrupt.out")"
echo "capture_check_test: PASS"
