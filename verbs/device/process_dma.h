// "DMA" into application processes: the engine's Dma port over pread(2)/pwrite(2) on the
// /proc/self/mem each process opened itself and handed over at open_device. Every transfer is
// first checked against the MR table (the registration must still stand with the same keys,
// and the range must lie inside it as the table knows it), so whatever MrFacts reach this
// class, it only ever touches memory that its owner registered.
//
// Why not process_vm_readv/writev on the client's pid, as before: the daemon is root, so the
// kernel's ptrace check always passed, and a pid is not an address space. A client that
// forked and exec'd a setuid-root program at the registered pid had the daemon read and
// write that program's memory (issue 16). A mem file is bound to the address space that
// opened it: after an exec or an exit a transfer moves nothing (0 bytes), and the daemon needs
// no ptrace right at all. docs/SECURITY.md has the threat model, docs/VERBS_MEMORY.md the
// costs.
#pragma once

#include <sys/types.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "rocev2/engine/ports.h"
#include "verbs/device/address_layout.h"
#include "verbs/device/dma_thread.h"
#include "verbs/device/mr_table.h"

namespace rrdma::verbs {

// Why transfers failed, for the daemon's stats and for tests. Each failed call counts once.
struct DmaCounters {
  std::uint64_t transfers = 0;     // calls that moved every byte asked for
  std::uint64_t refused = 0;       // the MR table did not vouch for the range; no syscall made
  std::uint64_t process_gone = 0;  // the address space is gone (exit or exec): 0 bytes moved
  std::uint64_t faults = 0;        // EIO: the range is not mapped
  std::uint64_t partial = 0;       // fewer bytes moved than asked (a hole inside the range)
  std::uint64_t other_errors = 0;  // ENOMEM, EBADF, ...
  // Reads of a gather that named the same bytes as the piece before them (perftest posts one
  // buffer many times): copied from that piece instead of read again.
  std::uint64_t reads_shared = 0;
  // Write combining (combine_writes_from): writes queued, pwritev calls that
  // carried them, and queued writes lost because their call failed at flush().
  std::uint64_t writes_queued = 0;
  std::uint64_t combined_calls = 0;
  std::uint64_t queued_writes_lost = 0;
  // Writes refused because the owner may not write there itself (read-only or unmapped in
  // its maps, address_layout.h): no byte moved. Counted once per refused call or run.
  std::uint64_t not_writable = 0;
  // Calls that did not return within the DMA thread's bound (memory that never answers): the
  // memory is reported lost and its client evicted.
  std::uint64_t stalled = 0;
};

// Which received packet a queued write came from, so that a write lost at flush() is
// answered with a NAK instead of the ACK the batch would send (Nic::fail_lost_writes).
struct WriteOrigin {
  std::uint32_t qpn = 0;
  std::uint32_t psn = 0;
};

using rocev2::DmaPiece;

// What a one-byte read at address 0 of a memory handle says. No process maps that page: a
// living address space's mem file fails the read with EIO, a gone one (exit, exec) moves 0
// bytes; anything else is not a mem file we can judge. Used to accept a handle at
// open_device and to look at it once a second.
enum class AddressSpace : std::uint8_t { Alive, Gone, Unknown };
AddressSpace probe_address_space(int memory);

class ProcessDma final : public rocev2::Dma {
 public:
  // With `thread`, every system call on client memory runs there and the caller waits at
  // most its bound (dma_thread.h); a call that does not return in time fails, and its memory
  // is reported lost (stalled). Without, calls run on the caller's thread (tests, tools).
  explicit ProcessDma(const MrTable& table, DmaThread* thread = nullptr) : table_(table), thread_(thread) {}

  // The engine's port. False / nullopt when the table refuses the range or the memory
  // cannot be reached; a transfer that moves fewer bytes than asked is a failure too.
  bool read(const rocev2::MrFacts& mr, std::uint64_t addr, std::span<std::uint8_t> out) override;
  bool write(const rocev2::MrFacts& mr, std::uint64_t addr,
             std::span<const std::uint8_t> in) override;
  // Read 8 bytes, compute, write 8 bytes. Atomic with respect to other atomics of this
  // daemon (one thread runs every QP), NOT with respect to the owning process's own CPU
  // stores to the same word: see docs/VERBS_MEMORY.md.
  std::optional<std::uint64_t> compare_swap(const rocev2::MrFacts& mr, std::uint64_t addr,
                                            std::uint64_t compare, std::uint64_t swap) override;
  std::optional<std::uint64_t> fetch_add(const rocev2::MrFacts& mr, std::uint64_t addr,
                                         std::uint64_t add) override;
  // ATOMIC_WRITE: the queued writes first (the annex orders it after them), then the 8 bytes
  // in one pwrite of their own, never combined: /proc/PID/mem copies a write through a
  // bounce buffer in pieces that start at the write's offset, so 8 aligned bytes sharing a
  // pwritev with an unaligned run before them could be split in two copies. Alone, they are
  // one copy into one page; whether the owner's CPUs can see a torn word mid-copy is the
  // kernel's memcpy's business (docs/VERBS_MEMORY.md).
  bool atomic_write(const rocev2::MrFacts& mr, std::uint64_t addr, std::uint64_t value) override;
  // FLUSH: the queued writes land (pwrite returns once the bytes are in the owner's pages,
  // which are then coherent for its CPUs); true if none was lost and `mr`'s address space
  // still stands. There is no persistent memory behind any MR (docs/VERBS_MEMORY.md).
  bool place_writes(const rocev2::MrFacts& mr) override;
  // The address space behind `mr` was found gone (its owner exited or exec'd) by a transfer
  // or a probe, and its client is not yet evicted.
  bool owner_gone(const rocev2::MrFacts& mr) const override;

