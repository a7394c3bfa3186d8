#include "stack/arp_cache.h"

#include <algorithm>
#include <utility>

namespace rrdma::stack {

ArpCache::ArpCache(ArpTimers timers, ArpCacheClient& client) : timers_(timers), client_(client) {}

ArpCache::~ArpCache() {
  lru_.clear();
  by_address_.clear_and_dispose([](Entry* entry) { delete entry; });
}

ArpCache::Entry* ArpCache::find(Ipv4Address address) {
  const auto it = by_address_.find(address);
  return it == by_address_.end() ? nullptr : &*it;
}

ArpCache::Entry& ArpCache::insert(Ipv4Address address) {
  if (by_address_.size() >= timers_.max_entries && !lru_.empty()) {
    Entry& victim = lru_.front();
    // An evicted resolution is a failure like any other: its packets are lost.
    if (victim.state == State::incomplete) {
      fail(victim);
    } else {
      erase(victim);
    }
  }
  auto* entry = new Entry;
  entry->address = address;
  by_address_.insert(*entry);
  lru_.push_back(*entry);
  return *entry;
}

void ArpCache::touch(Entry& entry) {
  lru_.erase(lru_.iterator_to(entry));
  lru_.push_back(entry);
}

void ArpCache::erase(Entry& entry) {
  lru_.erase(lru_.iterator_to(entry));
  by_address_.erase(by_address_.iterator_to(entry));
  delete &entry;
}

std::optional<MacAddress> ArpCache::lookup(Ipv4Address address, Instant) {
  Entry* entry = find(address);
  if (!entry || entry->state == State::incomplete) return std::nullopt;
  entry->used = true;
  touch(*entry);
  return entry->mac;
}

void ArpCache::enqueue(Ipv4Address address, PendingPacket packet, Instant now) {
  Entry* entry = find(address);
  if (entry && entry->state != State::incomplete) {
    entry->used = true;
    touch(*entry);
    client_.send_pending(address, entry->mac, std::move(packet));
    return;
  }
  if (!entry) {
    entry = &insert(address);
    send_request(*entry, now);
  }
  if (entry->waiting.size() >= timers_.max_queued_per_address) {
    entry->waiting.pop_front();
    ++queue_overflows_;
  }
  entry->waiting.push_back(std::move(packet));
}

bool ArpCache::solicit(Ipv4Address address, Instant now) {
  if (Entry* entry = find(address)) return entry->state != State::incomplete;
  send_request(insert(address), now);
  return false;
}

bool ArpCache::update(Ipv4Address address, const MacAddress& mac, Instant now, bool create) {
  Entry* entry = find(address);
  if (!entry && !create) return false;
  if (!entry) entry = &insert(address);
  confirm(*entry, mac, now);
  return true;
}

void ArpCache::confirm(Entry& entry, const MacAddress& mac, Instant now) {
  // A resolution completes only if we asked; an entry learnt from a request just appears.
  const bool was_resolving = entry.state == State::incomplete && entry.requests_sent > 0;
  entry.state = State::reachable;
  entry.mac = mac;
  entry.confirmed_at = now;
  entry.deadline = now + timers_.reachable;
  entry.requests_sent = 0;
  entry.used = false;
  touch(entry);
  // Taken out first: the client's transmit path may call back into the cache.
  std::deque<PendingPacket> waiting = std::exchange(entry.waiting, {});
  const Ipv4Address address = entry.address;
  if (was_resolving) client_.arp_resolved(address, mac);
  for (PendingPacket& packet : waiting) client_.send_pending(address, mac, std::move(packet));
}

void ArpCache::send_request(Entry& entry, Instant now) {
  ++entry.requests_sent;
  entry.deadline = now + timers_.retry_interval;
  std::optional<MacAddress> known_mac;
  if (entry.state == State::refreshing) known_mac = entry.mac;
  client_.send_arp_request(entry.address, known_mac);
}

void ArpCache::fail(Entry& entry) {
  ++failures_;
  const Ipv4Address address = entry.address;
  const std::size_t dropped = entry.waiting.size();
  erase(entry);
  client_.arp_failed(address, dropped);
}

void ArpCache::step(Entry& entry, Instant now) {
  switch (entry.state) {
    case State::incomplete:
    case State::refreshing:
      if (entry.requests_sent < timers_.max_requests) {
        send_request(entry, now);
      } else {
        fail(entry);
      }
      return;
    case State::reachable:
      // Only a MAC still in use is worth a request; an idle one just ages out.
      if (!entry.used) {
        erase(entry);
        return;
      }
      entry.state = State::refreshing;
      entry.requests_sent = 0;
      send_request(entry, now);
      return;
  }
}

void ArpCache::poll(Instant now) {
  // Addresses first, then one step each: a step may erase entries or call the client,
  // which may call back into the cache.
  std::vector<Ipv4Address> due;
  for (const Entry& entry : by_address_) {
    if (entry.deadline <= now) due.push_back(entry.address);
  }
  for (Ipv4Address address : due) {
    Entry* entry = find(address);
    if (entry && entry->deadline <= now) step(*entry, now);
  }
}

std::optional<Instant> ArpCache::next_deadline() const {
  std::optional<Instant> next;
  for (const Entry& entry : by_address_) {
    if (!next || entry.deadline < *next) next = entry.deadline;
  }
  return next;
}

std::vector<ArpEntry> ArpCache::entries(Instant now) const {
  std::vector<ArpEntry> result;
  for (const Entry& entry : by_address_) {
    if (entry.state == State::incomplete) continue;
    result.push_back({entry.address, entry.mac, now - entry.confirmed_at});
  }
  return result;
}

std::size_t ArpCache::size() const { return by_address_.size(); }

}  // namespace rrdma::stack
