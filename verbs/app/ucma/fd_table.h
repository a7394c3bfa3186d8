// Runs in the application process (the rdma_cm shim, librrdma_ucma.so).
//
// Which descriptors are rdma_cm channels. write() is interposed for the whole process, so a
// descriptor that is not a channel must cost one bit test: one bit per descriptor number,
// set while the number names a channel the shim opened (or a dup of one). Everything else
// about a channel sits in a record looked up only on a hit.
//
// The bit can go stale: close_range(), closefrom() and raw syscalls close descriptors without
// passing through the shim, and the number is then reused. So a hit is confirmed by the
// socket's identity (device and inode, recorded at open) before the shim acts on it.
#pragma once

#include <sys/types.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <optional>

namespace rrdma::ucma_shim {

// Linux's default fs.nr_open: no descriptor number reaches it unless an administrator raised
// the limit. A channel whose number would not fit is refused (EMFILE); 128 KiB of bitmap,
// of which only the pages of numbers in use are ever touched.
inline constexpr int kMaxTrackedFd = 1 << 20;

struct ChannelRecord {
  std::uint64_t token = 0;  // the daemon's name for the channel (CreateChannel's reply)
  dev_t device = 0;         // the application end's identity, from fstat
  ino_t inode = 0;
  bool writable = true;     // opened O_WRONLY or O_RDWR: write() on O_RDONLY is EBADF
};

namespace detail {
extern std::array<std::atomic<std::uint64_t>, kMaxTrackedFd / 64> g_channel_bits;
}

// The fast path of every interposed call: false for any descriptor that is surely not ours.
inline bool maybe_channel(int fd) {
  if (fd < 0 || fd >= kMaxTrackedFd) return false;
  const std::uint64_t word = detail::g_channel_bits[static_cast<unsigned>(fd) / 64].load(std::memory_order_relaxed);
  return (word >> (static_cast<unsigned>(fd) % 64) & 1U) != 0;
}

void remember_channel(int fd, const ChannelRecord& record);
void forget_channel(int fd);
// The record of `fd` if it is still the socket recorded at open; a stale bit is cleared.
std::optional<ChannelRecord> verified_channel(int fd);
// As verified_channel, from an fstat the caller already made of `fd`.
std::optional<ChannelRecord> channel_matching(int fd, dev_t device, ino_t inode);
// `to` now names the same channel as `from` (after dup, dup2, dup3).
void copy_channel(int from, int to);

// Held across fork() so that the child never inherits the table's lock taken.
void lock_table_for_fork();
void unlock_table_after_fork();

}  // namespace rrdma::ucma_shim
