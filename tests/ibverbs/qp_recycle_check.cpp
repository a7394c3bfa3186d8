/* An ordinary libibverbs program (built against the system's libibverbs, run over ours by
 * `rrdma-vnic exec`) for issue 27: a QP that failed, brought back through RESET, must work
 * again. Between two devices in one process (A sends, B receives), for RC, UC and UD, and for
 * each of two ways to fail B's receive WQE:
 *   - SEND A -> B succeeds;
 *   - B posts a receive WQE naming its MR, then re-registers the MR (a new address with
 *     IBV_REREG_MR_CHANGE_TRANSLATION, or a new PD), and A SENDs: B's WQE completes in error
 *     and B goes to ERR; an RC requester learns it (IBV_WC_REM_OP_ERR) and goes to ERR too;
 *   - both QPs go RESET -> INIT -> RTR -> RTS with the same attributes (once after polling
 *     B's error and flush, once leaving them and A's flushed receive in the CQs, as pyverbs'
 *     test_mr_rereg_pd does): the CQs hold nothing of the QPs' past, and SENDs from A
 *     complete with success at both ends, with nothing flushed.
 * Also: modify_qp to INIT accepts qp_access_flags carrying bits that only mean something to an
 * MR (every IBV_ACCESS_* of verbs.h), as the kernel does.
 *   qp_recycle_check DEVICE_A DEVICE_B      exit 0 and "ok" when everything checked out */
#include <cstdlib>
#include <ctime>

#define CHECK_PROGRAM "qp_recycle_check"
#include "check_common.h"

#define MESSAGE 64
#define UD_GRH 40

struct side {
  struct ibv_context *context;
  struct ibv_pd *pd;
  struct ibv_cq *cq;
  union ibv_gid gid;
};

static void open_side(struct side *side, const char *name) {
  side->context = open_device(name);
  side->pd = ibv_alloc_pd(side->context);
  side->cq = ibv_create_cq(side->context, 64, NULL, NULL, 0);
  check(side->pd && side->cq, "ibv_alloc_pd / ibv_create_cq");
  check(ibv_query_gid(side->context, 1, 0, &side->gid) == 0, "ibv_query_gid");
}

static struct ibv_qp *create_qp(struct side *side, enum ibv_qp_type type) {
  struct ibv_qp_init_attr_ex attr = qp_init_attr(side->pd, side->cq, type);
  struct ibv_qp *qp = ibv_create_qp_ex(side->context, &attr);
  check(qp != NULL, "ibv_create_qp_ex");
  return qp;
}

static void to_reset(struct ibv_qp *qp) {
  struct ibv_qp_attr attr = {};
  attr.qp_state = IBV_QPS_RESET;
  check(ibv_modify_qp(qp, &attr, IBV_QP_STATE) == 0, "modify to RESET");
}

static enum ibv_qp_state state_of(struct ibv_qp *qp) {
  struct ibv_qp_attr attr = {};
  struct ibv_qp_init_attr init = {};
  check(ibv_query_qp(qp, &attr, IBV_QP_STATE, &init) == 0, "ibv_query_qp");
  return attr.qp_state;
}

/* One test case's QPs and memory. */
struct pair {
  struct side *a, *b;
  struct ibv_qp *qa, *qb;
  struct ibv_ah *ah; /* UD: A's path to B */
  unsigned char *message;
  struct ibv_mr *source;
};

static void connect_pair(struct pair *p) {
  connect_qp(p->qa, &p->b->gid, p->qb->qp_num, IBV_ACCESS_REMOTE_WRITE);
  connect_qp(p->qb, &p->a->gid, p->qa->qp_num, IBV_ACCESS_REMOTE_WRITE);
}

static void post_recv_on(struct ibv_qp *qp, uint64_t wr_id, void *address, uint32_t lkey) {
  struct ibv_sge sge = {(uint64_t)(uintptr_t)address, MESSAGE + UD_GRH, lkey};
  struct ibv_recv_wr wr = {};
  wr.wr_id = wr_id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  struct ibv_recv_wr *bad = NULL;
  check(ibv_post_recv(qp, &wr, &bad) == 0, "ibv_post_recv");
}

