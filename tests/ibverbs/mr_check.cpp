/* An ordinary libibverbs program (built against the system's libibverbs, run over ours by
 * `rrdma-vnic exec`) for the memory-region verbs beyond ibv_reg_mr and for ibv_create_qp_ex's
 * forms, between two devices in one process (A initiates, B is the target):
 *   - IOVA: regions registered with ibv_reg_mr_iova at an IOVA far from their address;
 *     RDMA WRITE and READ by IOVA, in RETHs and in local SGEs; an IOVA range that wraps is
 *     refused; a WRITE past the region's end fails with IBV_WC_REM_ACCESS_ERR.
 *   - ibv_rereg_mr: a region moved to other memory (same keys), its PD changed and back,
 *     ibv_rereg_mr(3)'s input errors.
 *   - on-demand paging: odp_caps; a WRITE into untouched mmap'd memory of an ODP region; a
 *     16 GiB MAP_NORESERVE region written at far-apart offsets (only those pages become
 *     resident); implicit ODP regions (NULL, SIZE_MAX) on both sides for WRITE, READ and
 *     FETCH_ADD with local SGEs through them; ibv_advise_mr; SENDs into ODP memory through an
 *     SRQ (RC), a UC QP (SEND and WRITE) and a UD QP; implicit ODP with HUGETLB refused.
 *   - ibv_create_qp_ex for RC, UC and UD with and without CREATE_FLAGS / SEND_OPS_FLAGS, and
 *     the forms rxe refuses (EOPNOTSUPP).
 *   - the context's cmd_fd is a real descriptor; ibv_import_device on it says EOPNOTSUPP.
 *   mr_check DEVICE_A DEVICE_B      exit 0 and "ok" when everything checked out */
#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <unistd.h>

#define CHECK_PROGRAM "mr_check"
#include "check_common.h"

#define RIGHTS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)
#define GIB (1024ul * 1024ul * 1024ul)

struct side {
  struct ibv_context *context;
  struct ibv_pd *pd;
  struct ibv_cq *cq;
  struct ibv_srq *srq;
  union ibv_gid gid;
};

static void open_side(struct side *side, const char *name) {
  side->context = open_device(name);
  side->pd = ibv_alloc_pd(side->context);
  side->cq = ibv_create_cq(side->context, 64, NULL, NULL, 0);
  struct ibv_srq_init_attr srq_attr = {};
  srq_attr.attr.max_wr = 16;
  srq_attr.attr.max_sge = 1;
  side->srq = ibv_create_srq(side->pd, &srq_attr);
  check(side->pd && side->cq && side->srq, "ibv_alloc_pd / ibv_create_cq / ibv_create_srq");
  check(ibv_query_gid(side->context, 1, 0, &side->gid) == 0, "ibv_query_gid");
}

/* ibv_create_qp_ex with the given extended attributes: the QP, or NULL with errno. */
static struct ibv_qp *create_qp(struct side *side, enum ibv_qp_type type, uint32_t comp_mask, uint32_t create_flags,
                                uint64_t send_ops, struct ibv_srq *srq) {
  struct ibv_qp_init_attr_ex attr = qp_init_attr(side->pd, side->cq, type);
  attr.srq = srq;
  attr.comp_mask |= comp_mask;
  attr.create_flags = create_flags;
  attr.send_ops_flags = send_ops;
  attr.max_tso_header = 64;
  errno = 0;
  return ibv_create_qp_ex(side->context, &attr);
}

/* The remote access mr_check's QPs grant: all RC has, the WRITEs of UC. */
static void connect_to(struct ibv_qp *qp, const struct side *peer, uint32_t peer_qpn) {
  unsigned access = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
  if (qp->qp_type == IBV_QPT_UC) access = IBV_ACCESS_REMOTE_WRITE;
  connect_qp(qp, &peer->gid, peer_qpn, access);
}

static void expect_success(struct side *side, const char *what) {
  struct ibv_wc wc = next_completion(side->cq, what);
  if (wc.status != IBV_WC_SUCCESS) {
    fprintf(stderr, "mr_check: %s: %s\n", what, ibv_wc_status_str(wc.status));
    exit(1);
  }
}

