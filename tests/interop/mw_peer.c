/* Memory windows across the wire (issue 19): one side owns memory and binds windows to it,
 * the other, on another machine, reads, writes and invalidates through them. Run on a vnic
 * (`rrdma-vnic exec`) and in the rxe VM (run-peer --add), each role on each side, so that
 * both our responder and our requester meet rxe's.
 *
 *   mw_peer owner [--dev NAME] [--gid-index N] [--rxe] PORT
 *                                                           listens on TCP PORT
 *   mw_peer user  [--dev NAME] [--gid-index N] HOST PORT   connects to it
 *
 * The owner drives: over the TCP connection it sends the user orders (connect a new RC QP to
 * mine; WRITE, READ or SEND with Invalidate through this R_Key) and gets back the user's
 * completion status. A remote access error leaves both QPs in the error state, so each case
 * that expects one ends its connection and the next case makes a new one. The cases:
 *   type 2 (bound by a BIND_MW work request): WRITE and READ through the window, data checked
 *   in the owner's memory and by the user's hash; SEND with Invalidate (the owner's receive
 *   carries IBV_WC_WITH_INV and the key) and the next WRITE refused; LOCAL_INV and the next
 *   WRITE refused; the window used through another QP than the one that bound it, refused;
 *   a WRITE straddling the window's end, refused with the memory beyond it untouched.
 *   type 1 (ibv_bind_mw): WRITE and READ; SEND with Invalidate of a type 1 window refused
 *   (IBV_WC_REM_INV_REQ_ERR) while the window stays valid for the next connection; a
 *   zero-length bind unbinds it and the next WRITE is refused.
 * --rxe, for Linux rxe (kernel 6.1) as the owner, allows its three known deviations and says so
 * ("rxe: ..." lines): it checks a type 2 window's accesses against its region's range
 * (docs/VERBS_MEMORY.md), so the WRITE across the window's end may land, exactly where aimed;
 * and its receive completion of a SEND with Invalidate carries the kernel's
 * IB_WC_WITH_INVALIDATE bit (1 << 2, which libibverbs calls IBV_WC_IP_CSUM_OK) instead of
 * IBV_WC_WITH_INV (1 << 3): rxe's provider copies the kernel's flags as they are; and it
 * acknowledges a SEND with Invalidate of a type 1 window (the sender sees success) and fails
 * the receive instead (docs/INTEROP.md).
 * Each side prints "PASS NAME" per case and "ok" at the end; it exits 1 at the first
 * failure with "FAIL NAME: why" (and the user, when the owner vanishes, "FAIL: ..."). The
 * user prints "Couldn't connect to HOST:PORT" when the owner is not listening yet, which is
 * what the VM's rrdma-connect retries on. Written in C with libibverbs and libc only: the
 * VM's initramfs has no libstdc++. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#define REGION 16384u /* the owner's registered memory */
#define WINDOW_AT 4096u /* every window covers [WINDOW_AT, WINDOW_AT + WINDOW_LEN) */
#define WINDOW_LEN 4096u
#define FILL 0x5a
#define PSN 100u
#define COMPLETION_SECONDS 30
/* rxe's receive completion flag for a SEND with Invalidate: the kernel's IB_WC_WITH_INVALIDATE. */
#define RXE_WITH_INV (1u << 2)
#define RIGHTS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)

enum op { OP_CONNECT = 1, OP_WRITE, OP_READ, OP_SEND_INV, OP_END };

/* Both ends are x86-64 Linux built from the same source: structs go over TCP as they are. */
struct order {
  uint32_t op;
  uint32_t qpn;    /* OP_CONNECT: the owner's QP */
  uint8_t gid[16]; /* OP_CONNECT: the owner's GID */
  uint64_t addr;   /* WRITE, READ: the remote address */
  uint32_t rkey;   /* WRITE, READ, SEND_INV */
  uint32_t length; /* WRITE, READ */
};
struct reply {
  uint32_t status; /* the user's completion status (ibv_wc_status) */
  uint32_t qpn;    /* OP_CONNECT: the user's new QP */
  uint8_t gid[16];
  uint64_t hash; /* READ: FNV-1a of what was read */
};

struct device {
  struct ibv_context *context;
  struct ibv_pd *pd;
  union ibv_gid gid;
  int gid_index;
};

struct conn {
  struct ibv_cq *cq;
  struct ibv_qp *qp;
};

static const char *current_case = "setup";

