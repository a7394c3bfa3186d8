#!/usr/bin/env bash
# rrdma_capture_check must refuse what it exists to catch: one flipped bit in one RoCE
# frame of a golden rxe capture (a bad ICRC), an expected sender that sent nothing, a
# UDP source port other than ours for a connection or a UD sender, a MAD rxe's GSI QP would
# drop; and it must take a CM-made connection's port from the flow label of its REQ.
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
# rdma_cm (issue 18). rxe's CM capture passes: QP 1's MADs from port 0xD872, each a MAD the
# GSI QP takes and a CM message our codec parses, counted by name.
"$CHECK" "$RRDMA_TEST_DATA_DIR/rxe_cm.pcapng" --check-udp-ports >"$TMPD/cm.out" 2>&1 ||
  fail "--check-udp-ports refuses rxe's CM capture: $(cat "$TMPD/cm.out")"
grep -qE "^  CM REQ +3$" "$TMPD/cm.out" && grep -qE "^  CM SIDR_REQ +3$" "$TMPD/cm.out" ||
  fail "rxe's CM messages are not counted: $(cat "$TMPD/cm.out")"
# cm_edit IN OUT MODE: rewrites frames with the ICRC (and IPv4 checksum) made good again.
#   bad_qkey: the first frame's DETH Q_Key becomes 0x11111111 (a GSI MAD rxe drops)
#   cm_flow:  IN is rxe_rc_pingpong (QPN 0x11 at both ends, 10.77.0.3 the client): every
#             RoCE frame moves to the UDP source port of flow label 0xA3E36; with a CM REQ
#             from the client (local QPN 0x11, that flow label) and the server's REP
#             (QPN 0x11) put first, taken from rxe_cm.pcapng's frames 3 and 4
#   cm_flow_no_rep: the same without the REP (the checker cannot know the connection)
cm_edit() {
  python3 - "$@" "$RRDMA_TEST_DATA_DIR/rxe_cm.pcapng" <<'PY'
import struct, sys, zlib
src, out, mode, cm_capture = sys.argv[1:5]
FLOW_LABEL = 0xA3E36

def blocks(data):
    offset = 0
    while offset + 8 <= len(data):
        block_type, length = struct.unpack_from("<II", data, offset)
        if length < 12:
            sys.exit("bad block length")
        yield offset, block_type, length
        offset += length

def frames_of(data):
    return [(o, struct.unpack_from("<I", data, o + 20)[0]) for o, t, _ in blocks(data) if t == 6]

def seal(frame):
    # IPv4 header checksum, then the ICRC (IBA A17.3.3) over the masked packet.
    ihl = (frame[14] & 0x0F) * 4
    frame[24:26] = b"\0\0"
    words = struct.unpack(">%dH" % (ihl // 2), bytes(frame[14:14 + ihl]))
    total = sum(words)
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    frame[24:26] = struct.pack(">H", ~total & 0xFFFF)
    end = 14 + struct.unpack_from(">H", frame, 16)[0] - 4
    masked = bytearray(frame[14:end])
    masked[1] = 0xFF
    masked[8] = 0xFF
    masked[10:12] = b"\xff\xff"
    masked[ihl + 6:ihl + 8] = b"\xff\xff"
    masked[ihl + 8 + 4] = 0xFF
    frame[end:end + 4] = struct.pack("<I", zlib.crc32(b"\xff" * 8 + masked))

data = bytearray(open(src, "rb").read())
ROCE_PORT = ((FLOW_LABEL & 0x3FFF) ^ (FLOW_LABEL >> 14)) | 0xC000
if mode == "bad_qkey":
    o, n = frames_of(data)[0]
    frame = memoryview(data)[o + 28:o + 28 + n]
    frame[54:58] = struct.pack(">I", 0x11111111)  # DETH after Ethernet, IPv4, UDP, BTH
    seal(frame)
else:
    server = client = None
    for o, n in frames_of(data):
        frame = memoryview(data)[o + 28:o + 28 + n]
        if bytes(frame[26:30]) == bytes([10, 77, 0, 3]):
            client = (bytes(frame[6:12]), bytes(frame[26:30]))
            server = (bytes(frame[0:6]), bytes(frame[30:34]))
        frame[34:36] = struct.pack(">H", ROCE_PORT)
        seal(frame)
        frame.release()
    cm = bytearray(open(cm_capture, "rb").read())
    inserted = bytearray()
    for index, (o, n) in enumerate(frames_of(cm)):
        if index not in (2, 3) or (index == 3 and mode == "cm_flow_no_rep"):
            continue
        block = bytearray(cm[o:o + struct.unpack_from("<I", cm, o + 4)[0]])
        frame = memoryview(block)[28:28 + n]
        sender, receiver = (client, server) if index == 2 else (server, client)
        frame[0:6], frame[6:12] = receiver[0], sender[0]
        frame[26:30], frame[30:34] = sender[1], receiver[1]
        mad = 14 + 20 + 8 + 12 + 8
        if index == 2:  # REQ: local QPN (byte 32 after the MAD header), flow label (88)
            frame[mad + 24 + 32:mad + 24 + 35] = (0x11).to_bytes(3, "big")
            word = struct.unpack_from(">I", frame, mad + 24 + 88)[0]
            struct.pack_into(">I", frame, mad + 24 + 88, FLOW_LABEL << 12 | (word & 0xFFF))
        else:           # REP: local QPN (byte 12)
            frame[mad + 24 + 12:mad + 24 + 15] = (0x11).to_bytes(3, "big")
        seal(frame)
        inserted += block
        frame.release()
    first = frames_of(data)[0][0]
    data[first:first] = inserted
open(out, "wb").write(data)
PY
}
cm_edit "$RRDMA_TEST_DATA_DIR/rxe_cm.pcapng" "$TMPD/qkey.pcapng" bad_qkey || fail "cannot make the bad Q_Key capture"
rc=0
"$CHECK" "$TMPD/qkey.pcapng" >"$TMPD/qkey.out" 2>&1 || rc=$?
[[ $rc == 1 ]] && grep -q "^frame 1: not a MAD rxe's GSI QP takes: bad_qkey" "$TMPD/qkey.out" ||
  fail "a GSI MAD with a bad Q_Key: exit $rc: $(cat "$TMPD/qkey.out")"
# A CM-made connection's port comes from its REQ's flow label, not from the QPNs.
cm_edit "$RRDMA_TEST_DATA_DIR/rxe_rc_pingpong.pcapng" "$TMPD/cm_flow.pcapng" cm_flow || fail "cannot make the CM flow capture"
"$CHECK" "$TMPD/cm_flow.pcapng" --check-udp-ports >"$TMPD/cm_flow.out" 2>&1 ||
  fail "a connection on its CM flow label's port is refused: $(cat "$TMPD/cm_flow.out")"
grep -q "qpn 0x000011-0x000011 0xa3e36" "$TMPD/cm_flow.out" || fail "the flow label is not learned: $(cat "$TMPD/cm_flow.out")"
cm_edit "$RRDMA_TEST_DATA_DIR/rxe_rc_pingpong.pcapng" "$TMPD/cm_no_rep.pcapng" cm_flow_no_rep || fail "cannot make the capture without a REP"
rc=0
"$CHECK" "$TMPD/cm_no_rep.pcapng" --check-udp-ports >"$TMPD/cm_no_rep.out" 2>&1 || rc=$?
[[ $rc == 1 ]] && grep -q "nor of a CM flow label" "$TMPD/cm_no_rep.out" ||
  fail "a flow-label port without the REP that makes it a CM connection: exit $rc: $(cat "$TMPD/cm_no_rep.out")"
echo "capture_check_test: PASS"
