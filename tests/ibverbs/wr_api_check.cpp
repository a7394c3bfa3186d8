/* An ordinary libibverbs program (built against the system's libibverbs, run over ours by
 * `rrdma-vnic exec`) for the extended verbs that Debian's tools do not reach on a vnic:
 * ibv_create_cq_ex with ibv_start_poll / ibv_next_poll, ibv_create_qp_ex with send_ops_flags
 * and the ibv_wr_* posting API (ibv_wr_post(3)). One process, two devices: an RC QP on each,
 * connected to each other; from A it WRITEs, READs, FETCH_ADDs, CMP_SWAPs and SENDs inline
 * to B, then ATOMIC_WRITEs and FLUSHes (IBA 1.5 Annex A19), then checks B's memory, A's
 * results and every completion; last, a FLUSH of a region registered without
 * IBV_ACCESS_FLUSH_GLOBAL must fail as rxe fails it (IBV_WC_REM_ACCESS_ERR). C++ only for
 * the build's flags: it is written as any C verbs program is.
 *
 * Debian 12's verbs.h (rdma-core 44) has ibv_wr_atomic_write but not ibv_wr_flush, which
 * rdma-core 45 added as the pointer after wr_atomic_write in struct ibv_qp_ex, with these
 * constants; a program built against newer headers calls exactly that, as this one does.
 *   wr_api_check DEVICE_A DEVICE_B      exit 0 and "ok" when everything checked out */
#define CHECK_PROGRAM "wr_api_check"
#include "check_common.h"

#define BUFFER_BYTES 8192

/* rdma-core 45 (verbs.h, ib_user_verbs.h) */
#define FLUSH_ACCESS_GLOBAL (1u << 8)            /* IBV_ACCESS_FLUSH_GLOBAL */
#define FLUSH_ACCESS_PERSISTENT (1u << 9)        /* IBV_ACCESS_FLUSH_PERSISTENT */
#define FLUSH_WR_OPCODE 14                       /* IBV_WR_FLUSH */
#define FLUSH_WC_OPCODE 8                        /* IBV_WC_FLUSH */
#define FLUSH_SEND_OPS (1ull << 11)              /* IBV_QP_EX_WITH_FLUSH */
#define FLUSH_TYPE_GLOBAL 1                      /* IBV_FLUSH_GLOBAL */
#define FLUSH_LEVEL_RANGE 0                      /* IBV_FLUSH_RANGE */
#define DEVICE_FLUSH_GLOBAL (1ull << 38)         /* IB_UVERBS_DEVICE_FLUSH_GLOBAL */
#define DEVICE_FLUSH_PERSISTENT (1ull << 39)     /* IB_UVERBS_DEVICE_FLUSH_PERSISTENT */
#define DEVICE_ATOMIC_WRITE (1ull << 40)         /* IB_UVERBS_DEVICE_ATOMIC_WRITE */
struct qp_ex_45 {
  struct ibv_qp_ex ex;
  void (*wr_flush)(struct ibv_qp_ex *qp, uint32_t rkey, uint64_t remote_addr, size_t len, uint8_t type,
                   uint8_t level);
};

struct side {
  struct ibv_context *context;
  struct ibv_pd *pd;
  struct ibv_cq_ex *cq;
  struct ibv_qp *qp;
  struct ibv_mr *mr;
  unsigned char *buffer;
  union ibv_gid gid;
};

