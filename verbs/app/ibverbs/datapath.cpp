// The data path: the functions verbs.h's inline ibv_post_send / ibv_post_recv /
// ibv_post_srq_recv / ibv_poll_cq / ibv_req_notify_cq call through ibv_context_ops, the
// extended CQ poll functions of ibv_cq_ex (ibv_create_cq_ex(3)) and the ibv_wr_* posting
// functions of ibv_qp_ex (ibv_wr_post(3)). Each is a thin walk over the caller's structs
// into the client library, which checks every WR and owns the rings.
#include <sched.h>

#include <cstring>

#include "verbs/app/ibverbs/shim.h"

namespace rrdma::ibverbs {
namespace {

static_assert(sizeof(ibv_sge) == sizeof(verbs::Sge) && offsetof(ibv_sge, lkey) == offsetof(verbs::Sge, lkey));
static_assert(sizeof(ibv_wc) == sizeof(verbs::Cqe) && offsetof(ibv_wc, wc_flags) == offsetof(verbs::Cqe, wc_flags));

std::span<const verbs::Sge> sges_of(const ibv_sge* list, int count) {
  if (list == nullptr || count <= 0) return {};
  return {reinterpret_cast<const verbs::Sge*>(list), static_cast<std::size_t>(count)};
}

const client::AddressHandle* ah_of(ibv_ah* ah) {
  return ah != nullptr ? box_cast<AhBox>(ah)->state->ah.get() : nullptr;
}

// ibv_send_wr -> the client's SendWr; the union members by opcode (ibv_post_send(3)).
client::SendWr to_send_wr(const ibv_send_wr& wr, ibv_qp_type type) {
  client::SendWr out;
  out.wr_id = wr.wr_id;
  out.sg_list = sges_of(wr.sg_list, wr.num_sge);
  out.opcode = static_cast<std::uint32_t>(wr.opcode);
  out.send_flags = wr.send_flags;
  out.imm_data = wr.imm_data;
  const rocev2::WrOpcodeInfo& op = rocev2::wr_opcode_info(static_cast<rocev2::WrOpcode>(wr.opcode));
  if (op.ieth || wr.opcode == IBV_WR_LOCAL_INV) out.invalidate_rkey = wr.invalidate_rkey;
  if (wr.opcode == IBV_WR_BIND_MW) {
    // ibv_post_send(3): bind_mw.mw, bind_mw.rkey (the new key), bind_mw.bind_info. The
    // window's own rkey is not changed here: that is ibv_bind_mw's doing, for type 1.
    const std::uint32_t current = wr.bind_mw.mw != nullptr ? wr.bind_mw.mw->rkey : 0;
    client::SendWr bind = bind_wr(current, wr.bind_mw.rkey, wr.bind_mw.bind_info);
    bind.wr_id = out.wr_id;
    bind.send_flags = out.send_flags;
    return bind;
  }
  if (type == IBV_QPT_UD) {
    out.ah = ah_of(wr.wr.ud.ah);
    out.remote_qpn = wr.wr.ud.remote_qpn;
    out.remote_qkey = wr.wr.ud.remote_qkey;
  } else if (op.atomic_eth) {
    out.remote_addr = wr.wr.atomic.remote_addr;
    out.rkey = wr.wr.atomic.rkey;
    out.compare_add = wr.wr.atomic.compare_add;
    out.swap = wr.wr.atomic.swap;
  } else {
    out.remote_addr = wr.wr.rdma.remote_addr;
    out.rkey = wr.wr.rdma.rkey;
  }
  return out;
}

// ibv_send_wr has no field for ATOMIC_WRITE's 8 bytes or FLUSH's type and level: only
// ibv_wr_atomic_write / ibv_wr_flush post them (ibv_wr_post(3)).
bool needs_qp_ex(const ibv_send_wr& wr) {
  return rocev2::wr_opcode_info(static_cast<rocev2::WrOpcode>(wr.opcode)).empty_read_response();
}

int post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad_wr) {
  auto batch = box_of(qp)->state->qp->begin_send();
  for (ibv_send_wr* current = wr; current != nullptr; current = current->next) {
    const int error = needs_qp_ex(*current) ? EINVAL : batch.push(to_send_wr(*current, qp->qp_type));
    if (error != 0) {
      if (bad_wr != nullptr) *bad_wr = current;
      return error;
    }
  }
  return 0;
}

template <typename Batch>
int post_receives(Batch batch, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  for (ibv_recv_wr* current = wr; current != nullptr; current = current->next) {
    client::RecvWr recv{current->wr_id, sges_of(current->sg_list, current->num_sge)};
    if (const int error = batch.push(recv); error != 0) {
      if (bad_wr != nullptr) *bad_wr = current;
      return error;
    }
  }
  return 0;
}

int post_recv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  return post_receives(box_of(qp)->state->qp->begin_recv(), wr, bad_wr);
}

