// What must hold for any sequence of decoded verbs requests that local clients send the
// daemon's Nic (verbs/device/nic.h, Nic::handle), shared by the libFuzzer target
// (fuzz_nic_requests.cpp) and the ctest replay of its findings (control_regressions_test.cpp).
//
// The Nic runs as in tests/verbs/nic_test.cpp: in this process, a fake packet port and a fake
// loop, two clients (ids 1 and 2, this process's pid: MRs are our own memory, never touched
// here since no WQE is posted). The input is a script of up to kMaxRequests requests, each:
//   byte   type: (b & 0x1f) % 21 + 1; bit 5: from client 2; bits 6 and 7 both set: sent
//          with the reply bit (a client sending a "reply")
//   per word of the type's body, a selector byte s, by s >> 6:
//          0: the next 8 input bytes, big-endian   1: the value s & 0x3f
//          2: a word of an earlier reply (handles, QPNs, keys), by s & 0x3f
//          3: 1 << (s & 0x3f) (masks, limits)
//   per fd of the type, a byte f, by f % 4: 0 what the request needs (a formatted ring memfd
//          of the geometry the words ask for, and the words' byte count made to match; an
//          eventfd; or this process's /proc/self/mem), 1 an eventfd, 2 a memfd of one page,
//          unsealed and unformatted,
//          3 /dev/null
// What holds:
//  - every reply is the request's type with the reply bit, its id, the reply's word count,
//    and a status 0 or an errno (1 .. 4095); `requests_refused` counts exactly the refusals;
//  - a refused request leaves no state behind: the clients' listings and the MR count are
//    unchanged;
//  - the end of client 1 removes everything it made and nothing of client 2's; the end of
//    client 2 leaves nothing; destroying the Nic leaves no descriptor open that was not
//    open before.
// Returns a description of the first property that fails, or nullptr.
#pragma once

#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/fuzz/control_frame_properties.h"
#include "verbs/contract/abi.h"
#include "verbs/device/nic.h"
#include "verbs/contract/ring.h"

