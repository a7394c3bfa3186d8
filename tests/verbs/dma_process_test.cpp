// ProcessDma against real second processes: a forked child maps a buffer (with an unmapped
// page inside), fills a pattern, reports the buffer's address over a pipe and then answers
// "dump" requests with its own view of the buffer, so what the parent's DMA did is checked
// by the process that owns the memory. Then the child is killed and every transfer must
// fail cleanly. Time is bounded by poll timeouts and an alarm in the child; the child is
// always killed and reaped.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "tests/verbs/dma_child.h"
#include "verbs/device/mr_table.h"
#include "verbs/device/process_dma.h"

using namespace rrdma::verbs;
using namespace rrdma::verbs::test;
using rrdma::rocev2::MrFacts;

TEST_CASE("DMA reads and writes another process's registered memory and the owner sees the writes") {
  Child child(11);
  MrTable table;
  ProcessDma dma(table);
  const MrFacts mr = register_buffer(table, child, 1);
  const std::uint64_t base = mr.base;  // iova == address without ZERO_BASED

  std::vector<std::uint8_t> got(300);
  REQUIRE(dma.read(mr, base + 5000, got));
  for (std::size_t i = 0; i < got.size(); ++i) CHECK(got[i] == pattern(11, 5000 + i));

  const std::array<std::uint8_t, 6> hello{'h', 'e', 'l', 'l', 'o', '!'};
  REQUIRE(dma.write(mr, base + 100, hello));
  std::vector<std::uint8_t> expected = expected_dump(11);
  std::copy(hello.begin(), hello.end(), expected.begin() + 100);
  CHECK(child.dump() == expected);
  CHECK(dma.counters().transfers == 2);
}

TEST_CASE("DMA scatter/gather: several pieces, two pages apart, one call each way") {
  Child child(23);
  MrTable table;
  ProcessDma dma(table);
  const MrFacts mr = register_buffer(table, child, 1);
  const std::uint64_t base = mr.base;
  const std::uint64_t last_page = (kHolePage + 1) * kPage;
  const std::array<DmaPiece, 3> pieces{DmaPiece{mr, base + 4000, 200},  // crosses pages 0 -> 1
                                       DmaPiece{mr, base + last_page + 10, 16},
                                       DmaPiece{mr, base + 50, 8}};

  std::vector<std::uint8_t> gathered(224);
  REQUIRE(dma.read_gather(pieces, gathered));
  for (std::size_t i = 0; i < 200; ++i) CHECK(gathered[i] == pattern(23, 4000 + i));
  for (std::size_t i = 0; i < 16; ++i) CHECK(gathered[200 + i] == pattern(23, last_page + 10 + i));
  for (std::size_t i = 0; i < 8; ++i) CHECK(gathered[216 + i] == pattern(23, 50 + i));

  std::vector<std::uint8_t> scattered(224);
  for (std::size_t i = 0; i < scattered.size(); ++i) scattered[i] = static_cast<std::uint8_t>(0xA0 ^ i);
  REQUIRE(dma.write_scatter(pieces, scattered));
  std::vector<std::uint8_t> expected = expected_dump(23);
  std::copy_n(scattered.begin(), 200, expected.begin() + 4000);
  std::copy_n(scattered.begin() + 200, 16, expected.begin() + static_cast<std::ptrdiff_t>(Child::dump_offset(last_page + 10)));
  std::copy_n(scattered.begin() + 216, 8, expected.begin() + 50);
  CHECK(child.dump() == expected);

  // The span must be exactly the pieces' total.
  std::vector<std::uint8_t> wrong_size(223);
  CHECK_FALSE(dma.read_gather(pieces, wrong_size));
  CHECK(dma.counters().refused == 1);
}

