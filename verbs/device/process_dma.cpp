#include "verbs/device/process_dma.h"

#include "verbs/device/address_layout.h"

#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <climits>
#include <cstring>
#include <memory>
#include <vector>

namespace rrdma::verbs {

using rocev2::MrFacts;

namespace {

constexpr std::size_t kMaxIovecs = IOV_MAX;
// The kernel silently shortens one read or write to MAX_RW_COUNT (INT_MAX rounded down to a
// page); staying well below it keeps "fewer bytes than asked" meaning "a hole".
constexpr std::size_t kMaxCallBytes = std::size_t{1} << 30;

// An address in the client is the offset of its byte in the mem file; it is never
// dereferenced here. pread/pwrite refuse offsets above 2^63 with EINVAL before the mem file
// sees them (counted as other_errors); no user address is that high.
off_t offset_of(std::uint64_t address) { return static_cast<off_t>(address); }

bool same_bytes(const DmaTarget& a, const DmaTarget& b, std::uint64_t length_a, std::uint64_t length_b) {
  return a.memory == b.memory && a.address == b.address && length_a == length_b;
}

}  // namespace

// What one read or write of a mem file says: every byte, or why not. 0 bytes is the address
// space gone (mem_rw finds no live mm: the process exited or exec'd); EIO is an unmapped
// address at the start; fewer bytes than asked is a hole further in.
bool ProcessDma::check_moved(int memory, ssize_t moved, std::size_t asked) {
  if (moved >= 0 && static_cast<std::size_t>(moved) == asked) return true;
  if (moved == 0) {
    ++counters_.process_gone;
    if (!known_lost(memory)) lost_.push_back(memory);
  } else if (moved > 0) {
    ++counters_.partial;
  } else if (errno == EIO || errno == EFAULT) {
    ++counters_.faults;
  } else {
    ++counters_.other_errors;
  }
  return false;
}

AddressSpace probe_address_space(int memory) {
  std::uint8_t byte = 0;
  ssize_t moved = 0;
  do {
    moved = ::pread(memory, &byte, 1, 0);
  } while (moved < 0 && errno == EINTR);
  if (moved == 0) return AddressSpace::Gone;
  return moved < 0 && errno == EIO ? AddressSpace::Alive : AddressSpace::Unknown;
}

AddressSpace ProcessDma::probe(int memory) {
  const ssize_t answer = call_on_memory(DmaTarget{memory, 0, -1}, [memory] {
    return static_cast<ssize_t>(probe_address_space(memory));
  });
  return answer < 0 ? AddressSpace::Unknown : static_cast<AddressSpace>(answer);
}

Writable ProcessDma::writable(const DmaTarget& target, std::uint64_t length) {
  const ssize_t answer = call_on_memory(target, [target, length] {
    return static_cast<ssize_t>(writable_range(target.layout, target.address, length));
  });
  return answer < 0 ? Writable::Unknown : static_cast<Writable>(answer);
}

bool ProcessDma::still_alive(int memory) {
  if (known_lost(memory)) return false;
  const AddressSpace answer = probe(memory);
  if (known_lost(memory)) return false;  // stalled: reported lost
  if (answer != AddressSpace::Gone) return true;
  check_moved(memory, 0, 1);  // counted and reported lost
  return false;
}

bool ProcessDma::known_lost(int memory) const {
  return std::find(lost_.begin(), lost_.end(), memory) != lost_.end();
}

// The system calls on client memory. A write asks the owner's maps first, every time: the
// mem file writes with FOLL_FORCE, so it would write where the owner may not (a read-only
// private page gets a copy-on-write copy), and an mprotect or mremap may have changed the maps
// since the registration (docs/VERBS_MEMORY.md). They run on bytes of their own, so that a
// call abandoned on the DMA thread touches nothing of the daemon's when it resumes.
namespace {

// EACCES is what no mem file transfer answers: it stands for "not writable for its owner".
constexpr int kNotWritable = EACCES;

ssize_t write_checked(int memory, int layout, std::uint64_t address, const std::uint8_t* bytes,
                      std::size_t length) {
  if (layout >= 0) {
    const Writable writable = writable_range(layout, address, length);
    if (writable == Writable::Gone) return 0;  // what the mem file says of a gone address space
    if (writable != Writable::Yes) {
      errno = kNotWritable;
      return -1;
    }
  }
  std::size_t done = 0;
  while (done < length) {
    const std::size_t chunk = std::min(length - done, kMaxCallBytes);
    ssize_t moved = 0;
    do {
      moved = ::pwrite(memory, bytes + done, chunk, offset_of(address + done));
    } while (moved < 0 && errno == EINTR);
    if (moved < 0) return done > 0 ? static_cast<ssize_t>(done) : -1;
    done += static_cast<std::size_t>(moved);
    if (static_cast<std::size_t>(moved) < chunk) break;
  }
  return static_cast<ssize_t>(done);
}

ssize_t read_all(int memory, std::uint64_t address, std::uint8_t* bytes, std::size_t length) {
  std::size_t done = 0;
  while (done < length) {
    const std::size_t chunk = std::min(length - done, kMaxCallBytes);
    ssize_t moved = 0;
    do {
      moved = ::pread(memory, bytes + done, chunk, offset_of(address + done));
    } while (moved < 0 && errno == EINTR);
    if (moved < 0) return done > 0 ? static_cast<ssize_t>(done) : -1;
    done += static_cast<std::size_t>(moved);
    if (static_cast<std::size_t>(moved) < chunk) break;
  }
  return static_cast<ssize_t>(done);
}

std::shared_ptr<std::uint8_t[]> buffer_of(std::size_t length) {
  return std::shared_ptr<std::uint8_t[]>(new std::uint8_t[std::max<std::size_t>(length, 1)]);
}

}  // namespace

ssize_t ProcessDma::call_on_memory(const DmaTarget& target, std::function<ssize_t()> call) {
  if (thread_ == nullptr) return call();
  const DmaThread::Outcome outcome = thread_->run(std::move(call), {target.memory, target.layout});
  if (outcome.finished) {
    errno = outcome.error;
    return outcome.result;
  }
  ++counters_.stalled;
  if (!known_lost(target.memory)) lost_.push_back(target.memory);
  errno = ETIMEDOUT;
  return -1;
}

bool ProcessDma::finish_write(const DmaTarget& target, ssize_t moved, std::size_t asked) {
  if (moved < 0 && errno == kNotWritable) {
    ++counters_.not_writable;
    return false;
  }
  if (moved < 0 && errno == ETIMEDOUT) return false;  // counted as stalled
  return check_moved(target.memory, moved, asked);
}

void ProcessDma::close_client_fd(int fd) {
  if (fd < 0) return;
  forget_memory(fd);
  if (thread_ != nullptr) thread_->close_when_idle(fd);
  else ::close(fd);
}

// One contiguous range of one address space.
bool ProcessDma::move(Direction direction, const DmaTarget& target, std::uint8_t* local, std::size_t length) {
  if (known_lost(target.memory)) {
    ++counters_.process_gone;
    return false;
  }
  if (direction == Direction::ToProcess) {
    if (thread_ == nullptr)
      return finish_write(target, write_checked(target.memory, target.layout, target.address, local, length), length);
    auto bytes = buffer_of(length);
    std::memcpy(bytes.get(), local, length);
    const ssize_t moved = call_on_memory(target, [memory = target.memory, layout = target.layout,
                                                  address = target.address, bytes, length] {
      return write_checked(memory, layout, address, bytes.get(), length);
    });
    return finish_write(target, moved, length);
  }
  if (thread_ == nullptr) return check_moved(target.memory, read_all(target.memory, target.address, local, length), length);
  auto bytes = buffer_of(length);
  const ssize_t moved = call_on_memory(target, [memory = target.memory, address = target.address, bytes, length] {
    return read_all(memory, address, bytes.get(), length);
  });
  if (moved < 0 && errno == ETIMEDOUT) return false;
  if (!check_moved(target.memory, moved, length)) return false;
  std::memcpy(local, bytes.get(), length);
  return true;
}

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