namespace rrdma::fuzz {

inline constexpr std::size_t kMaxRequests = 48;

class CountingPort final : public verbs::PacketPort {
 public:
  std::size_t sent = 0;
  void send(const rocev2::OutgoingPacket&, std::uint16_t, Instant) override { ++sent; }
};

class IdleWatcher final : public verbs::FdWatcher {
 public:
  std::map<int, Handler> watched;
  void watch(int fd, Handler on_ready) override { watched[fd] = std::move(on_ready); }
  void unwatch(int fd) override { watched.erase(fd); }
  void signal(int fd) override {
    const std::uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = ::write(fd, &one, sizeof(one));
  }
  void forget(int) override {}
};

// One fd a request carries: a ring (geometry from the words, byte count word to fix) or an
// eventfd.
struct FdSlot {
  bool ring = false;
  std::size_t entries_word = 0;  // the word the ring's capacity follows from (SIZE_MAX: fixed)
  std::uint32_t fixed_entries = 0;
  std::uint32_t entry_size = 0;
  std::size_t bytes_word = 0;
  bool memory = false;  // the process's own memory handle (open_device)
};

inline std::vector<FdSlot> fd_slots(verbs::control::MessageType type) {
  namespace f = verbs::control::field;
  using verbs::control::MessageType;
  constexpr std::size_t kFixed = SIZE_MAX;
  const FdSlot eventfd{};
  switch (type) {
    case MessageType::OpenDevice:
      return {{true, kFixed, 64, sizeof(verbs::AsyncEventEntry), f::kEventRingBytes}, eventfd,
              FdSlot{.memory = true}};
    case MessageType::CreateCq:
      return {{true, f::kCqEntries, 0, sizeof(verbs::Cqe), f::kCqRingBytes}, eventfd};
    case MessageType::CreateQp:
      return {{true, f::kQpMaxSendWr, 0, sizeof(verbs::SendWqe), f::kQpSqRingBytes},
              {true, f::kQpMaxRecvWr, 0, sizeof(verbs::RecvWqe), f::kQpRqRingBytes}, eventfd};
    case MessageType::CreateSrq:
      return {{true, f::kSrqMaxWr, 0, sizeof(verbs::RecvWqe), f::kSrqRingBytes}, eventfd};
    case MessageType::ResizeCq:
      return {{true, f::kResizeEntries, 0, sizeof(verbs::Cqe), f::kResizeRingBytes}};
    default:
      return {};
  }
}

// The ring capacity the Nic derives from a requested number of entries (a power of two,
// at least 1), or 1 where it would refuse the number anyway.
inline std::uint32_t ring_capacity(std::uint64_t entries) {
  if (entries > verbs::kMaxRingCapacity) return 1;
  std::uint32_t capacity = 1;
  while (capacity < entries) capacity <<= 1;
  return capacity;
}

inline int make_fd(std::uint8_t choice, const FdSlot& slot, std::vector<std::uint64_t>& words) {
  switch (choice % 4) {
    case 0:
      if (slot.memory) return ::open("/proc/self/mem", O_RDWR | O_CLOEXEC);
      if (slot.ring) {
        const std::uint32_t capacity =
            slot.entries_word == SIZE_MAX ? slot.fixed_entries : ring_capacity(words[slot.entries_word]);
        const verbs::RingGeometry geometry{capacity, slot.entry_size};
        verbs::SharedRegion region = verbs::SharedRegion::create("fuzz-ring", geometry.region_size());
        if (verbs::format_ring(region.bytes(), geometry) != verbs::RingError::None) return -1;
        words[slot.bytes_word] = geometry.region_size();
        return ::dup(region.fd());  // `region` unmaps and closes its own
      }
      [[fallthrough]];
    case 1:
      return ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    case 2: {
      const int fd = ::memfd_create("fuzz-plain", MFD_CLOEXEC);
      if (fd >= 0 && ::ftruncate(fd, 4096) != 0) {
        ::close(fd);
        return -1;
      }
      return fd;
    }
    default:
      return ::open("/dev/null", O_RDWR | O_CLOEXEC);
  }
}

inline std::string describe(const std::vector<verbs::ClientListing>& listings) {
  std::ostringstream out;
  for (const auto& l : listings) {
    out << "client " << l.client.id << " ctx";
    for (auto h : l.contexts) out << ' ' << h;
    out << " pd";
    for (auto h : l.pds) out << ' ' << h;
    out << " mrs " << l.mrs << " cq";
    for (auto h : l.cqs) out << ' ' << h;
    out << " qp";
    for (const auto& q : l.qps) out << ' ' << q.handle << '/' << q.qpn.value() << '/' << static_cast<int>(q.type) << '/' << q.state;
    out << " srq";
    for (auto h : l.srqs) out << ' ' << h;
    out << " ah";
    for (auto h : l.ahs) out << ' ' << h;
    out << ";";
  }
  return out.str();
}

// Reads the script's bytes in order; past the end it has none.
class Script {
 public:
  explicit Script(ByteSpan bytes) : bytes_(bytes) {}
  bool empty() const { return at_ >= bytes_.size(); }
  std::optional<std::uint8_t> byte() {
    if (empty()) return std::nullopt;
    return bytes_[at_++];
  }
  std::optional<std::uint64_t> word() {
    if (bytes_.size() - at_ < 8) {
      at_ = bytes_.size();
      return std::nullopt;
    }
    const std::uint64_t value = load_be64(bytes_, at_);
    at_ += 8;
    return value;
  }