_Noreturn static void fail(const char *what) {
  printf("FAIL %s: %s (errno %d: %s)\n", current_case, what, errno, strerror(errno));
  exit(1);
}
static void check(bool ok, const char *what) {
  if (!ok) fail(what);
}

static uint64_t fnv1a(const uint8_t *p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

/* ---------------------------------------------------------------------------------------
 * TCP */

static void send_all(int fd, const void *data, size_t n) {
  const char *p = data;
  while (n > 0) {
    ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    check(k > 0, "the control connection broke while sending");
    p += k;
    n -= (size_t)k;
  }
}
static void recv_all(int fd, void *data, size_t n) {
  char *p = data;
  while (n > 0) {
    ssize_t k = recv(fd, p, n, 0);
    if (k < 0 && errno == EINTR) continue;
    check(k > 0, "the peer closed the control connection");
    p += k;
    n -= (size_t)k;
  }
}

static int listen_once(const char *port) {
  int one = 1, server = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(port))};
  check(server >= 0, "socket");
  setsockopt(server, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  check(bind(server, (struct sockaddr *)&addr, sizeof addr) == 0, "bind");
  check(listen(server, 1) == 0, "listen");
  int fd = accept(server, NULL, NULL);
  check(fd >= 0, "accept");
  close(server);
  return fd;
}

static int connect_to(const char *host, const char *port) {
  struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *found;
  if (getaddrinfo(host, port, &hints, &found) != 0) fail("cannot resolve the owner's host");
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  check(fd >= 0, "socket");
  if (connect(fd, found->ai_addr, found->ai_addrlen) != 0) {
    printf("Couldn't connect to %s:%s\n", host, port);
    exit(1);
  }
  freeaddrinfo(found);
  return fd;
}

/* ---------------------------------------------------------------------------------------
 * Verbs */

static void open_device(struct device *dev, const char *name) {
  int n = 0;
  struct ibv_device **list = ibv_get_device_list(&n);
  check(list != NULL && n > 0, "no RDMA device");
  for (int i = 0; i < n && !dev->context; ++i)
    if (!name || strcmp(ibv_get_device_name(list[i]), name) == 0) dev->context = ibv_open_device(list[i]);
  ibv_free_device_list(list);
  check(dev->context != NULL, "no such device");
  dev->pd = ibv_alloc_pd(dev->context);
  check(dev->pd != NULL, "ibv_alloc_pd");
  check(ibv_query_gid(dev->context, 1, dev->gid_index, &dev->gid) == 0, "ibv_query_gid");
}

static struct conn new_conn(struct device *dev) {
  struct conn c;
  c.cq = ibv_create_cq(dev->context, 16, NULL, NULL, 0);
  check(c.cq != NULL, "ibv_create_cq");
  struct ibv_qp_init_attr attr = {.send_cq = c.cq, .recv_cq = c.cq, .qp_type = IBV_QPT_RC};
  attr.cap.max_send_wr = attr.cap.max_recv_wr = 8;
  attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
  c.qp = ibv_create_qp(dev->pd, &attr);
  check(c.qp != NULL, "ibv_create_qp");
  return c;
}

static void drop_conn(struct conn *c) {
  if (!c->qp) return;
  check(ibv_destroy_qp(c->qp) == 0 && ibv_destroy_cq(c->cq) == 0, "destroying a QP and its CQ");
  c->qp = NULL;
}

/* INIT, RTR to the peer's QP, RTS; path MTU 1024 fits both sides' Ethernet MTU. */
static void connect_qp(struct device *dev, struct ibv_qp *qp, const uint8_t *peer_gid, uint32_t peer_qpn) {
  struct ibv_qp_attr attr = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qp_access_flags = RIGHTS};
  check(ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == 0,
        "modify to INIT");
  memset(&attr, 0, sizeof attr);
  attr.qp_state = IBV_QPS_RTR;
  attr.path_mtu = IBV_MTU_1024;
  attr.dest_qp_num = peer_qpn;
  attr.rq_psn = PSN;
  attr.ah_attr.is_global = 1;
  memcpy(attr.ah_attr.grh.dgid.raw, peer_gid, 16);
  attr.ah_attr.grh.sgid_index = (uint8_t)dev->gid_index;
  attr.ah_attr.grh.hop_limit = 64;
  attr.ah_attr.port_num = 1;
  attr.max_dest_rd_atomic = 1;
  attr.min_rnr_timer = 12;
  check(ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                     IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) == 0,
        "modify to RTR");
  memset(&attr, 0, sizeof attr);
  attr.qp_state = IBV_QPS_RTS;
  attr.sq_psn = PSN;
  attr.timeout = 14;
  attr.retry_cnt = 7;
  attr.rnr_retry = 7;
  attr.max_rd_atomic = 1;
  check(ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                     IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC) == 0,
        "modify to RTS");
}

