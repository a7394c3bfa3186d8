#!/usr/bin/env bash
# Issue 18: Debian's own, unmodified librdmacm programs connect through the vnics, over
# `rrdma-vnic exec` (which adds the rdma_cm shim to our libibverbs.so.1): rping, ucmatose,
# udaddy, rdma_server/rdma_client, rdma_xserver/rdma_xclient (RC; XRC is declined or passes),
# cmtime, the rsockets programs rstream and udpong, and perftest with -R (the connection
# through rdma_cm instead of TCP). Server on vnic A in namespace A, client on vnic B in
# namespace B (rdma_cm_lib.sh); then rping, ucmatose and ib_send_bw -R with both ends on
# vnic A, the client connecting to the vnic's own address. Each pair prints what it ran and
# a one-line result; the table at the end has them all. Both sides must exit 0 (a server
# that never exits by itself, cmtime's or udpong's, must still run at the end).
#
# RRDMA_CM_ROWS=REGEX runs only the rows whose "program arguments" match (debugging).
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/verbs_lib.sh"
source "$(dirname "$0")/rdma_cm_lib.sh"
TEST_DEADLINE=${RRDMA_TEST_DEADLINE:-1500}
init_test cp
cm_install_cleanup
require_system
require_rdmacm rping ucmatose udaddy rdma_server rdma_client rdma_xserver rdma_xclient cmtime rstream udpong \
  ib_send_bw ib_write_bw ib_read_bw ib_atomic_bw ib_send_lat ib_write_lat
cm_scene
KEEP_GOING=1

selected() { [[ -z "${RRDMA_CM_ROWS:-}" || "$1 $2" =~ $RRDMA_CM_ROWS ]]; }

A=$VNIC_A_IP
pair_sides a b

log "--- rping (RC: SEND, RDMA READ, RDMA WRITE per ping; -V: the client checks every ping's data)"
# -S: rping takes 26 .. 65535 bytes (RPING_MIN_BUFSIZE, RPING_BUFSIZE - 1).
for size in 64 4096 65535; do
  next_port
  selected rping "-C 1000 -S $size" || continue
  PAIR_LIMIT=300
  PAIR_REFUSE_CLIENT="data mismatch|cq completion failed|cma event"
  cm_pair rping "-C 1000 -S $size -V" -s -a "$A" -p "$CM_PORT" -C 1000 -S "$size" \
    -- -c -a "$A" -p "$CM_PORT" -C 1000 -S "$size" -V
done
# With -v each side prints one line per ping: the count is checked (the 100th is rdma-ping-99).
next_port
if selected rping "-v -C 100"; then
  PAIR_EXPECT_CLIENT=("^ping data: rdma-ping-99: ")
  PAIR_EXPECT_SERVER=("^server ping data: rdma-ping-99: ")
  PAIR_FIGURE='/^ping data: rdma-ping-/ {n++} END {print n " pings printed"}'
  cm_pair rping "-v -C 100 -S 64" -s -v -a "$A" -p "$CM_PORT" -C 100 -S 64 \
    -- -c -v -a "$A" -p "$CM_PORT" -C 100 -S 64
  lines=$(grep -c '^ping data: rdma-ping-' "$TMPD/rping.$CM_PORT.client.out" 2>/dev/null)
  [[ "${lines:-0}" == 100 ]] || fail_case "rping -v -C 100: the client printed ${lines:-0} pings, expected 100"
fi

log "--- ucmatose (RC, 20 connections, 10 messages each way on each)"
next_port
if selected ucmatose "-c 20"; then
  PAIR_EXPECT_CLIENT=("^return status 0$")
  PAIR_EXPECT_SERVER=("^return status 0$" "^disconnected$")
  PAIR_REFUSE_CLIENT="event: RDMA_CM_EVENT"
  cm_pair ucmatose "-c 20" -b "$A" -p "$CM_PORT" -c 20 -- -s "$A" -p "$CM_PORT" -c 20
fi

log "--- udaddy (UD: SIDR_REQ/SIDR_REP, then datagrams; its port is fixed, 7174 in the UDP port space)"
if selected udaddy ""; then
  PAIR_EXPECT_CLIENT=("^return status 0$")
  PAIR_EXPECT_SERVER=("^return status 0$")
  PAIR_REFUSE_CLIENT="event: RDMA_CM_EVENT"
  PAIR_PORT=7174
  cm_pair udaddy "-C 10 -S 100 (defaults)" -b "$A" -- -s "$A"
