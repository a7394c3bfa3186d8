/* An ordinary libibverbs program (built against the system's libibverbs, run over ours by
 * `rrdma-vnic exec`) for memory windows, between two devices in one process: A owns the
 * memory and binds windows to it, B is the remote peer that reads and writes through them.
 *   - the device claims IBV_DEVICE_MEM_WINDOW and type 2B windows, and a max_mw;
 *   - type 1: ibv_bind_mw (mw->rkey takes ibv_inc_rkey's key), B WRITEs and READs through the
 *     window's R_Key (memory checked), the old key and a range outside the window fail with
 *     IBV_WC_REM_ACCESS_ERR, a zero-length bind unbinds, LOCAL_INV of a type 1 window fails;
 *   - type 2: IBV_WR_BIND_MW by ibv_post_send and by ibv_wr_bind_mw, LOCAL_INV by
 *     ibv_post_send and ibv_wr_local_inv, remote invalidation by B's SEND with Invalidate
 *     (IBV_WC_WITH_INV and invalidated_rkey on A's receive), B's next access failing with the
 *     remote access error each time; the window used through another QP than the one that
 *     bound it fails too;
 *   - errors: a region without MW_BIND (IBV_WC_MW_BIND_ERR), a second bind of a bound type 2
 *     window, ibv_dereg_mr of a region with windows bound (EINVAL), ibv_dealloc_pd with a
 *     window (EBUSY), ibv_bind_mw on a type 2 window and a zero-based type 1 bind (EINVAL),
 *     remote invalidation of a type 1 window (IBV_WC_REM_INV_REQ_ERR).
 *   mw_check DEVICE_A DEVICE_B      exit 0 and "ok" when everything checked out */
#define CHECK_PROGRAM "mw_check"
#include "check_common.h"

#define RIGHTS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)
#define WINDOW_RIGHTS (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)

struct side {
  struct ibv_context *context;
  struct ibv_pd *pd;
  union ibv_gid gid;
};

/* One RC connection: A's QP (an ibv_qp_ex, for ibv_wr_*) and B's, each with its own CQ, so
 * that what one case leaves in error does not reach the next. */
struct pair {
  struct ibv_cq *cq_a, *cq_b;
  struct ibv_qp *qa, *qb;
};

static void open_side(struct side *side, const char *name) {
  side->context = open_device(name);
  side->pd = ibv_alloc_pd(side->context);
  check(side->pd != NULL, "ibv_alloc_pd");
  check(ibv_query_gid(side->context, 1, 0, &side->gid) == 0, "ibv_query_gid");
}

static struct ibv_qp *create_qp(struct side *side, struct ibv_cq *cq) {
  struct ibv_qp_init_attr_ex attr = qp_init_attr(side->pd, cq, IBV_QPT_RC);
  attr.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  attr.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_INV | IBV_QP_EX_WITH_RDMA_WRITE |
                        IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_LOCAL_INV;
  struct ibv_qp *qp = ibv_create_qp_ex(side->context, &attr);
  check(qp != NULL, "ibv_create_qp_ex");
  return qp;
}

static struct pair make_pair(struct side *a, struct side *b) {
  struct pair p;
  p.cq_a = ibv_create_cq(a->context, 64, NULL, NULL, 0);
  p.cq_b = ibv_create_cq(b->context, 64, NULL, NULL, 0);
  check(p.cq_a && p.cq_b, "ibv_create_cq");
  p.qa = create_qp(a, p.cq_a);
  p.qb = create_qp(b, p.cq_b);
  connect_qp(p.qa, &b->gid, p.qb->qp_num, WINDOW_RIGHTS);
  connect_qp(p.qb, &a->gid, p.qa->qp_num, WINDOW_RIGHTS);
  return p;
}

static void drop_pair(struct pair *p) {
  check(ibv_destroy_qp(p->qa) == 0 && ibv_destroy_qp(p->qb) == 0, "ibv_destroy_qp");
  check(ibv_destroy_cq(p->cq_a) == 0 && ibv_destroy_cq(p->cq_b) == 0, "ibv_destroy_cq");
}

static void expect(struct ibv_cq *cq, enum ibv_wc_status status, enum ibv_wc_opcode opcode, const char *what) {
  struct ibv_wc wc = next_completion(cq, what);
  if (wc.status != status || (status == IBV_WC_SUCCESS && wc.opcode != opcode)) {
    fprintf(stderr, "mw_check: %s: %s, opcode %d (wanted %s, opcode %d)\n", what, ibv_wc_status_str(wc.status),
            wc.opcode, ibv_wc_status_str(status), opcode);
    exit(1);
  }
}