static struct ibv_wc next_completion(struct ibv_cq *cq, const char *what) {
  time_t give_up = time(NULL) + COMPLETION_SECONDS;
  struct ibv_wc wc;
  for (;;) {
    int n = ibv_poll_cq(cq, 1, &wc);
    check(n >= 0, "ibv_poll_cq");
    if (n == 1) return wc;
    if (time(NULL) > give_up) fail(what);
    usleep(100);
  }
}

static void post_send(struct ibv_qp *qp, struct ibv_send_wr *wr) {
  struct ibv_send_wr *bad;
  check(ibv_post_send(qp, wr, &bad) == 0, "ibv_post_send");
}

/* ---------------------------------------------------------------------------------------
 * The user: carries out the owner's orders. */

static void serve_order(struct device *dev, struct conn *c, const struct order *o, struct reply *r,
                        struct ibv_mr *mr, uint8_t *buf) {
  struct ibv_sge sge = {(uint64_t)(uintptr_t)buf, o->length, mr->lkey};
  struct ibv_send_wr wr = {.wr_id = o->op, .sg_list = &sge, .num_sge = 1, .send_flags = IBV_SEND_SIGNALED};
  check(o->length <= REGION, "an order longer than the buffer");
  switch (o->op) {
    case OP_CONNECT:
      drop_conn(c);
      *c = new_conn(dev);
      connect_qp(dev, c->qp, o->gid, o->qpn);
      r->qpn = c->qp->qp_num;
      memcpy(r->gid, dev->gid.raw, 16);
      return;
    case OP_WRITE:
      memset(buf, FILL, o->length);
      wr.opcode = IBV_WR_RDMA_WRITE;
      break;
    case OP_READ:
      memset(buf, 0, o->length);
      wr.opcode = IBV_WR_RDMA_READ;
      break;
    case OP_SEND_INV:
      wr.opcode = IBV_WR_SEND_WITH_INV;
      wr.num_sge = 0;
      wr.invalidate_rkey = o->rkey;
      break;
    default:
      fail("an unknown order");
  }
  wr.wr.rdma.remote_addr = o->addr;
  wr.wr.rdma.rkey = o->rkey;
  post_send(c->qp, &wr);
  r->status = next_completion(c->cq, "no completion for the owner's order").status;
  if (o->op == OP_READ) r->hash = fnv1a(buf, o->length);
}

static int run_user(struct device *dev, const char *host, const char *port) {
  int fd = connect_to(host, port);
  static uint8_t buf[REGION];
  struct ibv_mr *mr = ibv_reg_mr(dev->pd, buf, sizeof buf, RIGHTS);
  check(mr != NULL, "ibv_reg_mr");
  struct conn c = {0};
  for (;;) {
    struct order o;
    struct reply r = {0};
    recv_all(fd, &o, sizeof o);
    if (o.op == OP_END) break;
    serve_order(dev, &c, &o, &r, mr, buf);
    printf("order %u: %s\n", o.op, o.op == OP_CONNECT ? "connected" : ibv_wc_status_str(r.status));
    send_all(fd, &r, sizeof r);
  }
  drop_conn(&c);
  printf("ok\n");
  return 0;
}

/* ---------------------------------------------------------------------------------------
 * The owner: binds windows and judges. */

struct owner {
  struct device *dev;
  int fd;
  uint8_t *buf; /* the registered region, REGION bytes */
  struct ibv_mr *mr;
  bool rxe; /* --rxe */
};

static void expect_status(enum ibv_wc_status got, enum ibv_wc_status wanted, const char *what) {
  if (got == wanted) return;
  printf("FAIL %s: %s: %s (wanted %s)\n", current_case, what, ibv_wc_status_str(got), ibv_wc_status_str(wanted));
  exit(1);
}

/* A new connection: my QP, and the user's new one connected to it. */
static struct conn owner_connect(struct owner *o) {
  struct conn c = new_conn(o->dev);
  struct order ord = {.op = OP_CONNECT, .qpn = c.qp->qp_num};
  struct reply r;
  memcpy(ord.gid, o->dev->gid.raw, 16);
  send_all(o->fd, &ord, sizeof ord);
  recv_all(o->fd, &r, sizeof r);
  connect_qp(o->dev, c.qp, r.gid, r.qpn);
  return c;
}