static void open_side(struct side *side, const char *name) {
  side->context = open_device(name);
  side->pd = ibv_alloc_pd(side->context);
  side->buffer = static_cast<unsigned char *>(calloc(1, BUFFER_BYTES));
  if (!side->pd || !side->buffer) fail("ibv_alloc_pd");
  side->mr = ibv_reg_mr(side->pd, side->buffer, BUFFER_BYTES,
                        IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                            IBV_ACCESS_REMOTE_ATOMIC);
  if (!side->mr) fail("ibv_reg_mr");
  struct ibv_cq_init_attr_ex cq_attr = {};
  cq_attr.cqe = 16;
  cq_attr.wc_flags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_QP_NUM;
  side->cq = ibv_create_cq_ex(side->context, &cq_attr);
  if (!side->cq) fail("ibv_create_cq_ex");
  struct ibv_qp_init_attr_ex qp_attr = qp_init_attr(side->pd, ibv_cq_ex_to_cq(side->cq), IBV_QPT_RC);
  qp_attr.cap.max_inline_data = 64;
  qp_attr.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  qp_attr.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_SEND |
                           IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
                           IBV_QP_EX_WITH_ATOMIC_WRITE | FLUSH_SEND_OPS;
  side->qp = ibv_create_qp_ex(side->context, &qp_attr);
  if (!side->qp) fail("ibv_create_qp_ex");
  if (ibv_query_gid(side->context, 1, 0, &side->gid)) fail("ibv_query_gid");
}

/* rxe's responder wants the QP to grant FLUSH of the placement type too, not only the MR. */
#define QP_ACCESS (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC | FLUSH_ACCESS_GLOBAL)

/* Waits (at most 30 s) for `count` completions on the extended CQ; checks each succeeded. */
static void expect_completions(struct side *side, int count, const char *what) {
  time_t give_up = time(NULL) + 30;
  struct ibv_poll_cq_attr poll_attr = {};
  int seen = 0;
  while (seen < count) {
    if (time(NULL) > give_up) fail(what);
    if (ibv_start_poll(side->cq, &poll_attr) != 0) continue;
    do {
      if (side->cq->status != IBV_WC_SUCCESS) {
        fprintf(stderr, "wr_api_check: %s: wr_id %llu: %s\n", what, (unsigned long long)side->cq->wr_id,
                ibv_wc_status_str(side->cq->status));
        exit(1);
      }
      if (ibv_wc_read_qp_num(side->cq) != side->qp->qp_num) fail("completion of another QP");
      ++seen;
    } while (seen < count && ibv_next_poll(side->cq) == 0);
    ibv_end_poll(side->cq);
  }
}

/* Waits (at most 30 s) for the next completion and checks its wr_id, status and opcode. */
static void expect_one(struct side *side, uint64_t wr_id, enum ibv_wc_status status, int opcode, const char *what) {
  time_t give_up = time(NULL) + 30;
  struct ibv_poll_cq_attr poll_attr = {};
  while (ibv_start_poll(side->cq, &poll_attr) != 0)
    if (time(NULL) > give_up) fail(what);
  const bool ok = side->cq->wr_id == wr_id && side->cq->status == status &&
                  (status != IBV_WC_SUCCESS || (int)ibv_wc_read_opcode(side->cq) == opcode);
  if (!ok)
    fprintf(stderr, "wr_api_check: %s: wr_id %llu: %s, opcode %d\n", what, (unsigned long long)side->cq->wr_id,
            ibv_wc_status_str(side->cq->status), (int)ibv_wc_read_opcode(side->cq));
  ibv_end_poll(side->cq);
  if (!ok) exit(1);
}

/* The device offers ATOMIC_WRITE and FLUSH of the global placement type, not the persistent
 * one, and registering for a persistent FLUSH is refused as the kernel refuses an MR access
 * bit the device does not offer (EOPNOTSUPP). */
static void check_placement_caps(struct side *side) {
  struct ibv_device_attr_ex attr = {};
  if (ibv_query_device_ex(side->context, NULL, &attr)) fail("ibv_query_device_ex");
  if (!(attr.device_cap_flags_ex & DEVICE_FLUSH_GLOBAL) || !(attr.device_cap_flags_ex & DEVICE_ATOMIC_WRITE) ||
      (attr.device_cap_flags_ex & DEVICE_FLUSH_PERSISTENT))
    fail("device_cap_flags_ex: FLUSH_GLOBAL and ATOMIC_WRITE expected, FLUSH_PERSISTENT not");
  struct ibv_mr *mr = ibv_reg_mr(side->pd, side->buffer, 4096, IBV_ACCESS_LOCAL_WRITE | FLUSH_ACCESS_PERSISTENT);
  if (mr || errno != EOPNOTSUPP) fail("ibv_reg_mr with IBV_ACCESS_FLUSH_PERSISTENT: EOPNOTSUPP expected");
}

