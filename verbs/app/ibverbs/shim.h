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
  // The daemon names an async event's object by its handle; these give back the public
  // struct (docs/VERBS_DATAPATH.md, "Asynchronous events").
  std::mutex objects_mutex;
  std::unordered_map<std::uint32_t, ibv_qp*> qps;
  std::unordered_map<std::uint32_t, ibv_cq*> cqs;
  std::unordered_map<std::uint32_t, ibv_srq*> srqs;
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
using QpBox = Box<ibv_qp_ex, QpState>;  // ibv_qp_ex.qp_base is the ibv_qp

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
void fill_cq_ex_ops(ibv_cq_ex& cq);
void fill_qp_ex_ops(ibv_qp_ex& qp);
// Filled in by resources.cpp: the verbs_context entries for extended verbs.
void fill_verbs_context_ops(verbs_context& vctx);

// The ibv_gid <-> client Gid conversions (both are 16 bytes in network order).
verbs::Gid to_gid(const ibv_gid& gid);
ibv_gid to_ibv_gid(const verbs::Gid& gid);

}  // namespace rrdma::ibverbs
