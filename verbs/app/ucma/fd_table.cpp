// Runs in the application process (the rdma_cm shim, librrdma_ucma.so).
#include "verbs/app/ucma/fd_table.h"

#include <sys/stat.h>

#include <mutex>
#include <unordered_map>

#include "verbs/app/ucma/real_libc.h"

namespace rrdma::ucma_shim {
namespace detail {
constinit std::array<std::atomic<std::uint64_t>, kMaxTrackedFd / 64> g_channel_bits{};
}

namespace {

constinit std::mutex g_table_mutex;

// Built on first use (not at load time): an interposer can run before our constructors.
std::unordered_map<int, ChannelRecord>& records() {
  static auto* table = new std::unordered_map<int, ChannelRecord>();
  return *table;
}

std::atomic<std::uint64_t>& word_of(int fd) { return detail::g_channel_bits[static_cast<unsigned>(fd) / 64]; }
std::uint64_t bit_of(int fd) { return std::uint64_t{1} << (static_cast<unsigned>(fd) % 64); }

void set_locked(int fd, const ChannelRecord& record) {
  records()[fd] = record;
  word_of(fd).fetch_or(bit_of(fd), std::memory_order_relaxed);
}

void clear_locked(int fd) {
  word_of(fd).fetch_and(~bit_of(fd), std::memory_order_relaxed);
  records().erase(fd);
}

}  // namespace

void remember_channel(int fd, const ChannelRecord& record) {
  if (fd < 0 || fd >= kMaxTrackedFd) return;
  std::lock_guard lock(g_table_mutex);
  set_locked(fd, record);
}

void forget_channel(int fd) {
  if (!maybe_channel(fd)) return;
  std::lock_guard lock(g_table_mutex);
  clear_locked(fd);
}

std::optional<ChannelRecord> channel_matching(int fd, dev_t device, ino_t inode) {
  if (!maybe_channel(fd)) return std::nullopt;
  std::lock_guard lock(g_table_mutex);
  const auto found = records().find(fd);
  if (found == records().end()) return std::nullopt;
  if (found->second.device == device && found->second.inode == inode) return found->second;
  // The number was closed behind our back and now names something else.
  clear_locked(fd);
  return std::nullopt;
}

std::optional<ChannelRecord> verified_channel(int fd) {
  if (!maybe_channel(fd)) return std::nullopt;
  struct stat st {};
  if (real::fstat(fd, &st) != 0) {
    forget_channel(fd);
    return std::nullopt;
  }
  return channel_matching(fd, st.st_dev, st.st_ino);
}

void copy_channel(int from, int to) {
  if (to < 0 || to >= kMaxTrackedFd || from == to) return;
  std::lock_guard lock(g_table_mutex);
  const auto found = maybe_channel(from) ? records().find(from) : records().end();
  if (found == records().end()) {
    clear_locked(to);
    return;
  }
  set_locked(to, ChannelRecord(found->second));
}

void lock_table_for_fork() { g_table_mutex.lock(); }
void unlock_table_after_fork() { g_table_mutex.unlock(); }

}  // namespace rrdma::ucma_shim