int post_srq_recv(ibv_srq* srq, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  return post_receives(box_cast<SrqBox>(srq)->state->srq->begin_recv(), wr, bad_wr);
}

// Programs busy-poll their CQs (perftest, the pingpongs without -e), and the process that
// produces the completions is the daemon, not a NIC: on a machine with fewer cores than busy
// threads a spinning program can keep the daemon off the CPU for a whole time slice per
// message. So after a run of empty polls the poller gives the CPU away once; with a core to
// spare sched_yield returns at once. The run is long enough that a poll loop waiting for a
// completion that is microseconds away never yields.
constexpr std::uint32_t kEmptyPollsBeforeYield = 64;

void count_poll(CqState& state, int got) {
  if (got != 0) {
    state.empty_polls.store(0, std::memory_order_relaxed);
  } else if (state.empty_polls.fetch_add(1, std::memory_order_relaxed) + 1 >= kEmptyPollsBeforeYield) {
    state.empty_polls.store(0, std::memory_order_relaxed);
    sched_yield();
  }
}

// ibv_poll_cq(3): the number of completions, negative on error.
int poll_cq(ibv_cq* cq, int num_entries, ibv_wc* wc) {
  if (num_entries < 0 || (num_entries > 0 && wc == nullptr)) return -EINVAL;
  CqState& state = *box_of(cq)->state;
  const int got = state.cq->poll({reinterpret_cast<verbs::Cqe*>(wc), static_cast<std::size_t>(num_entries)});
  count_poll(state, got);
  return got;
}

int req_notify_cq(ibv_cq* cq, int solicited_only) {
  return box_of(cq)->state->cq->req_notify(solicited_only != 0);
}

// ---------------------------------------------------------------------------------------
// ibv_cq_ex: one CQE at a time, read field by field.

int poll_one(ibv_cq_ex* cq) {
  CqState& state = *box_of(cq)->state;
  const int got = state.cq->poll({&state.current, 1});
  count_poll(state, got);
  if (got < 0) return -got;
  if (got == 0) return ENOENT;
  cq->wr_id = state.current.wr_id;
  cq->status = static_cast<ibv_wc_status>(state.current.status);
  return 0;
}

int start_poll(ibv_cq_ex* cq, ibv_poll_cq_attr* attr) {
  if (attr != nullptr && attr->comp_mask != 0) return EINVAL;
  return poll_one(cq);
}
int next_poll(ibv_cq_ex* cq) { return poll_one(cq); }
void end_poll(ibv_cq_ex*) {}

const verbs::Cqe& current(ibv_cq_ex* cq) { return box_of(cq)->state->current; }
ibv_wc_opcode read_opcode(ibv_cq_ex* cq) { return static_cast<ibv_wc_opcode>(current(cq).opcode); }
std::uint32_t read_vendor_err(ibv_cq_ex* cq) { return current(cq).vendor_err; }
std::uint32_t read_byte_len(ibv_cq_ex* cq) { return current(cq).byte_len; }
__be32 read_imm_data(ibv_cq_ex* cq) { return current(cq).imm_data; }
std::uint32_t read_qp_num(ibv_cq_ex* cq) { return current(cq).qp_num; }
std::uint32_t read_src_qp(ibv_cq_ex* cq) { return current(cq).src_qp; }
unsigned int read_wc_flags(ibv_cq_ex* cq) { return current(cq).wc_flags; }
std::uint32_t read_slid(ibv_cq_ex* cq) { return current(cq).slid; }
std::uint8_t read_sl(ibv_cq_ex* cq) { return current(cq).sl; }
std::uint8_t read_dlid_path_bits(ibv_cq_ex* cq) { return current(cq).dlid_path_bits; }