/* Orders the user's WRITE, READ or SEND with Invalidate; returns its completion. */
static struct reply order(struct owner *o, enum op op, uint32_t offset, uint32_t length, uint32_t rkey) {
  struct order ord = {.op = op, .addr = (uint64_t)(uintptr_t)(o->buf + offset), .rkey = rkey, .length = length};
  struct reply r;
  send_all(o->fd, &ord, sizeof ord);
  recv_all(o->fd, &r, sizeof r);
  return r;
}

/* The bytes [from, to) of the region hold `value`. */
static void expect_bytes(struct owner *o, uint32_t from, uint32_t to, uint8_t value, const char *what) {
  for (uint32_t i = from; i < to; ++i)
    if (o->buf[i] != value) {
      printf("FAIL %s: %s: byte %u is 0x%02x, not 0x%02x\n", current_case, what, i, o->buf[i], value);
      exit(1);
    }
}

static void bind_type2(struct conn *c, struct ibv_mw *mw, uint32_t rkey, struct owner *o) {
  struct ibv_send_wr wr = {.wr_id = 7, .opcode = IBV_WR_BIND_MW, .send_flags = IBV_SEND_SIGNALED};
  wr.bind_mw.mw = mw;
  wr.bind_mw.rkey = rkey;
  wr.bind_mw.bind_info.mr = o->mr;
  wr.bind_mw.bind_info.addr = (uint64_t)(uintptr_t)(o->buf + WINDOW_AT);
  wr.bind_mw.bind_info.length = WINDOW_LEN;
  wr.bind_mw.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  post_send(c->qp, &wr);
  expect_status(next_completion(c->cq, "no BIND_MW completion").status, IBV_WC_SUCCESS, "BIND_MW");
  /* A bind by work request leaves mw->rkey as it was, and the next bind names the window by
   * its current key (rxe compares the whole key, and so do we): the program keeps it. */
  mw->rkey = rkey;
}

static void bind_type1(struct conn *c, struct ibv_mw *mw, struct owner *o, uint64_t length) {
  struct ibv_mw_bind bind = {.wr_id = 8, .send_flags = IBV_SEND_SIGNALED};
  bind.bind_info.mr = o->mr;
  bind.bind_info.addr = (uint64_t)(uintptr_t)(o->buf + WINDOW_AT);
  bind.bind_info.length = length;
  bind.bind_info.mw_access_flags = length ? IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ : 0;
  check(ibv_bind_mw(c->qp, mw, &bind) == 0, "ibv_bind_mw");
  expect_status(next_completion(c->cq, "no ibv_bind_mw completion").status, IBV_WC_SUCCESS, "ibv_bind_mw");
}

static void post_receive(struct conn *c) {
  struct ibv_recv_wr wr = {.wr_id = 9}, *bad;
  check(ibv_post_recv(c->qp, &wr, &bad) == 0, "ibv_post_recv");
}

static struct ibv_mw *new_window(struct owner *o, enum ibv_mw_type type) {
  struct ibv_mw *mw = ibv_alloc_mw(o->dev->pd, type);
  check(mw != NULL, "ibv_alloc_mw");
  return mw;
}

/* WRITE through the window fills it; READ returns it. */
static void expect_write_and_read(struct owner *o, uint32_t rkey) {
  memset(o->buf, 0, REGION);
  expect_status(order(o, OP_WRITE, WINDOW_AT, WINDOW_LEN, rkey).status, IBV_WC_SUCCESS, "WRITE through the window");
  expect_bytes(o, WINDOW_AT, WINDOW_AT + WINDOW_LEN, FILL, "the window after the WRITE");
  expect_bytes(o, 0, WINDOW_AT, 0, "the memory before the window");
  expect_bytes(o, WINDOW_AT + WINDOW_LEN, REGION, 0, "the memory after the window");
  struct reply r = order(o, OP_READ, WINDOW_AT, WINDOW_LEN, rkey);
  expect_status(r.status, IBV_WC_SUCCESS, "READ through the window");
  check(r.hash == fnv1a(o->buf + WINDOW_AT, WINDOW_LEN), "the user READ other bytes than the window holds");
}

/* A WRITE through `rkey` is refused with the remote access error and changes nothing. */
static void expect_write_refused(struct owner *o, uint32_t offset, uint32_t length, uint32_t rkey, const char *what) {
  memset(o->buf, 0, REGION);
  expect_status(order(o, OP_WRITE, offset, length, rkey).status, IBV_WC_REM_ACCESS_ERR, what);
  expect_bytes(o, 0, REGION, 0, "the region after a refused WRITE");
}