/* ATOMIC_WRITE and FLUSH into a region of B registered for them, then a FLUSH into B's
 * first region, registered without IBV_ACCESS_FLUSH_GLOBAL: a remote access error (rxe:
 * lookup_mr fails, RESPST_ERR_RKEY_VIOLATION, NAK remote access error). */
static void check_placement(struct side *a, struct side *b) {
  check_placement_caps(a);
  unsigned char *placed = static_cast<unsigned char *>(aligned_alloc(64, 64));
  if (!placed) fail("aligned_alloc");
  memset(placed, 0, 64);
  struct ibv_mr *flushable =
      ibv_reg_mr(b->pd, placed, 64, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | FLUSH_ACCESS_GLOBAL);
  if (!flushable) fail("ibv_reg_mr with IBV_ACCESS_FLUSH_GLOBAL");
  struct ibv_qp_ex *qpx = ibv_qp_to_qp_ex(a->qp);
  struct qp_ex_45 *qpx45 = (struct qp_ex_45 *)qpx;
  const unsigned char value[8] = {0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88};
  ibv_wr_start(qpx);
  qpx->wr_flags = IBV_SEND_SIGNALED;
  qpx->wr_id = 6;
  ibv_wr_atomic_write(qpx, flushable->rkey, (uintptr_t)(placed + 16), value);
  qpx->wr_id = 7;
  qpx45->wr_flush(qpx, flushable->rkey, (uintptr_t)placed, 64, FLUSH_TYPE_GLOBAL, FLUSH_LEVEL_RANGE);
  if (ibv_wr_complete(qpx)) fail("ibv_wr_complete (ATOMIC_WRITE, FLUSH)");
  expect_one(a, 6, IBV_WC_SUCCESS, IBV_WC_ATOMIC_WRITE, "ATOMIC_WRITE");
  expect_one(a, 7, IBV_WC_SUCCESS, FLUSH_WC_OPCODE, "FLUSH");
  if (memcmp(placed + 16, value, 8) != 0) fail("ATOMIC_WRITE: B's memory differs");
  for (int i = 0; i < 64; ++i)
    if ((i < 16 || i >= 24) && placed[i] != 0) fail("ATOMIC_WRITE wrote outside its 8 bytes");

  ibv_wr_start(qpx);
  qpx->wr_id = 8;
  qpx45->wr_flush(qpx, b->mr->rkey, (uintptr_t)b->buffer, 64, FLUSH_TYPE_GLOBAL, FLUSH_LEVEL_RANGE);
  if (ibv_wr_complete(qpx)) fail("ibv_wr_complete (refused FLUSH)");
  expect_one(a, 8, IBV_WC_REM_ACCESS_ERR, FLUSH_WC_OPCODE, "FLUSH without IBV_ACCESS_FLUSH_GLOBAL");
  ibv_dereg_mr(flushable);
  free(placed);
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: wr_api_check DEVICE_A DEVICE_B\n");
    return 2;
  }
  struct side a = {}, b = {};
  open_side(&a, argv[1]);
  open_side(&b, argv[2]);
  connect_qp(a.qp, &b.gid, b.qp->qp_num, QP_ACCESS);
  connect_qp(b.qp, &a.gid, a.qp->qp_num, QP_ACCESS);
  for (int i = 0; i < 4096; ++i) a.buffer[i] = (unsigned char)(i * 7 + 1);
  for (int i = 0; i < 1024; ++i) b.buffer[4096 + i] = (unsigned char)(255 - i);
  uint64_t counter = 40, swap_target = 5;
  memcpy(b.buffer + 6000, &counter, 8);
  memcpy(b.buffer + 6008, &swap_target, 8);

  struct ibv_sge recv_sge = {(uintptr_t)(b.buffer + 7000), 64, b.mr->lkey};
  struct ibv_recv_wr recv = {}, *bad_recv;
  recv.wr_id = 99;
  recv.sg_list = &recv_sge;
  recv.num_sge = 1;
  if (ibv_post_recv(b.qp, &recv, &bad_recv)) fail("ibv_post_recv");

  struct ibv_qp_ex *qpx = ibv_qp_to_qp_ex(a.qp);
  if (!qpx) fail("ibv_qp_to_qp_ex");
  uint64_t remote = (uintptr_t)b.buffer;
  const char message[] = "sent inline through ibv_wr_set_inline_data";
  ibv_wr_start(qpx);
  qpx->wr_flags = IBV_SEND_SIGNALED;
  qpx->wr_id = 1;
  ibv_wr_rdma_write(qpx, b.mr->rkey, remote);
  ibv_wr_set_sge(qpx, a.mr->lkey, (uintptr_t)a.buffer, 4096);
  qpx->wr_id = 2;
  ibv_wr_rdma_read(qpx, b.mr->rkey, remote + 4096);
  ibv_wr_set_sge(qpx, a.mr->lkey, (uintptr_t)(a.buffer + 4096), 1024);
  qpx->wr_id = 3;
  ibv_wr_atomic_fetch_add(qpx, b.mr->rkey, remote + 6000, 2);
  ibv_wr_set_sge(qpx, a.mr->lkey, (uintptr_t)(a.buffer + 6000), 8);
  qpx->wr_id = 4;
  ibv_wr_atomic_cmp_swp(qpx, b.mr->rkey, remote + 6008, 5, 77);
  ibv_wr_set_sge(qpx, a.mr->lkey, (uintptr_t)(a.buffer + 6008), 8);
  qpx->wr_id = 5;
  ibv_wr_send(qpx);
  ibv_wr_set_inline_data(qpx, (void *)message, sizeof message);
  if (ibv_wr_complete(qpx)) fail("ibv_wr_complete");

  expect_completions(&a, 5, "A's five requests");
  expect_completions(&b, 1, "B's receive");

  if (memcmp(b.buffer, a.buffer, 4096) != 0) fail("WRITE: B's memory differs");
  for (int i = 0; i < 1024; ++i)
    if (a.buffer[4096 + i] != (unsigned char)(255 - i)) fail("READ: A's memory differs");
  uint64_t old_counter, old_swap;
  memcpy(&old_counter, a.buffer + 6000, 8);
  memcpy(&old_swap, a.buffer + 6008, 8);
  memcpy(&counter, b.buffer + 6000, 8);
  memcpy(&swap_target, b.buffer + 6008, 8);
  if (old_counter != 40 || counter != 42) fail("FETCH_ADD");
  if (old_swap != 5 || swap_target != 77) fail("CMP_SWAP");
  if (memcmp(b.buffer + 7000, message, sizeof message) != 0) fail("SEND: B received other bytes");
  check_placement(&a, &b);

  ibv_destroy_qp(a.qp);
  ibv_destroy_qp(b.qp);
  ibv_destroy_cq(ibv_cq_ex_to_cq(a.cq));
  ibv_destroy_cq(ibv_cq_ex_to_cq(b.cq));
  ibv_dereg_mr(a.mr);
  ibv_dereg_mr(b.mr);
  ibv_dealloc_pd(a.pd);
  ibv_dealloc_pd(b.pd);
  ibv_close_device(a.context);
  ibv_close_device(b.context);
  printf("ok: WRITE 4096 B, READ 1024 B, FETCH_ADD, CMP_SWAP, inline SEND, ATOMIC_WRITE, FLUSH through ibv_wr_*;"
         " FLUSH without the MR's flush access: remote access error\n");
  return 0;
}