/* One signaled RDMA WRITE / READ / FETCH_ADD of `length` bytes; the status of its completion. */
static enum ibv_wc_status rdma(struct side *side, struct ibv_qp *qp, enum ibv_wr_opcode opcode, uint64_t local,
                               uint32_t length, uint32_t lkey, uint64_t remote, uint32_t rkey, const char *what) {
  struct ibv_sge sge = {local, length, lkey};
  struct ibv_send_wr wr = {}, *bad;
  wr.wr_id = 1;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = opcode;
  wr.send_flags = IBV_SEND_SIGNALED;
  if (opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
    wr.wr.atomic.remote_addr = remote;
    wr.wr.atomic.rkey = rkey;
    wr.wr.atomic.compare_add = 2;
  } else {
    wr.wr.rdma.remote_addr = remote;
    wr.wr.rdma.rkey = rkey;
  }
  check(ibv_post_send(qp, &wr, &bad) == 0, what);
  return next_completion(side->cq, what).status;
}

static void post_recv(struct ibv_qp *qp, struct ibv_srq *srq, uint64_t addr, uint32_t length, uint32_t lkey) {
  struct ibv_sge sge = {addr, length, lkey};
  struct ibv_recv_wr wr = {}, *bad;
  wr.wr_id = 7;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  check((srq ? ibv_post_srq_recv(srq, &wr, &bad) : ibv_post_recv(qp, &wr, &bad)) == 0, "post receive");
}

static size_t resident_pages(void *start, size_t bytes) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE), pages = (bytes + page - 1) / page, n = 0;
  unsigned char *in_core = (unsigned char *)malloc(pages);
  check(in_core && mincore(start, bytes, in_core) == 0, "mincore");
  for (size_t i = 0; i < pages; ++i) n += in_core[i] & 1;
  free(in_core);
  return n;
}

/* ---------------------------------------------------------------------------------------- */

static void check_qp_ex_forms(struct side *a) {
  const uint64_t sends = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM;
  const uint64_t writes = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM;
  const uint64_t rc_only = IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD |
                           IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP;
  const enum ibv_qp_type types[] = {IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD};
  for (enum ibv_qp_type type : types) {
    uint64_t allowed = type == IBV_QPT_RC ? sends | writes | rc_only : type == IBV_QPT_UC ? sends | writes : sends;
    struct ibv_qp *made[] = {
        create_qp(a, type, 0, 0, 0, NULL),
        create_qp(a, type, IBV_QP_INIT_ATTR_CREATE_FLAGS, 0, 0, NULL),
        create_qp(a, type, IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, 0, allowed, NULL),
        create_qp(a, type, IBV_QP_INIT_ATTR_CREATE_FLAGS | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, 0, sends, NULL),
    };
    for (struct ibv_qp *qp : made) {
      check(qp != NULL && qp->qp_type == type, "ibv_create_qp_ex refused a form rxe takes");
      check(ibv_destroy_qp(qp) == 0, "ibv_destroy_qp");
    }
    check(!create_qp(a, type, IBV_QP_INIT_ATTR_CREATE_FLAGS, IBV_QP_CREATE_SCATTER_FCS, 0, NULL) && errno == EOPNOTSUPP,
          "create_flags: not EOPNOTSUPP");
    check(!create_qp(a, type, IBV_QP_INIT_ATTR_MAX_TSO_HEADER, 0, 0, NULL) && errno == EOPNOTSUPP,
          "MAX_TSO_HEADER: not EOPNOTSUPP");
    if (type != IBV_QPT_RC)
      check(!create_qp(a, type, IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, 0, allowed | rc_only, NULL) && errno == EOPNOTSUPP,
            "send_ops_flags beyond the transport: not EOPNOTSUPP");
  }
}

static void check_command_fd(struct side *a) {
  int fd = a->context->cmd_fd;
  check(fd >= 0 && fcntl(fd, F_GETFD) >= 0, "cmd_fd is not a descriptor");
  struct pollfd p = {fd, POLLIN, 0};
  check(poll(&p, 1, 0) >= 0, "poll(cmd_fd)");
  errno = 0;
  check(ibv_import_device(fd) == NULL && errno == EOPNOTSUPP, "ibv_import_device(cmd_fd): not EOPNOTSUPP");
}

