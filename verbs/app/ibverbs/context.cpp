// ibv_open_device / ibv_close_device, the queries (device, port, GID, P_Key) and the
// asynchronous events of a context. A context is one connection to the vnic's daemon
// (client::Context); its ibv_context is the last member of a verbs_context, as verbs.h's
// verbs_get_ctx() expects, with the data-path ops filled.
#include <endian.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "verbs/app/ibverbs/shim.h"
#include "verbs/app/sysfs_view.h"

namespace rrdma::ibverbs {
namespace {

// The vendor of a software device: rxe reports 0xFFFFFF too, and programs that switch on
// known vendors (perftest) then take their generic path.
constexpr std::uint32_t kVendorId = 0xFFFFFF;
constexpr const char* kFirmwareVersion = "rrdma-vnic 0.1";

ibv_port_attr port_attributes(const verbs::PortAttributes& port, std::uint32_t max_msg_sz) {
  ibv_port_attr out{};
  out.state = static_cast<ibv_port_state>(port.state);
  out.max_mtu = static_cast<ibv_mtu>(port.max_mtu);
  out.active_mtu = static_cast<ibv_mtu>(port.active_mtu);
  out.gid_tbl_len = static_cast<int>(port.gid_tbl_len);
  out.max_msg_sz = max_msg_sz;
  out.pkey_tbl_len = static_cast<std::uint16_t>(port.pkey_tbl_len);
  out.max_vl_num = 1;
  // A RoCE port has no subnet manager, no LID; width and speed are nominal (1X, 2.5 Gb/s):
  // the real rate is whatever the daemon reaches. The sysfs view shows the same values.
  const verbs::sysfs::PortExtras extras = verbs::sysfs::port_extras(port);
  out.active_width = extras.active_width;
  out.active_speed = extras.active_speed;
  out.phys_state = extras.phys_state;
  out.link_layer = static_cast<std::uint8_t>(port.link_layer);
  out.port_cap_flags = extras.port_cap_flags;
  return out;
}

// rdma-core's cmd_fd is the uverbs character device; programs pass it to ibv_import_device
// (in another process too), poll it or close it. Ours is an empty memfd: a real descriptor,
// so those calls meet our EOPNOTSUPP rather than EBADF, reads see end of file, poll says
// ready, and closing it takes nothing from the context (the daemon connection is elsewhere).
int open_command_fd(ContextState& state) {
  state.cmd_fd = ::memfd_create("rrdma-vnic-cmd", MFD_CLOEXEC);
  if (state.cmd_fd < 0) return errno;
  struct stat st {};
  if (::fstat(state.cmd_fd, &st) != 0) return errno;
  state.cmd_fd_dev = st.st_dev;
  state.cmd_fd_ino = st.st_ino;
  return 0;
}

void close_command_fd(const ContextState& state) {
  struct stat st {};
  if (state.cmd_fd < 0 || ::fstat(state.cmd_fd, &st) != 0) return;
  if (st.st_dev == state.cmd_fd_dev && st.st_ino == state.cmd_fd_ino) ::close(state.cmd_fd);
}

// Closed on any error of ibv_open_device.
void free_context(ContextBox* box) {
  close_command_fd(*box->state);
  pthread_mutex_destroy(&box->vctx.context.mutex);
  delete box->state;
  delete box;
}

}  // namespace

verbs::Gid to_gid(const ibv_gid& gid) {
  verbs::Gid out;
  std::memcpy(out.bytes.data(), gid.raw, out.bytes.size());
  return out;
}

ibv_gid to_ibv_gid(const verbs::Gid& gid) {
  ibv_gid out{};
  std::memcpy(out.raw, gid.bytes.data(), sizeof out.raw);
  return out;
}

}  // namespace rrdma::ibverbs

using namespace rrdma::ibverbs;