static void post_recv(struct pair *p, uint64_t wr_id, void *address, uint32_t lkey) {
  post_recv_on(p->qb, wr_id, address, lkey);
}

static void post_send(struct pair *p, uint64_t wr_id) {
  struct ibv_sge sge = {(uint64_t)(uintptr_t)p->message, MESSAGE, p->source->lkey};
  struct ibv_send_wr wr = {};
  wr.wr_id = wr_id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  if (p->qa->qp_type == IBV_QPT_UD) {
    wr.wr.ud.ah = p->ah;
    wr.wr.ud.remote_qpn = p->qb->qp_num;
    wr.wr.ud.remote_qkey = CHECK_UD_QKEY;
  }
  struct ibv_send_wr *bad = NULL;
  check(ibv_post_send(p->qa, &wr, &bad) == 0, "ibv_post_send");
}

/* The next completion of `qp` (A's and B's CQs are their own: one QP each at a time). */
static struct ibv_wc completion_of(struct ibv_qp *qp, uint64_t wr_id, const char *what) {
  struct ibv_wc wc = next_completion(qp->send_cq, what);
  if (wc.wr_id != wr_id || wc.qp_num != qp->qp_num) {
    fprintf(stderr, CHECK_PROGRAM ": %s: wr_id %llu (expected %llu), status %s\n", what,
            (unsigned long long)wc.wr_id, (unsigned long long)wr_id, ibv_wc_status_str(wc.status));
    exit(1);
  }
  return wc;
}

static void expect_status(struct ibv_qp *qp, uint64_t wr_id, enum ibv_wc_status status, const char *what) {
  struct ibv_wc wc = completion_of(qp, wr_id, what);
  if (wc.status != status) {
    fprintf(stderr, CHECK_PROGRAM ": %s: status %s, expected %s\n", what, ibv_wc_status_str(wc.status),
            ibv_wc_status_str(status));
    exit(1);
  }
}

static void expect_nothing_more(struct ibv_cq *cq, const char *what) {
  struct ibv_wc wc;
  int n = ibv_poll_cq(cq, 1, &wc);
  if (n != 0) {
    fprintf(stderr, CHECK_PROGRAM ": %s: an extra completion (wr_id %llu, %s)\n", what,
            (unsigned long long)wc.wr_id, n > 0 ? ibv_wc_status_str(wc.status) : "poll failed");
    exit(1);
  }
}

/* A SEND that lands in `landed` and succeeds at both ends. */
static void send_ok(struct pair *p, uint64_t wr_id, unsigned char *landed, uint32_t lkey, const char *what) {
  memset(landed, 0, MESSAGE + UD_GRH);
  fill(p->message, MESSAGE, (unsigned)wr_id);
  post_recv(p, wr_id, landed, lkey);
  post_send(p, wr_id);
  expect_status(p->qa, wr_id, IBV_WC_SUCCESS, what);
  expect_status(p->qb, wr_id, IBV_WC_SUCCESS, what);
  const size_t grh = p->qb->qp_type == IBV_QPT_UD ? UD_GRH : 0;
  check(memcmp(landed + grh, p->message, MESSAGE) == 0, what);
}