/* B's signaled RDMA WRITE or READ of `length` bytes at `remote` through `rkey`: its status. */
static enum ibv_wc_status rdma(struct pair *p, enum ibv_wr_opcode opcode, void *local, uint32_t length,
                               uint32_t lkey, uint64_t remote, uint32_t rkey, const char *what) {
  struct ibv_sge sge = {(uint64_t)(uintptr_t)local, length, lkey};
  struct ibv_send_wr wr = {}, *bad;
  wr.wr_id = 2;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = opcode;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = remote;
  wr.wr.rdma.rkey = rkey;
  check(ibv_post_send(p->qb, &wr, &bad) == 0, what);
  return next_completion(p->cq_b, what).status;
}

/* A's IBV_WR_BIND_MW or IBV_WR_LOCAL_INV through ibv_post_send, signaled. */
static void post_bind(struct ibv_qp *qp, struct ibv_mw *mw, uint32_t rkey, struct ibv_mr *mr, void *addr,
                      uint64_t length, unsigned access) {
  struct ibv_send_wr wr = {}, *bad;
  wr.wr_id = 3;
  wr.opcode = IBV_WR_BIND_MW;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.bind_mw.mw = mw;
  wr.bind_mw.rkey = rkey;
  wr.bind_mw.bind_info.mr = mr;
  wr.bind_mw.bind_info.addr = (uint64_t)(uintptr_t)addr;
  wr.bind_mw.bind_info.length = length;
  wr.bind_mw.bind_info.mw_access_flags = access;
  check(ibv_post_send(qp, &wr, &bad) == 0, "ibv_post_send BIND_MW");
}

static void post_local_inv(struct ibv_qp *qp, uint32_t rkey) {
  struct ibv_send_wr wr = {}, *bad;
  wr.wr_id = 4;
  wr.opcode = IBV_WR_LOCAL_INV;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.invalidate_rkey = rkey;
  check(ibv_post_send(qp, &wr, &bad) == 0, "ibv_post_send LOCAL_INV");
}

static int type1_bind(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mr *mr, void *addr, uint64_t length,
                      unsigned access) {
  struct ibv_mw_bind bind = {};
  bind.wr_id = 5;
  bind.send_flags = IBV_SEND_SIGNALED;
  bind.bind_info.mr = mr;
  bind.bind_info.addr = (uint64_t)(uintptr_t)addr;
  bind.bind_info.length = length;
  bind.bind_info.mw_access_flags = access;
  return ibv_bind_mw(qp, mw, &bind);
}

struct memory {
  unsigned char *a;   /* 64 KiB of A's, behind mr_a (MW_BIND) and mr_plain (no MW_BIND) */
  unsigned char *b;   /* 16 KiB of B's */
  struct ibv_mr *mr_a, *mr_plain, *mr_b;
};

/* B writes 4 KiB through `rkey` at `at`, reads them back, and both copies are checked. */
static void write_and_read(struct pair *p, struct memory *m, unsigned char *at, uint32_t rkey, unsigned seed,
                           const char *what) {
  fill(m->b, 4 * KIB, seed);
  memset(at, 0, 4 * KIB);
  check(rdma(p, IBV_WR_RDMA_WRITE, m->b, 4 * KIB, m->mr_b->lkey, (uint64_t)(uintptr_t)at, rkey, what) ==
            IBV_WC_SUCCESS, what);
  check(memcmp(at, m->b, 4 * KIB) == 0, "the WRITE through the window did not land");
  memset(m->b + 8 * KIB, 0, 4 * KIB);
  check(rdma(p, IBV_WR_RDMA_READ, m->b + 8 * KIB, 4 * KIB, m->mr_b->lkey, (uint64_t)(uintptr_t)at, rkey, what) ==
            IBV_WC_SUCCESS, what);
  check(memcmp(m->b + 8 * KIB, at, 4 * KIB) == 0, "the READ through the window read something else");
}

static void refused(struct pair *p, struct memory *m, unsigned char *at, uint32_t rkey, const char *what) {
  enum ibv_wc_status s = rdma(p, IBV_WR_RDMA_WRITE, m->b, 64, m->mr_b->lkey, (uint64_t)(uintptr_t)at, rkey, what);
  if (s != IBV_WC_REM_ACCESS_ERR) {
    fprintf(stderr, "mw_check: %s: %s instead of the remote access error\n", what, ibv_wc_status_str(s));
    exit(1);
  }
}

