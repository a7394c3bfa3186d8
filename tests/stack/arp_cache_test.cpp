// The ARP cache as pure logic: every instant is chosen by the test.
#include <catch2/catch.hpp>

#include <vector>

#include "stack/arp_cache.h"

namespace rrdma::stack {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

const Ipv4Address peer{0x0a000002};
const Ipv4Address other_peer{0x0a000003};
const MacAddress peer_mac{{0x02, 0, 0, 0, 0, 0x02}};
const MacAddress new_peer_mac{{0x02, 0, 0, 0, 0, 0x22}};
const Instant t0{};

struct Request {
  Ipv4Address target;
  std::optional<MacAddress> known_mac;
};
struct Sent {
  Ipv4Address target;
  MacAddress mac;
  PendingPacket packet;
};
struct Failure {
  Ipv4Address target;
  std::size_t dropped;
};

struct RecordingClient : ArpCacheClient {
  std::vector<Request> requests;
  std::vector<Sent> sent;
  std::vector<Ipv4Address> resolved;
  std::vector<Failure> failures;

  void send_arp_request(Ipv4Address target, std::optional<MacAddress> known_mac) override {
    requests.push_back({target, known_mac});
  }
  void send_pending(Ipv4Address target, const MacAddress& mac, PendingPacket packet) override {
    sent.push_back({target, mac, std::move(packet)});
  }
  void arp_resolved(Ipv4Address target, const MacAddress&) override { resolved.push_back(target); }
  void arp_failed(Ipv4Address target, std::size_t dropped) override {
    failures.push_back({target, dropped});
  }
};

PendingPacket packet(std::uint8_t tag) { return PendingPacket(20, tag); }

}  // namespace

TEST_CASE("ARP cache: a queued packet triggers a broadcast request and leaves once resolved",
          "[arp_cache]") {
  RecordingClient client;
  ArpCache cache({}, client);
  CHECK_FALSE(cache.lookup(peer, t0));
  cache.enqueue(peer, packet(1), t0);
  cache.enqueue(peer, packet(2), t0 + milliseconds(10));
  REQUIRE(client.requests.size() == 1);  // one resolution, not one per packet
  CHECK(client.requests[0].target == peer);
  CHECK_FALSE(client.requests[0].known_mac);
  CHECK(client.sent.empty());
  CHECK_FALSE(cache.lookup(peer, t0));
  CHECK(cache.entries(t0).empty());  // incomplete entries are not shown

  CHECK(cache.update(peer, peer_mac, t0 + milliseconds(20), false));
  REQUIRE(client.sent.size() == 2);
  CHECK(client.sent[0].packet == packet(1));  // in order
  CHECK(client.sent[1].packet == packet(2));
  CHECK(client.sent[1].mac == peer_mac);
  CHECK(client.resolved == std::vector<Ipv4Address>{peer});
  CHECK(cache.lookup(peer, t0 + seconds(1)) == peer_mac);
  const auto entries = cache.entries(t0 + seconds(5));
  REQUIRE(entries.size() == 1);
  CHECK(entries[0].mac == peer_mac);
  CHECK(entries[0].age == seconds(5) - milliseconds(20));

  // Known now: the next packet goes at once.
  cache.enqueue(peer, packet(3), t0 + seconds(2));
  CHECK(client.sent.size() == 3);
  CHECK(client.requests.size() == 1);
}

TEST_CASE("ARP cache: three requests one second apart, then failure with the drop count",
          "[arp_cache]") {
  RecordingClient client;
  ArpCache cache({}, client);
  cache.enqueue(peer, packet(1), t0);
  cache.enqueue(peer, packet(2), t0);
  CHECK(cache.next_deadline() == t0 + seconds(1));

  cache.poll(t0 + milliseconds(999));
  CHECK(client.requests.size() == 1);
  cache.poll(t0 + seconds(1));
  CHECK(client.requests.size() == 2);
  cache.poll(t0 + seconds(2));
  CHECK(client.requests.size() == 3);
  CHECK(client.failures.empty());
  cache.poll(t0 + seconds(3));
  CHECK(client.requests.size() == 3);
  REQUIRE(client.failures.size() == 1);
  CHECK(client.failures[0].target == peer);
  CHECK(client.failures[0].dropped == 2);
  CHECK(cache.failures() == 1);
  CHECK(cache.size() == 0);
  CHECK_FALSE(cache.next_deadline());
  CHECK(client.sent.empty());

  // A late reply does not resurrect the entry: unsolicited, not addressed to us.
  CHECK_FALSE(cache.update(peer, peer_mac, t0 + seconds(4), false));
  CHECK_FALSE(cache.lookup(peer, t0 + seconds(4)));
}

