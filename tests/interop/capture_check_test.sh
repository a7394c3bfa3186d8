#!/usr/bin/env bash
# rrdma_capture_check must refuse what it exists to catch: one flipped bit in one RoCE
# frame of a golden rxe capture (a bad ICRC), an expected sender that sent nothing, and a
# UDP source port other than ours for a connection or a UD sender.
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
# --check-udp-ports must pass rxe's own captures, and refuse a UD frame, or one direction
# of an RC connection, moved to another source port with its ICRC made good again (the
# ICRC covers the UDP source port, so only a resealed frame tests the port rule itself).
for golden in rxe_rc_pingpong rxe_ud_pingpong rxe_write_bw; do
  "$CHECK" "$RRDMA_TEST_DATA_DIR/$golden.pcapng" --check-udp-ports >"$TMPD/ports.out" 2>&1 ||
    fail "--check-udp-ports refuses rxe's $golden: $(cat "$TMPD/ports.out")"
done
reseal() {  # reseal IN OUT SOURCE_IP: every frame from SOURCE_IP gets UDP source port 50000
  python3 - "$@" <<'PY'
import struct, sys, zlib
data = bytearray(open(sys.argv[1], "rb").read())
source = bytes(int(part) for part in sys.argv[3].split("."))

def icrc(frame, ip_start):
    # IBA A17.3.3: the masked IPv4 (TOS, TTL, checksum), UDP (checksum) and BTH (byte 4)
    # after 8 bytes of ones; zlib's CRC-32, little-endian on the wire.
    ihl = (frame[ip_start] & 0x0F) * 4
    end = ip_start + struct.unpack_from(">H", frame, ip_start + 2)[0] - 4
    masked = bytearray(frame[ip_start:end])
    masked[1] = 0xFF
    masked[8] = 0xFF
    masked[10:12] = b"\xff\xff"
    masked[ihl + 6:ihl + 8] = b"\xff\xff"
    masked[ihl + 8 + 4] = 0xFF
    return end, struct.pack("<I", zlib.crc32(b"\xff" * 8 + masked))

offset, changed = 0, 0
while offset + 8 <= len(data):
    block_type, length = struct.unpack_from("<II", data, offset)
    if length < 12:
        sys.exit("bad block length")
    if block_type == 6:
        frame_start = offset + 28
        frame = memoryview(data)[frame_start:frame_start + struct.unpack_from("<I", data, offset + 20)[0]]
        end, sealed = icrc(frame, 14)
        if bytes(frame[end:end + 4]) != sealed:
            sys.exit("our ICRC of an untouched frame differs from the capture's")
        if bytes(frame[26:30]) == source:
            ihl = (frame[14] & 0x0F) * 4
            struct.pack_into(">H", frame, 14 + ihl, 50000)
            end, sealed = icrc(frame, 14)
            frame[end:end + 4] = sealed
            changed += 1
    offset += length
if changed == 0:
    sys.exit("no frame from " + sys.argv[3])
open(sys.argv[2], "wb").write(data)
PY
}
for golden in rxe_ud_pingpong rxe_rc_pingpong; do
  reseal "$RRDMA_TEST_DATA_DIR/$golden.pcapng" "$TMPD/moved.pcapng" 10.77.0.3 || fail "cannot reseal $golden"
  "$CHECK" "$TMPD/moved.pcapng" >"$TMPD/moved.out" 2>&1 ||
    fail "$golden with a resealed port: refused without --check-udp-ports: $(cat "$TMPD/moved.out")"
  rc=0
  "$CHECK" "$TMPD/moved.pcapng" --check-udp-ports >"$TMPD/moved.out" 2>&1 || rc=$?
  [[ $rc == 1 ]] || fail "$golden with a port moved: exit $rc, expected 1: $(cat "$TMPD/moved.out")"
  grep -qE "UDP source port is not|no reverse flow" "$TMPD/moved.out" ||
    fail "$golden with a port moved: no reason given: $(cat "$TMPD/moved.out")"
done
echo "capture_check_test: PASS"
