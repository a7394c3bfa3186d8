#!/usr/bin/env bash
# rrdma_netdev_wire_check must accept what a --netdev device and rxe send, and refuse what it
# exists to catch. From the golden rxe capture rxe_send_bw.pcapng (10.77.0.3 sends, 10.77.0.2
# ACKs), 10.77.0.3's frames are rewritten as our netdev port sends them (IPv4 ID 0, DF, UDP
# checksum 0, source port 4791, ICRC and IPv4 checksum made good again): that capture passes
# with 10.77.0.3 as ours and 10.77.0.2 as the peer, and so does one frame given the ID of a
# place in a UDP_SEGMENT run (5, resealed) or a UDP checksum. Then one frame at a time gets
# an ID no run gives (64), DF cleared, another source port (each resealed: the ICRC alone
# would catch an unsealed change), or one flipped bit; the peer's IDs all 0; a peer that
# sent nothing: each must fail, naming the frame and the reason. The unchanged golden
# capture must fail with 10.77.0.3 as ours (rxe's IDs and source ports are not ours).
# Environment: RRDMA_NETDEV_WIRE_CHECK (the checker), RRDMA_TEST_DATA_DIR (tests/data).
set -u -o pipefail

fail() { echo "FAIL [netdev_wire_check_test]: $*" >&2; exit 1; }

readonly CHECK=${RRDMA_NETDEV_WIRE_CHECK:?} GOLDEN=${RRDMA_TEST_DATA_DIR:?}/rxe_send_bw.pcapng
readonly OURS=10.77.0.3 PEER=10.77.0.2
TMPD=$(mktemp -d /tmp/rrdma-netdev-wire.XXXXXX)
trap 'rm -rf -- "$TMPD"' EXIT

# edit IN OUT MODE: rewrites RoCE frames of the pcapng IN (Enhanced Packet Blocks, Ethernet,
# IPv4 without options) and reseals each changed one (IPv4 header checksum, then the ICRC
# over the masked packet, IBA A17.3.3, in Python's own zlib.crc32: an independent ICRC).
#   ours:    every frame from $OURS as the netdev port sends it
#   id5, csum, id64, nodf, sport, flip: the first frame from $OURS changed that way
#   peer_id0: every frame from $PEER with ID 0
edit() {
  python3 - "$@" "$OURS" "$PEER" <<'PY'
import struct, sys, zlib
src, out, mode, ours, peer = sys.argv[1:6]
ours = bytes(int(p) for p in ours.split("."))
peer = bytes(int(p) for p in peer.split("."))

def seal(frame):
    frame[24:26] = b"\0\0"
    total = sum(struct.unpack(">10H", bytes(frame[14:34])))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    frame[24:26] = struct.pack(">H", ~total & 0xFFFF)
    end = 14 + struct.unpack_from(">H", frame, 16)[0] - 4
    masked = bytearray(frame[14:end])
    masked[1] = masked[8] = 0xFF
    masked[10:12] = masked[26:28] = b"\xff\xff"
    masked[32] = 0xFF
    frame[end:end + 4] = struct.pack("<I", zlib.crc32(b"\xff" * 8 + masked))

def as_ours(frame):
    frame[18:20] = b"\0\0"                                  # ID 0
    frame[20] = (frame[20] & 0x1F) | 0x40                   # DF
    frame[34:36] = struct.pack(">H", 4791)                  # source port
    frame[40:42] = b"\0\0"                                  # UDP checksum 0
    seal(frame)

data = bytearray(open(src, "rb").read())
offset, changed = 0, 0
while offset + 8 <= len(data):
    block_type, length = struct.unpack_from("<II", data, offset)
    if length < 12:
        sys.exit("bad block length")
    if block_type == 6:
        frame = memoryview(data)[offset + 28:offset + 28 + struct.unpack_from("<I", data, offset + 20)[0]]
        source = bytes(frame[26:30])
        if mode == "peer_id0" and source == peer:
            frame[18:20] = b"\0\0"
            seal(frame)
            changed += 1
        elif mode == "ours" and source == ours:
            as_ours(frame)
            changed += 1
        elif mode not in ("ours", "peer_id0") and source == ours and changed == 0:
            if mode == "id64":
                frame[18:20] = b"\0\x40"
            elif mode == "id5":
                frame[18:20] = b"\0\5"
            elif mode == "nodf":
                frame[20] &= 0xBF
            elif mode == "sport":
                frame[34:36] = struct.pack(">H", 49152)
            if mode == "csum":
                frame[40:42] = b"\x12\x34"   # masked by the ICRC: no reseal needed, none done
            elif mode == "flip":
                frame[14 + 20 + 8 + 20] ^= 0x10  # in the payload the ICRC covers
            else:
                seal(frame)
            changed += 1
        frame.release()
    offset += length
if changed == 0:
    sys.exit("no frame changed")
open(out, "wb").write(data)
PY
}