fi

log "--- rdma_server / rdma_client (the synchronous API: rdma_getaddrinfo, rdma_create_ep, rdma_get_request)"
next_port
if selected rdma_server ""; then
  PAIR_EXPECT_CLIENT=("^rdma_client: end 0$")
  PAIR_EXPECT_SERVER=("^rdma_server: end 0$")
  PAIR_CLIENT_PROGRAM=rdma_client
  cm_pair rdma_server "-s -p / rdma_client -s -p" -s "$A" -p "$CM_PORT" -- -s "$A" -p "$CM_PORT"
fi

log "--- rdma_xserver / rdma_xclient: RC, then XRC (declined if the vnic refuses XRC, with its message)"
next_port
if selected rdma_xserver "-c r"; then
  PAIR_EXPECT_CLIENT=("rdma_xclient: end 0$")
  PAIR_EXPECT_SERVER=("rdma_xserver: end 0$")
  PAIR_CLIENT_PROGRAM=rdma_xclient
  cm_pair rdma_xserver "-c r / rdma_xclient" -p "$CM_PORT" -c r -- -s "$A" -p "$CM_PORT" -c r
fi
next_port
if selected rdma_xserver "-c x"; then
  PAIR_LIMIT=60
  PAIR_EXPECT_CLIENT=("rdma_xclient: end 0$")
  PAIR_EXPECT_SERVER=("rdma_xserver: end 0$")
  PAIR_DECLINE="not supported|Function not implemented"
  PAIR_CLIENT_PROGRAM=rdma_xclient
  cm_pair rdma_xserver "-c x / rdma_xclient (XRC)" -p "$CM_PORT" -c x -- -s "$A" -p "$CM_PORT" -c x
fi

log "--- cmtime (20 RC connections set up and torn down at once, timed step by step)"
next_port
if selected cmtime "-c 20"; then
  PAIR_SERVER_STAYS=1
  PAIR_EXPECT_CLIENT=("^connect +:" "^disconnect +:")
  PAIR_REFUSE_CLIENT="event: |ERROR|failure"
  PAIR_FIGURE="\$1 == \"connect\" && \$2 == \":\" && \$3 > 0 {printf \"connect 20 in %.0f ms: %.1f/s\", \$3, 20000 / \$3}"
  cm_pair cmtime "-c 20" -b "$A" -p "$CM_PORT" -- -s "$A" -p "$CM_PORT" -c 20
  if [[ -s "$TMPD/cmtime.$CM_PORT.client.out" ]]; then
    log "cmtime's table (client):"
    sed -n '/^step/,$p' "$TMPD/cmtime.$CM_PORT.client.out" | sed 's/^/    /'
    rate=$(cmtime_rate "$TMPD/cmtime.$CM_PORT.client.out" 20)
    log "connection setup rate: ${rate:-(no connect line)}"
  fi
fi

log "--- rsockets: rstream (a stream over RC), udpong (datagrams over UD)"
next_port
if selected rstream "-S 4096"; then
  # -T b: blocking calls (the default polls without sleeping, two busy loops on a 2-core box);
  # -T v: the data is verified.
  PAIR_EXPECT_CLIENT=("^custom ")
  PAIR_REFUSE_CLIENT="mismatch|rconnect|rsend|rrecv"
  PAIR_FIGURE='/^custom / {print $(NF-1) " Gb/s, " $NF " us/xfer"}'
  cm_pair rstream "-S 4096 -C 100 -I 10 -T b -T v" -b "$A" -p "$CM_PORT" -S 4096 -C 100 -I 10 -T b -T v \
    -- -s "$A" -p "$CM_PORT" -S 4096 -C 100 -I 10 -T b -T v
