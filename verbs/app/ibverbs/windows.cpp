// Memory windows (ibv_alloc_mw(3), ibv_bind_mw(3)): verbs.h's inline ibv_alloc_mw,
// ibv_dealloc_mw and ibv_bind_mw call these through ibv_context_ops. A window lives in the
// daemon's MR table; binding it is a work request the daemon executes in send-queue order
// (docs/VERBS_MEMORY.md, "Memory windows"). ibv_inc_rkey is verbs.h's own inline.
#include "verbs/app/ibverbs/shim.h"

namespace rrdma::ibverbs {

// The client's WR for a bind, in the field mapping of verbs/contract/abi.h (BIND_MW). The
// window is named by the R_Key it has now, as rxe's WQE names it (mw_rkey): a bind posted
// with a stale key fails with IBV_WC_MW_BIND_ERR.
client::SendWr bind_wr(std::uint32_t current_rkey, std::uint32_t new_rkey, const ibv_mw_bind_info& info) {
  client::SendWr wr;
  wr.opcode = IBV_WR_BIND_MW;
  wr.invalidate_rkey = current_rkey;
  wr.rkey = new_rkey;
  wr.remote_addr = info.addr;
  wr.compare_add = info.length;
  const std::uint64_t lkey = info.mr != nullptr ? info.mr->lkey : 0;
  wr.swap = lkey << 32 | info.mw_access_flags;
  return wr;
}

namespace {

ibv_mw* alloc_mw(ibv_pd* pd, ibv_mw_type type) {
  if (pd == nullptr) return fail_null<ibv_mw>(EINVAL);
  auto created = box_cast<PdBox>(pd)->state->pd->alloc_mw(static_cast<std::uint32_t>(type));
  if (!created.ok()) return fail_null<ibv_mw>(created.error);
  auto* box = new MwBox{};
  box->state = new MwState{std::move(created.value)};
  box->object.context = pd->context;
  box->object.pd = pd;
  box->object.rkey = box->state->mw->initial_rkey();
  box->object.handle = box->state->mw->handle();
  box->object.type = type;
  return &box->object;
}

int dealloc_mw(ibv_mw* mw) {
  auto* box = box_cast<MwBox>(mw);
  if (const int error = box->state->mw->destroy(); error != 0) return fail_code(error);
  delete box->state;
  delete box;
  return 0;
}

// ibv_bind_mw(3), type 1 only (verbs.h checked the type, the MR's presence and its PD). As
// rdma-core's rxe provider does: a zero-based type 1 window is refused (IBA o10-36.2.2), the
// bind is posted as a BIND_MW work request with the next key (ibv_inc_rkey), and mw->rkey
// takes that key at once; "the user has to undo this if he gets an error completion".
int bind_mw(ibv_qp* qp, ibv_mw* mw, ibv_mw_bind* mw_bind) {
  if (qp == nullptr || mw == nullptr || mw_bind == nullptr) return fail_code(EINVAL);
  if ((mw_bind->bind_info.mw_access_flags & IBV_ACCESS_ZERO_BASED) != 0) return fail_code(EINVAL);
  client::SendWr wr = bind_wr(mw->rkey, ibv_inc_rkey(mw->rkey), mw_bind->bind_info);
  wr.wr_id = mw_bind->wr_id;
  wr.send_flags = mw_bind->send_flags;
  auto batch = box_of(qp)->state->qp->begin_send();
  if (const int error = batch.push(wr); error != 0) return fail_code(error);
  mw->rkey = wr.rkey;
  return 0;
}

}  // namespace

void fill_mw_ops(ibv_context_ops& ops) {
  ops.alloc_mw = alloc_mw;
  ops.dealloc_mw = dealloc_mw;
  ops.bind_mw = bind_mw;
}

}  // namespace rrdma::ibverbs