  // Runs of pieces that continue each other in one address space move in one call (their
  // local bytes are consecutive too: `local` is the pieces' concatenation). A read of the
  // same bytes as the piece before is copied from it afterwards: a NIC that read both at the
  // same instant would see the same bytes.
  std::vector<bool> copy_of_previous(pieces.size(), false);
  std::size_t run_first = 0;
  std::size_t run_local = 0;
  std::uint64_t run_length = 0;
  std::size_t position = 0;
  const auto move_run = [&]() {
    if (run_length == 0) return true;
    DmaTarget at = targets[run_first];
    const bool ok = move(direction, at, local + run_local, static_cast<std::size_t>(run_length));
    run_length = 0;
    return ok;
  };
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    const std::uint64_t length = pieces[i].length;
    if (length == 0) continue;
    const bool shared = direction == Direction::FromProcess && i > 0 &&
                        same_bytes(targets[i], targets[i - 1], length, pieces[i - 1].length);
    const bool continues = run_length > 0 && targets[i].memory == targets[run_first].memory &&
                           targets[i].address == targets[run_first].address + run_length;
    if (shared) {
      copy_of_previous[i] = true;
      if (!move_run()) return false;
    } else if (!continues) {
      if (!move_run()) return false;
      run_first = i;
      run_local = position;
    }
    if (!shared) run_length += length;
    position += static_cast<std::size_t>(length);
  }
  if (!move_run()) return false;

  position = 0;
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    const auto length = static_cast<std::size_t>(pieces[i].length);
    if (copy_of_previous[i]) {
      std::memcpy(local + position, local + position - length, length);
      ++counters_.reads_shared;
    }
    position += length;
  }
  ++counters_.transfers;
  return true;
}

