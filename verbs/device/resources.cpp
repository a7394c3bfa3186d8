#include "verbs/device/resources.h"

#include <algorithm>
#include <cerrno>
#include <limits>

namespace rrdma::verbs {

ResourceRegistry::ResourceRegistry(Handle first_handle)
    : next_handle_(first_handle == 0 ? 1 : first_handle) {}

int ResourceRegistry::add_client(const ClientInfo& client) {
  if (!clients_.emplace(client.id, client).second) return EEXIST;
  QuotaUse& use = use_[client.pid];
  use.pid = client.pid;
  use.uid = client.uid;
  ++use.connections;
  QuotaUse& user = user_use_[client.uid];
  user.uid = client.uid;
  ++user.connections;
  return 0;
}

ResourceRegistry::Exhausted ResourceRegistry::exhausted(std::uint64_t client_id, ResourceKind kind,
                                                        std::uint64_t ring_bytes) const {
  auto client = clients_.find(client_id);
  if (client == clients_.end()) return Exhausted::Nothing;  // insert() answers ENOENT
  const QuotaUse& use = use_.at(client->second.pid);
  if (use.of(kind) >= quotas_.of(kind)) return Exhausted::Objects;
  if (user_use_.at(client->second.uid).of(kind) >= user_quotas_.of(kind)) return Exhausted::Objects;
  if (const std::uint64_t more = descriptors_per(kind); more > 0 && descriptor_budget_ != Quotas::kUnlimited) {
    std::uint64_t held = 0;
    for (const auto& [pid, other] : use_) held += other.descriptors();
    if (held > descriptor_budget_ || more > descriptor_budget_ - held) return Exhausted::Objects;
  }
  return over_ring_quotas(client_id, ring_bytes) ? Exhausted::RingBytes : Exhausted::Nothing;
}

// Written so that nothing wraps, even when the quota was lowered below what is held.
bool ResourceRegistry::over_ring_quota(const QuotaUse& use, const Quotas& quotas, std::uint64_t more_bytes) {
  return more_bytes > 0 && (use.ring_bytes > quotas.ring_bytes || more_bytes > quotas.ring_bytes - use.ring_bytes);
}

// The process's quota, then its user's total.
bool ResourceRegistry::over_ring_quotas(std::uint64_t client_id, std::uint64_t more_bytes) const {
  const ClientInfo& client = clients_.at(client_id);
  return over_ring_quota(use_.at(client.pid), quotas_, more_bytes) ||
         over_ring_quota(user_use_.at(client.uid), user_quotas_, more_bytes);
}

int ResourceRegistry::admit(std::uint64_t client_id, ResourceKind kind, std::uint64_t ring_bytes) {
  switch (exhausted(client_id, kind, ring_bytes)) {
    case Exhausted::Nothing: return 0;
    case Exhausted::Objects: ++refusals_.of(kind); return ENOMEM;
    case Exhausted::RingBytes: ++refusals_.ring_bytes; return ENOMEM;
  }
  return ENOMEM;
}

void ResourceRegistry::count(std::uint64_t client_id, ResourceKind kind, std::uint64_t ring_bytes, bool add) {
  const ClientInfo& client = clients_.at(client_id);
  for (QuotaUse* use : {&use_.at(client.pid), &user_use_.at(client.uid)}) {
    if (add) {
      ++use->of(kind);
      use->ring_bytes += ring_bytes;
    } else {
      --use->of(kind);
      use->ring_bytes -= ring_bytes;
    }
  }
}

std::vector<QuotaUse> ResourceRegistry::quota_use() const {
  std::vector<QuotaUse> out;
  for (const auto& [pid, use] : use_) out.push_back(use);
  std::sort(out.begin(), out.end(), [](const QuotaUse& a, const QuotaUse& b) { return a.pid < b.pid; });
  return out;
}

bool ResourceRegistry::has_client(std::uint64_t client_id) const {
  return clients_.contains(client_id);
}

ResourceRegistry::Object* ResourceRegistry::owned(std::uint64_t client_id, Handle handle,
                                                  ResourceKind kind) {
  auto it = objects_.find(handle);
  if (it == objects_.end() || it->second.owner != client_id || it->second.kind != kind) {
    return nullptr;
  }
  return &it->second;
}

const ResourceRegistry::Object* ResourceRegistry::owned(std::uint64_t client_id, Handle handle,
                                                        ResourceKind kind) const {
  return const_cast<ResourceRegistry*>(this)->owned(client_id, handle, kind);
}

Created ResourceRegistry::insert(std::uint64_t client_id, Object object) {
  if (!has_client(client_id)) return {ENOENT, 0};
  if (const int error = admit(client_id, object.kind, object.ring_bytes); error != 0) return {error, 0};
  if (next_handle_ > std::numeric_limits<Handle>::max()) return {ENOMEM, 0};
  const auto handle = static_cast<Handle>(next_handle_++);
  object.owner = client_id;
  objects_.emplace(handle, object);
  count(client_id, object.kind, object.ring_bytes, true);
  return {0, handle};
}

void ResourceRegistry::erase(Handle handle) {
  auto it = objects_.find(handle);
  count(it->second.owner, it->second.kind, it->second.ring_bytes, false);
  objects_.erase(it);
}

void ResourceRegistry::use(Handle handle) {
  if (handle != 0) ++objects_.at(handle).users;
}

void ResourceRegistry::release(Handle handle) {
  if (handle != 0) --objects_.at(handle).users;
}

// Common to every destroy verb: only the owner names it, and nothing may still depend on it.
int ResourceRegistry::destroy(std::uint64_t client_id, Handle handle, ResourceKind kind) {
  const Object* object = owned(client_id, handle, kind);
  if (object == nullptr) return EINVAL;
  if (object->users != 0) return EBUSY;
  release(object->parent);
  release(object->send_cq);
  release(object->recv_cq);
  release(object->srq);
  erase(handle);
  return 0;
}

Created ResourceRegistry::open_context(std::uint64_t client_id, std::uint64_t ring_bytes) {
  return insert(client_id, Object{.kind = ResourceKind::Context, .ring_bytes = ring_bytes});
}

int ResourceRegistry::close_context(std::uint64_t client_id, Handle context) {
  return destroy(client_id, context, ResourceKind::Context);
}

Created ResourceRegistry::alloc_pd(std::uint64_t client_id, Handle context) {
  if (owned(client_id, context, ResourceKind::Context) == nullptr) return {EINVAL, 0};
  Created created = insert(client_id, Object{.kind = ResourceKind::Pd, .parent = context});
  if (created.ok()) use(context);
  return created;
}

int ResourceRegistry::dealloc_pd(std::uint64_t client_id, Handle pd) {
  return destroy(client_id, pd, ResourceKind::Pd);
}

Created ResourceRegistry::create_cq(std::uint64_t client_id, Handle context, std::uint64_t ring_bytes) {
  if (owned(client_id, context, ResourceKind::Context) == nullptr) return {EINVAL, 0};
  Created created =
      insert(client_id, Object{.kind = ResourceKind::Cq, .parent = context, .ring_bytes = ring_bytes});
  if (created.ok()) use(context);
  return created;
}

int ResourceRegistry::destroy_cq(std::uint64_t client_id, Handle cq) {
  return destroy(client_id, cq, ResourceKind::Cq);
}

int ResourceRegistry::resize_cq(std::uint64_t client_id, Handle cq, std::uint64_t ring_bytes) {
  Object* object = owned(client_id, cq, ResourceKind::Cq);
  if (object == nullptr) return EINVAL;
  if (ring_bytes > object->ring_bytes) {
    // Only the growth is new; the object count does not change.
    if (over_ring_quotas(client_id, ring_bytes - object->ring_bytes)) {
      ++refusals_.ring_bytes;
      return ENOMEM;
    }
  }
  count(client_id, ResourceKind::Cq, object->ring_bytes, false);
  object->ring_bytes = ring_bytes;
  count(client_id, ResourceKind::Cq, object->ring_bytes, true);
  return 0;
}

Created ResourceRegistry::create_srq(std::uint64_t client_id, Handle pd, std::uint64_t ring_bytes) {
  if (owned(client_id, pd, ResourceKind::Pd) == nullptr) return {EINVAL, 0};
  Created created = insert(client_id, Object{.kind = ResourceKind::Srq, .parent = pd, .ring_bytes = ring_bytes});
  if (created.ok()) use(pd);
  return created;
}

int ResourceRegistry::destroy_srq(std::uint64_t client_id, Handle srq) {
  return destroy(client_id, srq, ResourceKind::Srq);
}

Created ResourceRegistry::create_qp(std::uint64_t client_id, const QpSpec& spec) {
  const bool named_own = owned(client_id, spec.pd, ResourceKind::Pd) != nullptr &&
                         owned(client_id, spec.send_cq, ResourceKind::Cq) != nullptr &&
                         owned(client_id, spec.recv_cq, ResourceKind::Cq) != nullptr &&
                         (!spec.srq || owned(client_id, *spec.srq, ResourceKind::Srq) != nullptr);
  if (!named_own) return {EINVAL, 0};
  Object qp{.kind = ResourceKind::Qp,
            .parent = spec.pd,
            .send_cq = spec.send_cq,
            .recv_cq = spec.recv_cq,
            .srq = spec.srq.value_or(0),
            .qpn = spec.qpn,
            .qp_type = spec.type,
            .ring_bytes = spec.ring_bytes};
  Created created = insert(client_id, qp);
  if (!created.ok()) return created;
  // One use per reference: a QP whose send and receive CQ are the same CQ holds it twice,
  // and destroy() releases it twice.
  use(qp.parent);
  use(qp.send_cq);
  use(qp.recv_cq);
  use(qp.srq);
  return created;
}

int ResourceRegistry::destroy_qp(std::uint64_t client_id, Handle qp) {
  return destroy(client_id, qp, ResourceKind::Qp);
}

int ResourceRegistry::set_qp_state(std::uint64_t client_id, Handle qp, ibv_qp_state state) {
  Object* object = owned(client_id, qp, ResourceKind::Qp);
  if (object == nullptr) return EINVAL;
  object->qp_state = state;
  return 0;
}

std::optional<ibv_qp_state> ResourceRegistry::qp_state(std::uint64_t client_id, Handle qp) const {
  const Object* object = owned(client_id, qp, ResourceKind::Qp);
  if (object == nullptr) return std::nullopt;
  return object->qp_state;
}

Created ResourceRegistry::create_ah(std::uint64_t client_id, Handle pd) {
  if (owned(client_id, pd, ResourceKind::Pd) == nullptr) return {EINVAL, 0};
  Created created = insert(client_id, Object{.kind = ResourceKind::Ah, .parent = pd});
  if (created.ok()) use(pd);
  return created;
}

int ResourceRegistry::destroy_ah(std::uint64_t client_id, Handle ah) {
  return destroy(client_id, ah, ResourceKind::Ah);
}

int ResourceRegistry::check_pd(std::uint64_t client_id, Handle pd) const {
  return owned(client_id, pd, ResourceKind::Pd) != nullptr ? 0 : EINVAL;
}

int ResourceRegistry::add_mr(std::uint64_t client_id, Handle pd, rocev2::Lkey lkey) {
  if (check_pd(client_id, pd) != 0) return EINVAL;
  if (mrs_.contains(lkey.value())) return EEXIST;
  if (const int error = admit(client_id, ResourceKind::Mr, 0); error != 0) return error;
  mrs_.emplace(lkey.value(), MrRecord{client_id, pd});
  count(client_id, ResourceKind::Mr, 0, true);
  use(pd);
  return 0;
}

int ResourceRegistry::remove_mr(std::uint64_t client_id, rocev2::Lkey lkey) {
  auto it = mrs_.find(lkey.value());
  if (it == mrs_.end() || it->second.owner != client_id) return EINVAL;
  release(it->second.pd);
  count(client_id, ResourceKind::Mr, 0, false);
  mrs_.erase(it);
  return 0;
}

std::vector<Handle> ResourceRegistry::handles_of(std::uint64_t client_id,
                                                 ResourceKind kind) const {
  std::vector<Handle> handles;
  for (const auto& [handle, object] : objects_) {
    if (object.owner == client_id && object.kind == kind) handles.push_back(handle);
  }
  std::sort(handles.begin(), handles.end());  // the counter only grows: creation order
  return handles;
}

std::vector<TeardownAction> ResourceRegistry::drop_client(std::uint64_t client_id) {
  std::vector<TeardownAction> actions;
  auto client = clients_.find(client_id);
  if (client == clients_.end()) return actions;
  auto take_objects = [&](ResourceKind kind) {
    std::vector<Handle> handles = handles_of(client_id, kind);
    for (auto it = handles.rbegin(); it != handles.rend(); ++it) {
      actions.push_back({kind, *it, objects_.at(*it).qpn});
      erase(*it);
    }
  };
  auto take_mrs = [&] {
    std::vector<std::uint32_t> lkeys;
    for (const auto& [lkey, record] : mrs_) {
      if (record.owner == client_id) lkeys.push_back(lkey);
    }
    std::sort(lkeys.begin(), lkeys.end());
    for (std::uint32_t lkey : lkeys) {
      actions.push_back({ResourceKind::Mr, lkey, {}});
      count(client_id, ResourceKind::Mr, 0, false);
      mrs_.erase(lkey);
    }
  };
  // A QP names PD, CQs and SRQ; an SRQ and an AH name a PD; MRs name a PD; PDs and CQs name
  // the context. Undoing users before what they use keeps every step a legal verb.
  take_objects(ResourceKind::Qp);
  take_objects(ResourceKind::Srq);
  take_objects(ResourceKind::Cq);
  take_objects(ResourceKind::Ah);
  take_mrs();
  take_objects(ResourceKind::Pd);
  take_objects(ResourceKind::Context);
  // Objects only ever name objects of the same client, so no use count elsewhere changes.
  // The process's other connections keep what they hold; with the last one it is forgotten.
  auto use = use_.find(client->second.pid);
  if (--use->second.connections == 0) use_.erase(use);
  auto user = user_use_.find(client->second.uid);
  if (--user->second.connections == 0) user_use_.erase(user);
  clients_.erase(client);
  return actions;
}

std::optional<ClientListing> ResourceRegistry::listing(std::uint64_t client_id) const {
  auto client = clients_.find(client_id);
  if (client == clients_.end()) return std::nullopt;
  ClientListing out;
  out.client = client->second;
  out.contexts = handles_of(client_id, ResourceKind::Context);
  out.pds = handles_of(client_id, ResourceKind::Pd);
  out.mrs = static_cast<std::size_t>(std::count_if(
      mrs_.begin(), mrs_.end(), [&](const auto& entry) { return entry.second.owner == client_id; }));
  out.cqs = handles_of(client_id, ResourceKind::Cq);
  for (Handle handle : handles_of(client_id, ResourceKind::Qp)) {
    const Object& qp = objects_.at(handle);
    out.qps.push_back({handle, qp.qpn, qp.qp_type, qp.qp_state});
  }
  out.srqs = handles_of(client_id, ResourceKind::Srq);
  out.ahs = handles_of(client_id, ResourceKind::Ah);
  return out;
}

std::vector<ClientListing> ResourceRegistry::listings() const {
  std::vector<std::uint64_t> ids;
  for (const auto& [id, client] : clients_) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  std::vector<ClientListing> out;
  for (std::uint64_t id : ids) out.push_back(*listing(id));
  return out;
}

}  // namespace rrdma::verbs