/* --rxe: rxe checks a type 2 window's accesses against its region's range
 * (docs/VERBS_MEMORY.md). A WRITE across the window's end is then either refused, or lands
 * exactly where it was aimed inside the region; anything else fails. */
static void expect_write_within_region(struct owner *o, uint32_t rkey) {
  const uint32_t at = WINDOW_AT + WINDOW_LEN - 8, length = 16;
  memset(o->buf, 0, REGION);
  enum ibv_wc_status status = order(o, OP_WRITE, at, length, rkey).status;
  if (status == IBV_WC_REM_ACCESS_ERR) {
    expect_bytes(o, 0, REGION, 0, "the region after a refused WRITE");
    return;
  }
  expect_status(status, IBV_WC_SUCCESS, "WRITE across the window's end");
  expect_bytes(o, 0, at, 0, "the memory before the WRITE");
  expect_bytes(o, at, at + length, FILL, "the bytes the WRITE aimed at");
  expect_bytes(o, at + length, REGION, 0, "the memory after the WRITE");
  printf("rxe: region range: a WRITE across a type 2 window's end reached its region\n");
}

/* --rxe: rxe acknowledges a SEND with Invalidate before it tries the invalidation, so the
 * sender of one naming a type 1 window sees success; the refusal shows in the receive, which
 * must not complete successfully. */
static void expect_receive_failed(struct conn *c) {
  struct ibv_wc wc = next_completion(c->cq, "no receive completion for the SEND with Invalidate");
  if (wc.status == IBV_WC_SUCCESS) {
    printf("FAIL %s: the receive of a SEND with Invalidate of a type 1 window succeeded\n", current_case);
    exit(1);
  }
  printf("rxe: a SEND with Invalidate of a type 1 window: the sender saw success, the receive %s\n",
         ibv_wc_status_str(wc.status));
}

static void pass(void) {
  printf("PASS %s\n", current_case);
  fflush(stdout);
}

static void type2_cases(struct owner *o) {
  current_case = "type2_write_read";
  struct conn a = owner_connect(o);
  struct ibv_mw *w1 = new_window(o, IBV_MW_TYPE_2);
  uint32_t k1 = ibv_inc_rkey(w1->rkey);
  bind_type2(&a, w1, k1, o);
  expect_write_and_read(o, k1);
  pass();

  current_case = "type2_send_with_invalidate";
  post_receive(&a);
  expect_status(order(o, OP_SEND_INV, 0, 0, k1).status, IBV_WC_SUCCESS, "SEND with Invalidate");
  struct ibv_wc wc = next_completion(a.cq, "no receive completion for the SEND with Invalidate");
  expect_status(wc.status, IBV_WC_SUCCESS, "the owner's receive");
  unsigned with_inv = o->rxe ? RXE_WITH_INV | IBV_WC_WITH_INV : IBV_WC_WITH_INV;
  if (o->rxe && (wc.wc_flags & RXE_WITH_INV)) printf("rxe: IBV_WC_WITH_INV reported as bit 2\n");
  if (wc.opcode != IBV_WC_RECV || !(wc.wc_flags & with_inv) || wc.invalidated_rkey != k1) {
    printf("FAIL %s: the receive: opcode %d, wc_flags 0x%x, invalidated_rkey 0x%x (wanted IBV_WC_RECV, "
           "IBV_WC_WITH_INV, 0x%x)\n", current_case, wc.opcode, wc.wc_flags, wc.invalidated_rkey, k1);
    exit(1);
  }
  expect_write_refused(o, WINDOW_AT, 64, k1, "WRITE through the invalidated window");
  pass();

  current_case = "type2_local_invalidate";
  struct conn b = owner_connect(o);
  uint32_t k2 = ibv_inc_rkey(w1->rkey);
  bind_type2(&b, w1, k2, o); /* invalidated type 2 windows are free to bind again */
  expect_write_and_read(o, k2);
  struct ibv_send_wr inv = {.wr_id = 10, .opcode = IBV_WR_LOCAL_INV, .send_flags = IBV_SEND_SIGNALED};
  inv.invalidate_rkey = k2;
  post_send(b.qp, &inv);
  expect_status(next_completion(b.cq, "no LOCAL_INV completion").status, IBV_WC_SUCCESS, "LOCAL_INV");
  expect_write_refused(o, WINDOW_AT, 64, k2, "WRITE through the locally invalidated window");
  pass();

  current_case = "type2_other_qp";
  struct conn c = owner_connect(o);
  uint32_t k3 = ibv_inc_rkey(w1->rkey);
  bind_type2(&c, w1, k3, o);
  struct conn d = owner_connect(o); /* the user's QP is now d's peer, not c's */
  expect_write_refused(o, WINDOW_AT, 64, k3, "WRITE through a QP that did not bind the window");
  pass();

  current_case = "type2_beyond_the_window";
  struct conn e = owner_connect(o);
  struct ibv_mw *w2 = new_window(o, IBV_MW_TYPE_2);
  uint32_t k4 = ibv_inc_rkey(w2->rkey);
  bind_type2(&e, w2, k4, o);
  if (o->rxe)
    expect_write_within_region(o, k4);
  else
    expect_write_refused(o, WINDOW_AT + WINDOW_LEN - 8, 16, k4, "WRITE across the window's end");
  pass();

  struct conn *conns[] = {&a, &b, &c, &d, &e};
  for (size_t i = 0; i < sizeof conns / sizeof conns[0]; ++i) drop_conn(conns[i]);
  check(ibv_dealloc_mw(w1) == 0 && ibv_dealloc_mw(w2) == 0, "ibv_dealloc_mw");
}