bool ProcessDma::inside_stable(std::span<const std::uint8_t> bytes) const {
  if (stable_.empty() || bytes.empty()) return false;
  const auto start = reinterpret_cast<std::uintptr_t>(stable_.data());
  const auto first = reinterpret_cast<std::uintptr_t>(bytes.data());
  return first >= start && first - start <= stable_.size() && bytes.size() <= stable_.size() - (first - start);
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
  if (known_lost(target->memory)) {
    ++counters_.process_gone;
    return false;
  }
  queue_.push_back({*target, in.data(), in.size(), origin_});
  ++counters_.writes_queued;
  return true;
}

// Runs of queued writes that continue each other in one address space: the packets of one
// message land back to back, one write for all of them. Every run into one address space goes
// to the DMA thread in one call (flush_memory): one hand-over per client per batch.
bool ProcessDma::flush() {
  std::vector<Run> runs;
  std::size_t begin = 0;
  std::uint64_t run_end = 0;
  for (std::size_t i = 0; i <= queue_.size(); ++i) {
    const bool run_ends = i == queue_.size() || (i > begin && (queue_[i].target.memory != queue_[begin].target.memory ||
                                                               queue_[i].target.address != run_end ||
                                                               i - begin == kMaxIovecs));
    if (run_ends && i > begin) {
      runs.push_back({begin, i});
      begin = i;
    }
    if (i < queue_.size()) run_end = queue_[i].target.address + queue_[i].length;
  }
  bool all_written = true;
  std::vector<bool> taken(runs.size(), false);
  for (std::size_t first = 0; first < runs.size(); ++first) {
    if (taken[first]) continue;
    std::vector<Run> same_memory;
    for (std::size_t j = first; j < runs.size(); ++j) {
      if (taken[j] || queue_[runs[j].begin].target.memory != queue_[runs[first].begin].target.memory) continue;
      taken[j] = true;
      same_memory.push_back(runs[j]);
    }
    all_written = flush_memory(same_memory) && all_written;
  }
  queue_.clear();
  return all_written;
}