// ---------------------------------------------------------------------------------------
// ibv_qp_ex: ibv_wr_start, one ibv_wr_<opcode> per request followed by its ibv_wr_set_*,
// then ibv_wr_complete posts them all (or ibv_wr_abort drops them).

QpState& qp_state(ibv_qp_ex* qp) { return *reinterpret_cast<QpBox*>(qp)->state; }

// A new request of `opcode` with the qp_ex's wr_id and wr_flags, as ibv_wr_post(3) says.
client::SendWr& begin_wr(ibv_qp_ex* qp, ibv_wr_opcode opcode) {
  PendingSend& pending = qp_state(qp).pending.emplace_back();
  pending.wr.wr_id = qp->wr_id;
  pending.wr.send_flags = qp->wr_flags;
  pending.wr.opcode = static_cast<std::uint32_t>(opcode);
  return pending.wr;
}

// The request the ibv_wr_set_* call applies to; null (and the error kept for
// ibv_wr_complete) when no ibv_wr_<opcode> came first.
PendingSend* last_wr(ibv_qp_ex* qp) {
  QpState& state = qp_state(qp);
  if (state.pending.empty()) {
    if (state.pending_error == 0) state.pending_error = EINVAL;
    return nullptr;
  }
  return &state.pending.back();
}

void wr_start(ibv_qp_ex* qp) {
  qp_state(qp).pending.clear();
  qp_state(qp).pending_error = 0;
}

void wr_abort(ibv_qp_ex* qp) { wr_start(qp); }

int wr_complete(ibv_qp_ex* qp) {
  QpState& state = qp_state(qp);
  int error = state.pending_error;
  if (error == 0) {
    auto batch = state.qp->begin_send();
    for (PendingSend& pending : state.pending) {
      pending.wr.sg_list = pending.sges;
      error = batch.push(pending.wr);
      if (error != 0) break;
    }
  }
  state.pending.clear();
  state.pending_error = 0;
  return error;
}

void wr_unsupported(ibv_qp_ex* qp) {
  if (qp_state(qp).pending_error == 0) qp_state(qp).pending_error = EOPNOTSUPP;
}

void wr_send(ibv_qp_ex* qp) { begin_wr(qp, IBV_WR_SEND); }
void wr_send_imm(ibv_qp_ex* qp, __be32 imm) { begin_wr(qp, IBV_WR_SEND_WITH_IMM).imm_data = imm; }
void wr_send_inv(ibv_qp_ex* qp, std::uint32_t rkey) { begin_wr(qp, IBV_WR_SEND_WITH_INV).invalidate_rkey = rkey; }

void wr_rdma(ibv_qp_ex* qp, ibv_wr_opcode opcode, std::uint32_t rkey, std::uint64_t remote_addr) {
  client::SendWr& wr = begin_wr(qp, opcode);
  wr.rkey = rkey;
  wr.remote_addr = remote_addr;
}
void wr_rdma_write(ibv_qp_ex* qp, std::uint32_t rkey, std::uint64_t addr) { wr_rdma(qp, IBV_WR_RDMA_WRITE, rkey, addr); }
void wr_rdma_read(ibv_qp_ex* qp, std::uint32_t rkey, std::uint64_t addr) { wr_rdma(qp, IBV_WR_RDMA_READ, rkey, addr); }
void wr_rdma_write_imm(ibv_qp_ex* qp, std::uint32_t rkey, std::uint64_t addr, __be32 imm) {
  wr_rdma(qp, IBV_WR_RDMA_WRITE_WITH_IMM, rkey, addr);
  qp_state(qp).pending.back().wr.imm_data = imm;
}