 private:
  ByteSpan bytes_;
  std::size_t at_ = 0;
};

// Which requests of a script the Nic took and which it refused (for the tests of the seeds).
struct NicScriptTally {
  std::multiset<verbs::control::MessageType> accepted;
  std::multiset<verbs::control::MessageType> refused;
};

inline const char* run_nic_script(ByteSpan input, verbs::Nic& nic, NicScriptTally* tally = nullptr) {
  namespace control = verbs::control;
  Script script(input);
  std::vector<std::uint64_t> seen{0};  // words of earlier replies
  std::uint32_t request_id = 0;
  const Instant now{};
  for (std::size_t n = 0; n < kMaxRequests && !script.empty(); ++n) {
    const std::uint8_t head = *script.byte();
    const auto type = static_cast<control::MessageType>((head & 0x1F) % control::kMessageTypeCount + 1);
    const std::uint64_t client = (head & 0x20) != 0 ? 2 : 1;
    const bool as_reply = (head & 0xC0) == 0xC0;
    control::Message request = control::make_request(type, ++request_id);
    if (as_reply) request.wire_type = control::reply_type(type);
    request.words.assign(control::shape_of(control::request_type(type))->words, 0);
    for (std::uint64_t& word : request.words) {
      const auto s = script.byte();
      if (!s) return nullptr;
      switch (*s >> 6) {
        case 0: {
          const auto raw = script.word();
          if (!raw) return nullptr;
          word = *raw;
          break;
        }
        case 1: word = *s & 0x3Fu; break;
        case 2: word = seen[(*s & 0x3Fu) % seen.size()]; break;
        default: word = std::uint64_t{1} << (*s & 0x3F); break;
      }
    }
    control::ReceivedFds fds;
    for (const FdSlot& slot : fd_slots(type)) {
      const auto f = script.byte();
      if (!f) return nullptr;
      const int fd = make_fd(*f, slot, request.words);
      if (fd < 0) return "could not make a descriptor for the request";
      fds.add(fd);
    }

    const std::string listing_before = describe(nic.listing());
    const std::size_t mrs_before = nic.registrations();
    const std::uint64_t refused_before = nic.counters().requests_refused;
    const control::Message reply = nic.handle(client, request, fds, now);
    fds.close_all();  // what the Nic did not adopt, as ControlServer does

    if (reply.wire_type != control::reply_type(type)) return "handle: reply of another type";
    if (reply.request_id != request.request_id) return "handle: reply with another request id";
    if (reply.words.size() != control::shape_of(reply.wire_type)->words) return "handle: reply with the wrong word count";
    const std::uint64_t status = reply.words[0];
    if (status >= 4096) return "handle: status is not an errno";
    if (tally) (status == 0 ? tally->accepted : tally->refused).insert(type);
    if (nic.counters().requests_refused - refused_before != (status != 0 ? 1u : 0u)) {
      return "handle: requests_refused does not count this reply";
    }
    if (status != 0) {
      if (describe(nic.listing()) != listing_before) return "handle: a refused request changed the resources";
      if (nic.registrations() != mrs_before) return "handle: a refused request changed the MRs";
    }
    for (std::size_t i = 1; i < reply.words.size() && seen.size() < 64; ++i) seen.push_back(reply.words[i]);
  }
  return nullptr;
}

inline const char* check_nic_requests(ByteSpan input) {
  const std::vector<int> fds_before = open_fds();
  const char* failed = nullptr;
  try {
    CountingPort port;
    IdleWatcher watcher;
    verbs::Nic nic(verbs::NicConfig{stack::Ipv4Address{0x0A420001}, stack::MacAddress{{2, 0, 0, 0, 0, 1}}, 1500, true, {}, {}, verbs::Quotas::kUnlimited},
                   port, watcher);
    if (nic.client_connected({1, ::getpid(), ::getuid()}) != 0 || nic.client_connected({2, ::getpid(), ::getuid()}) != 0) {
      return "client_connected refused";
    }
    failed = run_nic_script(input, nic);
    if (!failed) {
      std::string second;
      for (const auto& listing : nic.listing()) {
        if (listing.client.id == 2) second = describe({listing});
      }
      nic.client_disconnected(1, Instant{});
      const auto after = nic.listing();
      for (const auto& listing : after) {
        if (listing.client.id == 1) failed = "client_disconnected: client 1 is still listed";
      }
      if (!failed && second != (after.empty() ? std::string() : describe(after))) {
        failed = "client_disconnected: the end of client 1 changed client 2's resources";
      }
      nic.client_disconnected(2, Instant{});
      if (!failed && !nic.listing().empty()) failed = "client_disconnected: resources outlive their clients";
      if (!failed && nic.registrations() != 0) failed = "client_disconnected: MRs outlive their clients";
      if (!failed && !watcher.watched.empty()) failed = "client_disconnected: doorbells still watched";
    }
  } catch (const std::exception&) {
    return "an exception left the Nic";
  }
  if (!failed && open_fds() != fds_before) failed = "a descriptor leaked";
  return failed;
}

}  // namespace rrdma::fuzz