static void check_type1(struct side *a, struct side *b, struct memory *m) {
  struct ibv_mw *mw = ibv_alloc_mw(a->pd, IBV_MW_TYPE_1);
  check(mw != NULL && mw->type == IBV_MW_TYPE_1, "ibv_alloc_mw type 1");
  struct pair p = make_pair(a, b);
  const uint32_t first = mw->rkey;
  check(type1_bind(p.qa, mw, m->mr_a, m->a + 4 * KIB, 4 * KIB, WINDOW_RIGHTS) == 0, "ibv_bind_mw");
  check(mw->rkey == ibv_inc_rkey(first), "ibv_bind_mw: mw->rkey is the next key");
  expect(p.cq_a, IBV_WC_SUCCESS, IBV_WC_BIND_MW, "type 1 bind completion");
  write_and_read(&p, m, m->a + 4 * KIB, mw->rkey, 1, "type 1 window: WRITE/READ");
  refused(&p, m, m->a + 4 * KIB, first, "type 1 window: the key before the bind");
  drop_pair(&p);
  p = make_pair(a, b);
  refused(&p, m, m->a + 8 * KIB, mw->rkey, "type 1 window: past its range, inside the region");
  drop_pair(&p);

  /* A zero-length bind unbinds; the window's key then opens nothing. */
  p = make_pair(a, b);
  check(type1_bind(p.qa, mw, NULL, NULL, 0, 0) == 0, "ibv_bind_mw zero length");
  expect(p.cq_a, IBV_WC_SUCCESS, IBV_WC_BIND_MW, "type 1 unbind completion");
  refused(&p, m, m->a + 4 * KIB, mw->rkey, "type 1 window after a zero-length bind");
  drop_pair(&p);

  /* Type 1 windows cannot be invalidated (IBA o10-37.2.26): by LOCAL_INV or by the peer. */
  p = make_pair(a, b);
  check(type1_bind(p.qa, mw, m->mr_a, m->a, 4 * KIB, WINDOW_RIGHTS) == 0, "ibv_bind_mw again");
  expect(p.cq_a, IBV_WC_SUCCESS, IBV_WC_BIND_MW, "type 1 rebind completion");
  post_local_inv(p.qa, mw->rkey);
  expect(p.cq_a, IBV_WC_LOC_QP_OP_ERR, IBV_WC_LOCAL_INV, "LOCAL_INV of a type 1 window");
  drop_pair(&p);
  p = make_pair(a, b);
  struct ibv_sge sge = {(uint64_t)(uintptr_t)m->a, 64, m->mr_a->lkey};
  struct ibv_recv_wr recv = {}, *bad_recv;
  recv.sg_list = &sge;
  recv.num_sge = 1;
  check(ibv_post_recv(p.qa, &recv, &bad_recv) == 0, "ibv_post_recv");
  struct ibv_sge send_sge = {(uint64_t)(uintptr_t)m->b, 16, m->mr_b->lkey};
  struct ibv_send_wr send = {}, *bad_send;
  send.sg_list = &send_sge;
  send.num_sge = 1;
  send.opcode = IBV_WR_SEND_WITH_INV;
  send.send_flags = IBV_SEND_SIGNALED;
  send.invalidate_rkey = mw->rkey;
  check(ibv_post_send(p.qb, &send, &bad_send) == 0, "SEND_WITH_INV");
  expect(p.cq_b, IBV_WC_REM_INV_REQ_ERR, IBV_WC_SEND, "SEND with Invalidate of a type 1 window");
  drop_pair(&p);

  /* Errors at post time: ibv_bind_mw is for type 1, and type 1 windows are not zero-based. */
  struct ibv_mw *two = ibv_alloc_mw(a->pd, IBV_MW_TYPE_2);
  check(two != NULL, "ibv_alloc_mw type 2");
  p = make_pair(a, b);
  check(type1_bind(p.qa, two, m->mr_a, m->a, 64, WINDOW_RIGHTS) == EINVAL, "ibv_bind_mw of a type 2 window");
  check(type1_bind(p.qa, mw, m->mr_a, m->a, 64, WINDOW_RIGHTS | IBV_ACCESS_ZERO_BASED) == EINVAL,
        "zero-based type 1 bind");
  /* A region without MW_BIND: the bind completes with the memory-window bind error. */
  check(type1_bind(p.qa, mw, m->mr_plain, m->a + 32 * KIB, 64, WINDOW_RIGHTS) == 0, "ibv_bind_mw (no MW_BIND)");
  expect(p.cq_a, IBV_WC_MW_BIND_ERR, IBV_WC_BIND_MW, "bind to a region without MW_BIND");
  drop_pair(&p);
  check(ibv_dealloc_mw(two) == 0 && ibv_dealloc_mw(mw) == 0, "ibv_dealloc_mw");
}