TEST_CASE("DMA atomics: compare-and-swap and fetch-and-add on the owner's word") {
  Child child(37);
  MrTable table;
  ProcessDma dma(table);
  // ZERO_BASED: the engine's addresses are offsets into the region.
  const MrFacts mr = register_buffer(table, child, 1, mr_access::kZeroBased);
  REQUIRE(mr.base == 0);
  const std::uint64_t offset = 0x808;
  const std::uint64_t before = word_at(child.dump(), offset);

  // A stale compare value: nothing written, the original returned.
  CHECK(dma.compare_swap(mr, offset, before + 1, 0xDEAD) == before);
  CHECK(word_at(child.dump(), offset) == before);

  CHECK(dma.compare_swap(mr, offset, before, 0x1122'3344'5566'7788) == before);
  CHECK(word_at(child.dump(), offset) == 0x1122'3344'5566'7788);

  CHECK(dma.fetch_add(mr, offset, 0x10) == 0x1122'3344'5566'7788);
  CHECK(dma.fetch_add(mr, offset, UINT64_MAX) == 0x1122'3344'5566'7798);  // wraps: adds -1
  CHECK(word_at(child.dump(), offset) == 0x1122'3344'5566'7797);

  // Neighbouring words untouched.
  const std::vector<std::uint8_t> after = child.dump();
  CHECK(word_at(after, offset - 8) == word_at(expected_dump(37), offset - 8));
  CHECK(word_at(after, offset + 8) == word_at(expected_dump(37), offset + 8));

  const std::uint64_t refused_before = dma.counters().refused;
  CHECK_FALSE(dma.fetch_add(mr, offset + 4, 1));
  CHECK_FALSE(dma.compare_swap(mr, offset + 1, 0, 1));
  CHECK(dma.counters().refused == refused_before + 2);
}

TEST_CASE("DMA into an unmapped page fails as a fault or a partial transfer, never half-succeeds") {
  Child child(41);
  MrTable table;
  ProcessDma dma(table);
  const MrFacts mr = register_buffer(table, child, 1);
  const std::uint64_t hole = mr.base + kHolePage * kPage;

  std::vector<std::uint8_t> eight(8);
  CHECK_FALSE(dma.read(mr, hole, eight));
  CHECK(dma.counters().faults == 1);
  CHECK_FALSE(dma.write(mr, hole + 100, eight));
  CHECK(dma.counters().faults == 2);

  // Starts mapped, runs into the hole.
  std::vector<std::uint8_t> straddling(16);
  CHECK_FALSE(dma.read(mr, hole - 8, straddling));
  CHECK_FALSE(dma.write(mr, hole - 8, straddling));
  CHECK(dma.counters().faults + dma.counters().partial == 4);
  CHECK_FALSE(dma.fetch_add(mr, hole + 8, 1));
  CHECK(dma.counters().transfers == 0);

  // What the failed write may have put before the hole is its own business; the rest of the
  // buffer is as it was.
  const std::vector<std::uint8_t> now = child.dump();
  const std::vector<std::uint8_t> expected = expected_dump(41);
  CHECK(std::equal(now.begin(), now.begin() + kHolePage * kPage - 8, expected.begin()));
  CHECK(std::equal(now.begin() + kHolePage * kPage, now.end(), expected.begin() + kHolePage * kPage));
}

TEST_CASE("DMA never leaves the registration: forged facts and stale keys are refused before any syscall") {
  Child child(53);
  MrTable table;
  ProcessDma dma(table);
  MrRequest small;
  small.pd = 1;
  small.addr = child.address() + kPage;  // only page 1
  small.length = kPage;
  small.access = kAllRemote;
  const RegisterResult r = table.register_mr(Client{1, child.memory()}, small);
  REQUIRE(r.ok());
  const MrFacts mr = *table.find_rkey(r.rkey);

  std::vector<std::uint8_t> bytes(16, 0xEE);
  CHECK_FALSE(dma.read(mr, mr.base - 8, bytes));           // before the region
  CHECK_FALSE(dma.write(mr, mr.base + kPage - 8, bytes));   // past its end
  MrFacts enlarged = mr;
  enlarged.base = child.address();
  enlarged.length = kPages * kPage;
  CHECK_FALSE(dma.write(enlarged, child.address(), bytes)); // the table knows better
  CHECK(dma.counters().refused == 3);

  REQUIRE(table.deregister(1, r.lkey) == 0);
  CHECK_FALSE(dma.read(mr, mr.base, bytes));
  CHECK_FALSE(dma.compare_swap(mr, mr.base, 0, 1));
  CHECK(dma.counters().refused == 5);
  CHECK(dma.counters().transfers == 0);
  CHECK(child.dump() == expected_dump(53));
}

TEST_CASE("DMA goes to the process that registered the region, even at the same address") {
  // Both children come from one fork of this process: their buffers may well share an address.
  Child first(61);
  Child second(67);
  MrTable table;
  ProcessDma dma(table);
  const MrFacts first_mr = register_buffer(table, first, 1);
  const MrFacts second_mr = register_buffer(table, second, 2);

  std::vector<std::uint8_t> a(64);
  std::vector<std::uint8_t> b(64);
  REQUIRE(dma.read(first_mr, first_mr.base, a));
  REQUIRE(dma.read(second_mr, second_mr.base, b));
  for (std::size_t i = 0; i < 64; ++i) {
    CHECK(a[i] == pattern(61, i));
    CHECK(b[i] == pattern(67, i));
  }
  const std::array<std::uint8_t, 4> mark{1, 2, 3, 4};
  REQUIRE(dma.write(second_mr, second_mr.base, mark));
  CHECK(first.dump() == expected_dump(61));
  CHECK(second.dump()[0] == 1);

  // Dropping one client leaves the other reachable.
  CHECK(table.drop_client(1) == 1);
  CHECK_FALSE(dma.read(first_mr, first_mr.base, a));
  CHECK(dma.read(second_mr, second_mr.base + 4, b));
}

TEST_CASE("DMA into a process that died fails cleanly, before and after it is reaped") {
  Child child(71);
  MrTable table;
  ProcessDma dma(table);
  const MrFacts mr = register_buffer(table, child, 1);
  std::vector<std::uint8_t> bytes(32);
  REQUIRE(dma.read(mr, mr.base, bytes));

  child.kill();
  // A killed process becomes a zombie: no memory, pid still taken. Wait for that state
  // without reaping (WNOWAIT).
  siginfo_t info{};
  REQUIRE(::waitid(P_PID, static_cast<id_t>(child.pid()), &info, WEXITED | WNOWAIT) == 0);
  CHECK_FALSE(dma.read(mr, mr.base, bytes));
  const std::uint64_t gone = dma.counters().process_gone;
  CHECK(gone >= 1);
  CHECK_FALSE(dma.write(mr, mr.base, bytes));
  CHECK_FALSE(dma.fetch_add(mr, mr.base, 1));
  CHECK_FALSE(dma.compare_swap(mr, mr.base, 0, 1));
  CHECK(dma.counters().process_gone == gone + 3);

  child.reap();
  CHECK_FALSE(dma.read(mr, mr.base, bytes));
  CHECK_FALSE(dma.write(mr, mr.base, bytes));
  CHECK(dma.counters().process_gone == gone + 5);
  CHECK(dma.counters().faults == 0);

  // The daemon then tears the client down; the region is gone from the table as well.
  CHECK(table.drop_client(1) == 1);
  CHECK_FALSE(table.find_rkey(mr.rkey));
}

TEST_CASE("DMA gather/scatter with more pieces than one system call takes (IOV_MAX), across two processes") {
  Child first(79);
  Child second(83);
  MrTable table;
  ProcessDma dma(table);
  const MrFacts first_mr = register_buffer(table, first, 1);
  const MrFacts second_mr = register_buffer(table, second, 2);

  // 1500 two-byte pieces of the first child (every third byte pair of pages 0-1), then 3 of
  // the second, then 1 of the first again: three process switches, and a batch split at 1024.
  std::vector<DmaPiece> pieces;
  std::vector<std::uint8_t> expected_bytes;
  for (std::size_t i = 0; i < 1500; ++i) {
    const std::size_t offset = i * 5;
    pieces.push_back({first_mr, first_mr.base + offset, 2});
    expected_bytes.push_back(pattern(79, offset));
    expected_bytes.push_back(pattern(79, offset + 1));
  }
  for (std::size_t offset : {0, 100, 7000}) {
    pieces.push_back({second_mr, second_mr.base + offset, 2});
    expected_bytes.push_back(pattern(83, offset));
    expected_bytes.push_back(pattern(83, offset + 1));
  }
  pieces.push_back({first_mr, first_mr.base + 7777, 2});
  expected_bytes.push_back(pattern(79, 7777));
  expected_bytes.push_back(pattern(79, 7778));

  std::vector<std::uint8_t> gathered(expected_bytes.size());
  REQUIRE(dma.read_gather(pieces, gathered));
  CHECK(gathered == expected_bytes);

  std::vector<std::uint8_t> ones(expected_bytes.size(), 0x5A);
  REQUIRE(dma.write_scatter(pieces, ones));
  std::vector<std::uint8_t> first_expected = expected_dump(79);
  std::vector<std::uint8_t> second_expected = expected_dump(83);
  for (const DmaPiece& p : pieces) {
    std::vector<std::uint8_t>& target = p.mr.handle == first_mr.handle ? first_expected : second_expected;
    const std::size_t at = Child::dump_offset(p.addr - p.mr.base);
    target[at] = 0x5A;
    target[at + 1] = 0x5A;
  }
  CHECK(first.dump() == first_expected);
  CHECK(second.dump() == second_expected);
  CHECK(dma.counters().transfers == 2);

  // One bad piece anywhere refuses the whole list before anything moves.
  pieces[1200].length = 1'000'000;
  std::vector<std::uint8_t> zeros(expected_bytes.size() - 2 + 1'000'000, 0);
  CHECK_FALSE(dma.write_scatter(pieces, zeros));
  CHECK(dma.counters().refused == 1);
  CHECK(first.dump() == first_expected);
}

// Write combining (ProcessDma::combine_writes_from): the daemon's receive path queues the
// payload writes of received frames and sends them to the kernel together.
TEST_CASE("DMA write combining: queued writes land at flush, contiguous ones in one call") {
  Child child(89);
  MrTable table;
  ProcessDma dma(table);
  const MrFacts mr = register_buffer(table, child, 1);
  // Stands in for the event loop's receive buffers: four "frames" of 512 bytes each.
  std::vector<std::uint8_t> frames(4 * 512);
  for (std::size_t i = 0; i < frames.size(); ++i) frames[i] = static_cast<std::uint8_t>(i * 7 + 1);
  dma.combine_writes_from(frames);

  // Four packets of one message, back to back in the target; each frame's payload elsewhere.
  for (std::size_t k = 0; k < 4; ++k) {
    REQUIRE(dma.write(mr, mr.base + 1000 + k * 512, std::span<const std::uint8_t>(frames).subspan(k * 512, 512)));
  }
  CHECK(dma.queued_writes() == 4);
  CHECK(child.dump() == expected_dump(89));  // nothing moved yet
  REQUIRE(dma.flush());
  std::vector<std::uint8_t> expected = expected_dump(89);
  std::copy(frames.begin(), frames.end(), expected.begin() + 1000);
  CHECK(child.dump() == expected);
  CHECK(dma.counters().writes_queued == 4);
  CHECK(dma.counters().combined_calls == 1);
  CHECK(dma.queued_writes() == 0);
  CHECK(dma.flush());  // an empty queue is nothing to do
  CHECK(dma.counters().combined_calls == 1);
}

TEST_CASE("DMA write combining keeps the order of every transfer") {
  Child child(97);
  MrTable table;
  ProcessDma dma(table);
  const MrFacts mr = register_buffer(table, child, 1);
  std::vector<std::uint8_t> frames(64, 0xAB);
  dma.combine_writes_from(frames);

  REQUIRE(dma.write(mr, mr.base + 40, std::span<const std::uint8_t>(frames).first(16)));
  // A read of the same bytes sees the queued write: reads flush first.
  std::array<std::uint8_t, 16> seen{};
  REQUIRE(dma.read(mr, mr.base + 40, seen));
  CHECK(std::all_of(seen.begin(), seen.end(), [](std::uint8_t b) { return b == 0xAB; }));

  // A write from outside the stable memory (an atomic's result, a GRH) is not queued: the
  // queue goes first, then it, so the later write wins.
  REQUIRE(dma.write(mr, mr.base + 200, std::span<const std::uint8_t>(frames).first(8)));
  const std::array<std::uint8_t, 4> later{1, 2, 3, 4};
  REQUIRE(dma.write(mr, mr.base + 202, later));
  CHECK(dma.queued_writes() == 0);
  std::vector<std::uint8_t> expected = expected_dump(97);
  std::fill(expected.begin() + 40, expected.begin() + 56, 0xAB);
  std::fill(expected.begin() + 200, expected.begin() + 208, 0xAB);
  std::copy(later.begin(), later.end(), expected.begin() + 202);
  CHECK(child.dump() == expected);
  // A span that starts inside the stable memory but runs past it is not the caller's frame.
  std::vector<std::uint8_t> around(128, 0x11);
  dma.combine_writes_from(std::span<const std::uint8_t>(around).first(64));
  REQUIRE(dma.write(mr, mr.base + 300, std::span<const std::uint8_t>(around).subspan(32, 64)));
  CHECK(dma.queued_writes() == 0);
}

TEST_CASE("DMA write combining: one call per process, and a refused write is refused at once") {
  Child first(101);
  Child second(103);
  MrTable table;
  ProcessDma dma(table);
  const MrFacts first_mr = register_buffer(table, first, 1);
  const MrFacts second_mr = register_buffer(table, second, 2);
  std::vector<std::uint8_t> frames(256, 0x3C);
  dma.combine_writes_from(frames);
  const std::span<const std::uint8_t> payload(frames);

  REQUIRE(dma.write(first_mr, first_mr.base + 10, payload.first(32)));
  REQUIRE(dma.write(second_mr, second_mr.base + 20, payload.subspan(32, 32)));
  REQUIRE(dma.write(second_mr, second_mr.base + 52, payload.subspan(64, 32)));
  // Outside the registration (the hole page lies inside it; this is past its end): refused
  // before anything is queued, exactly as without combining.
  CHECK_FALSE(dma.write(first_mr, first_mr.base + first_mr.length - 4, payload.first(8)));
  CHECK(dma.counters().refused == 1);
  CHECK(dma.queued_writes() == 3);
  REQUIRE(dma.flush());
  CHECK(dma.counters().combined_calls == 2);
  std::vector<std::uint8_t> first_expected = expected_dump(101);
  std::fill(first_expected.begin() + 10, first_expected.begin() + 42, 0x3C);
  std::vector<std::uint8_t> second_expected = expected_dump(103);
  std::fill(second_expected.begin() + 20, second_expected.begin() + 84, 0x3C);
  CHECK(first.dump() == first_expected);
  CHECK(second.dump() == second_expected);
}

TEST_CASE("DMA write combining: a process that dies before the flush loses its writes, counted") {
  Child child(107);
  MrTable table;
  ProcessDma dma(table);
  const MrFacts mr = register_buffer(table, child, 1);
  std::vector<std::uint8_t> frames(64, 0x77);
  dma.combine_writes_from(frames);
  REQUIRE(dma.write(mr, mr.base, frames));
  REQUIRE(dma.write(mr, mr.base + 64, frames));
  child.kill();
  child.reap();
  CHECK_FALSE(dma.flush());
  CHECK(dma.counters().queued_writes_lost == 2);
  CHECK(dma.counters().process_gone == 1);
  CHECK(dma.queued_writes() == 0);
  CHECK(dma.take_lost_memories() == std::vector<int>{child.memory()});
  REQUIRE(dma.write(mr, mr.base, frames));
  CHECK_FALSE(dma.flush());
  // Known dead now: the next write is refused at once, not queued.
  CHECK_FALSE(dma.write(mr, mr.base, frames));
  CHECK(dma.queued_writes() == 0);
}

// Issue 16: a client forked, and the process whose memory it registered exec'd a (setuid)
// program at the same pid. The registration must reach nothing now, although the pid has
// readable memory at the very address: DMA goes to the address space that registered, not to
// whatever runs at the pid.
TEST_CASE("DMA after an exec at the registered pid reaches nothing, and names the client to evict") {
  int ready[2];
  int go[2];
  REQUIRE(::pipe(ready) == 0);
  REQUIRE(::pipe(go) == 0);
  void* mapped = ::mmap(nullptr, kPage, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  REQUIRE(mapped != MAP_FAILED);
  const auto address = reinterpret_cast<std::uintptr_t>(mapped);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::alarm(60);
    std::memset(mapped, 0x11, kPage);
    char byte = 0;
    if (::write(ready[1], "r", 1) != 1 || ::read(go[0], &byte, 1) != 1) ::_exit(2);
    // The exec'd program maps its own page where the registered one was.
    ::munmap(mapped, kPage);
    ::dup2(ready[1], STDOUT_FILENO);
    const std::string at = std::to_string(address);
    ::execl(RRDMA_EXEC_TARGET, RRDMA_EXEC_TARGET, at.c_str(), "34", static_cast<char*>(nullptr));
    ::_exit(3);
  }
  ::close(ready[1]);
  ::close(go[0]);
  char said[8] = {};
  REQUIRE(::read(ready[0], said, 1) == 1);
  const int memory = ::open(("/proc/" + std::to_string(pid) + "/mem").c_str(), O_RDWR | O_CLOEXEC);
  REQUIRE(memory >= 0);
  MrTable table;
  ProcessDma dma(table);
  MrRequest request;
  request.pd = 1;
  request.addr = address;
  request.length = kPage;
  request.access = kAllRemote;
  const RegisterResult r = table.register_mr(Client{1, memory}, request);
  REQUIRE(r.ok());
  const MrFacts mr = *table.find_rkey(r.rkey);
  std::vector<std::uint8_t> bytes(64);
  REQUIRE(dma.read(mr, address, bytes));
  CHECK(bytes == std::vector<std::uint8_t>(64, 0x11));
  CHECK(dma.still_alive(memory));

  REQUIRE(::write(go[1], "g", 1) == 1);
  REQUIRE(::read(ready[0], said, 5) == 5);
  CHECK(std::string(said, 5) == "ready");
  // The pid now has memory at that address, filled by the new program...
  std::vector<std::uint8_t> seen(64);
  const iovec local{seen.data(), seen.size()};
  const iovec remote{reinterpret_cast<void*>(address), seen.size()};
  REQUIRE(::process_vm_readv(pid, &local, 1, &remote, 1, 0) == 64);
  CHECK(seen == std::vector<std::uint8_t>(64, 34));
  // The periodic look (Nic::check_address_spaces) finds the address space gone at once,
  // without any transfer.
  CHECK_FALSE(dma.still_alive(memory));
  CHECK(dma.take_lost_memories() == std::vector<int>{memory});
  // ...which the registration does not reach, neither to read nor to write.
  CHECK_FALSE(dma.read(mr, address, bytes));
  CHECK_FALSE(dma.write(mr, address, std::vector<std::uint8_t>(64, 0x99)));
  CHECK(dma.counters().process_gone >= 1);
  CHECK(dma.take_lost_memories() == std::vector<int>{memory});
  REQUIRE(::process_vm_readv(pid, &local, 1, &remote, 1, 0) == 64);
  CHECK(seen == std::vector<std::uint8_t>(64, 34));

  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ::close(memory);
  ::close(ready[0]);
  ::close(go[1]);
  ::munmap(mapped, kPage);
}
