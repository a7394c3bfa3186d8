/* What many memory regions cost (issue 20: "10,000 MRs registered"): registration and
 * deregistration time per MR, and the message rate of 64-byte RDMA WRITEs when every WRITE
 * uses a source and a destination region picked at random among N, against the same WRITEs
 * through one region. Twice: N regions over N different 64-byte slices (the daemon then also
 * reaches N places of the program's memory), and N regions all over the same slice (the
 * memory touched is that of one region: what remains is the cost of finding the keys). Two RC QPs of one process, connected to each other on one
 * device (on a vnic: the daemon's loopback, so the daemon looks up an L_Key and an R_Key per
 * WRITE and the wire does not count).
 *
 *   mr_scale [--dev NAME] [--gid-index N] [--mrs N] [--writes N]
 *
 * Prints one JSON object: mrs, reg_us_per_mr, dereg_us_per_mr, writes, rate_one_mr (WRITEs
 * per second through one region), rate_many_mrs (N regions, N slices), rate_many_keys (N
 * regions, one slice), ratio_many_mrs, ratio_many_keys (each over rate_one_mr). Built against the
 * system's libibverbs; run it under `rrdma-vnic exec`. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <infiniband/verbs.h>

#define SLICE 64u /* bytes of each region */
#define DEPTH 64  /* WRITEs in flight */

static void die(const char *what) {
  fprintf(stderr, "mr_scale: %s\n", what);
  exit(1);
}

static double seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

struct scene {
  struct ibv_context *context;
  struct ibv_pd *pd;
  struct ibv_cq *cq;
  struct ibv_qp *qp[2];
  union ibv_gid gid;
  int gid_index;
};

static struct ibv_qp *make_qp(struct scene *s) {
  struct ibv_qp_init_attr attr = {.send_cq = s->cq, .recv_cq = s->cq, .qp_type = IBV_QPT_RC, .sq_sig_all = 1};
  attr.cap.max_send_wr = DEPTH;
  attr.cap.max_recv_wr = 1;
  attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
  struct ibv_qp *qp = ibv_create_qp(s->pd, &attr);
  if (!qp) die("ibv_create_qp");
  return qp;
}

static void connect_qp(struct scene *s, struct ibv_qp *qp, uint32_t peer) {
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1,
                          .qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE};
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) die("INIT");
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = peer;
  a.ah_attr.is_global = 1;
  a.ah_attr.grh.dgid = s->gid;
  a.ah_attr.grh.sgid_index = (uint8_t)s->gid_index;
  a.ah_attr.grh.hop_limit = 64;
  a.ah_attr.port_num = 1;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
    die("RTR");
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.max_rd_atomic = 1;
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                IBV_QP_MAX_QP_RD_ATOMIC))
    die("RTS");
}

static void open_scene(struct scene *s, const char *name) {
  int n = 0;
  struct ibv_device **list = ibv_get_device_list(&n);
  for (int i = 0; list && i < n && !s->context; ++i)
    if (!name || strcmp(ibv_get_device_name(list[i]), name) == 0) s->context = ibv_open_device(list[i]);
  if (list) ibv_free_device_list(list);
  if (!s->context) die("no such device");
  if (!(s->pd = ibv_alloc_pd(s->context))) die("ibv_alloc_pd");
  if (!(s->cq = ibv_create_cq(s->context, 2 * DEPTH, NULL, NULL, 0))) die("ibv_create_cq");
  if (ibv_query_gid(s->context, 1, s->gid_index, &s->gid)) die("ibv_query_gid");
  s->qp[0] = make_qp(s);
  s->qp[1] = make_qp(s);
  connect_qp(s, s->qp[0], s->qp[1]->qp_num);
  connect_qp(s, s->qp[1], s->qp[0]->qp_num);
}

/* `writes` WRITEs of SLICE bytes from QP 0 to QP 1, DEPTH in flight; region i's bytes are
 * buf + i * SLICE. With one region, every WRITE uses regions[0]; else two picked at random.
 * Returns WRITEs per second. */
