// Writes only where the owner may write (issue 27, items 5 and 14). The daemon writes through
// the client's /proc/self/mem, which forces writes into read-only pages; rdma_rxe refuses to
// register such memory for writing (EFAULT) and a write that cannot land is NAKed. Two Nics
// back to back as in nic_test.cpp, here also with the daemon's batched receive path (write
// combining, ACKs held per batch), where a write is checked and performed after the packet
// was accepted: the requester must still see an error, never a success.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <deque>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "rocev2/encap.h"
#include "rocev2/wire.h"
#include "tests/verbs/dma_child.h"
#include "tests/verbs/fuse_stall.h"
#include "tests/verbs/nic_client.h"
#include "verbs/device/address_layout.h"
#include "verbs/device/nic.h"

namespace rrdma::verbs {
namespace {

using namespace rrdma::verbs::test;


struct WirePacket {
  std::vector<std::uint8_t> bytes;
  std::uint16_t udp_source_port;
};

class QueuePort final : public PacketPort {
 public:
  std::deque<WirePacket> sent;
  void send(const rocev2::OutgoingPacket& out, std::uint16_t sport, Instant) override {
    rocev2::TransportPayload payload(out.packet);
    REQUIRE(payload.error() == rocev2::EmitError::none);
    std::vector<std::uint8_t> bytes(payload.length() + rocev2::kIcrcLength);
    payload.write(MutableByteSpan(bytes.data(), payload.length()));
    sent.push_back({std::move(bytes), sport});
  }
};

// A vnic whose received frames live in `frames` when `batched` (as the daemon's receive
// buffers): payload writes are queued and land at end_of_frames(), ACKs are held till then.
struct ProtectSide {
  ProtectSide(std::uint32_t ip, std::uint8_t mac, bool batched = true,
              std::chrono::milliseconds dma_wait_bound = std::chrono::milliseconds{1000})
      : frames(batched ? 1 << 20 : 0),
        nic(config(ip, mac, std::span<const std::uint8_t>(frames.data(), frames.size()), dma_wait_bound), port,
            watcher) {}
  static NicConfig config(std::uint32_t ip, std::uint8_t mac, std::span<const std::uint8_t> frames,
                          std::chrono::milliseconds dma_wait_bound) {
    NicConfig c{stack::Ipv4Address{ip}, stack::MacAddress{{2, 0, 0, 0, 0, mac}}, 1500, true, frames, {}};
    c.dma_wait_bound = dma_wait_bound;
    return c;
  }
  std::vector<std::uint8_t> frames;
  QueuePort port;
  FakeWatcher watcher;
  Nic nic;
  TestClient user{nic};
};

struct UnbatchedSide : ProtectSide {
  UnbatchedSide(std::uint32_t ip, std::uint8_t mac) : ProtectSide(ip, mac, false) {}
};

// The daemon's loop gives up on a client's memory after 2 s: far above what a legitimate call
// takes on a loaded machine, far below StallingFuse's give-up.
struct StallSide : ProtectSide {
  StallSide(std::uint32_t ip, std::uint8_t mac) : ProtectSide(ip, mac, true, std::chrono::milliseconds{2000}) {}
};

// Every packet `from` sent is one batch at `to`: copied into its frame memory (when it has
// one), received, then end_of_frames().
template <typename Side>
bool deliver(Side& from, Side& to, std::uint32_t from_ip) {
  if (from.port.sent.empty()) return false;
  std::size_t used = 0;
  std::deque<WirePacket> batch = std::move(from.port.sent);
  from.port.sent.clear();
  std::vector<std::vector<std::uint8_t>> unbatched;
  for (WirePacket& packet : batch) {
    std::uint8_t* at = nullptr;
    if (!to.frames.empty()) {
      REQUIRE(used + packet.bytes.size() <= to.frames.size());
      at = to.frames.data() + used;
      std::memcpy(at, packet.bytes.data(), packet.bytes.size());
      used += packet.bytes.size();
    } else {
      at = packet.bytes.data();
    }
    rocev2::TransportPacket parsed;
    REQUIRE(rocev2::parse_transport(ByteSpan(at, packet.bytes.size()), parsed) == rocev2::TransportError::none);
    const std::uint8_t ip_header[20] = {0x45};
    to.nic.receive(parsed, {stack::Ipv4Address{from_ip}, packet.udp_source_port, ip_header}, kNow);
  }
  if (!to.frames.empty()) to.nic.end_of_frames();
  return true;
}

template <typename Side>
void exchange(Side& a, Side& b) {
  for (int round = 0; round < 1000; ++round) {
    bool moved = a.watcher.run_ready();
    moved = b.watcher.run_ready() || moved;
    moved = deliver(a, b, kTestIpA) || moved;
    moved = deliver(b, a, kTestIpB) || moved;
    if (!moved) return;
  }
  FAIL("the two Nics never went quiet");
}

// Pages of our own, mapped as the test asks; unmapped at the end.
struct Pages {
  Pages(std::size_t count, int prot, int flags = MAP_PRIVATE | MAP_ANONYMOUS, int fd = -1)
      : length(count * kPage),
        bytes(static_cast<std::uint8_t*>(::mmap(nullptr, length, prot, flags, fd, 0))) {
    REQUIRE(bytes != MAP_FAILED);
  }
  ~Pages() { ::munmap(bytes, length); }
  Pages(const Pages&) = delete;
  Pages& operator=(const Pages&) = delete;
  std::uint64_t address(std::size_t offset = 0) const { return reinterpret_cast<std::uintptr_t>(bytes) + offset; }
  std::size_t length;
  std::uint8_t* bytes;
};

// A file of `pages` pages filled with 0x5A, open read-only (what a MAP_SHARED PROT_READ
// mapping of someone else's file is).
int read_only_file(std::size_t pages) {
  char path[] = "/tmp/rrdma-protect-XXXXXX";
  const int writer = ::mkstemp(path);
  REQUIRE(writer >= 0);
  const std::vector<std::uint8_t> fill(pages * kPage, 0x5A);
  REQUIRE(::write(writer, fill.data(), fill.size()) == static_cast<ssize_t>(fill.size()));
  const int reader = ::open(path, O_RDONLY | O_CLOEXEC);
  ::close(writer);
  ::unlink(path);
  REQUIRE(reader >= 0);
  return reader;
}

Message reg_at(TestClient& side, std::uint64_t pd, std::uint64_t addr, std::uint64_t length, std::uint32_t access) {
  return side.call(MessageType::RegMr, {pd, addr, length, access, addr});
}

Registration keys(const Message& reply) {
  REQUIRE(reply.words[0] == 0);
  return {static_cast<std::uint32_t>(reply.words[field::kMrLkey]), static_cast<std::uint32_t>(reply.words[field::kMrRkey])};
}

constexpr std::uint32_t kWritable = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;

// A WRITE of 64 bytes of 0xC3 from A to `remote` under `rkey`; returns A's completion status.
template <typename Pair>
int write_from_a(Pair& p, std::uint64_t remote, std::uint32_t rkey, std::uint32_t length = 64) {
  std::vector<std::uint8_t> source(length, 0xC3);
  const Registration src = keys(reg_at(p.a.user, p.da.pd, reinterpret_cast<std::uintptr_t>(source.data()),
                                       source.size(), IBV_ACCESS_LOCAL_WRITE));
  SendWqe wqe = wqe_for(41, rocev2::WrOpcode::RdmaWrite, source, length, src.lkey);
  wqe.remote_addr = remote;
  wqe.rkey = rkey;
  p.qa->post_send(wqe);
  exchange(p.a, p.b);
  const auto cqes = p.qa->poll();
  REQUIRE(cqes.size() == 1);
  return cqes[0].status;
}

// A 64-byte WRITE of 0xC3 from A's QP `qa` to (remote, rkey), exchanged until both go quiet;
// `source` holds the bytes, registered at A, and must outlive the exchange.
template <typename Pair, typename Qp>
void post_write_from_a(Pair& p, Qp& qa, std::vector<std::uint8_t>& source, std::uint64_t remote, std::uint32_t rkey) {
  source.assign(64, 0xC3);
  const Registration src = keys(reg_at(p.a.user, p.da.pd, reinterpret_cast<std::uintptr_t>(source.data()),
                                       source.size(), IBV_ACCESS_LOCAL_WRITE));
  SendWqe wqe = wqe_for(1, rocev2::WrOpcode::RdmaWrite, source, 64, src.lkey);
  wqe.remote_addr = remote;
  wqe.rkey = rkey;
  qa.post_send(wqe);
  exchange(p.a, p.b);
}

bool all_bytes(const std::uint8_t* bytes, std::size_t length, std::uint8_t value) {
  for (std::size_t i = 0; i < length; ++i)
    if (bytes[i] != value) return false;
  return true;
}

// A process whose memory is one page of StallingFuse's file, mapped shared and writable and
// never touched: the first access to it waits for a READ that never comes. It is a client of
// its own, as an application would be, reached through its /proc/PID/mem.
class FuseBackedChild {
 public:
  explicit FuseBackedChild(const StallingFuse& fuse) {
    int report[2] = {-1, -1};
    REQUIRE(::pipe2(report, O_CLOEXEC) == 0);
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      for (const int fd : fuse.descriptors()) ::close(fd);
      ::alarm(120);
      const int file = ::open(fuse.file().c_str(), O_RDWR | O_CLOEXEC);
      void* at = file < 0 ? MAP_FAILED : ::mmap(nullptr, kPage, PROT_READ | PROT_WRITE, MAP_SHARED, file, 0);
      const std::uint64_t address = at == MAP_FAILED ? 0 : reinterpret_cast<std::uintptr_t>(at);
      if (::write(report[1], &address, sizeof address) != sizeof address) ::_exit(2);
      for (;;) ::pause();
    }
    ::close(report[1]);
    const bool reported = ::read(report[0], &address_, sizeof address_) == sizeof address_;
    ::close(report[0]);
    REQUIRE(reported);
    REQUIRE(address_ != 0);
  }
  // Killed, not waited for: its exit waits for the stalled access, which ends only when the
  // FUSE connection is aborted (reap() after that).
  ~FuseBackedChild() { ::kill(pid_, SIGKILL); }
  FuseBackedChild(const FuseBackedChild&) = delete;
  FuseBackedChild& operator=(const FuseBackedChild&) = delete;
  void reap() {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  pid_t pid() const { return pid_; }
  std::uint64_t address() const { return address_; }

 private:
  pid_t pid_ = -1;
  std::uint64_t address_ = 0;
};

Device open_device_of(TestClient& side, pid_t pid) {
  Device d;
  d.event_fd = side.keep(eventfd_for_test());
  const int memory = side.keep(::open(("/proc/" + std::to_string(pid) + "/mem").c_str(), O_RDWR | O_CLOEXEC));
  REQUIRE(memory >= 0);
  d.context = side.ok(MessageType::OpenDevice, {control::kVersion, d.events.bytes()},
                      {d.events.region.fd(), d.event_fd, memory});
  d.pd = side.ok(MessageType::AllocPd, {d.context});
  return d;
}

// A client of B's that is another process (`pid`, whose memory lies at `address`), with an
// RC QP connected to a new QP of A's (`peer`) and the page at `address` registered writable.
struct ClientInChild {
  template <typename Pair>
  ClientInChild(Pair& p, pid_t pid, std::uint64_t address)
      : client(p.b.nic, 7, pid), device(open_device_of(client, pid)), qp(create_qp(client, device)),
        peer(create_qp(p.a.user, p.da)) {
    connect(client, *qp, kTestIpA, peer->qpn);
    connect(p.a.user, *peer, kTestIpB, qp->qpn);
    page = keys(reg_at(client, device.pd, address, kPage, kWritable));
  }
  TestClient client;
  Device device;
  std::unique_ptr<TestQp> qp;
  std::unique_ptr<TestQp> peer;
  Registration page;
};

}  // namespace

// Issue 27 item 6: before, the daemon's loop made the call itself and waited as long as the
// page did (here: until StallingFuse gave up after 15 s), and every client with it.
TEST_CASE("dma stall: memory that never answers stops its own client only, another client's traffic flows") {
  auto fuse = std::make_unique<StallingFuse>();
  if (!fuse->mounted()) {
    WARN("skipped: mounting a FUSE file system needs root and /dev/fuse");
    return;
  }
  FuseBackedChild child(*fuse);
  ConnectedPair<StallSide> p;  // A's qa and B's qb, B's client being this process
  ClientInChild stalling(p, child.pid(), child.address());
  const auto& qa2 = stalling.peer;

  std::vector<std::uint8_t> source;
  post_write_from_a(p, *qa2, source, child.address(), stalling.page.rkey);
  // The loop had control back while the page was still being waited for.
  CHECK(fuse->reads_asked() >= 1);
  CHECK(fuse->reads_answered() == 0);
  CHECK(p.b.nic.dma_counters().stalled == 1);
  CHECK(qa2->poll().empty());  // no ACK for a write that did not land

  // Another client of the same vnic: its traffic goes on.
  std::vector<std::uint8_t> target(64, 0);
  const Registration dst = keys(reg_at(p.b.user, p.db.pd, reinterpret_cast<std::uintptr_t>(target.data()),
                                       target.size(), kWritable));
  CHECK(write_from_a(p, reinterpret_cast<std::uintptr_t>(target.data()), dst.rkey) == IBV_WC_SUCCESS);
  CHECK(all_bytes(target.data(), target.size(), 0xC3));
  CHECK(fuse->reads_answered() == 0);
  // The stalled client goes at the next look, as one whose address space is gone.
  p.b.nic.advance(kNow);
  CHECK(p.b.nic.counters().clients_evicted == 1);
  CHECK(p.b.nic.dma_counters().stalled == 1);

  fuse.reset();  // aborts the FUSE connection: the abandoned call returns, the child can exit
  child.reap();
}

// CI caught it in system.rdma_cm_errors: rping's client was killed while its server wrote into
// it; the daemon NAKed the WRITE (remote operational error) before the DREQ went out, and the
// server failed instead of seeing DISCONNECTED. rxe keeps a process's pages pinned until its
// QPs are destroyed, so no peer of rxe ever sees that NAK: the request goes unanswered.
template <typename Side>
void write_into_an_exited_client_goes_unanswered() {
  ConnectedPair<Side> p;
  test::Child child(9);
  ClientInChild dying(p, child.pid(), child.address());
  const auto& qa2 = dying.peer;
  child.kill();
  child.reap();

  std::vector<std::uint8_t> source;
  post_write_from_a(p, *qa2, source, child.address(), dying.page.rkey);
  CHECK(qa2->poll().empty());  // neither NAK nor ACK: the requester waits for the DREQ
  CHECK(p.b.nic.engine_counters().naks_sent == 0);
  CHECK(p.a.nic.engine_counters().naks_received == 0);
  CHECK(p.b.nic.engine_counters().owner_gone_drops + p.b.nic.counters().lost_writes_of_gone_owners == 1);
  CHECK(p.b.nic.dma_counters().process_gone >= 1);
  p.b.nic.advance(kNow);
  CHECK(p.b.nic.counters().clients_evicted == 1);
}

TEST_CASE("dma protection: a WRITE into a client whose process has exited goes unanswered, as with rxe (batched)") {
  write_into_an_exited_client_goes_unanswered<ProtectSide>();
}

TEST_CASE("dma protection: a WRITE into a client whose process has exited goes unanswered, as with rxe (direct)") {
  write_into_an_exited_client_goes_unanswered<UnbatchedSide>();
}

TEST_CASE("dma protection: memory its owner cannot write is refused for any write access, as rxe refuses it") {
  ConnectedPair<ProtectSide> p;
  TestClient& b = p.b.user;
  const std::uint64_t pd = p.db.pd;
  Pages read_only(2, PROT_READ);
  for (const std::uint32_t access : {std::uint32_t{IBV_ACCESS_LOCAL_WRITE}, kWritable,
                                     std::uint32_t{kWritable | IBV_ACCESS_REMOTE_ATOMIC}}) {
    CAPTURE(access);
    CHECK(reg_at(b, pd, read_only.address(), read_only.length, access).words[0] == EFAULT);
  }
  CHECK(reg_at(b, pd, read_only.address(), read_only.length, IBV_ACCESS_REMOTE_READ).words[0] == 0);

  const int file = read_only_file(2);
  Pages shared(2, PROT_READ, MAP_SHARED, file);
  ::close(file);
  CHECK(reg_at(b, pd, shared.address(), shared.length, kWritable).words[0] == EFAULT);

  // One read-only page inside a writable range is enough; so is a hole (rxe cannot pin it).
  Pages mixed(3, PROT_READ | PROT_WRITE);
  REQUIRE(::mprotect(mixed.bytes + kPage, kPage, PROT_READ) == 0);
  CHECK(reg_at(b, pd, mixed.address(), mixed.length, kWritable).words[0] == EFAULT);
  CHECK(reg_at(b, pd, mixed.address(), kPage, kWritable).words[0] == 0);
  Pages holed(3, PROT_READ | PROT_WRITE);
  REQUIRE(::munmap(holed.bytes + kPage, kPage) == 0);
  CHECK(reg_at(b, pd, holed.address(), holed.length, IBV_ACCESS_LOCAL_WRITE).words[0] == EFAULT);
  // On demand, nothing is pinned at registration (rxe's ODP neither): each write is checked.
  CHECK(reg_at(b, pd, holed.address(), holed.length, kWritable | IBV_ACCESS_ON_DEMAND).words[0] == 0);

  // rereg_mr is checked as a new registration: new rights, or a move onto read-only pages.
  const Registration r = keys(reg_at(b, pd, read_only.address(), read_only.length, IBV_ACCESS_REMOTE_READ));
  CHECK(b.call(MessageType::ReregMr, {r.lkey, IBV_REREG_MR_CHANGE_ACCESS, 0, 0, 0, kWritable}).words[0] == EFAULT);
  Pages writable(1, PROT_READ | PROT_WRITE);
  const Registration w = keys(reg_at(b, pd, writable.address(), writable.length, kWritable));
  CHECK(b.call(MessageType::ReregMr, {w.lkey, IBV_REREG_MR_CHANGE_TRANSLATION, 0, read_only.address(), kPage, 0})
            .words[0] == EFAULT);
  CHECK(b.call(MessageType::ReregMr, {w.lkey, IBV_REREG_MR_CHANGE_ACCESS, 0, 0, 0, IBV_ACCESS_LOCAL_WRITE}).words[0] == 0);
}

// After registration the owner may mprotect or mremap: every write is checked against its maps
// at the time of the write (docs/VERBS_MEMORY.md), on the batched and the direct path alike.
template <typename Side>
void later_protection_changes_stop_writes() {
  ConnectedPair<Side> p;
  SECTION("mprotect to read-only") {
    Pages target(2, PROT_READ | PROT_WRITE);
    std::memset(target.bytes, 0x11, target.length);
    const Registration dst = keys(reg_at(p.b.user, p.db.pd, target.address(), target.length, kWritable));
    CHECK(write_from_a(p, target.address(), dst.rkey) == IBV_WC_SUCCESS);
    CHECK(all_bytes(target.bytes, 64, 0xC3));
    std::memset(target.bytes, 0x11, 64);
    REQUIRE(::mprotect(target.bytes, target.length, PROT_READ) == 0);
    CHECK(write_from_a(p, target.address(kPage), dst.rkey) == IBV_WC_REM_OP_ERR);
    CHECK(all_bytes(target.bytes, target.length, 0x11));
    CHECK(p.b.nic.dma_counters().not_writable >= 1);
  }
  SECTION("mremap away, a read-only file mapped in its place") {
    Pages target(1, PROT_READ | PROT_WRITE);
    const Registration dst = keys(reg_at(p.b.user, p.db.pd, target.address(), target.length, kWritable));
    void* moved = ::mremap(target.bytes, kPage, kPage, MREMAP_MAYMOVE | MREMAP_FIXED,
                           ::mmap(nullptr, kPage, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    REQUIRE(moved != MAP_FAILED);
    const int file = read_only_file(1);
    REQUIRE(::mmap(target.bytes, kPage, PROT_READ, MAP_PRIVATE | MAP_FIXED, file, 0) == target.bytes);
    ::close(file);
    CHECK(write_from_a(p, target.address(), dst.rkey) == IBV_WC_REM_OP_ERR);
    CHECK(all_bytes(target.bytes, kPage, 0x5A));
    ::munmap(moved, kPage);
  }
}

TEST_CASE("dma protection: a write after mprotect or mremap never lands where the owner cannot write (batched)") {
  later_protection_changes_stop_writes<ProtectSide>();
}

TEST_CASE("dma protection: a write after mprotect or mremap never lands where the owner cannot write (direct)") {
  later_protection_changes_stop_writes<UnbatchedSide>();
}

// Issue 27 item 14: the batched path accepted these writes, lost them at flush and ACKed.
TEST_CASE("dma protection: a WRITE that cannot land is NAKed, never acknowledged (batched path)") {
  ConnectedPair<ProtectSide> p;
  SECTION("a MAP_SHARED PROT_READ file mapping, registered on demand") {
    const int file = read_only_file(1);
    Pages shared(1, PROT_READ, MAP_SHARED, file);
    ::close(file);
    const Registration dst =
        keys(reg_at(p.b.user, p.db.pd, shared.address(), shared.length, kWritable | IBV_ACCESS_ON_DEMAND));
    CHECK(write_from_a(p, shared.address(), dst.rkey) == IBV_WC_REM_OP_ERR);
    CHECK(all_bytes(shared.bytes, kPage, 0x5A));
  }
  SECTION("an unmapped page of an on-demand region") {
    Pages holed(3, PROT_READ | PROT_WRITE);
    REQUIRE(::munmap(holed.bytes + kPage, kPage) == 0);
    const Registration dst =
        keys(reg_at(p.b.user, p.db.pd, holed.address(), holed.length, kWritable | IBV_ACCESS_ON_DEMAND));
    CHECK(write_from_a(p, holed.address(kPage), dst.rkey) == IBV_WC_REM_OP_ERR);
  }
  // The responder's QP is in error, as after a write refused at once; the peer's too.
  CHECK(qp_state(p.b.user, *p.qb) == IBV_QPS_ERR);
  CHECK(p.b.nic.engine_counters().writes_not_placed == 1);
}

TEST_CASE("dma protection: the maps text says which ranges are writable, and a hostile text cannot fool it") {
  const std::string maps =
      "1000-3000 rw-p 00000000 00:00 0 \n"
      "3000-4000 r--p 00000000 00:00 0      /lib/x\n"
      "5000-6000 rw-s 00000000 00:05 7      /dev/shm/y\n"
      "garbage line\n"
      "6000-5000 rw-p 0 0 0\n"
      "6000-7000 rwxp 00000000 00:00 0\n"
      "ffffffffffffffffff-1 rw-p\n";
  CHECK(writable_in_maps_text(maps, 0x1000, 0x2000) == Writable::Yes);
  CHECK(writable_in_maps_text(maps, 0x2fff, 2) == Writable::No);        // into the read-only one
  CHECK(writable_in_maps_text(maps, 0x4000, 1) == Writable::No);        // the hole
  CHECK(writable_in_maps_text(maps, 0x5000, 0x2000) == Writable::Yes);  // across two, adjacent
  CHECK(writable_in_maps_text(maps, 0x6800, 0x1000) == Writable::No);   // past the end
  CHECK(writable_in_maps_text(maps, 0x800, 0x1000) == Writable::No);    // before the first
  CHECK(writable_in_maps_text(maps, UINT64_MAX, 2) == Writable::No);
  CHECK(writable_in_maps_text(maps, 0x3000, 0) == Writable::Yes);
  CHECK(writable_in_maps_text("", 0x1000, 1) == Writable::No);
  CHECK(writable_in_maps_text("1000-2000 r", 0x1000, 1) == Writable::No);
  CHECK(writable_in_maps_text("1000-2000 ", 0x1000, 1) == Writable::No);
}

TEST_CASE("dma protection: the kernel's answer for this process's own maps") {
  const int maps = ::open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  REQUIRE(maps >= 0);
  Pages pages(3, PROT_READ | PROT_WRITE);
  CHECK(writable_range(maps, pages.address(), pages.length) == Writable::Yes);
  REQUIRE(::mprotect(pages.bytes + kPage, kPage, PROT_READ) == 0);
  CHECK(writable_range(maps, pages.address(), pages.length) == Writable::No);
  CHECK(writable_range(maps, pages.address(), kPage) == Writable::Yes);
  REQUIRE(::munmap(pages.bytes + 2 * kPage, kPage) == 0);
  CHECK(writable_range(maps, pages.address(2 * kPage), 1) == Writable::No);
  ::close(maps);
  CHECK(writable_range(-1, pages.address(), 1) == Writable::Unknown);

  // A maps file outlives its process: what it says then is Gone, not No (a write into an
  // exited client is not a write into read-only memory).
  test::Child child(4);
  const int child_maps = ::open(("/proc/" + std::to_string(child.pid()) + "/maps").c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(child_maps >= 0);
  CHECK(writable_range(child_maps, child.address(), kPage) == Writable::Yes);
  child.kill();
  child.reap();
  CHECK(writable_range(child_maps, child.address(), kPage) == Writable::Gone);
  ::close(child_maps);
}

}  // namespace rrdma::verbs
