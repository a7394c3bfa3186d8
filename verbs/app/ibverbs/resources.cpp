// The verbs objects: PD, MR, AH, completion channel, CQ (plain and extended), QP (plain and
// extended), SRQ; their create / modify / query / destroy calls, and the extended verbs that
// go through verbs_context (query_port, query_device_ex, create_cq_ex, create_qp_ex,
// create_srq_ex). Each ibv_* struct is filled as verbs.h documents it and boxed with the
// client library's object (shim.h).
#include <cstring>

#include "verbs/app/ibverbs/shim.h"

namespace rrdma::ibverbs {
namespace {

// The ibv_send_wr opcodes ibv_wr_* can build on our QPs (ibv_create_qp_ex(3) send_ops_flags).
// IBV_QP_EX_WITH_FLUSH is rdma-core 45's (1 << 11); Debian 12's verbs.h lacks it.
constexpr std::uint64_t kSendOpsWithFlush = std::uint64_t{1} << 11;
constexpr std::uint64_t kSupportedSendOps = rocev2::implemented_send_ops_flags();
static_assert(kSupportedSendOps ==
              (IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_SEND |
               IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
               IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_BIND_MW |
               IBV_QP_EX_WITH_SEND_WITH_INV | IBV_QP_EX_WITH_ATOMIC_WRITE | kSendOpsWithFlush),
              "the table's bits are verbs.h's (update this check when a row becomes implemented)");
static_assert(rocev2::wr_opcode_info(rocev2::WrOpcode::AtomicWrite).send_ops_flag == IBV_QP_EX_WITH_ATOMIC_WRITE);

// What a CQE carries (verbs/contract/abi.h Cqe); completion timestamps, VLANs, flow tags we have not.
constexpr std::uint64_t kSupportedWcFlags =
    IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM | IBV_WC_EX_WITH_SRC_QP |
    IBV_WC_EX_WITH_SLID | IBV_WC_EX_WITH_SL | IBV_WC_EX_WITH_DLID_PATH_BITS;

std::shared_ptr<client::CompletionQueue> client_cq(ibv_cq* cq) {
  return cq != nullptr ? box_of(cq)->state->cq : nullptr;
}

void init_sync(pthread_mutex_t& mutex, pthread_cond_t& cond) {
  pthread_mutex_init(&mutex, nullptr);
  pthread_cond_init(&cond, nullptr);
}
void destroy_sync(pthread_mutex_t& mutex, pthread_cond_t& cond) {
  pthread_cond_destroy(&cond);
  pthread_mutex_destroy(&mutex);
}

template <typename Map, typename Object>
void remember(ContextState& state, Map ContextState::*map, std::uint32_t handle, Object* object) {
  std::lock_guard lock(state.objects_mutex);
  (state.*map)[handle] = object;
}
template <typename Map>
void forget(ContextState& state, Map ContextState::*map, std::uint32_t handle) {
  std::lock_guard lock(state.objects_mutex);
  (state.*map).erase(handle);
}

// The flow label is 20 bits (IBA 8.3.1); the kernel takes the 32-bit field of the uAPI as it
// comes and only its low 20 bits ever matter (rdma_flow_label_to_udp_sport), and UCX 1.13
// passes 0xFFFFFFFF ("no label chosen") in every UD address vector, so the drop-in keeps the
// low 20 bits as a kernel provider would, instead of refusing.
std::uint32_t flow_label_bits(std::uint32_t flow_label) { return flow_label & 0xF'FFFF; }

// RoCE needs a GRH in every address vector (IBA Annex A17: the GID is the IP address).
std::optional<client::AhAttributes> ah_attributes(const ibv_ah_attr& attr) {
  if (attr.is_global == 0) return std::nullopt;
  client::AhAttributes out;
  out.dgid = to_gid(attr.grh.dgid);
  out.sgid_index = attr.grh.sgid_index;
  out.hop_limit = attr.grh.hop_limit;
  out.traffic_class = attr.grh.traffic_class;
  out.flow_label = flow_label_bits(attr.grh.flow_label);
  out.port_num = attr.port_num;
  return out;
}

ibv_ah_attr to_ibv_ah_attr(const verbs::QpAttributes& attributes) {
  ibv_ah_attr out{};
  out.is_global = 1;
  out.grh.dgid = to_ibv_gid(attributes.dgid);
  out.grh.sgid_index = attributes.sgid_index;
  out.grh.hop_limit = attributes.hop_limit;
  out.grh.traffic_class = attributes.traffic_class;
  out.grh.flow_label = attributes.flow_label;
  out.port_num = attributes.port_num;
  return out;
}

ibv_qp_cap to_ibv_cap(const verbs::QpCapabilities& cap) {
  return ibv_qp_cap{cap.max_send_wr, cap.max_recv_wr, cap.max_send_sge, cap.max_recv_sge, cap.max_inline_data};
}

// ---------------------------------------------------------------------------------------
// CQ

ibv_cq_ex* create_cq(ibv_context* context, const ibv_cq_init_attr_ex& attr) {
  if (attr.cqe == 0 || attr.comp_vector >= static_cast<std::uint32_t>(context->num_comp_vectors))
    return fail_null<ibv_cq_ex>(EINVAL);
  if ((attr.wc_flags & ~kSupportedWcFlags) != 0 || (attr.comp_mask & ~IBV_CQ_INIT_ATTR_MASK_FLAGS) != 0)
    return fail_null<ibv_cq_ex>(EOPNOTSUPP);
  std::shared_ptr<client::CompletionChannel> channel;
  if (attr.channel != nullptr) channel = box_cast<ChannelBox>(attr.channel)->state->channel;
  ContextState& state = state_of(context);
  auto created = state.client->create_cq(attr.cqe, channel);
  if (!created.ok()) return fail_null<ibv_cq_ex>(created.error);
  auto* box = new CqBox{};
  box->state = new CqState;
  box->state->cq = std::move(created.value);
  box->state->wc_flags = attr.wc_flags;
  box->state->cq->user_context = box;
  ibv_cq_ex& cq = box->object;
  cq.context = context;
  cq.channel = attr.channel;
  cq.cq_context = attr.cq_context;
  cq.handle = box->state->cq->handle();
  cq.cqe = static_cast<int>(box->state->cq->capacity());
  init_sync(cq.mutex, cq.cond);
  fill_cq_ex_ops(cq);
  remember(state, &ContextState::cqs, cq.handle, ibv_cq_ex_to_cq(&cq));
  return &cq;
}

// ---------------------------------------------------------------------------------------
// QP

// The ibv_wr_* opcodes each transport carries (IBA ch. 9 / 10: UC has no READ nor atomics,
// UD only SENDs), as rdma-core's rxe provider splits them (check_qp_init_attr), less what
// we do not implement.
std::uint64_t send_ops_of(ibv_qp_type type) {
  constexpr std::uint64_t kUc = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_SEND |
                                IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_SEND_WITH_INV |
                                IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_BIND_MW;
  constexpr std::uint64_t kUd = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM;
  switch (type) {
    case IBV_QPT_RC: return kSupportedSendOps;
    case IBV_QPT_UC: return kSupportedSendOps & kUc;
    case IBV_QPT_UD: return kSupportedSendOps & kUd;
    default: return 0;
  }
}

// ibv_create_qp_ex(3) attributes rxe takes: a PD, create_flags if there are none (rxe's
// kernel refuses any, EOPNOTSUPP), send_ops_flags its transport carries. The rest (XRCD,
// TSO, RSS indirection and hash, source QPN) is EOPNOTSUPP, as rxe answers.
int check_qp_init(const ibv_qp_init_attr_ex& attr) {
  constexpr std::uint32_t kKnown = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  if ((attr.comp_mask & ~kKnown) != 0) return EOPNOTSUPP;
  if ((attr.comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) != 0 && attr.create_flags != 0) return EOPNOTSUPP;
  if ((attr.comp_mask & IBV_QP_INIT_ATTR_PD) == 0 || attr.pd == nullptr) return EINVAL;
  if (attr.qp_type != IBV_QPT_RC && attr.qp_type != IBV_QPT_UC && attr.qp_type != IBV_QPT_UD) return EOPNOTSUPP;
  if ((attr.comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) != 0 && (attr.send_ops_flags & ~send_ops_of(attr.qp_type)) != 0)
    return EOPNOTSUPP;
  return 0;
}

ibv_qp* create_qp(ibv_context* context, ibv_qp_init_attr_ex& attr) {
  if (const int error = check_qp_init(attr); error != 0) return fail_null<ibv_qp>(error);
  client::QpInit init;
  switch (attr.qp_type) {
    case IBV_QPT_RC: init.type = verbs::QpType::Rc; break;
    case IBV_QPT_UC: init.type = verbs::QpType::Uc; break;
    case IBV_QPT_UD: init.type = verbs::QpType::Ud; break;
    default: return fail_null<ibv_qp>(EOPNOTSUPP);  // RAW_PACKET, XRC, DRIVER
  }
  if (attr.send_cq == nullptr || attr.recv_cq == nullptr) return fail_null<ibv_qp>(EINVAL);
  init.send_cq = client_cq(attr.send_cq);
  init.recv_cq = client_cq(attr.recv_cq);
  if (attr.srq != nullptr) init.srq = box_cast<SrqBox>(attr.srq)->state->srq;
  init.cap = {attr.cap.max_send_wr, attr.cap.max_recv_wr, attr.cap.max_send_sge, attr.cap.max_recv_sge,
              attr.cap.max_inline_data};
  init.sq_sig_all = attr.sq_sig_all != 0;
  auto created = box_cast<PdBox>(attr.pd)->state->pd->create_qp(init);
  if (!created.ok()) return fail_null<ibv_qp>(created.error);

  auto* box = new QpBox{};
  box->state = new QpState{std::move(created.value), {}, 0};
  box->state->qp->user_context = box;
  ibv_qp& qp = box->object.ex.qp_base;
  qp.context = context;
  qp.qp_context = attr.qp_context;
  qp.pd = attr.pd;
  qp.send_cq = attr.send_cq;
  qp.recv_cq = attr.recv_cq;
  qp.srq = attr.srq;
  qp.handle = box->state->qp->handle();
  qp.qp_num = box->state->qp->qp_num();
  qp.state = IBV_QPS_RESET;
  qp.qp_type = attr.qp_type;
  init_sync(qp.mutex, qp.cond);
  fill_qp_ex_ops(box->object);
  attr.cap = to_ibv_cap(box->state->qp->capabilities());
  remember(state_of(context), &ContextState::qps, qp.handle, &qp);
  return &qp;
}

verbs::QpAttributes to_client_attributes(const ibv_qp_attr& attr, int mask) {
  verbs::QpAttributes out;
  out.state = static_cast<verbs::QpState>(attr.qp_state);
  out.cur_state = static_cast<verbs::QpState>(attr.cur_qp_state);
  out.path_mtu = static_cast<verbs::Mtu>(attr.path_mtu);
  out.qkey = attr.qkey;
  out.rq_psn = attr.rq_psn;
  out.sq_psn = attr.sq_psn;
  out.dest_qp_num = attr.dest_qp_num;
  out.access_flags = attr.qp_access_flags;
  out.pkey_index = attr.pkey_index;
  out.port_num = attr.port_num;
  out.max_rd_atomic = attr.max_rd_atomic;
  out.max_dest_rd_atomic = attr.max_dest_rd_atomic;
  out.min_rnr_timer = attr.min_rnr_timer;
  out.timeout = attr.timeout;
  out.retry_cnt = attr.retry_cnt;
  out.rnr_retry = attr.rnr_retry;
  if ((mask & IBV_QP_AV) != 0) {
    out.dgid = to_gid(attr.ah_attr.grh.dgid);
    out.sgid_index = attr.ah_attr.grh.sgid_index;
    out.hop_limit = attr.ah_attr.grh.hop_limit;
    out.traffic_class = attr.ah_attr.grh.traffic_class;
    out.flow_label = flow_label_bits(attr.ah_attr.grh.flow_label);
    // The address vector's port is the QP's port (ibv_modify_qp(3) takes it from ah_attr).
    if ((mask & IBV_QP_PORT) == 0 && attr.ah_attr.port_num != 0) out.port_num = attr.ah_attr.port_num;
  }
  return out;
}

void to_ibv_qp_attr(const verbs::QpAttributes& in, ibv_qp_attr& out) {
  out = ibv_qp_attr{};
  out.qp_state = static_cast<ibv_qp_state>(in.state);
  out.cur_qp_state = static_cast<ibv_qp_state>(in.cur_state);
  out.path_mtu = static_cast<ibv_mtu>(in.path_mtu);
  out.path_mig_state = IBV_MIG_MIGRATED;
  out.qkey = in.qkey;
  out.rq_psn = in.rq_psn;
  out.sq_psn = in.sq_psn;
  out.dest_qp_num = in.dest_qp_num;
  out.qp_access_flags = in.access_flags;
  out.cap = to_ibv_cap(in.cap);
  out.ah_attr = to_ibv_ah_attr(in);
  out.pkey_index = in.pkey_index;
  out.port_num = in.port_num;
  out.max_rd_atomic = in.max_rd_atomic;
  out.max_dest_rd_atomic = in.max_dest_rd_atomic;
  out.min_rnr_timer = in.min_rnr_timer;
  out.timeout = in.timeout;
  out.retry_cnt = in.retry_cnt;
  out.rnr_retry = in.rnr_retry;
}

// ---------------------------------------------------------------------------------------
// SRQ

ibv_srq* create_srq(ibv_pd* pd, void* srq_context, const ibv_srq_attr& attr) {
  auto created = box_cast<PdBox>(pd)->state->pd->create_srq(attr.max_wr, attr.max_sge, attr.srq_limit);
  if (!created.ok()) return fail_null<ibv_srq>(created.error);
  auto* box = new SrqBox{};
  box->state = new SrqState{std::move(created.value)};
  box->state->srq->user_context = box;
  ibv_srq& srq = box->object;
  srq.context = pd->context;
  srq.srq_context = srq_context;
  srq.pd = pd;
  srq.handle = box->state->srq->handle();
  init_sync(srq.mutex, srq.cond);
  remember(state_of(pd->context), &ContextState::srqs, srq.handle, &srq);
  return &srq;
}

// ---------------------------------------------------------------------------------------
// verbs_context entries

// On-demand paging is how the daemon reaches memory anyway: it never pins, it reads and
// writes the application through /proc/self/mem, faulting pages in (docs/VERBS_MEMORY.md).
// So ODP regions, explicit and implicit, serve every operation; we report per transport
// what tests/ibverbs/mr_check.cpp runs over ODP memory between two vnics.
ibv_odp_caps odp_capabilities() {
  ibv_odp_caps caps{};
  caps.general_caps = IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT;
  constexpr std::uint32_t kUd = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV;
  constexpr std::uint32_t kUc = kUd | IBV_ODP_SUPPORT_WRITE;
  caps.per_transport_caps.rc_odp_caps =
      kUc | IBV_ODP_SUPPORT_READ | IBV_ODP_SUPPORT_ATOMIC | IBV_ODP_SUPPORT_SRQ_RECV;
  caps.per_transport_caps.uc_odp_caps = kUc;
  caps.per_transport_caps.ud_odp_caps = kUd;
  return caps;
}

int query_device_ex(ibv_context* context, const ibv_query_device_ex_input* input, ibv_device_attr_ex* attr,
                    size_t attr_size) {
  if (input != nullptr && input->comp_mask != 0) return EINVAL;
  if (attr == nullptr || attr_size < sizeof(ibv_device_attr)) return EINVAL;
  ibv_device_attr_ex full{};
  if (const int error = ibv_query_device(context, &full.orig_attr); error != 0) return error;
  full.phys_port_cnt_ex = full.orig_attr.phys_port_cnt;
  full.odp_caps = odp_capabilities();
  // IBA 1.5 A19: ATOMIC_WRITE and FLUSH of the global placement type; no persistent memory
  // stands behind any MR, so FLUSH_PERSISTENT is not offered (docs/IBVERBS.md).
  full.device_cap_flags_ex = full.orig_attr.device_cap_flags | kDeviceFlushGlobal | kDeviceAtomicWrite;
  std::memcpy(attr, &full, std::min(attr_size, sizeof full));
  if (attr_size > sizeof full) std::memset(reinterpret_cast<char*>(attr) + sizeof full, 0, attr_size - sizeof full);
  return 0;
}

ibv_cq_ex* create_cq_ex(ibv_context* context, ibv_cq_init_attr_ex* attr) {
  if (attr == nullptr) return fail_null<ibv_cq_ex>(EINVAL);
  return create_cq(context, *attr);
}

ibv_qp* create_qp_ex(ibv_context* context, ibv_qp_init_attr_ex* attr) {
  if (attr == nullptr) return fail_null<ibv_qp>(EINVAL);
  return create_qp(context, *attr);
}

ibv_srq* create_srq_ex(ibv_context*, ibv_srq_init_attr_ex* attr) {
  if (attr == nullptr) return fail_null<ibv_srq>(EINVAL);
  const std::uint32_t known = IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_CQ;
  if ((attr->comp_mask & ~known) != 0) return fail_null<ibv_srq>(EOPNOTSUPP);
  if ((attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) != 0 && attr->srq_type != IBV_SRQT_BASIC)
    return fail_null<ibv_srq>(EOPNOTSUPP);  // XRC and tag matching
  if ((attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) == 0 || attr->pd == nullptr) return fail_null<ibv_srq>(EINVAL);
  return create_srq(attr->pd, attr->srq_context, attr->attr);
}

}  // namespace

int query_port_ex(ibv_context* context, std::uint8_t port_num, ibv_port_attr* attr, size_t attr_size) {
  if (attr == nullptr || attr_size < offsetof(ibv_port_attr, port_cap_flags2)) return EINVAL;
  ibv_port_attr full{};
  if (const int error = ibv_query_port(context, port_num, reinterpret_cast<_compat_ibv_port_attr*>(&full));
      error != 0)
    return error;
  std::memcpy(attr, &full, std::min(attr_size, sizeof full));
  return 0;
}

void fill_verbs_context_ops(verbs_context& vctx) {
  vctx.query_port = query_port_ex;
  vctx.query_device_ex = query_device_ex;
  vctx.create_cq_ex = create_cq_ex;
  vctx.create_qp_ex = create_qp_ex;
  vctx.create_srq_ex = create_srq_ex;
  vctx.advise_mr = advise_mr;
}

// IBV_ACCESS_OPTIONAL_RANGE bits are hints a device may ignore (ibv_reg_mr(3)). Beyond the
// four rights we take ON_DEMAND (the daemon never pins: docs/VERBS_MEMORY.md) and MW_BIND
// (memory windows may be bound to the region); huge-page promises and flush name features we
// do not have (rxe refuses HUGETLB too).
int accepted_access(unsigned int& access) {
  access &= ~static_cast<unsigned int>(IBV_ACCESS_OPTIONAL_RANGE);
  constexpr unsigned int kAccepted = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                                     IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_ON_DEMAND | IBV_ACCESS_MW_BIND |
                                     kAccessFlushGlobal;
  return (access & ~kAccepted) != 0 ? EOPNOTSUPP : 0;
}

}  // namespace rrdma::ibverbs

using namespace rrdma::ibverbs;

extern "C" {

// ---------------------------------------------------------------------------------------
// PD

RRDMA_EXPORT ibv_pd* ibv_alloc_pd(ibv_context* context) {
  if (context == nullptr) return fail_null<ibv_pd>(EINVAL);
  auto created = state_of(context).client->alloc_pd();
  if (!created.ok()) return fail_null<ibv_pd>(created.error);
  auto* box = new PdBox{};
  box->state = new PdState{std::move(created.value)};
  box->object.context = context;
  box->object.handle = box->state->pd->handle();
  return &box->object;
}

RRDMA_EXPORT int ibv_dealloc_pd(ibv_pd* pd) {
  if (pd == nullptr) return EINVAL;
  auto* box = box_cast<PdBox>(pd);
  if (const int error = box->state->pd->destroy(); error != 0) return fail_code(error);
  delete box->state;
  delete box;
  return 0;
}

// ---------------------------------------------------------------------------------------
// MR

RRDMA_EXPORT ibv_mr* ibv_reg_mr_iova2(ibv_pd* pd, void* addr, size_t length, std::uint64_t iova,
                                      unsigned int access) {
  if (pd == nullptr) return fail_null<ibv_mr>(EINVAL);
  // The daemon translates the IOVA that WQEs and RETHs name into this process's address
  // (docs/VERBS_MEMORY.md), so any IOVA rxe accepts is accepted.
  if (const int error = accepted_access(access); error != 0) return fail_null<ibv_mr>(error);
  auto created = box_cast<PdBox>(pd)->state->pd->register_memory(addr, length, access, iova);
  if (!created.ok()) return fail_null<ibv_mr>(created.error);
  auto* box = new MrBox{};
  box->state = new MrState{std::move(created.value)};
  ibv_mr& mr = box->object;
  mr.context = pd->context;
  mr.pd = pd;
  mr.addr = addr;
  mr.length = length;
  mr.handle = box->state->mr->handle();
  mr.lkey = box->state->mr->lkey();
  mr.rkey = box->state->mr->rkey();
  remember(state_of(pd->context), &ContextState::mrs, mr.lkey, &mr);
  return &mr;
}

RRDMA_EXPORT ibv_mr* ibv_reg_mr(ibv_pd* pd, void* addr, size_t length, int access) {
  return ibv_reg_mr_iova2(pd, addr, length, reinterpret_cast<std::uintptr_t>(addr), static_cast<unsigned int>(access));
}

RRDMA_EXPORT ibv_mr* ibv_reg_mr_iova(ibv_pd* pd, void* addr, size_t length, std::uint64_t iova, int access) {
  return ibv_reg_mr_iova2(pd, addr, length, iova, static_cast<unsigned int>(access));
}

RRDMA_EXPORT int ibv_dereg_mr(ibv_mr* mr) {
  if (mr == nullptr) return EINVAL;
  auto* box = box_cast<MrBox>(mr);
  if (const int error = box->state->mr->destroy(); error != 0) return fail_code(error);
  forget(state_of(mr->context), &ContextState::mrs, mr->lkey);
  delete box->state;
  delete box;
  return 0;
}

// ---------------------------------------------------------------------------------------
// AH

RRDMA_EXPORT ibv_ah* ibv_create_ah(ibv_pd* pd, ibv_ah_attr* attr) {
  if (pd == nullptr || attr == nullptr) return fail_null<ibv_ah>(EINVAL);
  const auto attributes = ah_attributes(*attr);
  if (!attributes) return fail_null<ibv_ah>(EINVAL);
  auto created = box_cast<PdBox>(pd)->state->pd->create_ah(*attributes);
  if (!created.ok()) return fail_null<ibv_ah>(created.error);
  auto* box = new AhBox{};
  box->state = new AhState{std::move(created.value)};
  box->object.context = pd->context;
  box->object.pd = pd;
  box->object.handle = box->state->ah->handle();
  return &box->object;
}

RRDMA_EXPORT int ibv_destroy_ah(ibv_ah* ah) {
  if (ah == nullptr) return EINVAL;
  auto* box = box_cast<AhBox>(ah);
  if (const int error = box->state->ah->destroy(); error != 0) return fail_code(error);
  delete box->state;
  delete box;
  return 0;
}

// ---------------------------------------------------------------------------------------
// Completion channels and CQs

RRDMA_EXPORT ibv_comp_channel* ibv_create_comp_channel(ibv_context* context) {
  if (context == nullptr) return fail_null<ibv_comp_channel>(EINVAL);
  auto created = state_of(context).client->create_comp_channel();
  if (!created.ok()) return fail_null<ibv_comp_channel>(created.error);
  auto* box = new ChannelBox{};
  box->state = new ChannelState{std::move(created.value)};
  box->object.context = context;
  box->object.fd = box->state->channel->fd();
  box->object.refcnt = 0;
  return &box->object;
}

// EBUSY while a CQ still uses the channel (ibv_create_comp_channel(3)).
RRDMA_EXPORT int ibv_destroy_comp_channel(ibv_comp_channel* channel) {
  if (channel == nullptr) return EINVAL;
  auto* box = box_cast<ChannelBox>(channel);
  if (box->state->channel->attached() != 0) return fail_code(EBUSY);
  delete box->state;
  delete box;
  return 0;
}

RRDMA_EXPORT ibv_cq* ibv_create_cq(ibv_context* context, int cqe, void* cq_context, ibv_comp_channel* channel,
                                   int comp_vector) {
  if (context == nullptr || cqe <= 0 || comp_vector < 0) return fail_null<ibv_cq>(EINVAL);
  ibv_cq_init_attr_ex attr{};
  attr.cqe = static_cast<std::uint32_t>(cqe);
  attr.cq_context = cq_context;
  attr.channel = channel;
  attr.comp_vector = static_cast<std::uint32_t>(comp_vector);
  ibv_cq_ex* cq = create_cq(context, attr);
  return cq != nullptr ? ibv_cq_ex_to_cq(cq) : nullptr;
}

RRDMA_EXPORT int ibv_resize_cq(ibv_cq* cq, int cqe) {
  if (cq == nullptr || cqe <= 0) return EINVAL;
  CqState& state = *box_of(cq)->state;
  if (const int error = state.cq->resize(static_cast<std::uint32_t>(cqe)); error != 0) return fail_code(error);
  cq->cqe = static_cast<int>(state.cq->capacity());
  return 0;
}

// ibv_destroy_cq(3): waits until every event ibv_get_cq_event delivered was acknowledged.
RRDMA_EXPORT int ibv_destroy_cq(ibv_cq* cq) {
  if (cq == nullptr) return EINVAL;
  CqBox* box = box_of(cq);
  if (const int error = box->state->cq->destroy(); error != 0) return fail_code(error);
  forget(state_of(cq->context), &ContextState::cqs, cq->handle);
  pthread_mutex_lock(&cq->mutex);
  while (cq->comp_events_completed < box->state->events_delivered) pthread_cond_wait(&cq->cond, &cq->mutex);
  pthread_mutex_unlock(&cq->mutex);
  box->state->cq->user_context = nullptr;
  destroy_sync(cq->mutex, cq->cond);
  delete box->state;
  delete box;
  return 0;
}

RRDMA_EXPORT int ibv_get_cq_event(ibv_comp_channel* channel, ibv_cq** cq, void** cq_context) {
  if (channel == nullptr || cq == nullptr || cq_context == nullptr) {
    errno = EINVAL;
    return -1;
  }
  std::shared_ptr<client::CompletionQueue> fired;
  if (const int error = box_cast<ChannelBox>(channel)->state->channel->get_cq_event(fired); error != 0) {
    errno = error;
    return -1;
  }
  auto* box = static_cast<CqBox*>(fired->user_context.load());
  if (box == nullptr) {  // destroyed while its event was on the way
    errno = EAGAIN;
    return -1;
  }
  ibv_cq* out = ibv_cq_ex_to_cq(&box->object);
  pthread_mutex_lock(&out->mutex);
  ++box->state->events_delivered;
  pthread_mutex_unlock(&out->mutex);
  *cq = out;
  *cq_context = out->cq_context;
  return 0;
}

RRDMA_EXPORT void ibv_ack_cq_events(ibv_cq* cq, unsigned int nevents) {
  if (cq == nullptr) return;
  pthread_mutex_lock(&cq->mutex);
  cq->comp_events_completed += nevents;
  pthread_cond_broadcast(&cq->cond);
  pthread_mutex_unlock(&cq->mutex);
}

// ---------------------------------------------------------------------------------------
// QP

RRDMA_EXPORT ibv_qp* ibv_create_qp(ibv_pd* pd, ibv_qp_init_attr* attr) {
  if (pd == nullptr || attr == nullptr) return fail_null<ibv_qp>(EINVAL);
  ibv_qp_init_attr_ex ex{};
  ex.qp_context = attr->qp_context;
  ex.send_cq = attr->send_cq;
  ex.recv_cq = attr->recv_cq;
  ex.srq = attr->srq;
  ex.cap = attr->cap;
  ex.qp_type = attr->qp_type;
  ex.sq_sig_all = attr->sq_sig_all;
  ex.comp_mask = IBV_QP_INIT_ATTR_PD;
  ex.pd = pd;
  ibv_qp* qp = create_qp(pd->context, ex);
  if (qp != nullptr) attr->cap = ex.cap;
  return qp;
}

RRDMA_EXPORT ibv_qp_ex* ibv_qp_to_qp_ex(ibv_qp* qp) {
  return qp != nullptr ? &box_of(qp)->object.ex : nullptr;
}

RRDMA_EXPORT int ibv_modify_qp(ibv_qp* qp, ibv_qp_attr* attr, int attr_mask) {
  if (qp == nullptr || attr == nullptr) return EINVAL;
  if ((attr_mask & IBV_QP_AV) != 0 && attr->ah_attr.is_global == 0) return EINVAL;  // RoCE: GRH required
  QpState& state = *box_of(qp)->state;
  if (const int error = state.qp->modify(to_client_attributes(*attr, attr_mask), attr_mask); error != 0)
    return fail_code(error);
  pthread_mutex_lock(&qp->mutex);
  qp->state = static_cast<ibv_qp_state>(state.qp->state());
  pthread_mutex_unlock(&qp->mutex);
  return 0;
}

RRDMA_EXPORT int ibv_query_qp(ibv_qp* qp, ibv_qp_attr* attr, int attr_mask, ibv_qp_init_attr* init_attr) {
  if (qp == nullptr || attr == nullptr || init_attr == nullptr) return EINVAL;
  QpState& state = *box_of(qp)->state;
  verbs::QpAttributes queried;
  if (const int error = state.qp->query(attr_mask, queried); error != 0) return fail_code(error);
  to_ibv_qp_attr(queried, *attr);
  *init_attr = ibv_qp_init_attr{};
  init_attr->qp_context = qp->qp_context;
  init_attr->send_cq = qp->send_cq;
  init_attr->recv_cq = qp->recv_cq;
  init_attr->srq = qp->srq;
  init_attr->cap = attr->cap;
  init_attr->qp_type = qp->qp_type;
  init_attr->sq_sig_all = state.qp->sq_sig_all() ? 1 : 0;
  pthread_mutex_lock(&qp->mutex);
  qp->state = attr->qp_state;
  pthread_mutex_unlock(&qp->mutex);
  return 0;
}

RRDMA_EXPORT int ibv_destroy_qp(ibv_qp* qp) {
  if (qp == nullptr) return EINVAL;
  QpBox* box = box_of(qp);
  if (const int error = box->state->qp->destroy(); error != 0) return fail_code(error);
  forget(state_of(qp->context), &ContextState::qps, qp->handle);
  box->state->qp->user_context = nullptr;
  destroy_sync(qp->mutex, qp->cond);
  delete box->state;
  delete box;
  return 0;
}

// ---------------------------------------------------------------------------------------
// SRQ

RRDMA_EXPORT ibv_srq* ibv_create_srq(ibv_pd* pd, ibv_srq_init_attr* attr) {
  if (pd == nullptr || attr == nullptr) return fail_null<ibv_srq>(EINVAL);
  ibv_srq* srq = create_srq(pd, attr->srq_context, attr->attr);
  if (srq != nullptr) {
    auto& state = *box_cast<SrqBox>(srq)->state;
    attr->attr.max_wr = state.srq->max_wr();
    attr->attr.max_sge = state.srq->max_sge();
  }
  return srq;
}

RRDMA_EXPORT int ibv_modify_srq(ibv_srq* srq, ibv_srq_attr* attr, int attr_mask) {
  if (srq == nullptr || attr == nullptr) return EINVAL;
  const verbs::SrqAttributes attributes{attr->max_wr, attr->max_sge, attr->srq_limit};
  if (const int error = box_cast<SrqBox>(srq)->state->srq->modify(attributes, attr_mask); error != 0)
    return fail_code(error);
  return 0;
}

RRDMA_EXPORT int ibv_query_srq(ibv_srq* srq, ibv_srq_attr* attr) {
  if (srq == nullptr || attr == nullptr) return EINVAL;
  verbs::SrqAttributes out;
  if (const int error = box_cast<SrqBox>(srq)->state->srq->query(out); error != 0) return fail_code(error);
  attr->max_wr = out.max_wr;
  attr->max_sge = out.max_sge;
  attr->srq_limit = out.srq_limit;
  return 0;
}

RRDMA_EXPORT int ibv_destroy_srq(ibv_srq* srq) {
  if (srq == nullptr) return EINVAL;
  auto* box = box_cast<SrqBox>(srq);
  if (const int error = box->state->srq->destroy(); error != 0) return fail_code(error);
  forget(state_of(srq->context), &ContextState::srqs, srq->handle);
  box->state->srq->user_context = nullptr;
  destroy_sync(srq->mutex, srq->cond);
  delete box->state;
  delete box;
  return 0;
}

}  // extern "C"
