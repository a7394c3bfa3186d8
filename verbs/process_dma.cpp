#include "verbs/process_dma.h"

#include <poll.h>
#include <sys/uio.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <climits>
#include <cstring>
#include <vector>

namespace rrdma::verbs {

using rocev2::MrFacts;

namespace {

constexpr std::size_t kMaxIovecs = IOV_MAX;
// The kernel silently shortens one process_vm_* call to MAX_RW_COUNT (INT_MAX rounded down
// to a page); staying well below it keeps "fewer bytes than asked" meaning "a hole".
constexpr std::size_t kMaxCallBytes = std::size_t{1} << 30;

// A pidfd turns readable when its process exits; the pid may then be handed to a new
// process, which must never receive the old one's DMA (pidfd_open(2)).
bool has_exited(int pidfd) {
  pollfd p{pidfd, POLLIN, 0};
  return ::poll(&p, 1, 0) == 1 && (p.revents & POLLIN) != 0;
}

// How long one look at a pidfd vouches for its process. A poll per transfer cost 5-8% of
// the daemon under load (docs/PERFORMANCE.md). For the pid to name another process after
// a check, the process must exit, be reaped, and the kernel must hand out every other pid
// (it allocates them cyclically: pid_max, at least 32768) within this time.
constexpr auto kLivenessValidity = std::chrono::milliseconds(1);
constexpr std::size_t kMaxLivenessEntries = 64;

iovec remote_iovec(std::uint64_t address, std::size_t length) {
  // An address in the other process, handed to the kernel as such: never dereferenced here.
  return iovec{reinterpret_cast<void*>(static_cast<std::uintptr_t>(address)), length};
}

}  // namespace

bool ProcessDma::transfer(Direction direction, std::span<const DmaPiece> pieces,
                          std::uint8_t* local, std::size_t size) {
  std::vector<DmaTarget> targets;
  targets.reserve(pieces.size());
  std::uint64_t total = 0;
  for (const DmaPiece& piece : pieces) {
    const std::optional<DmaTarget> target = table_.dma_target(piece.mr, piece.addr, piece.length);
    if (!target || piece.length > size - std::min<std::uint64_t>(total, size)) {
      ++counters_.refused;
      return false;
    }
    targets.push_back(*target);
    total += piece.length;
  }
  if (total != size) {
    ++counters_.refused;
    return false;
  }

  std::vector<iovec> remote;
  remote.reserve(std::min(pieces.size(), kMaxIovecs));
  DmaTarget batch_target;
  std::size_t batch_bytes = 0;
  std::size_t done = 0;
  const auto flush = [&]() -> bool {
    if (remote.empty()) return true;
    if (!still_alive(batch_target)) {
      ++counters_.process_gone;
      return false;
    }
    // process_vm_writev only reads the local iovec; iovec is the same type both ways.
    const iovec local_iov{local + done, batch_bytes};
    const ssize_t n =
        direction == Direction::FromProcess
            ? ::process_vm_readv(batch_target.pid, &local_iov, 1, remote.data(), remote.size(), 0)
            : ::process_vm_writev(batch_target.pid, &local_iov, 1, remote.data(), remote.size(), 0);
    if (n < 0) {
      if (errno == ESRCH) process_gone(batch_target);
      else if (errno == EFAULT) ++counters_.faults;
      else ++counters_.other_errors;
      return false;
    }
    if (static_cast<std::size_t>(n) != batch_bytes) {
      ++counters_.partial;
      return false;
    }
    done += batch_bytes;
    batch_bytes = 0;
    remote.clear();
    return true;
  };

  for (std::size_t i = 0; i < pieces.size(); ++i) {
    if (pieces[i].length == 0) continue;
    if (!remote.empty() && targets[i].pid != batch_target.pid && !flush()) return false;
    batch_target = targets[i];
    std::uint64_t address = targets[i].address;
    std::uint64_t remaining = pieces[i].length;
    while (remaining > 0) {
      if ((remote.size() == kMaxIovecs || batch_bytes == kMaxCallBytes) && !flush()) return false;
      const std::size_t chunk = static_cast<std::size_t>(std::min<std::uint64_t>(remaining, kMaxCallBytes - batch_bytes));
      remote.push_back(remote_iovec(address, chunk));
      batch_bytes += chunk;
      address += chunk;
      remaining -= chunk;
    }
  }
  if (!flush()) return false;
  ++counters_.transfers;
  return true;
}

bool ProcessDma::still_alive(const DmaTarget& target) {
  if (target.pidfd < 0) return true;  // no pidfd_open here: the pid is all we have
  const auto now = std::chrono::steady_clock::now();
  auto it = std::find_if(liveness_.begin(), liveness_.end(), [&](const LivenessCheck& c) {
    return c.pid == target.pid && c.pidfd == target.pidfd;
  });
  if (it != liveness_.end() && now - it->alive_at < kLivenessValidity) return true;
  if (has_exited(target.pidfd)) {
    if (it != liveness_.end()) liveness_.erase(it);
    return false;
  }
  if (it != liveness_.end()) {
    it->alive_at = now;
  } else {
    // Entries of closed pidfds are only ever stale: drop them all when the list grows.
    if (liveness_.size() >= kMaxLivenessEntries) liveness_.clear();
    liveness_.push_back({target.pid, target.pidfd, now});
  }
  return true;
}

bool ProcessDma::inside_stable(std::span<const std::uint8_t> bytes) const {
  if (stable_.empty() || bytes.empty()) return false;
  const auto start = reinterpret_cast<std::uintptr_t>(stable_.data());
  const auto first = reinterpret_cast<std::uintptr_t>(bytes.data());
  return first >= start && first - start <= stable_.size() && bytes.size() <= stable_.size() - (first - start);
}

// The kernel says the pid is gone: the next look at this client asks its pidfd again.
void ProcessDma::process_gone(const DmaTarget& target) {
  ++counters_.process_gone;
  std::erase_if(liveness_, [&](const LivenessCheck& c) { return c.pid == target.pid && c.pidfd == target.pidfd; });
}

void ProcessDma::combine_writes_from(std::span<const std::uint8_t> stable) {
  flush();
  stable_ = stable;
  queue_.reserve(1024);
}

bool ProcessDma::queue_write(const MrFacts& mr, std::uint64_t addr, std::span<const std::uint8_t> in) {
  const std::optional<DmaTarget> target = table_.dma_target(mr, addr, in.size());
  if (!target) {
    ++counters_.refused;
    return false;
  }
  if (!still_alive(*target)) {
    ++counters_.process_gone;
    return false;
  }
  queue_.push_back({*target, in.data(), in.size()});
  ++counters_.writes_queued;
  return true;
}

bool ProcessDma::flush() {
  bool all_written = true;
  std::size_t begin = 0;
  for (std::size_t i = 1; i <= queue_.size(); ++i) {
    const bool run_ends = i == queue_.size() || queue_[i].target.pid != queue_[begin].target.pid ||
                          i - begin == kMaxIovecs;
    if (!run_ends) continue;
    all_written = flush_run(begin, i) && all_written;
    begin = i;
  }
  queue_.clear();
  return all_written;
}

// One process_vm_writev for queue_[begin, end): all into one process, one local iovec per
// write (received frames lie in separate buffers), remote ranges that continue each other
// merged (the packets of one message land back to back).
bool ProcessDma::flush_run(std::size_t begin, std::size_t end) {
  if (begin == end) return true;
  const DmaTarget& target = queue_[begin].target;
  std::array<iovec, kMaxIovecs> local;
  std::array<iovec, kMaxIovecs> remote;
  std::size_t remotes = 0;
  std::size_t bytes = 0;
  for (std::size_t i = begin; i < end; ++i) {
    const QueuedWrite& w = queue_[i];
    // process_vm_writev only reads the local side; iovec holds a non-const pointer.
    local[i - begin] = iovec{const_cast<std::uint8_t*>(w.source), w.length};
    const std::uint64_t previous_end =
        remotes == 0 ? 0 : reinterpret_cast<std::uintptr_t>(remote[remotes - 1].iov_base) + remote[remotes - 1].iov_len;
    if (remotes > 0 && previous_end == w.target.address) {
      remote[remotes - 1].iov_len += w.length;
    } else {
      remote[remotes++] = remote_iovec(w.target.address, w.length);
    }
    bytes += w.length;
  }
  const std::size_t count = end - begin;
  ssize_t n = -1;
  if (!still_alive(target)) {
    errno = ESRCH;
  } else {
    n = ::process_vm_writev(target.pid, local.data(), count, remote.data(), remotes, 0);
  }
  ++counters_.combined_calls;
  if (n >= 0 && static_cast<std::size_t>(n) == bytes) {
    ++counters_.transfers;
    return true;
  }
  if (n >= 0) ++counters_.partial;
  else if (errno == ESRCH) process_gone(target);
  else if (errno == EFAULT) ++counters_.faults;
  else ++counters_.other_errors;
  counters_.queued_writes_lost += count;
  return false;
}

bool ProcessDma::read_gather(std::span<const DmaPiece> pieces, std::span<std::uint8_t> out) {
  flush();
  return transfer(Direction::FromProcess, pieces, out.data(), out.size());
}

bool ProcessDma::write_scatter(std::span<const DmaPiece> pieces, std::span<const std::uint8_t> in) {
  flush();
  // The bytes are only read (by process_vm_writev); transfer() takes one pointer type for both.
  return transfer(Direction::ToProcess, pieces, const_cast<std::uint8_t*>(in.data()), in.size());
}

bool ProcessDma::read(const MrFacts& mr, std::uint64_t addr, std::span<std::uint8_t> out) {
  const DmaPiece piece{mr, addr, out.size()};
  return read_gather({&piece, 1}, out);
}

bool ProcessDma::write(const MrFacts& mr, std::uint64_t addr, std::span<const std::uint8_t> in) {
  if (inside_stable(in)) return queue_write(mr, addr, in);
  const DmaPiece piece{mr, addr, in.size()};
  return write_scatter({&piece, 1}, in);
}

// The word is in the owner's byte order (it reads it as a uint64_t); only the AtomicETH on
// the wire is big-endian, and the engine converts that.
std::optional<std::uint64_t> ProcessDma::read_word(const MrFacts& mr, std::uint64_t addr) {
  // IBA ch. 9 atomics act on a naturally aligned 8-byte word.
  if (addr % 8 != 0) {
    ++counters_.refused;
    return std::nullopt;
  }
  std::array<std::uint8_t, 8> bytes{};
  if (!read(mr, addr, bytes)) return std::nullopt;
  std::uint64_t value = 0;
  std::memcpy(&value, bytes.data(), bytes.size());
  return value;
}

bool ProcessDma::write_word(const MrFacts& mr, std::uint64_t addr, std::uint64_t value) {
  std::array<std::uint8_t, 8> bytes{};
  std::memcpy(bytes.data(), &value, bytes.size());
  return write(mr, addr, bytes);
}

std::optional<std::uint64_t> ProcessDma::compare_swap(const MrFacts& mr, std::uint64_t addr,
                                                      std::uint64_t compare, std::uint64_t swap) {
  const std::optional<std::uint64_t> original = read_word(mr, addr);
  if (!original) return std::nullopt;
  if (*original == compare && !write_word(mr, addr, swap)) return std::nullopt;
  return original;
}

std::optional<std::uint64_t> ProcessDma::fetch_add(const MrFacts& mr, std::uint64_t addr,
                                                   std::uint64_t add) {
  const std::optional<std::uint64_t> original = read_word(mr, addr);
  if (!original || !write_word(mr, addr, *original + add)) return std::nullopt;
  return original;
}

}  // namespace rrdma::verbs