  // Scatter/gather: `out` / `in` is the concatenation of `pieces` (its size must be their
  // total length). Every piece is checked before the first byte moves; pieces that continue
  // each other in one address space go to the kernel in one call.
  bool read_gather(std::span<const DmaPiece> pieces, std::span<std::uint8_t> out) override;
  bool write_scatter(std::span<const DmaPiece> pieces, std::span<const std::uint8_t> in);

  // Write combining, for the daemon's receive path: from now on a write() whose source bytes
  // lie inside `stable` is checked against the table and queued, and the queue goes to the
  // kernel at flush(), consecutive writes into one contiguous range in one pwritev. The
  // caller promises that `stable` keeps its bytes until it calls flush(), and calls flush()
  // before anything may observe the written memory (a completion, an ACK, a deregistration).
  // Every other transfer flushes the queue first, so the order of writes and reads holds.
  void combine_writes_from(std::span<const std::uint8_t> stable);
  // Performs the queued writes. False if any was lost (counted in queued_writes_lost): the
  // process died or unmapped the range after write() vouched for it, which a hardware NIC
  // would not notice either (its DMA goes to the pages pinned at registration).
  bool flush();
  std::size_t queued_writes() const { return queue_.size(); }
  // The packet the next queued writes come from (the Nic sets it before handing a received
  // packet to the engine); nullopt: they come from no packet that is acknowledged.
  void set_origin(std::optional<WriteOrigin> origin) { origin_ = origin; }
  // The packets whose queued writes were lost since the last call, the first lost one per
  // QP first (its PSN is where the NAK goes).
  std::vector<WriteOrigin> take_lost_origins() { return std::exchange(lost_origins_, {}); }
  // True while a write queued for a packet of `qpn` is lost and not yet taken.
  bool write_lost_for(std::uint32_t qpn) const {
    return !lost_origins_.empty() && std::any_of(lost_origins_.begin(), lost_origins_.end(),
                                                 [qpn](const WriteOrigin& o) { return o.qpn == qpn; });
  }

  // The memory handles whose address space was found gone since the last call (its process
  // exited or exec'd): the owner's resources must go (Nic::evict_lost_clients).
  std::vector<int> take_lost_memories() { return std::exchange(lost_, {}); }
  // Asks the kernel whether the handle's address space still lives, without touching it
  // (probe_address_space). A gone one is reported as lost.
  bool still_alive(int memory);
  // True once a transfer found this handle's address space gone, until take_lost_memories().
  bool known_lost(int memory) const;
  bool any_lost() const { return !lost_.empty(); }
  // The handle is being closed: its number may name another client's handle next.
  void forget_memory(int memory) { std::erase(lost_, memory); }
  // probe_address_space(memory), on the DMA thread: Unknown if it did not answer in time.
  AddressSpace probe(int memory);
  // writable_range over the target's maps, on the DMA thread: Unknown if it did not answer.
  Writable writable(const DmaTarget& target, std::uint64_t length);
  // Closes a client's descriptor (memory handle, maps) now, or once an abandoned call that
  // uses it has returned, so that its number is not reused under that call.
  void close_client_fd(int fd);

  const DmaCounters& counters() const { return counters_; }

 private:
  enum class Direction : std::uint8_t { FromProcess, ToProcess };
  struct QueuedWrite {
    DmaTarget target;
    const std::uint8_t* source = nullptr;
    std::size_t length = 0;
    std::optional<WriteOrigin> origin;
  };
  bool transfer(Direction direction, std::span<const DmaPiece> pieces, std::uint8_t* local,
                std::size_t size);
  bool move(Direction direction, const DmaTarget& target, std::uint8_t* local, std::size_t length);
  // Runs `call` (which returns bytes moved, or -1 with errno) on the DMA thread, or here.
  ssize_t call_on_memory(const DmaTarget& target, std::function<ssize_t()> call);
  bool finish_write(const DmaTarget& target, ssize_t moved, std::size_t asked);
  bool check_moved(int memory, ssize_t moved, std::size_t asked);
  bool owner_may_write(const DmaTarget& target, std::uint64_t length);
  void lose_origins(std::size_t begin, std::size_t end);
  bool inside_stable(std::span<const std::uint8_t> bytes) const;
  bool queue_write(const rocev2::MrFacts& mr, std::uint64_t addr, std::span<const std::uint8_t> in);
  struct Run {
    std::size_t begin = 0;  // queue_[begin, end): one contiguous range of one address space
    std::size_t end = 0;
  };
  bool flush_memory(const std::vector<Run>& runs);
  std::optional<std::uint64_t> read_word(const rocev2::MrFacts& mr, std::uint64_t addr);
  bool write_word(const rocev2::MrFacts& mr, std::uint64_t addr, std::uint64_t value);

  const MrTable& table_;
  DmaThread* thread_ = nullptr;
  DmaCounters counters_;
  std::span<const std::uint8_t> stable_;
  std::vector<QueuedWrite> queue_;
  std::vector<int> lost_;
  std::optional<WriteOrigin> origin_;
  std::vector<WriteOrigin> lost_origins_;
};

}  // namespace rrdma::verbs