static void check_recycle(struct side *a, struct side *b, enum ibv_qp_type type, int how) {
  struct pair p = {};
  p.a = a;
  p.b = b;
  p.qa = create_qp(a, type);
  p.qb = create_qp(b, type);
  p.message = (unsigned char *)aligned_alloc(4096, 4096);
  unsigned char *landing = (unsigned char *)aligned_alloc(4096, 4096);
  unsigned char *moved = (unsigned char *)aligned_alloc(4096, 4096);
  check(p.message && landing && moved, "aligned_alloc");
  p.source = ibv_reg_mr(a->pd, p.message, 4096, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *target = ibv_reg_mr(b->pd, landing, 4096, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_pd *pd2 = ibv_alloc_pd(b->context);
  check(p.source && target && pd2, "ibv_reg_mr / ibv_alloc_pd");
  if (type == IBV_QPT_UD) {
    struct ibv_ah_attr ah = {};
    ah.is_global = 1;
    ah.grh.dgid = b->gid;
    ah.grh.hop_limit = 64;
    ah.port_num = 1;
    p.ah = ibv_create_ah(a->pd, &ah);
    check(p.ah != NULL, "ibv_create_ah");
  }
  connect_pair(&p);
  send_ok(&p, 1, landing, target->lkey, "the first SEND");

  /* Receive WQEs name the region, which then moves or leaves the QP's PD; A has a receive
   * posted too, as a ping-pong has (pyverbs' traffic()). */
  post_recv(&p, 2, landing, target->lkey);
  post_recv(&p, 3, landing, target->lkey);
  post_recv_on(p.qa, 100, p.message + 2048, p.source->lkey);
  if (how == IBV_REREG_MR_CHANGE_TRANSLATION)
    check(ibv_rereg_mr(target, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, moved, 4096, 0) == 0, "rereg translation");
  else
    check(ibv_rereg_mr(target, IBV_REREG_MR_CHANGE_PD, pd2, NULL, 0, 0) == 0, "rereg PD");
  post_send(&p, 2);
  expect_status(p.qa, 2, type == IBV_QPT_RC ? IBV_WC_REM_OP_ERR : IBV_WC_SUCCESS, "the SEND into it");
  /* B's WQE completes in error (a local protection error here; rxe says LOC_QP_OP_ERR) and
   * B goes to ERR for every transport, flushing the other WQE. */
  time_t give_up = time(NULL) + 30;
  while (state_of(p.qb) != IBV_QPS_ERR) check(time(NULL) <= give_up, "the receiver goes to ERR");
  check(state_of(p.qa) == (type == IBV_QPT_RC ? IBV_QPS_ERR : IBV_QPS_RTS), "the sender's state after it");
  if (how == IBV_REREG_MR_CHANGE_TRANSLATION) {
    /* Once, the receiver's completions are looked at; the other time they are left in the CQ
     * with A's flushed receive, as a program that stops at the first error leaves them. */
    struct ibv_wc wc = completion_of(p.qb, 2, "the receive into the re-registered MR");
    check(wc.status != IBV_WC_SUCCESS && wc.status != IBV_WC_WR_FLUSH_ERR, "that receive failed, not flushed");
    expect_status(p.qb, 3, IBV_WC_WR_FLUSH_ERR, "the receive behind it");
  }

  /* Recycled with the same attributes, B's receive posted in INIT (INIT -> INIT is legal, so
   * connect_qp can start from there): what the CQs held of the QPs' past is gone (as
   * hardware providers clean their CQs at RESET), new work succeeds, nothing is flushed. */
  unsigned char *now = how == IBV_REREG_MR_CHANGE_TRANSLATION ? moved : landing;
  if (how == IBV_REREG_MR_CHANGE_PD)
    check(ibv_rereg_mr(target, IBV_REREG_MR_CHANGE_PD, b->pd, NULL, 0, 0) == 0, "rereg back to the QP's PD");
  to_reset(p.qa);
  to_reset(p.qb);
  struct ibv_qp_attr init = {};
  init.qp_state = IBV_QPS_INIT;
  init.port_num = 1;
  init.qkey = CHECK_UD_QKEY;
  init.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
  check(ibv_modify_qp(p.qb, &init, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                       (type == IBV_QPT_UD ? IBV_QP_QKEY : IBV_QP_ACCESS_FLAGS)) == 0,
        "B to INIT");
  memset(now, 0, MESSAGE + UD_GRH);
  post_recv(&p, 4, now, target->lkey);
  connect_pair(&p);
  expect_nothing_more(a->cq, "after the recycle (A)");
  expect_nothing_more(b->cq, "after the recycle (B)");
  fill(p.message, MESSAGE, 4);
  post_send(&p, 4);
  expect_status(p.qa, 4, IBV_WC_SUCCESS, "the SEND after the recycle");
  expect_status(p.qb, 4, IBV_WC_SUCCESS, "the receive after the recycle");
  check(memcmp(now + (type == IBV_QPT_UD ? UD_GRH : 0), p.message, MESSAGE) == 0, "the data after the recycle");
  send_ok(&p, 5, now, target->lkey, "the second SEND after the recycle");
  expect_nothing_more(a->cq, "at the end (A)");
  expect_nothing_more(b->cq, "at the end (B)");
  check(state_of(p.qa) == IBV_QPS_RTS && state_of(p.qb) == IBV_QPS_RTS, "both in RTS at the end");

  check(ibv_destroy_qp(p.qa) == 0 && ibv_destroy_qp(p.qb) == 0, "ibv_destroy_qp");
  if (p.ah) check(ibv_destroy_ah(p.ah) == 0, "ibv_destroy_ah");
  check(ibv_dereg_mr(p.source) == 0 && ibv_dereg_mr(target) == 0 && ibv_dealloc_pd(pd2) == 0, "teardown");
  free(p.message);
  free(landing);
  free(moved);
}

/* Every IBV_ACCESS_* bit of verbs.h, alone, in qp_access_flags at RESET -> INIT. */
static void check_access_bits(struct side *a) {
  static const unsigned bits[] = {
      IBV_ACCESS_LOCAL_WRITE, IBV_ACCESS_REMOTE_WRITE, IBV_ACCESS_REMOTE_READ, IBV_ACCESS_REMOTE_ATOMIC,
      IBV_ACCESS_MW_BIND,     IBV_ACCESS_ZERO_BASED,   IBV_ACCESS_ON_DEMAND,   IBV_ACCESS_HUGETLB,
      1u << 8 /* IBV_ACCESS_FLUSH_GLOBAL, rdma-core 45 */, 1u << 9 /* IBV_ACCESS_FLUSH_PERSISTENT */,
      IBV_ACCESS_RELAXED_ORDERING};
  enum ibv_qp_type types[] = {IBV_QPT_RC, IBV_QPT_UC};
  for (enum ibv_qp_type type : types) {
    for (unsigned bit : bits) {
      struct ibv_qp *qp = create_qp(a, type);
      struct ibv_qp_attr attr = {};
      attr.qp_state = IBV_QPS_INIT;
      attr.port_num = 1;
      attr.qp_access_flags = bit;
      if (ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) != 0) {
        fprintf(stderr, CHECK_PROGRAM ": modify to INIT refused qp_access_flags 0x%x (%s)\n", bit,
                type == IBV_QPT_RC ? "RC" : "UC");
        exit(1);
      }
      check(ibv_destroy_qp(qp) == 0, "ibv_destroy_qp");
    }
  }
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: qp_recycle_check DEVICE_A DEVICE_B\n");
    return 2;
  }
  struct side a = {}, b = {};
  open_side(&a, argv[1]);
  open_side(&b, argv[2]);
  check_access_bits(&a);
  enum ibv_qp_type types[] = {IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD};
  int hows[] = {IBV_REREG_MR_CHANGE_TRANSLATION, IBV_REREG_MR_CHANGE_PD};
  for (enum ibv_qp_type type : types)
    for (int how : hows) check_recycle(&a, &b, type, how);
  struct side *sides[] = {&a, &b};
  for (struct side *s : sides) {
    check(ibv_destroy_cq(s->cq) == 0 && ibv_dealloc_pd(s->pd) == 0, "teardown");
    check(ibv_close_device(s->context) == 0, "ibv_close_device");
  }
  printf("ok: RC, UC and UD QPs failed by a re-registered MR (new address, new PD) work again after "
         "RESET -> INIT -> RTR -> RTS; every IBV_ACCESS_* bit accepted at INIT\n");
  return 0;
}
