// A forked child process holding a patterned buffer for the DMA tests: it maps four pages,
// unmaps page 2 (a hole), fills a pattern, reports the buffer's address over a pipe, then
// answers "dump" requests with its own view of the buffer. Killed and reaped on destruction;
// every wait on it is bounded.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "verbs/device/mr_table.h"

namespace rrdma::verbs::test {

using rocev2::MrFacts;


constexpr std::size_t kPage = 4096;
constexpr std::size_t kPages = 4;           // page 2 is a hole
constexpr std::size_t kHolePage = 2;
constexpr int kReplyTimeoutMs = 10'000;
constexpr char kDump = 'd';

inline std::uint8_t pattern(std::uint8_t seed, std::size_t i) {
  return static_cast<std::uint8_t>(seed + i * 7 + (i >> 8));
}

inline bool write_all(int fd, const void* data, std::size_t size) {
  const auto* p = static_cast<const std::uint8_t*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, p, size);
    if (n <= 0) return false;
    p += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

// Reads exactly `size` bytes or gives up after the timeout (a child that died or hung).
inline bool read_all(int fd, void* data, std::size_t size) {
  auto* p = static_cast<std::uint8_t*>(data);
  while (size > 0) {
    pollfd pfd{fd, POLLIN, 0};
    if (::poll(&pfd, 1, kReplyTimeoutMs) != 1) return false;
    const ssize_t n = ::read(fd, p, size);
    if (n <= 0) return false;
    p += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

[[noreturn]] inline void child_main(std::uint8_t seed, int commands, int replies) {
  ::alarm(60);  // never outlive a stuck test
  void* mapped = ::mmap(nullptr, kPages * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapped == MAP_FAILED) ::_exit(2);
  auto* buffer = static_cast<std::uint8_t*>(mapped);
  for (std::size_t i = 0; i < kPages * kPage; ++i) buffer[i] = pattern(seed, i);
  if (::munmap(buffer + kHolePage * kPage, kPage) != 0) ::_exit(3);
  const std::uint64_t address = reinterpret_cast<std::uintptr_t>(buffer);
  if (!write_all(replies, &address, sizeof address)) ::_exit(4);
  char command = 0;
  while (::read(commands, &command, 1) == 1) {
    if (command != kDump) ::_exit(5);
    if (!write_all(replies, buffer, kHolePage * kPage)) ::_exit(6);
    if (!write_all(replies, buffer + (kHolePage + 1) * kPage, kPage)) ::_exit(7);
  }
  ::_exit(0);  // the parent closed the command pipe
}

// A child process holding a patterned buffer; killed and reaped on destruction.
class Child {
 public:
  explicit Child(std::uint8_t seed) : seed_(seed) {
    int commands[2];
    int replies[2];
    REQUIRE(::pipe(commands) == 0);
    REQUIRE(::pipe(replies) == 0);
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      ::close(commands[1]);
      ::close(replies[0]);
      child_main(seed, commands[0], replies[1]);
    }
    ::close(commands[0]);
    ::close(replies[1]);
    commands_ = commands[1];
    replies_ = replies[0];
    REQUIRE(read_all(replies_, &address_, sizeof address_));
    // The handle the client library hands the daemon is the child's own /proc/self/mem; its
    // parent may open the same address space's file (same uid, and an ancestor).
    memory_ = ::open(("/proc/" + std::to_string(pid_) + "/mem").c_str(), O_RDWR | O_CLOEXEC);
    REQUIRE(memory_ >= 0);
  }
  ~Child() {
    kill();
    reap();
    ::close(memory_);
    ::close(commands_);
    ::close(replies_);
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  pid_t pid() const { return pid_; }
  int memory() const { return memory_; }
  std::uint64_t address() const { return address_; }
  std::uint8_t seed() const { return seed_; }

  // The child's own view of its mapped pages (the hole left out), in buffer order.
  std::vector<std::uint8_t> dump() {
    std::vector<std::uint8_t> bytes((kPages - 1) * kPage);
    REQUIRE(write_all(commands_, &kDump, 1));
    REQUIRE(read_all(replies_, bytes.data(), bytes.size()));
    return bytes;
  }
  // Offset in dump() of a buffer offset outside the hole.
  static std::size_t dump_offset(std::size_t offset) {
    return offset < kHolePage * kPage ? offset : offset - kPage;
  }

  void kill() {
    if (!reaped_) ::kill(pid_, SIGKILL);
  }
  void reap() {
    if (reaped_) return;
    int status = 0;
    ::waitpid(pid_, &status, 0);
    reaped_ = true;
  }

 private:
  std::uint8_t seed_;
  pid_t pid_ = -1;
  int commands_ = -1;
  int replies_ = -1;
  int memory_ = -1;
  std::uint64_t address_ = 0;
  bool reaped_ = false;
};

constexpr std::uint32_t kAllRemote = mr_access::kLocalWrite | mr_access::kRemoteWrite |
                                     mr_access::kRemoteRead | mr_access::kRemoteAtomic;

inline MrFacts register_buffer(MrTable& table, const Child& child, std::uint64_t client_id,
                        std::uint32_t extra_access = 0) {
  MrRequest req;
  req.pd = 1;
  req.addr = child.address();
  req.length = kPages * kPage;
  req.access = kAllRemote | extra_access;
  const RegisterResult r = table.register_mr(Client{client_id, child.memory()}, req);
  REQUIRE(r.ok());
  return *table.find_rkey(r.rkey);
}

inline std::vector<std::uint8_t> expected_dump(std::uint8_t seed) {
  std::vector<std::uint8_t> bytes;
  for (std::size_t i = 0; i < kPages * kPage; ++i)
    if (i / kPage != kHolePage) bytes.push_back(pattern(seed, i));
  return bytes;
}

inline std::uint64_t word_at(const std::vector<std::uint8_t>& dump, std::size_t offset) {
  std::uint64_t v = 0;
  std::memcpy(&v, dump.data() + Child::dump_offset(offset), 8);
  return v;
}

}  // namespace rrdma::verbs::test