void wr_atomic_cmp_swp(ibv_qp_ex* qp, std::uint32_t rkey, std::uint64_t addr, std::uint64_t compare,
                       std::uint64_t swap) {
  wr_rdma(qp, IBV_WR_ATOMIC_CMP_AND_SWP, rkey, addr);
  qp_state(qp).pending.back().wr.compare_add = compare;
  qp_state(qp).pending.back().wr.swap = swap;
}
void wr_atomic_fetch_add(ibv_qp_ex* qp, std::uint32_t rkey, std::uint64_t addr, std::uint64_t add) {
  wr_rdma(qp, IBV_WR_ATOMIC_FETCH_AND_ADD, rkey, addr);
  qp_state(qp).pending.back().wr.compare_add = add;
}

void wr_bind_mw(ibv_qp_ex* qp, ibv_mw* mw, std::uint32_t rkey, const ibv_mw_bind_info* info) {
  if (mw == nullptr || info == nullptr) {
    if (qp_state(qp).pending_error == 0) qp_state(qp).pending_error = EINVAL;
    return;
  }
  const client::SendWr bind = bind_wr(mw->rkey, rkey, *info);
  client::SendWr& wr = begin_wr(qp, IBV_WR_BIND_MW);
  wr.invalidate_rkey = bind.invalidate_rkey;
  wr.rkey = bind.rkey;
  wr.remote_addr = bind.remote_addr;
  wr.compare_add = bind.compare_add;
  wr.swap = bind.swap;
}
void wr_local_inv(ibv_qp_ex* qp, std::uint32_t rkey) { begin_wr(qp, IBV_WR_LOCAL_INV).invalidate_rkey = rkey; }
void wr_send_tso(ibv_qp_ex* qp, void*, std::uint16_t, std::uint16_t) { wr_unsupported(qp); }
void wr_set_xrc_srqn(ibv_qp_ex* qp, std::uint32_t) { wr_unsupported(qp); }
// IBA 1.5 A19.4.2: the 8 bytes at atomic_wr are copied now and stored at the responder as
// they are (no byte order), in one piece.
void wr_atomic_write(ibv_qp_ex* qp, std::uint32_t rkey, std::uint64_t addr, const void* atomic_wr) {
  wr_rdma(qp, IBV_WR_ATOMIC_WRITE, rkey, addr);
  if (atomic_wr == nullptr) {
    qp_state(qp).pending_error = EINVAL;
    return;
  }
  std::memcpy(&qp_state(qp).pending.back().wr.compare_add, atomic_wr, 8);
}

// IBA 1.5 A19.4.1 (rdma-core 45's ibv_wr_flush): the range, the placement type and the
// selectivity level; the WQE carries them as abi.h says.
void wr_flush(ibv_qp_ex* qp, std::uint32_t rkey, std::uint64_t addr, std::size_t len, std::uint8_t type,
              std::uint8_t level) {
  wr_rdma(qp, static_cast<ibv_wr_opcode>(rocev2::WrOpcode::Flush), rkey, addr);
  client::SendWr& wr = qp_state(qp).pending.back().wr;
  wr.compare_add = len;
  wr.swap = verbs::flush_fields(type, level);
}

void wr_set_ud_addr(ibv_qp_ex* qp, ibv_ah* ah, std::uint32_t remote_qpn, std::uint32_t remote_qkey) {
  if (PendingSend* pending = last_wr(qp)) {
    pending->wr.ah = ah_of(ah);
    pending->wr.remote_qpn = remote_qpn;
    pending->wr.remote_qkey = remote_qkey;
  }
}

void wr_set_sge(ibv_qp_ex* qp, std::uint32_t lkey, std::uint64_t addr, std::uint32_t length) {
  if (PendingSend* pending = last_wr(qp)) pending->sges.assign(1, verbs::Sge{addr, length, lkey});
}

