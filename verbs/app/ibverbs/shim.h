// Internals of our libibverbs.so.1 (docs/IBVERBS.md): how the structs a program sees
// (ibv_device, ibv_context, ibv_cq, ...) carry our own state. Each public struct is the first
// member of a standard-layout "box", so the pointer the program hands back converts to the box
// with one cast; the box points at the library object that does the work.
#pragma once

#include <infiniband/verbs.h>
// verbs.h turns these names into inline wrappers; we define the functions themselves.
#undef ibv_query_port
#undef ibv_reg_mr
#undef ibv_reg_mr_iova

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "verbs/app/client.h"

#define RRDMA_EXPORT __attribute__((visibility("default")))

namespace rrdma::ibverbs {

// Verbs report errors in two ways (see each man page): functions returning a pointer set
// errno and return NULL; functions returning int return the errno value itself.
template <typename T>
T* fail_null(int error) {
  errno = error;
  return nullptr;
}
inline int fail_code(int error) {
  errno = error;
  return error;
}

// One vnic as libibverbs presents it. Lives until the process ends (a context keeps a pointer
// to its device, and ibv_free_device_list does not end a context, ibv_get_device_list(3)).
struct DeviceBox {
  ibv_device device;   // first: ibv_device* <-> DeviceBox*
  int index;           // ibv_get_device_index
  std::uint64_t guid;  // network byte order; 0 until learnt from open_device
  bool guid_known;
};
static_assert(std::is_standard_layout_v<DeviceBox>);

inline DeviceBox* box_of(ibv_device* device) { return reinterpret_cast<DeviceBox*>(device); }

namespace verbs = ::rrdma::verbs;
namespace client = ::rrdma::verbs::client;

// ---------------------------------------------------------------------------------------
// Contexts and their objects. Each box is {the public struct, a pointer to our state}; the
// state holds the client library's object (a shared_ptr: children keep parents alive).

// IBA 1.5 Annex A19 constants that rdma-core 45 added and Debian 12's headers (44) lack
// (verbs.h, ib_user_verbs.h): the MR access bit and the device capability bits.
inline constexpr unsigned int kAccessFlushGlobal = 1u << 8;       // IBV_ACCESS_FLUSH_GLOBAL
inline constexpr unsigned int kAccessFlushPersistent = 1u << 9;   // IBV_ACCESS_FLUSH_PERSISTENT
inline constexpr std::uint64_t kDeviceFlushGlobal = 1ull << 38;   // IB_UVERBS_DEVICE_FLUSH_GLOBAL
inline constexpr std::uint64_t kDeviceFlushPersistent = 1ull << 39;  // ..._FLUSH_PERSISTENT
inline constexpr std::uint64_t kDeviceAtomicWrite = 1ull << 40;   // IB_UVERBS_DEVICE_ATOMIC_WRITE

struct ContextState;
struct ContextBox {
  verbs_context vctx;  // vctx.context is the ibv_context programs see; verbs_get_ctx()
                       // finds vctx just before it (verbs.h)
  ContextState* state;
};
static_assert(std::is_standard_layout_v<ContextBox>);

struct ContextState {
  std::shared_ptr<client::Context> client;
  DeviceBox* device = nullptr;
  // ibv_context.cmd_fd: a memfd of our own, identified by its inode so that ibv_close_device
  // closes it only if the program has not closed it (and reused the number) meanwhile.
  int cmd_fd = -1;
  std::uint64_t cmd_fd_dev = 0, cmd_fd_ino = 0;
  // The daemon names an async event's object by its handle; these give back the public
  // struct (docs/VERBS_DATAPATH.md, "Asynchronous events").
  std::mutex objects_mutex;
  std::unordered_map<std::uint32_t, ibv_qp*> qps;
  std::unordered_map<std::uint32_t, ibv_cq*> cqs;
  std::unordered_map<std::uint32_t, ibv_srq*> srqs;
  // MRs by L_Key, for ibv_advise_mr (its SGEs name regions by L_Key).
  std::unordered_map<std::uint32_t, ibv_mr*> mrs;
};

inline ContextBox* box_of(ibv_context* context) {
  return reinterpret_cast<ContextBox*>(reinterpret_cast<char*>(context) - offsetof(verbs_context, context));
}
inline ContextState& state_of(ibv_context* context) { return *box_of(context)->state; }

template <typename Public, typename State>
struct Box {
  Public object;  // first: Public* <-> Box*
  State* state;
};

struct PdState {
  std::shared_ptr<client::ProtectionDomain> pd;
};
using PdBox = Box<ibv_pd, PdState>;

struct MrState {
  std::shared_ptr<client::MemoryRegion> mr;
};
using MrBox = Box<ibv_mr, MrState>;

struct MwState {
  std::shared_ptr<client::MemoryWindow> mw;
};
using MwBox = Box<ibv_mw, MwState>;

struct AhState {
  std::shared_ptr<client::AddressHandle> ah;
};
using AhBox = Box<ibv_ah, AhState>;

struct ChannelState {
  std::shared_ptr<client::CompletionChannel> channel;
};
using ChannelBox = Box<ibv_comp_channel, ChannelState>;

// A CQ is always an ibv_cq_ex (whose first fields are an ibv_cq's), so ibv_cq_ex_to_cq and
// the extended poll functions work on every CQ.
struct CqState {
  std::shared_ptr<client::CompletionQueue> cq;
  std::uint64_t wc_flags = 0;         // IBV_WC_EX_WITH_* asked for at create_cq_ex
  verbs::Cqe current{};               // the CQE start_poll / next_poll made current
  std::uint32_t events_delivered = 0; // by ibv_get_cq_event, for ibv_destroy_cq's wait
  std::atomic<std::uint32_t> empty_polls{0};  // in a row (datapath.cpp: when to yield)
};
using CqBox = Box<ibv_cq_ex, CqState>;

struct SrqState {
  std::shared_ptr<client::SharedReceiveQueue> srq;
};
using SrqBox = Box<ibv_srq, SrqState>;

// One request built by the ibv_wr_* calls (ibv_wr_post(3)), posted at ibv_wr_complete.
struct PendingSend {
  client::SendWr wr;
  std::vector<verbs::Sge> sges;
  std::vector<std::uint8_t> inline_data;  // ibv_wr_set_inline_data*: copied at the call
};

struct QpState {
  std::shared_ptr<client::QueuePair> qp;
  std::vector<PendingSend> pending;  // between ibv_wr_start and ibv_wr_complete
  int pending_error = 0;             // the first error an ibv_wr_* call met
};
// rdma-core 45 appended wr_flush to struct ibv_qp_ex (IBA 1.5 FLUSH); Debian 12's verbs.h
// (rdma-core 44) ends it at wr_atomic_write. A program built against newer headers calls the
// pointer after wr_atomic_write, so the box gives it one there, not the box's state.
using WrFlushFn = void (*)(ibv_qp_ex* qp, std::uint32_t rkey, std::uint64_t remote_addr, std::size_t len,
                           std::uint8_t type, std::uint8_t level);
struct QpEx {
  ibv_qp_ex ex;  // first: ibv_qp_ex* <-> QpEx*; ex.qp_base is the ibv_qp
  WrFlushFn wr_flush;
};
static_assert(offsetof(QpEx, wr_flush) == sizeof(ibv_qp_ex));
using QpBox = Box<QpEx, QpState>;

template <typename Boxed, typename Public>
Boxed* box_cast(Public* object) {
  return reinterpret_cast<Boxed*>(object);
}
inline QpBox* box_of(ibv_qp* qp) { return reinterpret_cast<QpBox*>(qp); }
inline CqBox* box_of(ibv_cq* cq) { return reinterpret_cast<CqBox*>(cq); }
inline CqBox* box_of(ibv_cq_ex* cq) { return reinterpret_cast<CqBox*>(cq); }

// Filled in by datapath.cpp: the function pointers of ibv_context_ops, ibv_cq_ex and
// ibv_qp_ex that verbs.h's inline functions call.
void fill_context_ops(ibv_context_ops& ops);
void fill_mw_ops(ibv_context_ops& ops);  // windows.cpp
// A BIND_MW request in the client's terms (windows.cpp).
client::SendWr bind_wr(std::uint32_t current_rkey, std::uint32_t new_rkey, const ibv_mw_bind_info& info);
void fill_cq_ex_ops(ibv_cq_ex& cq);
void fill_qp_ex_ops(QpEx& qp);
// Filled in by resources.cpp: the verbs_context entries for extended verbs.
void fill_verbs_context_ops(verbs_context& vctx);
// memory.cpp: verbs_context.advise_mr (ibv_advise_mr(3)).
int advise_mr(ibv_pd* pd, ibv_advise_mr_advice advice, std::uint32_t flags, ibv_sge* sg_list, std::uint32_t num_sge);
// The ibv_access_flags an MR of ours may have, less the optional-range hints (which a device
// may ignore, ibv_reg_mr(3)); EOPNOTSUPP for a flag naming a feature we do not have.
int accepted_access(unsigned int& access);

// The ibv_gid <-> client Gid conversions (both are 16 bytes in network order).
verbs::Gid to_gid(const ibv_gid& gid);
ibv_gid to_ibv_gid(const verbs::Gid& gid);

}  // namespace rrdma::ibverbs