check() {  # check NAME EXPECTED_STATUS ARGS...: the checker's output in $TMPD/NAME.out
  local name=$1 expected=$2 rc=0
  shift 2
  "$CHECK" "$@" >"$TMPD/$name.out" 2>&1 || rc=$?
  [[ $rc == "$expected" ]] || fail "$name: exit $rc, expected $expected: $(head -c 2000 "$TMPD/$name.out")"
}

edit "$GOLDEN" "$TMPD/ours.pcapng" ours || fail "cannot make our frames"
check ours 0 "$TMPD/ours.pcapng" --ours "$OURS" --peer "$PEER"
grep -qE "^roce frames [1-9][0-9]*: [1-9][0-9]* good, 0 bad" "$TMPD/ours.out" || fail "no good frames: $(cat "$TMPD/ours.out")"
grep -qE "^source $OURS \(ours\) frames [1-9][0-9]* id_zero [1-9]" "$TMPD/ours.out" || fail "our summary: $(cat "$TMPD/ours.out")"
grep -qE "^frame 1 (ours|peer) .*: ok$" "$TMPD/ours.out" || fail "no per-frame line: $(head -n 3 "$TMPD/ours.out")"

check golden_as_ours 1 "$GOLDEN" --ours "$OURS" --peer "$PEER" --quiet
if ! grep -q "IPv4 ID is not a place in a run" "$TMPD/golden_as_ours.out" || ! grep -q "UDP source port is not 4791" "$TMPD/golden_as_ours.out"; then
  fail "rxe's frames taken for ours: $(head -n 3 "$TMPD/golden_as_ours.out")"
fi
# The same capture with both as peers: rxe's frames pass, whatever their IDs (the run fails
# only for the absent --ours).
check golden_peers_only 1 "$GOLDEN" --ours 10.77.0.9 --peer "$OURS" --peer "$PEER" --quiet
grep -q "no RoCE frame from 10.77.0.9" "$TMPD/golden_peers_only.out" || fail "the absent sender is not named"
[[ $(grep -c "^frame " "$TMPD/golden_peers_only.out") == 0 ]] || fail "rxe's frames refused: $(grep "^frame " "$TMPD/golden_peers_only.out" | head -n 2)"

# What a UDP_SEGMENT run gives a frame passes: the ID of its place (resealed), and a UDP
# checksum (masked by the ICRC; the kernel computes it when it segments).
for mode in id5 csum; do
  edit "$TMPD/ours.pcapng" "$TMPD/$mode.pcapng" "$mode" || fail "cannot make $mode"
  check "$mode" 0 "$TMPD/$mode.pcapng" --ours "$OURS" --peer "$PEER" --quiet
done
for mode in "id64:IPv4 ID is not a place in a run" "nodf:DF is not set" \
            "sport:UDP source port is not 4791" "flip:ICRC does not verify over the IPv4 packet"; do
  edit "$TMPD/ours.pcapng" "$TMPD/${mode%%:*}.pcapng" "${mode%%:*}" || fail "cannot make ${mode%%:*}"
  check "${mode%%:*}" 1 "$TMPD/${mode%%:*}.pcapng" --ours "$OURS" --peer "$PEER" --quiet
  grep -q "^frame [0-9]* ours .*${mode#*:}" "$TMPD/${mode%%:*}.out" ||
    fail "${mode%%:*}: the frame and '${mode#*:}' are not named: $(cat "$TMPD/${mode%%:*}.out")"
  [[ $(grep -c "^frame " "$TMPD/${mode%%:*}.out") == 1 ]] || fail "${mode%%:*}: not exactly one bad frame: $(cat "$TMPD/${mode%%:*}.out")"
done
# Without DF the rebuilt header (DF set) no longer matches: a receiver counts a bad ICRC.
grep -q "does not verify from the UDP payload" "$TMPD/nodf.out" || fail "nodf: the hidden-ID check passed: $(cat "$TMPD/nodf.out")"
grep -q "does not verify from the UDP payload" "$TMPD/flip.out" || fail "flip: the hidden-ID check passed"

edit "$TMPD/ours.pcapng" "$TMPD/peer_id0.pcapng" peer_id0 || fail "cannot make peer_id0"
check peer_id0 1 "$TMPD/peer_id0.pcapng" --ours "$OURS" --peer "$PEER" --quiet
grep -q "every frame from peer $PEER has IPv4 ID 0" "$TMPD/peer_id0.out" || fail "peer_id0: $(cat "$TMPD/peer_id0.out")"
check usage 2 "$GOLDEN" --peer "$PEER"
echo "netdev_wire_check_test: PASS"