TEST_CASE("ARP cache: the wait queue is bounded and drops the oldest", "[arp_cache]") {
  RecordingClient client;
  ArpTimers timers;
  timers.max_queued_per_address = 3;
  ArpCache cache(timers, client);
  for (std::uint8_t tag = 1; tag <= 5; ++tag) cache.enqueue(peer, packet(tag), t0);
  CHECK(cache.queue_overflows() == 2);
  cache.update(peer, peer_mac, t0, false);
  REQUIRE(client.sent.size() == 3);
  CHECK(client.sent[0].packet == packet(3));
  CHECK(client.sent[2].packet == packet(5));
}

TEST_CASE("ARP cache: an unused entry ages out silently after the reachable time",
          "[arp_cache]") {
  RecordingClient client;
  ArpCache cache({}, client);
  CHECK(cache.update(peer, peer_mac, t0, true));
  CHECK(client.resolved.empty());  // learnt, not resolved: nobody was waiting
  CHECK(cache.next_deadline() == t0 + seconds(30));
  cache.poll(t0 + seconds(29));
  CHECK(cache.size() == 1);
  cache.poll(t0 + seconds(30));
  CHECK(cache.size() == 0);
  CHECK(client.requests.empty());
  CHECK(client.failures.empty());
}

TEST_CASE("ARP cache: a used entry is refreshed by unicast and stays usable meanwhile",
          "[arp_cache]") {
  RecordingClient client;
  ArpCache cache({}, client);
  cache.update(peer, peer_mac, t0, true);
  CHECK(cache.lookup(peer, t0 + seconds(10)) == peer_mac);
  cache.poll(t0 + seconds(30));
  REQUIRE(client.requests.size() == 1);
  CHECK(client.requests[0].known_mac == peer_mac);  // unicast refresh
  CHECK(cache.lookup(peer, t0 + seconds(30)) == peer_mac);

  SECTION("answered: reachable again for another 30 s, with the new MAC") {
    cache.update(peer, new_peer_mac, t0 + milliseconds(30500), false);
    CHECK(cache.lookup(peer, t0 + seconds(31)) == new_peer_mac);
    CHECK(cache.next_deadline() == t0 + milliseconds(60500));
    cache.poll(t0 + seconds(33));
    CHECK(client.requests.size() == 1);
    CHECK(client.failures.empty());
  }
  SECTION("unanswered: two more unicast requests, then removal and failure") {
    cache.poll(t0 + seconds(31));
    cache.poll(t0 + seconds(32));
    CHECK(client.requests.size() == 3);
    CHECK(client.requests[2].known_mac == peer_mac);
    CHECK(cache.size() == 1);
    cache.poll(t0 + seconds(33));
    CHECK(cache.size() == 0);
    REQUIRE(client.failures.size() == 1);
    CHECK(client.failures[0].dropped == 0);
    CHECK_FALSE(cache.lookup(peer, t0 + seconds(33)));
  }
}

TEST_CASE("ARP cache: a poll long after several deadlines takes one step per entry",
          "[arp_cache]") {
  RecordingClient client;
  ArpCache cache({}, client);
  cache.enqueue(peer, packet(1), t0);
  cache.poll(t0 + seconds(100));  // the daemon was busy: one retry, not a burst
  CHECK(client.requests.size() == 2);
  CHECK(cache.next_deadline() == t0 + seconds(101));
}

TEST_CASE("ARP cache: the least recently used entry is evicted when full", "[arp_cache]") {
  RecordingClient client;
  ArpTimers timers;
  timers.max_entries = 2;
  ArpCache cache(timers, client);
  cache.update(peer, peer_mac, t0, true);
  cache.update(other_peer, peer_mac, t0, true);
  CHECK(cache.lookup(peer, t0) == peer_mac);  // other_peer is now least recently used
  cache.enqueue(Ipv4Address{0x0a000004}, packet(1), t0);
  CHECK(cache.size() == 2);
  CHECK(cache.lookup(peer, t0));
  CHECK_FALSE(cache.lookup(other_peer, t0));
}

}  // namespace rrdma::stack