fi
next_port
if selected udpong "-C 100"; then
  # rsockets' datagram mode binds a kernel UDP socket to the rsocket's address (udpong -b, and
  # the source address the kernel picks for rconnect) and the cm_id to the same address: a
  # vnic's address is the daemon's, not a kernel address of the namespace, so rbind/rconnect
  # fail with EADDRNOTAVAIL. Recorded as declined with the program's words until that changes.
  PAIR_DECLINE="Cannot assign requested address"
  # On a netdev device the address is the kernel's too: rbind and the source address work.
  # rconnect then fails in rsockets' own ds_add_qp_dest, which creates an address handle to
  # itself without a GRH (dlid only, InfiniBand's form); every RoCE device refuses that
  # (ibv_create_ah EINVAL; the kernel's rdma_check_ah_attr for rdma_rxe), and rconnect
  # reports the errno its cleanup left ("No such file or directory"). Declined with the
  # program's words; the server, bound to the one address, must still run.
  [[ $DEVICE_KIND == netdev ]] && PAIR_DECLINE="^rconnect: "
  PAIR_SERVER_STAYS=1
  PAIR_EXPECT_CLIENT=("^custom ")
  PAIR_FIGURE='/^custom / {print $(NF-1) " Gb/s, " $NF " us/xfer"}'
  udpong_server_out="$TMPD/udpong.$CM_PORT.server.out"
  cm_pair udpong "-C 100 -S 100 -T b" -b "$A" -p "$CM_PORT" -T b -- -s "$A" -p "$CM_PORT" -C 100 -S 100 -T b
  if [[ $DEVICE_KIND == netdev ]] && grep -qE "rbind|Cannot assign" "$udpong_server_out"; then
    fail_case "udpong -b $A: the server could not bind the one address: $(why "$udpong_server_out")"
  fi
fi

log "--- perftest -R (the connection through rdma_cm, no TCP)"
for program in ib_send_bw ib_write_bw ib_read_bw; do
  next_port
  selected "$program" "-R -s 65536 -n 200" || continue
  PAIR_FIGURE=$BW_FIGURE
  cm_pair "$program" "-R -s 65536 -n 200" -d "$VNIC_A" -R -s 65536 -n 200 -p "$CM_PORT" \
    -- -d "$VNIC_B" -R -s 65536 -n 200 -p "$CM_PORT" "$A"
done
next_port
if selected ib_atomic_bw "-R -n 200"; then
  PAIR_FIGURE=$BW_FIGURE
  cm_pair ib_atomic_bw "-R -n 200" -d "$VNIC_A" -R -n 200 -p "$CM_PORT" -- -d "$VNIC_B" -R -n 200 -p "$CM_PORT" "$A"
fi
for program in ib_send_lat ib_write_lat; do
  next_port
  selected "$program" "-R -s 64 -n 200" || continue
  PAIR_FIGURE=$LAT_FIGURE
  cm_pair "$program" "-R -s 64 -n 200" -d "$VNIC_A" -R -s 64 -n 200 -p "$CM_PORT" \
    -- -d "$VNIC_B" -R -s 64 -n 200 -p "$CM_PORT" "$A"
done

log "--- both ends on vnic A (namespace A), the client connecting to the vnic's own address"
pair_sides a a
next_port
if selected rping "loopback"; then
  PAIR_REFUSE_CLIENT="data mismatch|cq completion failed|cma event"
  cm_pair rping "loopback -C 1000 -S 4096 -V" -s -a "$A" -p "$CM_PORT" -C 1000 -S 4096 \
    -- -c -a "$A" -p "$CM_PORT" -C 1000 -S 4096 -V
fi
next_port
if selected ucmatose "loopback"; then
  PAIR_EXPECT_CLIENT=("^return status 0$")
  PAIR_EXPECT_SERVER=("^return status 0$")
  cm_pair ucmatose "loopback -c 20" -b "$A" -p "$CM_PORT" -c 20 -- -s "$A" -p "$CM_PORT" -c 20
fi
next_port
if selected ib_send_bw "loopback"; then
  PAIR_FIGURE=$BW_FIGURE
  cm_pair ib_send_bw "loopback -R -s 65536 -n 200" -d "$VNIC_A" -R -s 65536 -n 200 -p "$CM_PORT" \
    -- -d "$VNIC_A" -R -s 65536 -n 200 -p "$CM_PORT" "$A"
fi

print_rows
finish_cases
log "all ${#ROWS[@]} rows passed (or were declined, as the table says)"