/* WRITE and READ by IOVA, in RETHs and local SGEs; then the refusals. Leaves `qp` in error. */
static void check_iova(struct side *a, struct side *b, struct ibv_qp *qp) {
  const size_t size = 64 * KIB;
  unsigned char *a_mem = (unsigned char *)aligned_alloc(4096, size), *b_mem = (unsigned char *)aligned_alloc(4096, size);
  check(a_mem && b_mem, "aligned_alloc");
  fill(a_mem, size, 1);
  memset(b_mem, 0, size);
  const uint64_t ia = 0x3000'0000'0000ul, ib = 0x4abc'0000'0000ul;
  struct ibv_mr *ma = ibv_reg_mr_iova(a->pd, a_mem, size, ia, RIGHTS);
  struct ibv_mr *mb = ibv_reg_mr_iova(b->pd, b_mem, size, ib, RIGHTS);
  check(ma && mb, "ibv_reg_mr_iova");
  check(rdma(a, qp, IBV_WR_RDMA_WRITE, ia + 100, 5000, ma->lkey, ib + 300, mb->rkey, "WRITE by IOVA") ==
            IBV_WC_SUCCESS, "WRITE by IOVA failed");
  check(memcmp(b_mem + 300, a_mem + 100, 5000) == 0 && b_mem[299] == 0 && b_mem[5300] == 0, "WRITE by IOVA: B's bytes");
  fill(b_mem + 20000, 3000, 9);
  check(rdma(a, qp, IBV_WR_RDMA_READ, ia + 30000, 3000, ma->lkey, ib + 20000, mb->rkey, "READ by IOVA") ==
            IBV_WC_SUCCESS, "READ by IOVA failed");
  check(memcmp(a_mem + 30000, b_mem + 20000, 3000) == 0, "READ by IOVA: A's bytes");

  errno = 0;
  check(ibv_reg_mr_iova(b->pd, b_mem, size, UINT64_MAX - 100, RIGHTS) == NULL && errno == EINVAL,
        "an IOVA range that wraps: not EINVAL");
  memset(b_mem, 0, size);
  check(rdma(a, qp, IBV_WR_RDMA_WRITE, ia, 16, ma->lkey, ib + size - 8, mb->rkey, "WRITE past the end") ==
            IBV_WC_REM_ACCESS_ERR, "WRITE past the region: not REM_ACCESS_ERR");
  for (size_t i = 0; i < size; ++i) check(b_mem[i] == 0, "WRITE past the region wrote");
  check(ibv_dereg_mr(ma) == 0 && ibv_dereg_mr(mb) == 0, "ibv_dereg_mr");
  free(a_mem);
  free(b_mem);
}