extern "C" {

RRDMA_EXPORT ibv_context* ibv_open_device(ibv_device* device) {
  if (device == nullptr) return fail_null<ibv_context>(EINVAL);
  auto opened = client::Context::open(device->name);
  if (!opened.ok()) return fail_null<ibv_context>(opened.error);
  auto* box = new ContextBox{};
  box->state = new ContextState;
  box->state->client = std::move(opened.value);
  box->state->device = box_of(device);
  box_of(device)->guid = htobe64(box->state->client->node_guid());
  box_of(device)->guid_known = true;

  verbs_context& vctx = box->vctx;
  vctx.sz = sizeof(verbs_context);
  fill_verbs_context_ops(vctx);
  ibv_context& context = vctx.context;
  context.device = device;
  fill_context_ops(context.ops);
  fill_mw_ops(context.ops);
  context.async_fd = box->state->client->async_fd();
  context.num_comp_vectors = 1;
  context.abi_compat = __VERBS_ABI_IS_EXTENDED;
  if (pthread_mutex_init(&context.mutex, nullptr) != 0) {
    delete box->state;
    delete box;
    return fail_null<ibv_context>(ENOMEM);
  }
  if (const int error = open_command_fd(*box->state); error != 0) {
    free_context(box);
    return fail_null<ibv_context>(error);
  }
  context.cmd_fd = box->state->cmd_fd;
  return &context;
}

// The daemon releases whatever the context still holds when the connection closes
// (docs/VERBS_RESOURCES.md); objects the program did not destroy are leaked on our side, as
// rdma-core's ibv_close_device(3) warns.
RRDMA_EXPORT int ibv_close_device(ibv_context* context) {
  if (context == nullptr) return EINVAL;
  free_context(box_of(context));
  return 0;
}

RRDMA_EXPORT __be64 ibv_get_device_guid(ibv_device* device) {
  if (device == nullptr) return 0;
  DeviceBox* box = box_of(device);
  if (!box->guid_known) {
    auto opened = client::Context::open(device->name);
    if (!opened.ok()) return 0;
    box->guid = htobe64(opened.value->node_guid());
    box->guid_known = true;
  }
  return box->guid;
}

RRDMA_EXPORT int ibv_query_device(ibv_context* context, ibv_device_attr* attr) {
  if (context == nullptr || attr == nullptr) return EINVAL;
  verbs::DeviceAttributes device;
  if (const int error = state_of(context).client->query_device(device); error != 0) return fail_code(error);
  *attr = ibv_device_attr{};
  std::snprintf(attr->fw_ver, sizeof attr->fw_ver, "%s", kFirmwareVersion);
  // The client gives the GUID as a number; ibv_device_attr holds it in network order.
  attr->node_guid = htobe64(device.node_guid);
  attr->sys_image_guid = attr->node_guid;
  attr->max_mr_size = device.max_mr_size;
  attr->page_size_cap = device.page_size_cap;
  attr->vendor_id = kVendorId;
  attr->max_qp = static_cast<int>(device.max_qp);
  attr->max_qp_wr = static_cast<int>(device.max_qp_wr);
  attr->device_cap_flags = device.device_cap_flags;
  attr->max_sge = static_cast<int>(device.max_sge);
  attr->max_sge_rd = static_cast<int>(device.max_sge);
  attr->max_cq = static_cast<int>(device.max_cq);
  attr->max_cqe = static_cast<int>(device.max_cqe);
  attr->max_mr = static_cast<int>(device.max_mr);
  attr->max_pd = static_cast<int>(device.max_pd);
  attr->max_qp_rd_atom = static_cast<int>(device.max_qp_rd_atom);
  attr->max_qp_init_rd_atom = static_cast<int>(device.max_qp_init_rd_atom);
  attr->max_res_rd_atom = static_cast<int>(std::min<std::uint64_t>(
      std::uint64_t{device.max_qp} * device.max_qp_rd_atom, 0x7fffffff));
  attr->atomic_cap = static_cast<ibv_atomic_cap>(device.atomic_cap);
  attr->max_ah = static_cast<int>(device.max_ah);
  attr->max_mw = static_cast<int>(device.max_mw);
  attr->max_srq = static_cast<int>(device.max_srq);
  attr->max_srq_wr = static_cast<int>(device.max_srq_wr);
  attr->max_srq_sge = static_cast<int>(device.max_srq_sge);
  attr->max_pkeys = 1;
  attr->local_ca_ack_delay = 15;
  attr->phys_port_cnt = 1;
  return 0;
}

// The exported ibv_query_port fills the fields up to `flags`, the struct old programs were
// built with (_compat_ibv_port_attr); new ones come through verbs_context.query_port with
// their own size (verbs.h's ___ibv_query_port).
RRDMA_EXPORT int ibv_query_port(ibv_context* context, std::uint8_t port_num, _compat_ibv_port_attr* attr) {
  if (context == nullptr || attr == nullptr) return EINVAL;
  verbs::PortAttributes port;
  if (const int error = state_of(context).client->query_port(port_num, port); error != 0) return fail_code(error);
  const ibv_port_attr full = port_attributes(port, static_cast<std::uint32_t>(rrdma::verbs::kMaxMessageSize));
  std::memcpy(attr, &full, offsetof(ibv_port_attr, port_cap_flags2));
  return 0;
}

RRDMA_EXPORT int ibv_query_gid(ibv_context* context, std::uint8_t port_num, int index, ibv_gid* gid) {
  if (context == nullptr || gid == nullptr) return EINVAL;
  verbs::Gid value;
  if (const int error = state_of(context).client->query_gid(port_num, index, value); error != 0) {
    errno = error;
    return -1;  // ibv_query_gid(3)
  }
  *gid = to_ibv_gid(value);
  return 0;
}

RRDMA_EXPORT int _ibv_query_gid_ex(ibv_context* context, std::uint32_t port_num, std::uint32_t gid_index,
                                   ibv_gid_entry* entry, std::uint32_t flags, size_t entry_size) {
  if (context == nullptr || entry == nullptr || flags != 0 || entry_size < sizeof(ibv_gid_entry)) return EINVAL;
  if (port_num > 0xff || gid_index > 0x7fffffff) return EINVAL;
  verbs::Gid value;
  const int error = state_of(context).client->query_gid(static_cast<std::uint8_t>(port_num),
                                                        static_cast<int>(gid_index), value);
  if (error != 0) return error;
  *entry = ibv_gid_entry{};
  entry->gid = to_ibv_gid(value);
  entry->gid_index = gid_index;
  entry->port_num = port_num;
  entry->gid_type = IBV_GID_TYPE_ROCE_V2;
  entry->ndev_ifindex = 0;  // the vnic's TAP is no netdev of this namespace's RoCE
  return 0;
}

RRDMA_EXPORT ssize_t _ibv_query_gid_table(ibv_context* context, ibv_gid_entry* entries, size_t max_entries,
                                          std::uint32_t flags, size_t entry_size) {
  if (context == nullptr || flags != 0 || entry_size < sizeof(ibv_gid_entry)) return -EINVAL;
  verbs::PortAttributes port;
  if (const int error = state_of(context).client->query_port(1, port); error != 0) return -error;
  ssize_t count = 0;
  for (std::uint32_t index = 0; index < port.gid_tbl_len; ++index) {
    if (static_cast<size_t>(count) >= max_entries) return -EINVAL;  // man page: too small
    auto* entry = reinterpret_cast<ibv_gid_entry*>(reinterpret_cast<char*>(entries) + count * entry_size);
    if (_ibv_query_gid_ex(context, 1, index, entry, 0, entry_size) == 0) ++count;
  }
  return count;
}

enum ibv_gid_type_sysfs { IBV_GID_TYPE_SYSFS_IB_ROCE_V1, IBV_GID_TYPE_SYSFS_ROCE_V2 };
RRDMA_EXPORT int ibv_query_gid_type(ibv_context* context, std::uint8_t port_num, unsigned int index,
                                    ibv_gid_type_sysfs* type) {
  ibv_gid_entry entry;
  if (type == nullptr || _ibv_query_gid_ex(context, port_num, index, &entry, 0, sizeof entry) != 0) {
    errno = EINVAL;
    return -1;
  }
  *type = IBV_GID_TYPE_SYSFS_ROCE_V2;
  return 0;
}

// One P_Key: index 0 holds the default full-membership 0xFFFF (RoCE has no SM to set more).
RRDMA_EXPORT int ibv_query_pkey(ibv_context* context, std::uint8_t port_num, int index, __be16* pkey) {
  if (context == nullptr || pkey == nullptr || port_num != 1 || index != 0) return -1;
  *pkey = htobe16(0xFFFF);
  return 0;
}

RRDMA_EXPORT int ibv_get_pkey_index(ibv_context* context, std::uint8_t port_num, __be16 pkey) {
  __be16 ours;
  if (ibv_query_pkey(context, port_num, 0, &ours) != 0) return -1;
  return pkey == ours ? 0 : -1;
}

namespace {

// Points the event at its QP, CQ or SRQ; false when that object is destroyed already.
bool resolve_event_element(ContextState& state, const rrdma::verbs::AsyncEventEntry& entry,
                           ibv_async_event* event) {
  const auto handle = static_cast<std::uint32_t>(entry.element);
  std::lock_guard lock(state.objects_mutex);
  switch (event->event_type) {
    case IBV_EVENT_CQ_ERR: {
      const auto found = state.cqs.find(handle);
      if (found == state.cqs.end()) return false;
      event->element.cq = found->second;
      return true;
    }
    case IBV_EVENT_SRQ_ERR:
    case IBV_EVENT_SRQ_LIMIT_REACHED: {
      const auto found = state.srqs.find(handle);
      if (found == state.srqs.end()) return false;
      event->element.srq = found->second;
      return true;
    }
    case IBV_EVENT_PORT_ACTIVE:
    case IBV_EVENT_PORT_ERR:
    case IBV_EVENT_LID_CHANGE:
    case IBV_EVENT_PKEY_CHANGE:
    case IBV_EVENT_GID_CHANGE:
    case IBV_EVENT_SM_CHANGE:
    case IBV_EVENT_CLIENT_REREGISTER:
      event->element.port_num = static_cast<int>(entry.element);
      return true;
    case IBV_EVENT_DEVICE_FATAL:
      return true;
    default: {
      const auto found = state.qps.find(handle);
      if (found == state.qps.end()) return false;
      event->element.qp = found->second;
      return true;
    }
  }
}

}  // namespace

// ibv_get_async_event(3): blocks unless the program made async_fd non-blocking.
// An event whose object was destroyed before it was read is dropped, as the kernel drops a
// destroyed object's queued events (ib_uverbs_release_uevent): the daemon may have queued
// it just before the destroy (the engine posts IBV_EVENT_QP_LAST_WQE_REACHED as a QP on an
// SRQ enters the error state, which UCX moves its QPs to before destroying them). Handed on,
// it would carry a NULL element: UCX 1.13, which reads element.qp->qp_num of a QP event,
// crashed on one in its async thread (docs/INTEROP.md, "UCX against rxe"). The next event is
// then taken, so a non-blocking caller may get EAGAIN although async_fd was readable, as
// from the kernel.
RRDMA_EXPORT int ibv_get_async_event(ibv_context* context, ibv_async_event* event) {
  if (context == nullptr || event == nullptr) return -1;
  ContextState& state = state_of(context);
  for (;;) {
    rrdma::verbs::AsyncEventEntry entry{};
    if (const int error = state.client->get_async_event(entry); error != 0) {
      errno = error;
      return -1;
    }
    *event = ibv_async_event{};
    event->event_type = static_cast<ibv_event_type>(entry.event_type);
    if (resolve_event_element(state, entry, event)) return 0;
  }
}

// Counted as verbs says; our destroy calls do not wait for these acknowledgements (the
// daemon stops sending an object's events once it is destroyed).
RRDMA_EXPORT void ibv_ack_async_event(ibv_async_event* event) {
  if (event == nullptr) return;
  switch (event->event_type) {
    case IBV_EVENT_CQ_ERR:
      if (event->element.cq != nullptr) {
        pthread_mutex_lock(&event->element.cq->mutex);
        ++event->element.cq->async_events_completed;
        pthread_mutex_unlock(&event->element.cq->mutex);
      }
      break;
    case IBV_EVENT_SRQ_ERR:
    case IBV_EVENT_SRQ_LIMIT_REACHED:
      if (event->element.srq != nullptr) {
        pthread_mutex_lock(&event->element.srq->mutex);
        ++event->element.srq->events_completed;
        pthread_mutex_unlock(&event->element.srq->mutex);
      }
      break;
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
    case IBV_EVENT_COMM_EST:
    case IBV_EVENT_SQ_DRAINED:
    case IBV_EVENT_PATH_MIG:
    case IBV_EVENT_PATH_MIG_ERR:
    case IBV_EVENT_QP_LAST_WQE_REACHED:
      if (event->element.qp != nullptr) {
        pthread_mutex_lock(&event->element.qp->mutex);
        ++event->element.qp->events_completed;
        pthread_mutex_unlock(&event->element.qp->mutex);
      }
      break;
    default:
      break;
  }
}

}  // extern "C"