static void type1_cases(struct owner *o) {
  current_case = "type1_write_read";
  struct conn f = owner_connect(o);
  struct ibv_mw *w = new_window(o, IBV_MW_TYPE_1);
  bind_type1(&f, w, o, WINDOW_LEN);
  expect_write_and_read(o, w->rkey);
  pass();

  current_case = "type1_send_with_invalidate_refused";
  post_receive(&f);
  enum ibv_wc_status sent = order(o, OP_SEND_INV, 0, 0, w->rkey).status;
  if (o->rxe && sent == IBV_WC_SUCCESS)
    expect_receive_failed(&f);
  else
    expect_status(sent, IBV_WC_REM_INV_REQ_ERR, "SEND with Invalidate of a type 1 window");
  struct conn g = owner_connect(o); /* a type 1 window belongs to the PD, not to f */
  expect_write_and_read(o, w->rkey);
  pass();

  current_case = "type1_unbound";
  bind_type1(&g, w, o, 0);
  expect_write_refused(o, WINDOW_AT, 64, w->rkey, "WRITE through the unbound window");
  pass();

  drop_conn(&f);
  drop_conn(&g);
  check(ibv_dealloc_mw(w) == 0, "ibv_dealloc_mw");
}

static int run_owner(struct device *dev, const char *port, bool rxe) {
  static uint8_t buf[REGION];
  struct owner o = {.dev = dev, .buf = buf, .rxe = rxe};
  o.mr = ibv_reg_mr(dev->pd, buf, sizeof buf, RIGHTS | IBV_ACCESS_MW_BIND);
  check(o.mr != NULL, "ibv_reg_mr with IBV_ACCESS_MW_BIND");
  o.fd = listen_once(port);
  type2_cases(&o);
  type1_cases(&o);
  struct order end = {.op = OP_END};
  send_all(o.fd, &end, sizeof end);
  printf("ok\n");
  return 0;
}

static _Noreturn void usage(void) {
  fprintf(stderr,
          "usage: mw_peer owner [--dev NAME] [--gid-index N] [--rxe] PORT\n"
          "       mw_peer user  [--dev NAME] [--gid-index N] HOST PORT\n");
  exit(2);
}

int main(int argc, char **argv) {
  struct device dev = {0};
  const char *name = NULL;
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc < 2) usage();
  bool owner = strcmp(argv[1], "owner") == 0;
  if (!owner && strcmp(argv[1], "user") != 0) usage();
  bool rxe = false;
  int i = 2;
  while (i < argc && strncmp(argv[i], "--", 2) == 0) {
    if (owner && strcmp(argv[i], "--rxe") == 0) {
      rxe = true;
      i += 1;
    } else if (i + 1 < argc && strcmp(argv[i], "--dev") == 0) {
      name = argv[i + 1];
      i += 2;
    } else if (i + 1 < argc && strcmp(argv[i], "--gid-index") == 0) {
      dev.gid_index = atoi(argv[i + 1]);
      i += 2;
    } else {
      usage();
    }
  }
  if (argc - i != (owner ? 1 : 2)) usage();
  open_device(&dev, name);
  return owner ? run_owner(&dev, argv[i], rxe) : run_user(&dev, argv[i], argv[i + 1]);
}