/* A region moved to other memory keeps its keys; a PD change and back; input errors. */
static void check_rereg(struct side *a, struct side *b, struct ibv_qp *qp) {
  const size_t size = 16 * KIB;
  unsigned char *a_mem = (unsigned char *)malloc(size), *old_mem = (unsigned char *)calloc(1, size),
                *new_mem = (unsigned char *)calloc(1, size);
  check(a_mem && old_mem && new_mem, "malloc");
  fill(a_mem, size, 3);
  struct ibv_mr *ma = ibv_reg_mr(a->pd, a_mem, size, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *mb = ibv_reg_mr(b->pd, old_mem, size, RIGHTS);
  check(ma && mb, "ibv_reg_mr");
  const uint32_t lkey = mb->lkey, rkey = mb->rkey;
  check(ibv_rereg_mr(mb, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, new_mem, size, 0) == 0, "rereg translation");
  check(mb->addr == new_mem && mb->length == size && mb->lkey == lkey && mb->rkey == rkey, "rereg: MR fields");
  check(rdma(a, qp, IBV_WR_RDMA_WRITE, (uintptr_t)a_mem, 4096, ma->lkey, (uintptr_t)new_mem + 64, rkey,
             "WRITE after rereg") == IBV_WC_SUCCESS, "WRITE after rereg failed");
  check(memcmp(new_mem + 64, a_mem, 4096) == 0, "WRITE after rereg: new memory");
  for (size_t i = 0; i < size; ++i) check(old_mem[i] == 0, "WRITE after rereg reached the old memory");

  struct ibv_pd *pd2 = ibv_alloc_pd(b->context);
  check(pd2 != NULL, "ibv_alloc_pd");
  check(ibv_rereg_mr(mb, IBV_REREG_MR_CHANGE_PD, pd2, NULL, 0, 0) == 0 && mb->pd == pd2, "rereg PD");
  check(ibv_dealloc_pd(pd2) == EBUSY, "dealloc of the MR's new PD: not EBUSY");
  check(ibv_rereg_mr(mb, IBV_REREG_MR_CHANGE_PD | IBV_REREG_MR_CHANGE_ACCESS, b->pd, NULL, 0, RIGHTS) == 0,
        "rereg PD and access back");
  check(ibv_dealloc_pd(pd2) == 0, "dealloc of the PD the MR left");
  check(rdma(a, qp, IBV_WR_RDMA_READ, (uintptr_t)a_mem, 64, ma->lkey, (uintptr_t)new_mem + 64, rkey,
             "READ after rereg") == IBV_WC_SUCCESS, "READ after rereg failed");

  errno = 0;
  check(ibv_rereg_mr(mb, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, NULL, size, 0) == IBV_REREG_MR_ERR_INPUT &&
            errno == EINVAL, "rereg without an address: not IBV_REREG_MR_ERR_INPUT");
  check(ibv_rereg_mr(mb, 1 << 7, NULL, NULL, 0, 0) == IBV_REREG_MR_ERR_INPUT, "rereg unknown flag");
  check(ibv_dereg_mr(ma) == 0 && ibv_dereg_mr(mb) == 0, "ibv_dereg_mr");
  free(a_mem);
  free(old_mem);
  free(new_mem);
}

/* Explicit ODP over untouched memory and over a mostly unbacked 16 GiB mapping. */
static void check_explicit_odp(struct side *a, struct side *b, struct ibv_qp *qp) {
  const size_t size = 1024 * KIB;
  unsigned char *a_mem = (unsigned char *)malloc(size);
  check(a_mem != NULL, "malloc");
  fill(a_mem, size, 5);
  struct ibv_mr *ma = ibv_reg_mr(a->pd, a_mem, size, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND);
  check(ma != NULL, "ibv_reg_mr ODP (A)");

  unsigned char *untouched = (unsigned char *)mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  check(untouched != MAP_FAILED, "mmap");
  struct ibv_mr *mb = ibv_reg_mr(b->pd, untouched, size, RIGHTS | IBV_ACCESS_ON_DEMAND);
  check(mb != NULL, "ibv_reg_mr ODP over untouched memory");
  check(resident_pages(untouched, size) == 0, "the untouched mapping has resident pages already");
  check(rdma(a, qp, IBV_WR_RDMA_WRITE, (uintptr_t)a_mem, 200 * KIB, ma->lkey, (uintptr_t)untouched + 333, mb->rkey,
             "WRITE into untouched ODP memory") == IBV_WC_SUCCESS, "WRITE into untouched ODP memory failed");
  check(memcmp(untouched + 333, a_mem, 200 * KIB) == 0, "WRITE into untouched ODP memory: bytes");
  check(ibv_dereg_mr(mb) == 0, "ibv_dereg_mr");
  munmap(untouched, size);

  const size_t huge = 16 * GIB;
  unsigned char *sparse = (unsigned char *)mmap(NULL, huge, PROT_READ | PROT_WRITE,
                                                MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  check(sparse != MAP_FAILED, "mmap 16 GiB MAP_NORESERVE");
  madvise(sparse, huge, MADV_NOHUGEPAGE); /* count 4 KiB pages, not transparent huge ones */
  mb = ibv_reg_mr(b->pd, sparse, huge, RIGHTS | IBV_ACCESS_ON_DEMAND);
  check(mb != NULL, "ibv_reg_mr ODP over 16 GiB");
  const size_t offsets[] = {0, 5 * GIB + 4095, 11 * GIB + 123457, huge - 8 * KIB};
  for (size_t offset : offsets)
    check(rdma(a, qp, IBV_WR_RDMA_WRITE, (uintptr_t)a_mem, 8 * KIB, ma->lkey, (uintptr_t)sparse + offset, mb->rkey,
               "WRITE into the sparse region") == IBV_WC_SUCCESS, "WRITE into the sparse region failed");
  for (size_t offset : offsets) check(memcmp(sparse + offset, a_mem, 8 * KIB) == 0, "sparse region: bytes");
  /* 4 writes of 8 KiB touch at most 3 pages each; mincore over 16 GiB is 4 M entries. */
  check(resident_pages(sparse, huge) <= 12, "the sparse region became resident beyond what was written");
  check(ibv_dereg_mr(mb) == 0 && ibv_dereg_mr(ma) == 0, "ibv_dereg_mr");
  munmap(sparse, huge);
  free(a_mem);
}

/* Implicit ODP regions on both sides: WRITE, READ, FETCH_ADD, local SGEs through them,
 * ibv_advise_mr; a SEND into ODP memory through B's SRQ. */
static void check_implicit_odp(struct side *a, struct side *b, struct ibv_qp *qp, struct ibv_qp *b_qp) {
  struct ibv_mr *ia = ibv_reg_mr(a->pd, NULL, SIZE_MAX, RIGHTS | IBV_ACCESS_ON_DEMAND);
  struct ibv_mr *ib = ibv_reg_mr(b->pd, NULL, SIZE_MAX, RIGHTS | IBV_ACCESS_ON_DEMAND);
  check(ia && ib, "implicit ODP ibv_reg_mr");
  errno = 0;
  check(ibv_reg_mr(b->pd, NULL, SIZE_MAX, RIGHTS | IBV_ACCESS_ON_DEMAND | IBV_ACCESS_HUGETLB) == NULL,
        "implicit ODP with HUGETLB was accepted");
  const size_t size = 64 * KIB;
  unsigned char *src = (unsigned char *)malloc(size), *dst = (unsigned char *)calloc(1, size),
                *back = (unsigned char *)calloc(1, size);
  check(src && dst && back, "malloc");
  fill(src, size, 11);
  struct ibv_sge advice = {(uintptr_t)back, (uint32_t)size, ia->lkey};
  check(ibv_advise_mr(a->pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, IBV_ADVISE_MR_FLAG_FLUSH, &advice, 1) == 0,
        "ibv_advise_mr on an implicit region");
  check(rdma(a, qp, IBV_WR_RDMA_WRITE, (uintptr_t)src, (uint32_t)size, ia->lkey, (uintptr_t)dst, ib->rkey,
             "WRITE through implicit regions") == IBV_WC_SUCCESS, "WRITE through implicit regions failed");
  check(memcmp(dst, src, size) == 0, "implicit WRITE: bytes");
  check(rdma(a, qp, IBV_WR_RDMA_READ, (uintptr_t)back, (uint32_t)size, ia->lkey, (uintptr_t)dst, ib->rkey,
             "READ through implicit regions") == IBV_WC_SUCCESS, "READ through implicit regions failed");
  check(memcmp(back, src, size) == 0, "implicit READ: bytes");
  uint64_t *counter = (uint64_t *)(dst + 64), original = 0;
  *counter = 40;
  check(rdma(a, qp, IBV_WR_ATOMIC_FETCH_AND_ADD, (uintptr_t)&original, 8, ia->lkey, (uintptr_t)counter, ib->rkey,
             "FETCH_ADD through implicit regions") == IBV_WC_SUCCESS, "FETCH_ADD through implicit regions failed");
  check(original == 40 && *counter == 42, "implicit FETCH_ADD: values");

  /* SEND into ODP memory taken from B's SRQ (B's RC QP was created with it). */
  unsigned char *landing = (unsigned char *)mmap(NULL, 64 * KIB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  check(landing != MAP_FAILED, "mmap");
  post_recv(b_qp, b->srq, (uintptr_t)landing + 100, 4096, ib->lkey);
  struct ibv_sge sge = {(uintptr_t)src, 3000, ia->lkey};
  struct ibv_send_wr wr = {}, *bad;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  check(ibv_post_send(qp, &wr, &bad) == 0, "post SEND");
  expect_success(a, "SEND into the SRQ");
  struct ibv_wc wc = next_completion(b->cq, "SRQ receive");
  check(wc.status == IBV_WC_SUCCESS && wc.byte_len == 3000 && memcmp(landing + 100, src, 3000) == 0,
        "SEND into ODP memory through the SRQ");
  munmap(landing, 64 * KIB);
  check(ibv_dereg_mr(ia) == 0 && ibv_dereg_mr(ib) == 0, "ibv_dereg_mr");
  free(src);
  free(dst);
  free(back);
}

/* UC (SEND and WRITE through ibv_wr_*) and UD (SEND) into untouched ODP memory. */
static void check_uc_ud_odp(struct side *a, struct side *b) {
  const size_t size = 256 * KIB;
  unsigned char *src = (unsigned char *)malloc(size);
  unsigned char *target = (unsigned char *)mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  check(src && target != MAP_FAILED, "buffers");
  fill(src, size, 17);
  struct ibv_mr *ma = ibv_reg_mr(a->pd, src, size, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND);
  struct ibv_mr *mb = ibv_reg_mr(b->pd, target, size, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_ON_DEMAND);
  check(ma && mb, "ibv_reg_mr ODP");

  const uint64_t uc_ops = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE;
  struct ibv_qp *uc_a = create_qp(a, IBV_QPT_UC, IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, 0, uc_ops, NULL);
  struct ibv_qp *uc_b = create_qp(b, IBV_QPT_UC, 0, 0, 0, NULL);
  check(uc_a && uc_b, "UC QPs");
  connect_to(uc_a, b, uc_b->qp_num);
  connect_to(uc_b, a, uc_a->qp_num);
  post_recv(uc_b, NULL, (uintptr_t)target, 2000, mb->lkey);
  struct ibv_qp_ex *qpx = ibv_qp_to_qp_ex(uc_a);
  ibv_wr_start(qpx);
  qpx->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_send(qpx);
  ibv_wr_set_sge(qpx, ma->lkey, (uintptr_t)src, 2000);
  ibv_wr_rdma_write(qpx, mb->rkey, (uintptr_t)target + 128 * KIB);
  ibv_wr_set_sge(qpx, ma->lkey, (uintptr_t)src + 4096, 100 * KIB);
  check(ibv_wr_complete(qpx) == 0, "UC ibv_wr_complete");
  expect_success(a, "UC SEND");
  expect_success(a, "UC WRITE");
  struct ibv_wc wc = next_completion(b->cq, "UC receive");
  check(wc.status == IBV_WC_SUCCESS && memcmp(target, src, 2000) == 0, "UC SEND into ODP memory");
  /* UC WRITEs complete at the sender when sent; the receiver has them once its RECV (posted
     later on the same QP, so in order behind the WRITE) completes. */
  post_recv(uc_b, NULL, (uintptr_t)target + 4096, 64, mb->lkey);
  struct ibv_sge marker_sge = {(uintptr_t)src, 64, ma->lkey};
  struct ibv_send_wr marker = {}, *bad;
  marker.sg_list = &marker_sge;
  marker.num_sge = 1;
  marker.opcode = IBV_WR_SEND;
  marker.send_flags = IBV_SEND_SIGNALED;
  check(ibv_post_send(uc_a, &marker, &bad) == 0, "UC marker SEND");
  expect_success(a, "UC marker SEND");
  check(next_completion(b->cq, "UC marker receive").status == IBV_WC_SUCCESS, "UC marker receive");
  check(memcmp(target + 128 * KIB, src + 4096, 100 * KIB) == 0, "UC WRITE into ODP memory");

  struct ibv_qp *ud_a = create_qp(a, IBV_QPT_UD, IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, 0, IBV_QP_EX_WITH_SEND, NULL);
  struct ibv_qp *ud_b = create_qp(b, IBV_QPT_UD, IBV_QP_INIT_ATTR_CREATE_FLAGS, 0, 0, NULL);
  check(ud_a && ud_b, "UD QPs");
  connect_to(ud_a, b, 0);
  connect_to(ud_b, a, 0);
  unsigned char *ud_landing = target + 200 * KIB;  /* not touched by anything above */
  post_recv(ud_b, NULL, (uintptr_t)ud_landing, 40 + 512, mb->lkey);
  struct ibv_ah_attr ah_attr = {};
  ah_attr.is_global = 1;
  ah_attr.grh.dgid = b->gid;
  ah_attr.grh.hop_limit = 64;
  ah_attr.port_num = 1;
  struct ibv_ah *ah = ibv_create_ah(a->pd, &ah_attr);
  check(ah != NULL, "ibv_create_ah");
  qpx = ibv_qp_to_qp_ex(ud_a);
  ibv_wr_start(qpx);
  qpx->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_send(qpx);
  ibv_wr_set_ud_addr(qpx, ah, ud_b->qp_num, CHECK_UD_QKEY);
  ibv_wr_set_sge(qpx, ma->lkey, (uintptr_t)src + 777, 512);
  check(ibv_wr_complete(qpx) == 0, "UD ibv_wr_complete");
  expect_success(a, "UD SEND");
  wc = next_completion(b->cq, "UD receive");
  check(wc.status == IBV_WC_SUCCESS && wc.byte_len == 40 + 512 && memcmp(ud_landing + 40, src + 777, 512) == 0,
        "UD SEND into ODP memory");

  check(ibv_destroy_ah(ah) == 0, "ibv_destroy_ah");
  struct ibv_qp *qps[] = {uc_a, uc_b, ud_a, ud_b};
  for (struct ibv_qp *qp : qps) check(ibv_destroy_qp(qp) == 0, "ibv_destroy_qp");
  check(ibv_dereg_mr(ma) == 0 && ibv_dereg_mr(mb) == 0, "ibv_dereg_mr");
  munmap(target, size);
  free(src);
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: mr_check DEVICE_A DEVICE_B\n");
    return 2;
  }
  struct side a = {}, b = {};
  open_side(&a, argv[1]);
  open_side(&b, argv[2]);
  check_command_fd(&a);

  struct ibv_device_attr_ex attr = {};
  check(ibv_query_device_ex(a.context, NULL, &attr) == 0, "ibv_query_device_ex");
  /* What this program runs over ODP memory below is what the device must claim. */
  check((attr.odp_caps.general_caps & (IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT)) ==
            (IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT), "odp_caps: no (implicit) ODP");
  const uint32_t rc = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE | IBV_ODP_SUPPORT_READ |
                      IBV_ODP_SUPPORT_ATOMIC | IBV_ODP_SUPPORT_SRQ_RECV;
  check(attr.odp_caps.per_transport_caps.rc_odp_caps == rc, "odp_caps: RC");
  check(attr.odp_caps.per_transport_caps.uc_odp_caps ==
            (IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE), "odp_caps: UC");
  check(attr.odp_caps.per_transport_caps.ud_odp_caps == (IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV),
        "odp_caps: UD");

  check_qp_ex_forms(&a);
  struct ibv_qp *qa = create_qp(&a, IBV_QPT_RC, IBV_QP_INIT_ATTR_CREATE_FLAGS, 0, 0, NULL);
  struct ibv_qp *qb = create_qp(&b, IBV_QPT_RC, 0, 0, 0, b.srq);
  check(qa && qb, "RC QPs");
  connect_to(qa, &b, qb->qp_num);
  connect_to(qb, &a, qa->qp_num);
  check_rereg(&a, &b, qa);
  check_explicit_odp(&a, &b, qa);
  check_implicit_odp(&a, &b, qa, qb);
  check_uc_ud_odp(&a, &b);
  check_iova(&a, &b, qa); /* last: its refused WRITE takes the RC QP to the error state */

  check(ibv_destroy_qp(qa) == 0 && ibv_destroy_qp(qb) == 0, "ibv_destroy_qp");
  struct side *sides[] = {&a, &b};
  for (struct side *s : sides) {
    check(ibv_destroy_srq(s->srq) == 0 && ibv_destroy_cq(s->cq) == 0 && ibv_dealloc_pd(s->pd) == 0, "teardown");
    check(ibv_close_device(s->context) == 0, "ibv_close_device");
  }
  printf("ok: IOVA WRITE/READ and refusals, rereg (translation, PD, access), ODP (untouched, 16 GiB sparse, "
         "implicit WRITE/READ/FETCH_ADD, advise, SRQ, UC SEND/WRITE, UD SEND), qp_ex forms, cmd_fd\n");
  return 0;
}