static void check_type2(struct side *a, struct side *b, struct memory *m) {
  struct ibv_mw *mw = ibv_alloc_mw(a->pd, IBV_MW_TYPE_2);
  check(mw != NULL && mw->type == IBV_MW_TYPE_2, "ibv_alloc_mw type 2");
  struct pair p = make_pair(a, b);
  /* Bound by ibv_post_send: the new key is the program's to keep (mw->rkey is not changed). */
  uint32_t key = ibv_inc_rkey(mw->rkey);
  post_bind(p.qa, mw, key, m->mr_a, m->a + 16 * KIB, 8 * KIB, WINDOW_RIGHTS);
  expect(p.cq_a, IBV_WC_SUCCESS, IBV_WC_BIND_MW, "type 2 bind completion");
  mw->rkey = key;
  write_and_read(&p, m, m->a + 20 * KIB, key, 2, "type 2 window: WRITE/READ");
  /* Local invalidation frees it; B's next access fails. */
  post_local_inv(p.qa, key);
  expect(p.cq_a, IBV_WC_SUCCESS, IBV_WC_LOCAL_INV, "LOCAL_INV completion");
  refused(&p, m, m->a + 20 * KIB, key, "type 2 window after LOCAL_INV");
  drop_pair(&p);

  /* Bound by ibv_wr_bind_mw, invalidated by ibv_wr_local_inv. */
  p = make_pair(a, b);
  struct ibv_qp_ex *qx = ibv_qp_to_qp_ex(p.qa);
  key = ibv_inc_rkey(mw->rkey);
  struct ibv_mw_bind_info info = {m->mr_a, (uint64_t)(uintptr_t)(m->a + 16 * KIB), 8 * KIB, WINDOW_RIGHTS};
  ibv_wr_start(qx);
  qx->wr_id = 6;
  qx->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_bind_mw(qx, mw, key, &info);
  check(ibv_wr_complete(qx) == 0, "ibv_wr_bind_mw");
  expect(p.cq_a, IBV_WC_SUCCESS, IBV_WC_BIND_MW, "ibv_wr_bind_mw completion");
  mw->rkey = key;
  write_and_read(&p, m, m->a + 16 * KIB, key, 3, "type 2 window (ibv_wr_bind_mw): WRITE/READ");
  ibv_wr_start(qx);
  ibv_wr_local_inv(qx, key);
  check(ibv_wr_complete(qx) == 0, "ibv_wr_local_inv");
  expect(p.cq_a, IBV_WC_SUCCESS, IBV_WC_LOCAL_INV, "ibv_wr_local_inv completion");
  refused(&p, m, m->a + 16 * KIB, key, "type 2 window after ibv_wr_local_inv");
  drop_pair(&p);

  /* Remote invalidation: B's SEND with Invalidate names the window's key. */
  p = make_pair(a, b);
  key = ibv_inc_rkey(mw->rkey);
  post_bind(p.qa, mw, key, m->mr_a, m->a + 16 * KIB, 8 * KIB, WINDOW_RIGHTS);
  expect(p.cq_a, IBV_WC_SUCCESS, IBV_WC_BIND_MW, "type 2 bind for remote invalidation");
  mw->rkey = key;
  write_and_read(&p, m, m->a + 16 * KIB, key, 4, "type 2 window before remote invalidation");
  struct ibv_sge sge = {(uint64_t)(uintptr_t)(m->a + 28 * KIB), 64, m->mr_a->lkey};
  struct ibv_recv_wr recv = {}, *bad_recv;
  recv.wr_id = 9;
  recv.sg_list = &sge;
  recv.num_sge = 1;
  check(ibv_post_recv(p.qa, &recv, &bad_recv) == 0, "ibv_post_recv");
  struct ibv_sge send_sge = {(uint64_t)(uintptr_t)m->b, 16, m->mr_b->lkey};
  struct ibv_send_wr send = {}, *bad_send;
  send.sg_list = &send_sge;
  send.num_sge = 1;
  send.opcode = IBV_WR_SEND_WITH_INV;
  send.send_flags = IBV_SEND_SIGNALED;
  send.invalidate_rkey = key;
  check(ibv_post_send(p.qb, &send, &bad_send) == 0, "SEND_WITH_INV");
  expect(p.cq_b, IBV_WC_SUCCESS, IBV_WC_SEND, "SEND with Invalidate");
  struct ibv_wc wc = next_completion(p.cq_a, "the receive of the SEND with Invalidate");
  check(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV && (wc.wc_flags & IBV_WC_WITH_INV) != 0,
        "receive completion without IBV_WC_WITH_INV");
  check(wc.invalidated_rkey == key, "invalidated_rkey is not the window's key");
  refused(&p, m, m->a + 16 * KIB, key, "type 2 window after remote invalidation");
  drop_pair(&p);

  /* A type 2 window is used through the QP that bound it only (rxe_lookup_mw: mw->qp). */
  struct pair binder = make_pair(a, b);
  p = make_pair(a, b);
  key = ibv_inc_rkey(mw->rkey);
  post_bind(binder.qa, mw, key, m->mr_a, m->a + 16 * KIB, 8 * KIB, WINDOW_RIGHTS);
  expect(binder.cq_a, IBV_WC_SUCCESS, IBV_WC_BIND_MW, "type 2 bind through the first QP");
  mw->rkey = key;
  refused(&p, m, m->a + 16 * KIB, key, "type 2 window through another QP");
  write_and_read(&binder, m, m->a + 16 * KIB, key, 5, "type 2 window through its own QP");
  /* A bound type 2 window must be invalidated before it binds again (IBA o10-37.2.30): a
   * second bind fails with the bind error. The region cannot be deregistered meanwhile. */
  post_bind(binder.qa, mw, ibv_inc_rkey(key), m->mr_a, m->a, 64, WINDOW_RIGHTS);
  expect(binder.cq_a, IBV_WC_MW_BIND_ERR, IBV_WC_BIND_MW, "second bind of a bound type 2 window");
  errno = 0;
  check(ibv_dereg_mr(m->mr_a) == EINVAL, "ibv_dereg_mr with a window bound (wanted EINVAL)");
  check(ibv_dealloc_pd(a->pd) == EBUSY, "ibv_dealloc_pd with a window (wanted EBUSY)");
  drop_pair(&p);
  drop_pair(&binder);
  check(ibv_dealloc_mw(mw) == 0, "ibv_dealloc_mw of a bound window");
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: mw_check DEVICE_A DEVICE_B\n");
    return 2;
  }
  struct side a = {}, b = {};
  open_side(&a, argv[1]);
  open_side(&b, argv[2]);
  struct ibv_device_attr attr = {};
  check(ibv_query_device(a.context, &attr) == 0, "ibv_query_device");
  check((attr.device_cap_flags & IBV_DEVICE_MEM_WINDOW) != 0, "no IBV_DEVICE_MEM_WINDOW");
  check((attr.device_cap_flags & (IBV_DEVICE_MEM_WINDOW_TYPE_2A | IBV_DEVICE_MEM_WINDOW_TYPE_2B)) != 0,
        "no type 2 memory windows");
  check(attr.max_mw > 0, "max_mw is 0");

  struct memory m = {};
  m.a = (unsigned char *)aligned_alloc(4096, 64 * KIB);
  m.b = (unsigned char *)aligned_alloc(4096, 16 * KIB);
  check(m.a && m.b, "aligned_alloc");
  memset(m.a, 0, 64 * KIB);
  m.mr_a = ibv_reg_mr(a.pd, m.a, 32 * KIB, RIGHTS | IBV_ACCESS_MW_BIND);
  m.mr_plain = ibv_reg_mr(a.pd, m.a + 32 * KIB, 32 * KIB, RIGHTS);
  m.mr_b = ibv_reg_mr(b.pd, m.b, 16 * KIB, RIGHTS);
  check(m.mr_a && m.mr_plain && m.mr_b, "ibv_reg_mr");

  check_type1(&a, &b, &m);
  check_type2(&a, &b, &m);

  check(ibv_dereg_mr(m.mr_a) == 0 && ibv_dereg_mr(m.mr_plain) == 0 && ibv_dereg_mr(m.mr_b) == 0, "ibv_dereg_mr");
  struct side *sides[] = {&a, &b};
  for (struct side *s : sides) {
    check(ibv_dealloc_pd(s->pd) == 0, "ibv_dealloc_pd");
    check(ibv_close_device(s->context) == 0, "ibv_close_device");
  }
  printf("ok: type 1 and type 2 windows bound, written and read through, invalidated locally and remotely, "
         "and refused where they must be\n");
  return 0;
}