// The runs into one address space, in queue order, in one call: the frames' bytes gathered
// into one buffer of the call's own (received frames go back to the kernel after the batch,
// and an abandoned call may resume after that).
bool ProcessDma::flush_memory(const std::vector<Run>& runs) {
  const DmaTarget& first = queue_[runs.front().begin].target;
  counters_.combined_calls += runs.size();
  struct Piece {
    std::uint64_t address = 0;
    std::size_t offset = 0;
    std::size_t bytes = 0;
    ssize_t moved = -1;
    int error = 0;
  };
  auto pieces = std::make_shared<std::vector<Piece>>();
  std::size_t total = 0;
  for (const Run& run : runs) {
    std::size_t bytes = 0;
    for (std::size_t i = run.begin; i < run.end; ++i) bytes += queue_[i].length;
    pieces->push_back({queue_[run.begin].target.address, total, bytes});
    total += bytes;
  }
  ssize_t finished = -1;
  if (known_lost(first.memory)) {
    ++counters_.process_gone;
  } else {
    auto gathered = buffer_of(total);
    std::size_t at = 0;
    for (const Run& run : runs)
      for (std::size_t i = run.begin; i < run.end; ++i) {
        std::memcpy(gathered.get() + at, queue_[i].source, queue_[i].length);
        at += queue_[i].length;
      }
    finished = call_on_memory(first, [memory = first.memory, layout = first.layout, gathered, pieces] {
      for (Piece& piece : *pieces) {
        errno = 0;
        piece.moved = write_checked(memory, layout, piece.address, gathered.get() + piece.offset, piece.bytes);
        piece.error = errno;
      }
      return ssize_t{0};
    });
  }
  bool all_written = true;
  for (std::size_t k = 0; k < runs.size(); ++k) {
    // An abandoned call may still be filling in its pieces: read them only when it finished.
    if (finished == 0) {
      const Piece& piece = (*pieces)[k];
      errno = piece.error;
      if (finish_write(queue_[runs[k].begin].target, piece.moved, piece.bytes)) {
        ++counters_.transfers;
        continue;
      }
    }
    counters_.queued_writes_lost += runs[k].end - runs[k].begin;
    lose_origins(runs[k].begin, runs[k].end);
    all_written = false;
  }
  return all_written;
}

// A QP's first lost write is where its NAK goes; later ones of the same QP add nothing.
void ProcessDma::lose_origins(std::size_t begin, std::size_t end) {
  for (std::size_t i = begin; i < end; ++i) {
    const std::optional<WriteOrigin>& origin = queue_[i].origin;
    if (!origin) continue;
    const bool known = std::any_of(lost_origins_.begin(), lost_origins_.end(),
                                   [&](const WriteOrigin& o) { return o.qpn == origin->qpn; });
    if (!known) lost_origins_.push_back(*origin);
  }
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

bool ProcessDma::atomic_write(const MrFacts& mr, std::uint64_t addr, std::uint64_t value) {
  if (addr % 8 != 0) {
    ++counters_.refused;
    return false;
  }
  flush();
  return write_word(mr, addr, value);  // a local buffer: never queued, one pwrite
}

bool ProcessDma::place_writes(const MrFacts& mr) {
  const bool none_lost = flush();
  const std::optional<DmaTarget> target = table_.dma_target(mr, mr.base, 0);
  return none_lost && target && !known_lost(target->memory);
}

bool ProcessDma::owner_gone(const MrFacts& mr) const {
  if (lost_.empty()) return false;
  const std::optional<DmaTarget> target = table_.dma_target(mr, mr.base, 0);
  return target && known_lost(target->memory);
}

}  // namespace rrdma::verbs
