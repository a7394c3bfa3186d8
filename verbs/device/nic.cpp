// The Nic's control path: one handler per verbs request (docs/VERBS_CONTROL.md for the
// words, docs/VERBS_DATAPATH.md for who creates what). Every word is hostile: each handler
// checks ownership through the registry and ranges against device_caps.h before it adopts
// an fd or touches the engine, and a refusal leaves no state behind.
#include "verbs/device/nic.h"

#include "verbs/device/address_layout.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <limits>
#include <type_traits>

#include "rocev2/encap.h"
#include "verbs/device/device_caps.h"
#include "verbs/device/nic_state.h"
#include "verbs/device/qp_rules.h"

namespace rrdma::verbs {

namespace {

constexpr auto kAddressCheckPeriod = std::chrono::seconds(1);

using control::Message;
using control::MessageType;
namespace field = control::field;

// The async event ring of a context: 64 entries (docs/VERBS_DATAPATH.md).
constexpr std::uint32_t kEventRingEntries = 64;

Message reply(const Message& request, std::uint64_t status) {
  return control::make_reply(request.type(), request.request_id, status);
}

// Ring capacity for `entries` (at least 1), or 0 when it exceeds the ring limit.
std::uint32_t capacity_for(std::uint64_t entries) {
  if (entries > kMaxRingCapacity) return 0;
  std::uint32_t capacity = 1;
  while (capacity < entries) capacity <<= 1;
  return capacity;
}

std::uint64_t gid_word(const ibv_gid& gid, std::size_t first) {
  std::uint64_t word = 0;
  for (std::size_t i = 0; i < 8; ++i) word = (word << 8) | gid.raw[first + i];
  return word;
}

ibv_gid gid_of(std::uint64_t high, std::uint64_t low) {
  ibv_gid gid{};
  for (std::size_t i = 0; i < 8; ++i) {
    gid.raw[i] = static_cast<std::uint8_t>(high >> (56 - 8 * i));
    gid.raw[8 + i] = static_cast<std::uint8_t>(low >> (56 - 8 * i));
  }
  return gid;
}

// Adopts a client's memfd as the ring of `geometry`, if `claimed_bytes` is what that geometry
// needs. The ring end is checked (magic, version, geometry) by its constructor.
template <typename End>
std::unique_ptr<End> adopt_ring(control::ReceivedFds& fds, std::size_t index, RingGeometry geometry,
                                std::uint64_t claimed_bytes, SharedRegion& region) {
  if (!geometry.valid() || claimed_bytes != geometry.region_size()) return nullptr;
  SharedRegion::AdoptError error = SharedRegion::AdoptError::None;
  region = SharedRegion::adopt(fds.release(index), geometry.region_size(), error);
  if (!region.valid()) return nullptr;
  auto end = std::make_unique<End>(region.bytes(), geometry);
  if (end->error() != RingError::None) return nullptr;
  return end;
}

ibv_qp_state to_ibv(rocev2::QpState state) { return static_cast<ibv_qp_state>(state); }

// What a ring of this geometry costs the daemon: the pages it maps (the ring quota's unit).
std::uint64_t mapped_bytes(const RingGeometry& geometry) { return SharedRegion::mapped_size(geometry.region_size()); }

}  // namespace

Nic::Nic(const NicConfig& config, PacketPort& port, FdWatcher& watcher)
    : config_(config),
      port_(port),
      watcher_(watcher),
      dma_thread_(config.dma_wait_bound.count() > 0 ? std::make_unique<DmaThread>(config.dma_wait_bound) : nullptr),
      dma_(mrs_, dma_thread_.get()),
      engine_(static_cast<rocev2::EngineHost&>(*this), mrs_, dma_,
              static_cast<rocev2::EngineObserver*>(this)) {
  // Frames come in batches with an end (end_of_frames): combine their writes, answer each
  // QP's requests with one ACK per batch, publish completions once per batch.
  if (!config.frame_memory.empty()) {
    dma_.combine_writes_from(config.frame_memory);
    engine_.hold_acks(true);
    batched_frames_ = true;
  }
  registry_.set_quotas(config.quotas);
  registry_.set_user_quotas(config.user_quotas);
  registry_.set_descriptor_budget(config.descriptor_budget);
}

Nic::~Nic() {
  std::vector<std::uint64_t> clients;
  for (const auto& [id, info] : clients_) clients.push_back(id);
  for (std::uint64_t id : clients) client_disconnected(id, now_);
}

int Nic::client_connected(const ClientInfo& client) {
  // A client whose process cannot be watched (gone already, or no descriptor for a pidfd)
  // is refused: its resources could not end with it.
  CredentialWatch watch(client.pid, client.pidfd);
  if (!watch.valid()) return ESRCH;
  const int error = registry_.add_client(client);
  if (error != 0) return error;
  clients_.emplace(client.id, client);
  client_credentials_.emplace(client.id, std::move(watch));
  ++counters_.clients_connected;
  return 0;
}

void Nic::client_disconnected(std::uint64_t client_id, Instant now) {
  if (clients_.erase(client_id) == 0) return;
  now_ = now;
  dma_.flush();
  ++counters_.clients_disconnected;
  for (const TeardownAction& action : registry_.drop_client(client_id)) forget_object(action);
  mrs_.drop_client(client_id);
  client_credentials_.erase(client_id);
  if (auto memory = client_memory_.find(client_id); memory != client_memory_.end()) {
    dma_.forget_memory(memory->second);
    dma_.close_client_fd(memory->second);  // later, if a stalled call still uses it
    client_memory_.erase(memory);
  }
  if (auto layout = client_layout_.find(client_id); layout != client_layout_.end()) {
    dma_.close_client_fd(layout->second);
    client_layout_.erase(layout);
  }
  settle(now);
}

// The clients in `owners` (check_address_spaces: their process exited or changed
// credentials), and those whose address space a transfer found gone (their process exec'd,
// and a setuid program may now run at that pid, or exited), lose their resources now, not
// when their connection closes, which a forked child may keep open for ever
// (docs/SECURITY.md).
void Nic::evict_lost_clients(std::vector<std::uint64_t> owners, Instant now) {
  for (const int memory : dma_.take_lost_memories())
    for (const auto& [client, fd] : client_memory_)
      if (fd == memory) owners.push_back(client);
  for (const std::uint64_t client : owners) {
    if (clients_.count(client) == 0) continue;
    ++counters_.clients_evicted;
    if (evict_) evict_(client);
    client_disconnected(client, now);  // a no-op if the evictor already disconnected it
  }
}

// On every packet sent: nearly always answered by the empty list of lost handles, before any
// lookup of the client.
bool Nic::memory_lost(std::uint64_t client) const {
  if (!dma_.any_lost()) return false;
  const auto memory = client_memory_.find(client);
  return memory != client_memory_.end() && dma_.known_lost(memory->second);
}

// One look per client per kAddressCheckPeriod, so that a client whose process exec'd while
// nothing moved, or changed credentials, loses its resources all the same, and soon. A
// process that changes credentials keeps no right the daemon granted to the old ones.
// Returns the clients whose process exited or changed credentials; those whose address
// space is gone are found by the DMA (evict_lost_clients).
std::vector<std::uint64_t> Nic::check_address_spaces(Instant now) {
  std::vector<std::uint64_t> gone;
  if (now < next_address_check_) return gone;
  next_address_check_ = now + kAddressCheckPeriod;
  for (const auto& [client, memory] : client_memory_) dma_.still_alive(memory);
  for (const auto& [client, watch] : client_credentials_)
    if (watch.exited() || watch.changed()) gone.push_back(client);
  return gone;
}

namespace {

// The memory handle open_device brings must be a process's mem file, open read-write:
// anything else (a pipe, a FUSE file) could make the daemon's reads block, and another
// procfs file would be written with the daemon's rights (root's: /proc/PID/oom_score_adj,
// bind-mounted over a file named "mem" in the sender's own mount namespace, passed every
// check of the path). So the file is judged by what it is, not by its name: a regular procfs
// file of mode 0600 (the only one in /proc/PID is mem), open read-write, whose address space
// a one-byte read at address 0 finds alive (probe_address_space, on the DMA thread: even that
// read waits for the owner's mmap lock). Whose mem file it is needs no check: a process can
// only open the mem file of an address space it may ptrace, so the handle never carries more
// right than its sender had.
bool is_mem_file(int fd) {
  struct statfs filesystem{};
  if (fd < 0 || ::fstatfs(fd, &filesystem) != 0 || filesystem.f_type != PROC_SUPER_MAGIC) return false;
  struct stat file{};
  if (::fstat(fd, &file) != 0 || !S_ISREG(file.st_mode) || (file.st_mode & 07777) != 0600) return false;
  const int flags = ::fcntl(fd, F_GETFL);
  return flags >= 0 && (flags & O_ACCMODE) == O_RDWR;
}

}  // namespace

// One step of a teardown, after the registry agreed to it.
void Nic::forget_object(const TeardownAction& action) {
  switch (action.kind) {
    case ResourceKind::Qp: release_qp(action.handle); break;
    case ResourceKind::Srq:
      if (auto it = srqs_.find(action.handle); it != srqs_.end()) {
        watcher_.forget(it->second->doorbell.fd());
        srqs_.erase(it);
      }
      break;
    case ResourceKind::Cq:
      if (auto it = cqs_.find(action.handle); it != cqs_.end()) {
        watcher_.forget(it->second->notify.fd());
        cqs_.erase(it);
      }
      break;
    case ResourceKind::Ah: ahs_.erase(action.handle); break;
    case ResourceKind::Mr:
      // Registrations go all at once with MrTable::drop_client, after the QPs that used them.
      break;
    case ResourceKind::Pd: pds_.erase(action.handle); break;
    case ResourceKind::Context:
      if (auto it = contexts_.find(action.handle); it != contexts_.end()) {
        watcher_.forget(it->second->event_fd.fd());
        contexts_.erase(it);
      }
      break;
  }
}

// The engine QP goes first (it points at the rings and the SRQ), then the fds and mappings.
void Nic::release_qp(Handle handle) {
  auto it = qps_.find(handle);
  if (it == qps_.end()) return;
  Qp& qp = *it->second;
  engine_.destroy_qp(qp.qpn);
  mrs_.forget_qp(qp.qpn);
  qp_by_qpn_.erase(qp.qpn.value());
  watcher_.unwatch(qp.doorbell.fd());
  watcher_.forget(qp.doorbell.fd());
  qps_.erase(it);
}

Message Nic::handle(std::uint64_t client, const Message& request, control::ReceivedFds& fds, Instant now) {
  now_ = now;
  ++counters_.requests;
  // A request may deregister memory or read what the engine wrote: queued writes land first.
  dma_.flush();
  fail_lost_writes();
  Message answer = clients_.count(client) == 0 || request.is_reply()
                       ? reply(request, clients_.count(client) == 0 ? ENOENT : EINVAL)
                       : dispatch(client, request, fds, now);
  if (answer.words.at(0) != 0) ++counters_.requests_refused;
  settle(now);
  return answer;
}

Message Nic::dispatch(std::uint64_t client, const Message& m, control::ReceivedFds& fds, Instant now) {
  switch (m.type()) {
    case MessageType::OpenDevice: return open_device(client, m, fds);
    case MessageType::QueryDevice: return query_device(client, m);
    case MessageType::QueryPort: return query_port(client, m);
    case MessageType::QueryGid: return query_gid(client, m);
    case MessageType::AllocPd: return alloc_pd(client, m);
    case MessageType::DeallocPd: return dealloc_pd(client, m);
    case MessageType::RegMr: return reg_mr(client, m);
    case MessageType::DeregMr: return dereg_mr(client, m);
    case MessageType::ReregMr: return rereg_mr(client, m);
    case MessageType::AllocMw: return alloc_mw(client, m);
    case MessageType::DeallocMw: return dealloc_mw(client, m);
    case MessageType::CreateCq: return create_cq(client, m, fds);
    case MessageType::DestroyCq: return destroy_cq(client, m);
    case MessageType::ResizeCq: return resize_cq(client, m, fds);
    case MessageType::CreateQp: return create_qp(client, m, fds);
    case MessageType::ModifyQp: return modify_qp(client, m, now);
    case MessageType::QueryQp: return query_qp(client, m);
    case MessageType::DestroyQp: return destroy_qp(client, m);
    case MessageType::CreateSrq: return create_srq(client, m, fds);
    case MessageType::ModifySrq: return modify_srq(client, m);
    case MessageType::QuerySrq: return query_srq(client, m);
    case MessageType::DestroySrq: return destroy_srq(client, m);
    case MessageType::CreateAh: return create_ah(client, m);
    case MessageType::DestroyAh: return destroy_ah(client, m);
  }
  return reply(m, EOPNOTSUPP);
}

bool Nic::owns_context(std::uint64_t client, std::uint64_t handle) const {
  auto it = contexts_.find(static_cast<Handle>(handle));
  return handle <= UINT32_MAX && it != contexts_.end() && it->second->client == client;
}

// ------------------------------------------------------------------ device and queries

Message Nic::open_device(std::uint64_t client, const Message& m, control::ReceivedFds& fds) {
  if (m.words[field::kAbiVersion] != control::kVersion) return reply(m, EPROTONOSUPPORT);
  const RingGeometry geometry{kEventRingEntries, sizeof(AsyncEventEntry)};
  if (const int error = registry_.admit(client, ResourceKind::Context, mapped_bytes(geometry)); error != 0) {
    return reply(m, static_cast<std::uint64_t>(error));
  }
  auto context = std::make_unique<Context>();
  context->events =
      adopt_ring<RingProducer>(fds, 0, geometry, m.words[field::kEventRingBytes], context->region);
  context->event_fd = Doorbell::adopt_keeping_mode(fds.release(1));
  if (!context->events || !context->event_fd.valid()) return reply(m, EINVAL);
  if (!is_mem_file(fds.at(2))) return reply(m, EINVAL);
  if (dma_.probe(fds.at(2)) != AddressSpace::Alive) {
    dma_.close_client_fd(fds.release(2));  // a probe that stalled still uses it
    return reply(m, EINVAL);
  }
  const Created created = registry_.open_context(client, mapped_bytes(geometry));
  if (!created.ok()) return reply(m, static_cast<std::uint64_t>(created.error));
  context->handle = created.handle;
  context->client = client;
  // One address space per connection: a later context of the client keeps the first handle.
  if (client_memory_.count(client) == 0) {
    client_memory_.emplace(client, fds.release(2));
    const auto watch = client_credentials_.find(client);
    client_layout_.emplace(client, watch == client_credentials_.end() ? -1 : watch->second.open_proc_file("maps"));
  }
  contexts_.emplace(created.handle, std::move(context));
  Message answer = reply(m, 0);
  answer.words[field::kContextHandle] = created.handle;
  answer.words[field::kNodeGuid] = caps::node_guid(config_.mac);
  return answer;
}

Message Nic::query_device(std::uint64_t client, const Message& m) {
  if (!owns_context(client, m.words[field::kQueryDeviceContext])) return reply(m, EINVAL);
  const ibv_device_attr a = caps::device_attributes();
  Message answer = reply(m, 0);
  auto& w = answer.words;
  w[field::kMaxMrSize] = a.max_mr_size;
  w[field::kPageSizeCap] = a.page_size_cap;
  w[field::kMaxQp] = static_cast<std::uint64_t>(a.max_qp);
  w[field::kMaxQpWr] = static_cast<std::uint64_t>(a.max_qp_wr);
  w[field::kDeviceCapFlags] = a.device_cap_flags;
  w[field::kMaxSge] = static_cast<std::uint64_t>(a.max_sge);
  w[field::kMaxCq] = static_cast<std::uint64_t>(a.max_cq);
  w[field::kMaxCqe] = static_cast<std::uint64_t>(a.max_cqe);
  w[field::kMaxMr] = static_cast<std::uint64_t>(a.max_mr);
  w[field::kMaxPd] = static_cast<std::uint64_t>(a.max_pd);
  w[field::kMaxQpRdAtom] = static_cast<std::uint64_t>(a.max_qp_rd_atom);
  w[field::kMaxQpInitRdAtom] = static_cast<std::uint64_t>(a.max_qp_init_rd_atom);
  w[field::kAtomicCap] = static_cast<std::uint64_t>(a.atomic_cap);
  w[field::kMaxSrq] = static_cast<std::uint64_t>(a.max_srq);
  w[field::kMaxSrqWr] = static_cast<std::uint64_t>(a.max_srq_wr);
  w[field::kMaxSrqSge] = static_cast<std::uint64_t>(a.max_srq_sge);
  w[field::kMaxAh] = static_cast<std::uint64_t>(a.max_ah);
  w[field::kMaxMw] = static_cast<std::uint64_t>(a.max_mw);
  return answer;
}

Message Nic::query_port(std::uint64_t client, const Message& m) {
  if (!owns_context(client, m.words[field::kQueryPortContext]) || m.words[field::kPortNum] != caps::kPortNum) {
    return reply(m, EINVAL);
  }
  const ibv_port_attr p = caps::port_attributes(config_.link_up, config_.netdev_mtu);
  Message answer = reply(m, 0);
  answer.words[field::kState] = p.state;
  answer.words[field::kMaxMtu] = p.max_mtu;
  answer.words[field::kActiveMtu] = p.active_mtu;
  answer.words[field::kGidTblLen] = static_cast<std::uint64_t>(p.gid_tbl_len);
  answer.words[field::kPkeyTblLen] = p.pkey_tbl_len;
  answer.words[field::kLinkLayer] = p.link_layer;
  return answer;
}

Message Nic::query_gid(std::uint64_t client, const Message& m) {
  if (!owns_context(client, m.words[field::kQueryGidContext]) || m.words[field::kGidPort] != caps::kPortNum ||
      m.words[field::kGidIndex] > INT_MAX) {
    return reply(m, EINVAL);
  }
  const auto entry = caps::gid_entry(static_cast<int>(m.words[field::kGidIndex]), config_.address);
  if (!entry) return reply(m, EINVAL);
  Message answer = reply(m, 0);
  answer.words[field::kGidHigh] = gid_word(entry->gid, 0);
  answer.words[field::kGidLow] = gid_word(entry->gid, 8);
  return answer;
}

// ------------------------------------------------------------------ PDs and MRs

Message Nic::alloc_pd(std::uint64_t client, const Message& m) {
  const std::uint64_t context = m.words[field::kAllocPdContext];
  if (!owns_context(client, context)) return reply(m, EINVAL);
  if (pds_.size() >= caps::kMaxPd) return reply(m, ENOMEM);
  const Created created = registry_.alloc_pd(client, static_cast<Handle>(context));
  if (!created.ok()) return reply(m, static_cast<std::uint64_t>(created.error));
  pds_.emplace(created.handle, std::make_unique<Pd>(Pd{client, static_cast<Handle>(context)}));
  Message answer = reply(m, 0);
  answer.words[field::kHandle] = created.handle;
  return answer;
}

Message Nic::dealloc_pd(std::uint64_t client, const Message& m) {
  const std::uint64_t pd = m.words[field::kDestroyHandle];
  if (pd > UINT32_MAX) return reply(m, EINVAL);
  const int error = registry_.dealloc_pd(client, static_cast<Handle>(pd));
  if (error == 0) pds_.erase(static_cast<Handle>(pd));
  return reply(m, static_cast<std::uint64_t>(error));
}

// The device's max_mr_size bounds every region but an implicit ODP one, which covers the
// whole address space by definition (ibv_reg_mr(3): addr 0, length SIZE_MAX).
bool Nic::exceeds_max_mr_size(std::uint64_t addr, std::uint64_t length, std::uint32_t access) {
  const bool implicit = (access & mr_access::kOnDemand) != 0 && addr == 0 && length == UINT64_MAX;
  return !implicit && length > caps::kMaxMrSize;
}

// rdma_rxe pins a region's pages for writing when it grants any write (local, remote, atomic),
// which fails with EFAULT on a read-only or unmapped page; our DMA would write there anyway
// (the mem file forces writes), so the client's maps are asked instead. An ON_DEMAND region
// pins nothing on rxe either: its pages are checked at each write (ProcessDma).
int Nic::check_writable_region(std::uint64_t client, std::uint64_t addr, std::uint64_t length,
                               std::uint32_t access) {
  constexpr std::uint32_t kWrites = mr_access::kLocalWrite | mr_access::kRemoteWrite | mr_access::kRemoteAtomic;
  if ((access & kWrites) == 0 || (access & mr_access::kOnDemand) != 0) return 0;
  const auto layout = client_layout_.find(client);
  const auto memory = client_memory_.find(client);
  if (layout == client_layout_.end() || memory == client_memory_.end()) return EFAULT;
  return dma_.writable(DmaTarget{memory->second, addr, layout->second}, length) == Writable::Yes ? 0 : EFAULT;
}

// The region as ibv_rereg_mr would leave it, checked as a new registration.
int Nic::check_writable_rereg(std::uint64_t client, rocev2::Lkey lkey, const ReregRequest& request) {
  if ((request.flags & (rereg_flags::kChangeTranslation | rereg_flags::kChangeAccess)) == 0) return 0;
  for (const MrInfo& mr : mrs_.registrations_of(client)) {
    if (mr.facts.lkey != lkey) continue;
    const bool moved = (request.flags & rereg_flags::kChangeTranslation) != 0;
    const bool reaccess = (request.flags & rereg_flags::kChangeAccess) != 0;
    return check_writable_region(client, moved ? request.addr : mr.addr, moved ? request.length : mr.facts.length,
                                 reaccess ? request.access : mr.facts.access);
  }
  return 0;  // not this client's: reregister() refuses it
}

// The MR handle is its L_Key: unique among standing registrations, and the MR table and
// the registry both know an MR by it.
Message Nic::reg_mr(std::uint64_t client, const Message& m) {
  const std::uint64_t pd = m.words[field::kMrPd];
  const std::uint64_t access = m.words[field::kMrAccess];
  if (pd > UINT32_MAX || access > UINT32_MAX || registry_.check_pd(client, static_cast<Handle>(pd)) != 0) {
    return reply(m, EINVAL);
  }
  MrRequest request;
  request.pd = static_cast<std::uint32_t>(pd);
  request.addr = m.words[field::kMrAddress];
  request.length = m.words[field::kMrLength];
  request.access = static_cast<std::uint32_t>(access);
  request.iova = m.words[field::kMrIova];
  if (exceeds_max_mr_size(request.addr, request.length, request.access)) return reply(m, EINVAL);
  const auto memory = client_memory_.find(client);
  if (memory == client_memory_.end()) return reply(m, EINVAL);
  if (const int error = check_writable_region(client, request.addr, request.length, request.access); error != 0)
    return reply(m, static_cast<std::uint64_t>(error));
  if (const int error = registry_.admit(client, ResourceKind::Mr, 0); error != 0) {
    return reply(m, static_cast<std::uint64_t>(error));
  }
  const RegisterResult result = mrs_.register_mr(Client{client, memory->second, client_layout_[client]}, request);
  if (!result.ok()) return reply(m, static_cast<std::uint64_t>(result.error));
  if (const int error = registry_.add_mr(client, static_cast<Handle>(pd), result.lkey); error != 0) {
    mrs_.deregister(client, result.lkey);
    return reply(m, static_cast<std::uint64_t>(error));
  }
  Message answer = reply(m, 0);
  answer.words[field::kMrHandle] = result.lkey.value();
  answer.words[field::kMrLkey] = result.lkey.value();
  answer.words[field::kMrRkey] = result.rkey.value();
  return answer;
}

// ibv_rereg_mr: the MR table changes the registration in place (same keys, as rxe); a new PD
// moves the MR's reference from the old PD to the new one, so that ibv_dealloc_pd of the
// old PD no longer answers EBUSY because of it.
Message Nic::rereg_mr(std::uint64_t client, const Message& m) {
  const std::uint64_t handle = m.words[field::kReregMr];
  const std::uint64_t flags = m.words[field::kReregFlags];
  const std::uint64_t pd = m.words[field::kReregPd];
  const std::uint64_t access = m.words[field::kReregAccess];
  if (handle > UINT32_MAX || flags > UINT32_MAX || pd > UINT32_MAX || access > UINT32_MAX) return reply(m, EINVAL);
  const rocev2::Lkey lkey(static_cast<std::uint32_t>(handle));
  const std::optional<std::uint32_t> old_pd = mrs_.pd_of(client, lkey);
  if (!old_pd) return reply(m, EINVAL);
  ReregRequest request{static_cast<std::uint32_t>(flags), static_cast<std::uint32_t>(pd), m.words[field::kReregAddress],
                       m.words[field::kReregLength], static_cast<std::uint32_t>(access)};
  const bool new_pd = (request.flags & rereg_flags::kChangePd) != 0;
  if (new_pd && registry_.check_pd(client, static_cast<Handle>(pd)) != 0) return reply(m, EINVAL);
  if ((request.flags & rereg_flags::kChangeTranslation) != 0 &&
      exceeds_max_mr_size(request.addr, request.length, request.access))
    return reply(m, EINVAL);
  if (const int error = check_writable_rereg(client, lkey, request); error != 0) {
    return reply(m, static_cast<std::uint64_t>(error));
  }
  if (const int error = mrs_.reregister(client, lkey, request); error != 0) {
    return reply(m, static_cast<std::uint64_t>(error));
  }
  if (new_pd && pd != *old_pd) {
    registry_.remove_mr(client, lkey);
    registry_.add_mr(client, static_cast<Handle>(pd), lkey);  // the count is unchanged: no quota refusal
  }
  Message answer = reply(m, 0);
  answer.words[field::kReregLkey] = lkey.value();
  const auto facts = mrs_.find_lkey(lkey);
  answer.words[field::kReregRkey] = facts ? facts->rkey.value() : 0;
  return answer;
}

Message Nic::dereg_mr(std::uint64_t client, const Message& m) {
  const std::uint64_t handle = m.words[field::kDestroyHandle];
  if (handle > UINT32_MAX) return reply(m, EINVAL);
  const rocev2::Lkey lkey(static_cast<std::uint32_t>(handle));
  if (const int error = mrs_.deregister(client, lkey); error != 0) return reply(m, static_cast<std::uint64_t>(error));
  registry_.remove_mr(client, lkey);
  return reply(m, 0);
}

// A window counts as a registration of its PD in the registry (so ibv_dealloc_pd answers
// EBUSY while it stands, as rxe's window holds its PD), known there by its handle.
Message Nic::alloc_mw(std::uint64_t client, const Message& m) {
  const std::uint64_t pd = m.words[field::kMwPd];
  const std::uint64_t type = m.words[field::kMwType];
  if (pd > UINT32_MAX || registry_.check_pd(client, static_cast<Handle>(pd)) != 0) return reply(m, EINVAL);
  if (type != IBV_MW_TYPE_1 && type != IBV_MW_TYPE_2) return reply(m, EINVAL);
  const auto memory = client_memory_.find(client);
  if (memory == client_memory_.end()) return reply(m, EINVAL);
  if (const int error = registry_.admit(client, ResourceKind::Mr, 0); error != 0) {
    return reply(m, static_cast<std::uint64_t>(error));
  }
  const AllocMwResult result =
      mrs_.alloc_mw(Client{client, memory->second, client_layout_[client]}, static_cast<std::uint32_t>(pd), static_cast<int>(type));
  if (!result.ok()) return reply(m, static_cast<std::uint64_t>(result.error));
  if (const int error = registry_.add_mr(client, static_cast<Handle>(pd), rocev2::Lkey(result.handle)); error != 0) {
    mrs_.dealloc_mw(client, result.handle);
    return reply(m, static_cast<std::uint64_t>(error));
  }
  Message answer = reply(m, 0);
  answer.words[field::kMwHandle] = result.handle;
  answer.words[field::kMwRkey] = result.rkey.value();
  return answer;
}

Message Nic::dealloc_mw(std::uint64_t client, const Message& m) {
  const std::uint64_t handle = m.words[field::kDestroyHandle];
  if (handle > UINT32_MAX) return reply(m, EINVAL);
  const auto window = static_cast<std::uint32_t>(handle);
  if (const int error = mrs_.dealloc_mw(client, window); error != 0) return reply(m, static_cast<std::uint64_t>(error));
  registry_.remove_mr(client, rocev2::Lkey(window));
  return reply(m, 0);
}

// ------------------------------------------------------------------ CQs

Message Nic::create_cq(std::uint64_t client, const Message& m, control::ReceivedFds& fds) {
  const std::uint64_t context = m.words[field::kCqContext];
  const std::uint64_t entries = m.words[field::kCqEntries];
  const std::uint32_t capacity = capacity_for(entries);
  if (!owns_context(client, context) || entries == 0 || entries > caps::kMaxCqe || capacity == 0) {
    return reply(m, EINVAL);
  }
  if (cqs_.size() >= caps::kMaxCq) return reply(m, ENOMEM);
  const RingGeometry geometry{capacity, sizeof(Cqe)};
  if (const int error = registry_.admit(client, ResourceKind::Cq, mapped_bytes(geometry)); error != 0) {
    return reply(m, static_cast<std::uint64_t>(error));
  }
  auto cq = std::make_unique<Cq>();
  cq->ring = adopt_ring<RingProducer>(fds, 0, geometry, m.words[field::kCqRingBytes], cq->region);
  cq->notify = Doorbell::adopt_keeping_mode(fds.release(1));
  if (!cq->ring || !cq->notify.valid()) return reply(m, EINVAL);
  const Created created = registry_.create_cq(client, static_cast<Handle>(context), mapped_bytes(geometry));
  if (!created.ok()) return reply(m, static_cast<std::uint64_t>(created.error));
  cq->handle = created.handle;
  cq->client = client;
  cq->context = static_cast<Handle>(context);
  cqs_.emplace(created.handle, std::move(cq));
  Message answer = reply(m, 0);
  answer.words[field::kHandle] = created.handle;
  return answer;
}

Message Nic::destroy_cq(std::uint64_t client, const Message& m) {
  const std::uint64_t handle = m.words[field::kDestroyHandle];
  if (handle > UINT32_MAX) return reply(m, EINVAL);
  const int error = registry_.destroy_cq(client, static_cast<Handle>(handle));
  if (error == 0) forget_object({ResourceKind::Cq, static_cast<Handle>(handle), {}});
  return reply(m, static_cast<std::uint64_t>(error));
}

// ibv_resize_cq: the CQEs the client has not polled move, in order, into the new ring
// before the reply; the client switches rings when it reads the reply.
Message Nic::resize_cq(std::uint64_t client, const Message& m, control::ReceivedFds& fds) {
  const std::uint64_t handle = m.words[field::kResizeCq];
  const std::uint64_t entries = m.words[field::kResizeEntries];
  auto it = cqs_.find(static_cast<Handle>(handle));
  const std::uint32_t capacity = capacity_for(entries);
  if (handle > UINT32_MAX || it == cqs_.end() || it->second->client != client || entries == 0 ||
      entries > caps::kMaxCqe || capacity == 0) {
    return reply(m, EINVAL);
  }
  Cq& cq = *it->second;
  publish();
  SharedRegion region;
  auto ring = adopt_ring<RingProducer>(fds, 0, {capacity, sizeof(Cqe)}, m.words[field::kResizeRingBytes], region);
  if (!ring) return reply(m, EINVAL);
  RingConsumer old(cq.region.bytes(), {cq.ring->capacity(), sizeof(Cqe)});
  if (old.error() != RingError::None || old.available() > capacity) return reply(m, EINVAL);
  // Last of the checks: from here the CQ has its new ring, and its quota counts that size.
  if (const int error = registry_.resize_cq(client, cq.handle, region.size()); error != 0) {
    return reply(m, static_cast<std::uint64_t>(error));
  }
  Cqe cqe{};
  while (old.try_pop_value(cqe) == PopResult::Popped) ring->try_push_value(cqe);
  ring->publish();
  cq.region = std::move(region);
  cq.ring = std::move(ring);
  return reply(m, 0);
}

// ------------------------------------------------------------------ QPs

Message Nic::create_qp(std::uint64_t client, const Message& m, control::ReceivedFds& fds) {
  const auto& w = m.words;
  const std::uint64_t type = w[field::kQpType];
  const std::uint64_t pd = w[field::kQpPd];
  const std::uint64_t srq = w[field::kQpSrq];
  const std::uint32_t sq_capacity = capacity_for(w[field::kQpMaxSendWr]);
  const std::uint32_t rq_capacity = capacity_for(w[field::kQpMaxRecvWr]);
  if ((type != IBV_QPT_RC && type != IBV_QPT_UC && type != IBV_QPT_UD) || sq_capacity == 0 ||
      rq_capacity == 0 || w[field::kQpMaxSendSge] > kMaxSge || w[field::kQpMaxRecvSge] > kMaxSge ||
      w[field::kQpMaxInline] > kMaxInlineData || pd > UINT32_MAX || srq > UINT32_MAX ||
      w[field::kQpSendCq] > UINT32_MAX || w[field::kQpRecvCq] > UINT32_MAX) {
    return reply(m, EINVAL);
  }
  auto pd_it = pds_.find(static_cast<Handle>(pd));
  auto srq_it = srqs_.find(static_cast<Handle>(srq));
  if (pd_it == pds_.end() || pd_it->second->client != client ||
      (srq != 0 && (srq_it == srqs_.end() || srq_it->second->client != client))) {
    return reply(m, EINVAL);
  }
  if (qps_.size() >= caps::kMaxQp) return reply(m, ENOMEM);
  const RingGeometry sq_geometry{sq_capacity, sizeof(SendWqe)};
  const RingGeometry rq_geometry{rq_capacity, sizeof(RecvWqe)};
  const std::uint64_t ring_bytes = mapped_bytes(sq_geometry) + mapped_bytes(rq_geometry);
  if (const int error = registry_.admit(client, ResourceKind::Qp, ring_bytes); error != 0) {
    return reply(m, static_cast<std::uint64_t>(error));
  }
  auto qp = std::make_unique<Qp>();
  qp->client = client;
  qp->context = pd_it->second->context;
  qp->type = static_cast<rocev2::QpType>(type);
  qp->send_cq = static_cast<Handle>(w[field::kQpSendCq]);
  qp->recv_cq = static_cast<Handle>(w[field::kQpRecvCq]);
  qp->srq = static_cast<Handle>(srq);
  qp->max_send_sge = static_cast<std::uint32_t>(w[field::kQpMaxSendSge]);
  qp->max_recv_sge = static_cast<std::uint32_t>(w[field::kQpMaxRecvSge]);
  qp->max_inline = static_cast<std::uint32_t>(w[field::kQpMaxInline]);
  qp->sq = adopt_ring<RingConsumer>(fds, 0, sq_geometry, w[field::kQpSqRingBytes], qp->sq_region);
  qp->rq = adopt_ring<RingConsumer>(fds, 1, rq_geometry, w[field::kQpRqRingBytes], qp->rq_region);
  qp->doorbell = Doorbell::adopt(fds.release(2));
  if (!qp->sq || !qp->rq || !qp->doorbell.valid()) return reply(m, EINVAL);

  Qp* raw = qp.get();
  rocev2::QpInit init;
  init.type = qp->type;
  init.pd = static_cast<std::uint32_t>(pd);
  init.max_send_wr = sq_capacity;
  init.max_recv_wr = rq_capacity;
  if (srq != 0) {
    init.srq = srq_it->second->queue.get();
  } else {
    qp->rq_queue = std::make_unique<RingReceiveQueue>(*qp->rq, [] {}, [this, raw] { fail_later(*raw); });
    init.rq = qp->rq_queue.get();
  }
  const auto qpn = engine_.create_qp(init);
  if (!qpn) return reply(m, ENOMEM);
  QpSpec spec{static_cast<Handle>(pd), qp->send_cq, qp->recv_cq,
              srq != 0 ? std::optional<Handle>(static_cast<Handle>(srq)) : std::nullopt, qp->type, *qpn,
              ring_bytes};
  const Created created = registry_.create_qp(client, spec);
  if (!created.ok()) {
    engine_.destroy_qp(*qpn);
    return reply(m, static_cast<std::uint64_t>(created.error));
  }
  qp->handle = created.handle;
  qp->qpn = *qpn;
  qp->udp_source_port = rocev2::udp_source_port_datagram(*qpn);
  // The client rings the doorbell only when asked: ask now, the rings are empty.
  qp->sq->request_doorbell();
  const Handle handle = created.handle;
  watcher_.watch(qp->doorbell.fd(), [this, handle](Instant now) { on_doorbell(handle, now); });
  qp_by_qpn_.emplace(qpn->value(), handle);
  qps_.emplace(handle, std::move(qp));
  Message answer = reply(m, 0);
  answer.words[field::kQpHandle] = handle;
  answer.words[field::kQpNum] = qpn->value();
  return answer;
}

namespace {

// The ibv_qp_attr of a modify_qp request. Fields outside the mask are left zero whatever
// the words say (a client may pass an attr it did not fully initialise); a field inside
// it that does not fit its C type is refused.
bool decode_attr(const std::vector<std::uint64_t>& w, int mask, ibv_qp_attr& a) {
  bool fits = true;
  auto take_int = [&](int bit, std::size_t index, auto& out) {
    if ((mask & bit) == 0) return;
    using T = std::remove_reference_t<decltype(out)>;
    if (w[index] > static_cast<std::uint64_t>(std::numeric_limits<T>::max())) fits = false;
    out = static_cast<T>(w[index]);
  };
  std::uint32_t state = 0, cur_state = 0, mtu = 0;
  take_int(IBV_QP_STATE, field::kModState, state);
  take_int(IBV_QP_CUR_STATE, field::kModCurState, cur_state);
  take_int(IBV_QP_PATH_MTU, field::kModPathMtu, mtu);
  a.qp_state = static_cast<ibv_qp_state>(state);
  a.cur_qp_state = static_cast<ibv_qp_state>(cur_state);
  a.path_mtu = static_cast<ibv_mtu>(mtu);
  take_int(IBV_QP_QKEY, field::kModQkey, a.qkey);
  take_int(IBV_QP_RQ_PSN, field::kModRqPsn, a.rq_psn);
  take_int(IBV_QP_SQ_PSN, field::kModSqPsn, a.sq_psn);
  take_int(IBV_QP_DEST_QPN, field::kModDestQpNum, a.dest_qp_num);
  take_int(IBV_QP_ACCESS_FLAGS, field::kModAccessFlags, a.qp_access_flags);
  take_int(IBV_QP_PKEY_INDEX, field::kModPkeyIndex, a.pkey_index);
  take_int(IBV_QP_PORT, field::kModPortNum, a.port_num);
  take_int(IBV_QP_MAX_QP_RD_ATOMIC, field::kModMaxRdAtomic, a.max_rd_atomic);
  take_int(IBV_QP_MAX_DEST_RD_ATOMIC, field::kModMaxDestRdAtomic, a.max_dest_rd_atomic);
  take_int(IBV_QP_MIN_RNR_TIMER, field::kModMinRnrTimer, a.min_rnr_timer);
  take_int(IBV_QP_TIMEOUT, field::kModTimeout, a.timeout);
  take_int(IBV_QP_RETRY_CNT, field::kModRetryCnt, a.retry_cnt);
  take_int(IBV_QP_RNR_RETRY, field::kModRnrRetry, a.rnr_retry);
  if (mask & IBV_QP_AV) {
    // RoCE v2 always carries a GRH on port 1; the words carry only what varies.
    a.ah_attr.is_global = 1;
    a.ah_attr.port_num = caps::kPortNum;
    a.ah_attr.grh.dgid = gid_of(w[field::kModDgidHigh], w[field::kModDgidLow]);
    take_int(IBV_QP_AV, field::kModSgidIndex, a.ah_attr.grh.sgid_index);
    take_int(IBV_QP_AV, field::kModHopLimit, a.ah_attr.grh.hop_limit);
    take_int(IBV_QP_AV, field::kModTrafficClass, a.ah_attr.grh.traffic_class);
    take_int(IBV_QP_AV, field::kModFlowLabel, a.ah_attr.grh.flow_label);
    if (a.ah_attr.grh.flow_label > 0xF'FFFF) fits = false;
  }
  return fits;
}

// The engine's part of an accepted modify. IBV_QP_* and rocev2::qp_attr bits have the same
// values; the bits the engine has no use for (PORT, PKEY_INDEX, CUR_STATE...) are dropped.
constexpr std::uint32_t kEngineMask =
    rocev2::qp_attr::kState | rocev2::qp_attr::kAccessFlags | rocev2::qp_attr::kQkey | rocev2::qp_attr::kAv |
    rocev2::qp_attr::kPathMtu | rocev2::qp_attr::kTimeout | rocev2::qp_attr::kRetryCnt |
    rocev2::qp_attr::kRnrRetry | rocev2::qp_attr::kRqPsn | rocev2::qp_attr::kMaxQpRdAtomic |
    rocev2::qp_attr::kMinRnrTimer | rocev2::qp_attr::kSqPsn | rocev2::qp_attr::kMaxDestRdAtomic |
    rocev2::qp_attr::kDestQpn;

rocev2::QpAttr engine_attr(const ibv_qp_attr& a, int mask, ibv_qp_state next) {
  rocev2::QpAttr e;
  e.state = static_cast<rocev2::QpState>(next);
  if (mask & IBV_QP_PATH_MTU) e.path_mtu = static_cast<std::uint32_t>(caps::mtu_bytes(a.path_mtu).value_or(0));
  e.timeout = a.timeout;
  e.retry_cnt = a.retry_cnt;
  e.rnr_retry = a.rnr_retry;
  e.min_rnr_timer = a.min_rnr_timer;
  e.max_rd_atomic = a.max_rd_atomic;
  e.max_dest_rd_atomic = a.max_dest_rd_atomic;
  e.sq_psn = rocev2::Psn(a.sq_psn);
  e.rq_psn = rocev2::Psn(a.rq_psn);
  e.dest_qpn = rocev2::Qpn(a.dest_qp_num);
  e.qkey = rocev2::Qkey(a.qkey);
  if (mask & IBV_QP_AV) {
    e.dest_ip = caps::ipv4_from_gid(a.ah_attr.grh.dgid).value_or(stack::Ipv4Address{});
    e.traffic_class = a.ah_attr.grh.traffic_class;
  }
  e.access_flags = a.qp_access_flags;
  return e;
}

}  // namespace

Message Nic::modify_qp(std::uint64_t client, const Message& m, Instant now) {
  const auto& w = m.words;
  auto it = qps_.find(static_cast<Handle>(w[field::kModQp]));
  if (w[field::kModQp] > UINT32_MAX || it == qps_.end() || it->second->client != client ||
      w[field::kModAttrMask] > static_cast<std::uint64_t>(INT_MAX)) {
    return reply(m, EINVAL);
  }
  Qp& qp = *it->second;
  const int mask = static_cast<int>(w[field::kModAttrMask]);
  ibv_qp_attr attr{};
  if (!decode_attr(w, mask, attr)) return reply(m, EINVAL);
  QpLimits limits;
  limits.active_mtu = caps::active_mtu_for_netdev(config_.netdev_mtu).value_or(IBV_MTU_256);
  const ibv_qp_state current = to_ibv(engine_state(qp));
  const ModifyVerdict verdict = validate_modify(qp.type, current, attr, mask, limits);
  if (!verdict.ok()) return reply(m, EINVAL);
  rocev2::QpAttr e = engine_attr(attr, mask, verdict.next_state);
  std::uint32_t engine_mask = static_cast<std::uint32_t>(mask) & kEngineMask;
  if (qp.type == rocev2::QpType::Ud) {
    // UD has no path MTU attribute: its messages are bounded by the port's active MTU
    // (as rxe's get_mtu() does for UD), which ibv_ud_pingpong checks its size against.
    e.path_mtu = static_cast<std::uint32_t>(caps::mtu_bytes(limits.active_mtu).value_or(256));
    engine_mask |= rocev2::qp_attr::kPathMtu;
  }
  if (engine_.modify_qp(qp.qpn, e, engine_mask, now) != rocev2::VerbResult::Ok) return reply(m, EINVAL);
  registry_.set_qp_state(client, qp.handle, verdict.next_state);
  if (mask & IBV_QP_PKEY_INDEX) qp.pkey_index = attr.pkey_index;
  if (mask & IBV_QP_AV) {
    qp.dgid = attr.ah_attr.grh.dgid;
    qp.flow_label = attr.ah_attr.grh.flow_label;
    qp.hop_limit = attr.ah_attr.grh.hop_limit;
    qp.traffic_class = attr.ah_attr.grh.traffic_class;
  }
  if ((mask & (IBV_QP_AV | IBV_QP_DEST_QPN)) && qp.type != rocev2::QpType::Ud) {
    const auto applied = engine_.query_qp(qp.qpn);
    qp.udp_source_port = rocev2::udp_source_port_connected(qp.qpn, applied->dest_qpn, qp.flow_label);
  }
  if (verdict.next_state == IBV_QPS_RESET) {
    // Reset empties the send queue too (ibv_modify_qp(3)): what waits in the ring is dropped.
    qp.held.reset();
    qp.refused.reset();
    SendWqe discarded{};
    while (qp.sq->try_pop_value(discarded) == PopResult::Popped) {
    }
    if (qp.rq_queue) {
      RecvWqe dropped{};
      while (qp.rq->try_pop_value(dropped) == PopResult::Popped) {
      }
      qp.rq_queue->reset();
    }
    qp.rq_failure_reported = false;
    qp.must_fail = false;
    qp.sq->request_doorbell();
  }
  pump_later(qp);
  return reply(m, 0);
}

Message Nic::query_qp(std::uint64_t client, const Message& m) {
  auto it = qps_.find(static_cast<Handle>(m.words[field::kQueryQpHandle]));
  if (m.words[field::kQueryQpHandle] > UINT32_MAX || it == qps_.end() || it->second->client != client) {
    return reply(m, EINVAL);
  }
  const Qp& qp = *it->second;
  const rocev2::QpAttr a = *engine_.query_qp(qp.qpn);
  Message answer = reply(m, 0);
  auto& w = answer.words;
  w[field::kModAttrMask] = m.words[field::kQueryQpMask];
  w[field::kModState] = static_cast<std::uint64_t>(a.state);
  w[field::kModCurState] = static_cast<std::uint64_t>(a.state);
  int mtu = IBV_MTU_256;
  while (mtu < IBV_MTU_4096 && caps::mtu_bytes(mtu).value_or(0) < static_cast<int>(a.path_mtu)) ++mtu;
  w[field::kModPathMtu] = static_cast<std::uint64_t>(mtu);
  w[field::kModQkey] = a.qkey.value();
  w[field::kModRqPsn] = a.rq_psn.value();
  w[field::kModSqPsn] = a.sq_psn.value();
  w[field::kModDestQpNum] = a.dest_qpn.value();
  w[field::kModAccessFlags] = a.access_flags;
  w[field::kModPkeyIndex] = qp.pkey_index;
  w[field::kModPortNum] = caps::kPortNum;
  w[field::kModMaxRdAtomic] = a.max_rd_atomic;
  w[field::kModMaxDestRdAtomic] = a.max_dest_rd_atomic;
  w[field::kModMinRnrTimer] = a.min_rnr_timer;
  w[field::kModTimeout] = a.timeout;
  w[field::kModRetryCnt] = a.retry_cnt;
  w[field::kModRnrRetry] = a.rnr_retry;
  w[field::kModDgidHigh] = gid_word(qp.dgid, 0);
  w[field::kModDgidLow] = gid_word(qp.dgid, 8);
  w[field::kModSgidIndex] = 0;
  w[field::kModHopLimit] = qp.hop_limit;
  w[field::kModTrafficClass] = qp.traffic_class;
  w[field::kModFlowLabel] = qp.flow_label;
  return answer;
}

Message Nic::destroy_qp(std::uint64_t client, const Message& m) {
  const std::uint64_t handle = m.words[field::kDestroyHandle];
  if (handle > UINT32_MAX) return reply(m, EINVAL);
  const int error = registry_.destroy_qp(client, static_cast<Handle>(handle));
  if (error == 0) release_qp(static_cast<Handle>(handle));
  return reply(m, static_cast<std::uint64_t>(error));
}

// ------------------------------------------------------------------ SRQs

Message Nic::create_srq(std::uint64_t client, const Message& m, control::ReceivedFds& fds) {
  const auto& w = m.words;
  const std::uint64_t pd = w[field::kSrqPd];
  const std::uint32_t capacity = capacity_for(w[field::kSrqMaxWr]);
  auto pd_it = pds_.find(static_cast<Handle>(pd));
  if (pd > UINT32_MAX || pd_it == pds_.end() || pd_it->second->client != client || w[field::kSrqMaxWr] == 0 ||
      capacity == 0 || w[field::kSrqMaxSge] > caps::kMaxSrqSge || w[field::kSrqLimit] > w[field::kSrqMaxWr]) {
    return reply(m, EINVAL);
  }
  if (srqs_.size() >= caps::kMaxSrq) return reply(m, ENOMEM);
  const RingGeometry geometry{capacity, sizeof(RecvWqe)};
  if (const int error = registry_.admit(client, ResourceKind::Srq, mapped_bytes(geometry)); error != 0) {
    return reply(m, static_cast<std::uint64_t>(error));
  }
  auto srq = std::make_unique<Srq>();
  srq->ring = adopt_ring<RingConsumer>(fds, 0, geometry, w[field::kSrqRingBytes], srq->region);
  srq->doorbell = Doorbell::adopt(fds.release(1));
  if (!srq->ring || !srq->doorbell.valid()) return reply(m, EINVAL);
  const Created created = registry_.create_srq(client, static_cast<Handle>(pd), mapped_bytes(geometry));
  if (!created.ok()) return reply(m, static_cast<std::uint64_t>(created.error));
  Srq* raw = srq.get();
  srq->handle = created.handle;
  srq->client = client;
  srq->context = pd_it->second->context;
  srq->max_wr = capacity;
  srq->max_sge = static_cast<std::uint32_t>(w[field::kSrqMaxSge]);
  srq->queue = std::make_unique<RingReceiveQueue>(
      *srq->ring, [this, raw] { check_srq_limit(*raw); }, [this, raw] { srq_failed(*raw); });
  srqs_.emplace(created.handle, std::move(srq));
  Message answer = reply(m, 0);
  answer.words[field::kHandle] = created.handle;
  return answer;
}

// ibv_modify_srq(3): IBV_SRQ_LIMIT arms the limit event; IBV_SRQ_MAX_WR would resize the
// ring, which we do not (IBV_DEVICE_SRQ_RESIZE is not among our capabilities).
Message Nic::modify_srq(std::uint64_t client, const Message& m) {
  const auto& w = m.words;
  auto it = srqs_.find(static_cast<Handle>(w[field::kModSrq]));
  if (w[field::kModSrq] > UINT32_MAX || it == srqs_.end() || it->second->client != client) return reply(m, EINVAL);
  const std::uint64_t mask = w[field::kModSrqMask];
  if ((mask & ~static_cast<std::uint64_t>(IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT)) != 0 || (mask & IBV_SRQ_MAX_WR) != 0) {
    return reply(m, EINVAL);
  }
  Srq& srq = *it->second;
  if (mask & IBV_SRQ_LIMIT) {
    if (w[field::kModSrqLimit] > srq.max_wr) return reply(m, EINVAL);
    srq.limit = static_cast<std::uint32_t>(w[field::kModSrqLimit]);
    srq.armed = srq.limit > 0;
  }
  return reply(m, 0);
}

Message Nic::query_srq(std::uint64_t client, const Message& m) {
  auto it = srqs_.find(static_cast<Handle>(m.words[field::kQuerySrqHandle]));
  if (m.words[field::kQuerySrqHandle] > UINT32_MAX || it == srqs_.end() || it->second->client != client) {
    return reply(m, EINVAL);
  }
  Message answer = reply(m, 0);
  answer.words[field::kQuerySrqMaxWr] = it->second->max_wr;
  answer.words[field::kQuerySrqMaxSge] = it->second->max_sge;
  // ibv_query_srq(3): the limit reads 0 once the event fired (the arm is consumed).
  answer.words[field::kQuerySrqLimit] = it->second->armed ? it->second->limit : 0;
  return answer;
}

Message Nic::destroy_srq(std::uint64_t client, const Message& m) {
  const std::uint64_t handle = m.words[field::kDestroyHandle];
  if (handle > UINT32_MAX) return reply(m, EINVAL);
  const int error = registry_.destroy_srq(client, static_cast<Handle>(handle));
  if (error == 0) forget_object({ResourceKind::Srq, static_cast<Handle>(handle), {}});
  return reply(m, static_cast<std::uint64_t>(error));
}

// ------------------------------------------------------------------ AHs

Message Nic::create_ah(std::uint64_t client, const Message& m) {
  const auto& w = m.words;
  const std::uint64_t pd = w[field::kAhPd];
  const auto dest = caps::ipv4_from_gid(gid_of(w[field::kAhDgidHigh], w[field::kAhDgidLow]));
  if (pd > UINT32_MAX || registry_.check_pd(client, static_cast<Handle>(pd)) != 0 || !dest ||
      w[field::kAhSgidIndex] != 0 || w[field::kAhPortNum] != caps::kPortNum || w[field::kAhFlowLabel] > 0xF'FFFF ||
      w[field::kAhHopLimit] > 0xFF || w[field::kAhTrafficClass] > 0xFF) {
    return reply(m, EINVAL);
  }
  if (ahs_.size() >= caps::kMaxAh) return reply(m, ENOMEM);
  const Created created = registry_.create_ah(client, static_cast<Handle>(pd));
  if (!created.ok()) return reply(m, static_cast<std::uint64_t>(created.error));
  ahs_.emplace(created.handle, std::make_unique<Ah>(Ah{client, *dest, static_cast<std::uint32_t>(w[field::kAhFlowLabel]),
                                                       static_cast<std::uint8_t>(w[field::kAhTrafficClass])}));
  Message answer = reply(m, 0);
  answer.words[field::kHandle] = created.handle;
  return answer;
}

Message Nic::destroy_ah(std::uint64_t client, const Message& m) {
  const std::uint64_t handle = m.words[field::kDestroyHandle];
  if (handle > UINT32_MAX) return reply(m, EINVAL);
  const int error = registry_.destroy_ah(client, static_cast<Handle>(handle));
  if (error == 0) ahs_.erase(static_cast<Handle>(handle));
  return reply(m, static_cast<std::uint64_t>(error));
}

// ------------------------------------------------------------------ listing

std::vector<ClientListing> Nic::listing() {
  for (const auto& [handle, qp] : qps_) registry_.set_qp_state(qp->client, handle, to_ibv(engine_state(*qp)));
  return registry_.listings();
}

}  // namespace rrdma::verbs
