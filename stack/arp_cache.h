// The ARP cache (RFC 826, with the aging and refresh of RFC 1122 section 2.3.2.1): maps
// next-hop IPv4 addresses to MAC addresses, holds the packets that wait for a resolution,
// and decides when to send requests. Pure logic: it never reads a clock (time is an
// argument) and never touches frames; what must go on the wire is asked of an
// ArpCacheClient.
//
// An entry's life:
//   incomplete --reply--> reachable --`reachable` elapsed, entry used--> refreshing
//        |                    ^  \--`reachable` elapsed, unused--> removed (aged out)
//        |                    |                                    |
//        |                    +---------------reply----------------+
//        +--no reply after `max_requests` requests--> removed, failure reported
// A refreshing entry keeps its MAC in use while unicast requests ask the same host to
// confirm; if none answers it is removed and the failure reported.
#pragma once

#include <boost/intrusive/list.hpp>
#include <boost/intrusive/set.hpp>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

#include "stack/addresses.h"
#include "stack/arp_timers.h"
#include "stack/interface.h"
#include "stack/time.h"

namespace rrdma::stack {

// An IPv4 packet waiting for its next hop, with room in front for the Ethernet header.
using PendingPacket = std::vector<std::uint8_t>;

// What the cache asks of the interface that owns it.
class ArpCacheClient {
 public:
  virtual ~ArpCacheClient() = default;
  // Send an ARP request for `target`: broadcast, or unicast to `known_mac` when
  // refreshing an entry (RFC 1122 2.3.2.1 suggests unicast polls to limit broadcasts).
  virtual void send_arp_request(Ipv4Address target, std::optional<MacAddress> known_mac) = 0;
  // `target` now resolves to `mac`: transmit one packet that waited for it.
  virtual void send_pending(Ipv4Address target, const MacAddress& mac,
                            PendingPacket packet) = 0;
  // An incomplete entry got its first answer.
  virtual void arp_resolved(Ipv4Address target, const MacAddress& mac) = 0;
  // `target` did not answer: its entry is gone, and with it `dropped_packets` packets.
  virtual void arp_failed(Ipv4Address target, std::size_t dropped_packets) = 0;
};

class ArpCache {
 public:
  ArpCache(ArpTimers timers, ArpCacheClient& client);
  ~ArpCache();
  ArpCache(const ArpCache&) = delete;
  ArpCache& operator=(const ArpCache&) = delete;

  // The MAC of `address` if known (reachable or refreshing), marking the entry used.
  std::optional<MacAddress> lookup(Ipv4Address address, Instant now);

  // Queues `packet` until `address` resolves, starting resolution if it is not under way.
  // When the queue is full the oldest packet is dropped (counted in queue_overflows()).
  // If the address is already known the packet goes out at once.
  void enqueue(Ipv4Address address, PendingPacket packet, Instant now);

  // Starts resolving `address` if it is neither known nor being resolved, with no packet to
  // send (an rdma_cm address resolution asks before it has anything to send). Returns
  // whether the MAC is known now.
  bool solicit(Ipv4Address address, Instant now);
  // An ARP packet said `address` is at `mac` (RFC 826 "merge"): an existing entry is
  // updated and confirmed, and its waiting packets sent; a new entry is made only when
  // `create` (the packet was addressed to us). Returns true if an entry was updated or made.
  bool update(Ipv4Address address, const MacAddress& mac, Instant now, bool create);

  // Runs every due retry, refresh and expiry.
  void poll(Instant now);
  std::optional<Instant> next_deadline() const;

  std::vector<ArpEntry> entries(Instant now) const;
  std::size_t size() const;
  std::uint64_t queue_overflows() const { return queue_overflows_; }
  std::uint64_t failures() const { return failures_; }
  const ArpTimers& timers() const { return timers_; }

 private:
  enum class State { incomplete, reachable, refreshing };

  // One entry lives in two intrusive containers at once (the address index and the LRU
  // list), so lookup, touch and eviction need no allocation and no second map.
  struct Entry : boost::intrusive::set_base_hook<>, boost::intrusive::list_base_hook<> {
    Ipv4Address address;
    State state = State::incomplete;
    MacAddress mac;                 // valid unless incomplete
    Instant confirmed_at;           // last reply (valid unless incomplete)
    Instant deadline;               // next retry, or end of the reachable period
    unsigned requests_sent = 0;     // in the current resolution or refresh
    bool used = false;              // looked up since confirmed_at
    std::deque<PendingPacket> waiting;
  };
  struct EntryAddress {
    using type = Ipv4Address;
    const Ipv4Address& operator()(const Entry& entry) const { return entry.address; }
  };
  using ByAddress = boost::intrusive::set<
      Entry, boost::intrusive::base_hook<boost::intrusive::set_base_hook<>>,
      boost::intrusive::key_of_value<EntryAddress>>;
  // Least recently used first.
  using Lru = boost::intrusive::list<
      Entry, boost::intrusive::base_hook<boost::intrusive::list_base_hook<>>>;

  Entry* find(Ipv4Address address);
  Entry& insert(Ipv4Address address);
  void touch(Entry& entry);
  void confirm(Entry& entry, const MacAddress& mac, Instant now);
  void step(Entry& entry, Instant now);
  void send_request(Entry& entry, Instant now);
  void fail(Entry& entry);
  void erase(Entry& entry);

  ArpTimers timers_;
  ArpCacheClient& client_;
  ByAddress by_address_;
  Lru lru_;
  std::uint64_t queue_overflows_ = 0;
  std::uint64_t failures_ = 0;
};

}  // namespace rrdma::stack