void wr_set_sge_list(ibv_qp_ex* qp, std::size_t num_sge, const ibv_sge* list) {
  PendingSend* pending = last_wr(qp);
  if (pending == nullptr) return;
  if (num_sge > verbs::kMaxSge || (num_sge > 0 && list == nullptr)) {
    qp_state(qp).pending_error = EINVAL;
    return;
  }
  const auto sges = sges_of(list, static_cast<int>(num_sge));
  pending->sges.assign(sges.begin(), sges.end());
}

// Inline data is copied now (the caller may reuse its buffer at once) into the request's
// own buffer, which one SGE then names; the client library copies it into the WQE.
void wr_set_inline_data_list(ibv_qp_ex* qp, std::size_t num_buf, const ibv_data_buf* list) {
  PendingSend* pending = last_wr(qp);
  if (pending == nullptr) return;
  std::size_t total = 0;
  for (std::size_t i = 0; i < num_buf; ++i) total += list[i].length;
  if (total > verbs::kMaxInlineData) {
    qp_state(qp).pending_error = ENOMEM;  // ibv_wr_post(3): larger than max_inline_data
    return;
  }
  pending->inline_data.clear();
  for (std::size_t i = 0; i < num_buf; ++i) {
    const auto* bytes = static_cast<const std::uint8_t*>(list[i].addr);
    pending->inline_data.insert(pending->inline_data.end(), bytes, bytes + list[i].length);
  }
  pending->wr.send_flags |= IBV_SEND_INLINE;
  pending->sges.assign(1, verbs::Sge{reinterpret_cast<std::uintptr_t>(pending->inline_data.data()),
                                     static_cast<std::uint32_t>(total), 0});
}

void wr_set_inline_data(ibv_qp_ex* qp, void* addr, std::size_t length) {
  const ibv_data_buf one{addr, length};
  wr_set_inline_data_list(qp, 1, &one);
}

}  // namespace

void fill_context_ops(ibv_context_ops& ops) {
  ops.post_send = post_send;
  ops.post_recv = post_recv;
  ops.post_srq_recv = post_srq_recv;
  ops.poll_cq = poll_cq;
  ops.req_notify_cq = req_notify_cq;
}

void fill_cq_ex_ops(ibv_cq_ex& cq) {
  cq.start_poll = start_poll;
  cq.next_poll = next_poll;
  cq.end_poll = end_poll;
  cq.read_opcode = read_opcode;
  cq.read_vendor_err = read_vendor_err;
  cq.read_byte_len = read_byte_len;
  cq.read_imm_data = read_imm_data;
  cq.read_qp_num = read_qp_num;
  cq.read_src_qp = read_src_qp;
  cq.read_wc_flags = read_wc_flags;
  cq.read_slid = read_slid;
  cq.read_sl = read_sl;
  cq.read_dlid_path_bits = read_dlid_path_bits;
}

void fill_qp_ex_ops(QpEx& box) {
  box.wr_flush = wr_flush;
  ibv_qp_ex& qp = box.ex;
  qp.wr_start = wr_start;
  qp.wr_complete = wr_complete;
  qp.wr_abort = wr_abort;
  qp.wr_send = wr_send;
  qp.wr_send_imm = wr_send_imm;
  qp.wr_send_inv = wr_send_inv;
  qp.wr_rdma_write = wr_rdma_write;
  qp.wr_rdma_write_imm = wr_rdma_write_imm;
  qp.wr_rdma_read = wr_rdma_read;
  qp.wr_atomic_cmp_swp = wr_atomic_cmp_swp;
  qp.wr_atomic_fetch_add = wr_atomic_fetch_add;
  qp.wr_bind_mw = wr_bind_mw;
  qp.wr_local_inv = wr_local_inv;
  qp.wr_send_tso = wr_send_tso;
  qp.wr_set_xrc_srqn = wr_set_xrc_srqn;
  qp.wr_atomic_write = wr_atomic_write;
  qp.wr_set_ud_addr = wr_set_ud_addr;
  qp.wr_set_sge = wr_set_sge;
  qp.wr_set_sge_list = wr_set_sge_list;
  qp.wr_set_inline_data = wr_set_inline_data;
  qp.wr_set_inline_data_list = wr_set_inline_data_list;
}

}  // namespace rrdma::ibverbs