static double write_rate(struct scene *s, struct ibv_mr **mrs, size_t count, uint8_t *buf, long writes) {
  const size_t stride = mrs[count - 1]->addr == mrs[0]->addr ? 0 : SLICE;
  unsigned seed = 12345;
  long posted = 0, done = 0;
  const double start = seconds();
  while (done < writes) {
    while (posted < writes && posted - done < DEPTH) {
      const size_t from = count > 1 ? (size_t)rand_r(&seed) % count : 0;
      const size_t to = count > 1 ? (size_t)rand_r(&seed) % count : 0;
      struct ibv_sge sge = {(uint64_t)(uintptr_t)(buf + from * stride), SLICE, mrs[from]->lkey};
      struct ibv_send_wr wr = {.wr_id = (uint64_t)posted, .sg_list = &sge, .num_sge = 1,
                               .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED}, *bad;
      wr.wr.rdma.remote_addr = (uint64_t)(uintptr_t)(buf + to * stride);
      wr.wr.rdma.rkey = mrs[to]->rkey;
      if (ibv_post_send(s->qp[0], &wr, &bad)) die("ibv_post_send");
      ++posted;
    }
    struct ibv_wc wc[DEPTH];
    const int n = ibv_poll_cq(s->cq, DEPTH, wc);
    if (n < 0) die("ibv_poll_cq");
    for (int i = 0; i < n; ++i)
      if (wc[i].status != IBV_WC_SUCCESS) die(ibv_wc_status_str(wc[i].status));
    done += n;
  }
  return (double)writes / (seconds() - start);
}

int main(int argc, char **argv) {
  struct scene s = {0};
  const char *dev = NULL;
  size_t count = 10000;
  long writes = 20000;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--dev")) dev = argv[i + 1];
    else if (!strcmp(argv[i], "--gid-index")) s.gid_index = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--mrs")) count = strtoul(argv[i + 1], NULL, 10);
    else if (!strcmp(argv[i], "--writes")) writes = atol(argv[i + 1]);
    else die("usage: mr_scale [--dev NAME] [--gid-index N] [--mrs N] [--writes N]");
  }
  if (argc % 2 == 0 || count < 2 || writes < 1) die("usage: mr_scale [--dev NAME] [--gid-index N] [--mrs N >= 2] [--writes N]");
  open_scene(&s, dev);
  uint8_t *buf = aligned_alloc(4096, (count * SLICE + 4095) / 4096 * 4096);
  struct ibv_mr **mrs = calloc(count, sizeof *mrs);
  if (!buf || !mrs) die("out of memory");
  memset(buf, 0, count * SLICE);

  double reg = 0, dereg = 0, one = 0, many = 0, keys = 0;
  for (int same = 0; same <= 1; ++same) {  /* N slices, then N keys over one slice */
    double t = seconds();
    for (size_t i = 0; i < count; ++i)
      if (!(mrs[i] = ibv_reg_mr(s.pd, buf + (same ? 0 : i * SLICE), SLICE, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)))
        die("ibv_reg_mr");
    if (!same) reg = (seconds() - t) / (double)count;
    if (!same) one = write_rate(&s, mrs, 1, buf, writes);
    *(same ? &keys : &many) = write_rate(&s, mrs, count, buf, writes);
    t = seconds();
    for (size_t i = 0; i < count; ++i)
      if (ibv_dereg_mr(mrs[i])) die("ibv_dereg_mr");
    if (!same) dereg = (seconds() - t) / (double)count;
  }
  printf("{\"mrs\": %zu, \"reg_us_per_mr\": %.2f, \"dereg_us_per_mr\": %.2f, \"writes\": %ld, "
         "\"rate_one_mr\": %.0f, \"rate_many_mrs\": %.0f, \"rate_many_keys\": %.0f, \"ratio_many_mrs\": %.3f, "
         "\"ratio_many_keys\": %.3f}\n",
         count, reg * 1e6, dereg * 1e6, writes, one, many, keys, many / one, keys / one);
  return 0;
}
