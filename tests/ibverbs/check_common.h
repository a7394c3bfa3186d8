/* What the ordinary verbs programs of this folder (mr_check, mw_check, wr_api_check) share:
 * failing with a message, opening a device by name, the QP attributes they all start from,
 * taking a QP from RESET to RTS toward a peer on the same subnet, and waiting for the next
 * completion. Written as C verbs code is (the programs are C++ only for the build's flags);
 * each program is one translation unit, hence static inline functions.
 *
 * A program defines CHECK_PROGRAM, its name as its messages begin, before including this.
 * tests/interop/mw_peer.c and bench/mr_scale.c do not: they are built alone inside the VM. */
#ifndef RRDMA_TESTS_IBVERBS_CHECK_COMMON_H
#define RRDMA_TESTS_IBVERBS_CHECK_COMMON_H

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include <infiniband/verbs.h>

#ifndef CHECK_PROGRAM
#error "define CHECK_PROGRAM (the program's name) before including check_common.h"
#endif

#define KIB 1024ul
/* The Q_Key of every UD QP connect_qp sets up; a UD sender names it in its work requests. */
#define CHECK_UD_QKEY 0x1111
#define CHECK_PSN 100

[[noreturn]] static inline void fail(const char *what) {
  fprintf(stderr, CHECK_PROGRAM ": %s (errno %d: %s)\n", what, errno, strerror(errno));
  exit(1);
}

static inline void check(bool ok, const char *what) {
  if (!ok) fail(what);
}

/* The device called `name`, opened; the program fails when there is none. */
static inline struct ibv_context *open_device(const char *name) {
  struct ibv_device **list = ibv_get_device_list(NULL);
  check(list != NULL, "ibv_get_device_list");
  struct ibv_context *context = NULL;
  for (int i = 0; list[i] && !context; ++i)
    if (strcmp(ibv_get_device_name(list[i]), name) == 0) context = ibv_open_device(list[i]);
  ibv_free_device_list(list);
  check(context != NULL, "no such device");
  return context;
}

/* What every QP of the checks has: `cq` for both queues, 16 work requests of one SGE each,
 * `pd` given through comp_mask. The caller adds its own (comp_mask bits, send_ops_flags, an
 * SRQ, inline data) before ibv_create_qp_ex. */
static inline struct ibv_qp_init_attr_ex qp_init_attr(struct ibv_pd *pd, struct ibv_cq *cq, enum ibv_qp_type type) {
  struct ibv_qp_init_attr_ex attr = {};
  attr.send_cq = cq;
  attr.recv_cq = cq;
  attr.cap.max_send_wr = 16;
  attr.cap.max_recv_wr = 16;
  attr.cap.max_send_sge = 1;
  attr.cap.max_recv_sge = 1;
  attr.qp_type = type;
  attr.comp_mask = IBV_QP_INIT_ATTR_PD;
  attr.pd = pd;
  return attr;
}

/* RESET -> INIT -> RTR -> RTS, with what each transport needs of modify_qp (ibv_modify_qp(3)):
 * UD only its Q_Key; UC and RC the path to `peer_gid` (port 1, GID index 0 on both sides),
 * the peer's QPN and the PSNs; RC also its timers and four READs / atomics in flight.
 * `access`: the remote access the QP grants (RC, UC). */
static inline void connect_qp(struct ibv_qp *qp, const union ibv_gid *peer_gid, uint32_t peer_qpn,
                              unsigned access) {
  struct ibv_qp_attr attr = {};
  attr.qp_state = IBV_QPS_INIT;
  attr.port_num = 1;
  int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
  if (qp->qp_type == IBV_QPT_UD) {
    attr.qkey = CHECK_UD_QKEY;
    mask |= IBV_QP_QKEY;
  } else {
    attr.qp_access_flags = access;
    mask |= IBV_QP_ACCESS_FLAGS;
  }
  check(ibv_modify_qp(qp, &attr, mask) == 0, "modify to INIT");
  memset(&attr, 0, sizeof attr);
  attr.qp_state = IBV_QPS_RTR;
  mask = IBV_QP_STATE;
  if (qp->qp_type != IBV_QPT_UD) {
    attr.path_mtu = IBV_MTU_1024;
    attr.dest_qp_num = peer_qpn;
    attr.rq_psn = CHECK_PSN;
    attr.ah_attr.is_global = 1;
    attr.ah_attr.grh.dgid = *peer_gid;
    attr.ah_attr.grh.hop_limit = 64;
    attr.ah_attr.port_num = 1;
    mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
    if (qp->qp_type == IBV_QPT_RC) {
      attr.max_dest_rd_atomic = 4;
      attr.min_rnr_timer = 12;
      mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
    }
  }
  check(ibv_modify_qp(qp, &attr, mask) == 0, "modify to RTR");
  memset(&attr, 0, sizeof attr);
  attr.qp_state = IBV_QPS_RTS;
  attr.sq_psn = CHECK_PSN;
  mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
  if (qp->qp_type == IBV_QPT_RC) {
    attr.timeout = 14;
    attr.retry_cnt = 7;
    attr.rnr_retry = 7;
    attr.max_rd_atomic = 4;
    mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
  }
  check(ibv_modify_qp(qp, &attr, mask) == 0, "modify to RTS");
}

/* The next completion of `cq`, polled for at most 30 s; the program fails with `what` after. */
static inline struct ibv_wc next_completion(struct ibv_cq *cq, const char *what) {
  time_t give_up = time(NULL) + 30;
  struct ibv_wc wc;
  for (;;) {
    int n = ibv_poll_cq(cq, 1, &wc);
    check(n >= 0, "ibv_poll_cq");
    if (n == 1) return wc;
    if (time(NULL) > give_up) fail(what);
  }
}

/* Bytes that differ from their neighbours and from another seed's, to compare after a transfer. */
static inline void fill(unsigned char *p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; ++i) p[i] = (unsigned char)(i * 13 + seed);
}

#endif
