// What a client process may write: the daemon's DMA goes through the client's
// /proc/self/mem, and the kernel's mem file writes with FOLL_FORCE (as a debugger plants a
// breakpoint), so a write into a read-only private page succeeds by copy-on-write. Hardware,
// and rdma_rxe, reach memory through pages pinned for writing at registration, which fails
// (EFAULT) on a read-only mapping. To keep that promise the daemon asks the client's
// /proc/PID/maps, before registering a region that grants writes and before every DMA write,
// whether the range lies in mappings the owner itself may write (VM_WRITE).
// docs/VERBS_MEMORY.md ("Writes only where the owner may write") has the choice and its cost.
#pragma once

#include <cstdint>
#include <string_view>

namespace rrdma::verbs {

enum class Writable : std::uint8_t { Yes, No, Unknown, Gone };

// [address, address + length) against the maps file `maps` (opened on the client's
// /proc/PID/maps; it stays bound to the address space it was opened on). One PROCMAP_QUERY
// ioctl per mapping the range crosses (Linux 6.11+); on an older kernel the text is read and
// parsed. Yes only if every byte lies in a mapping with the write permission; No when some
// byte is unmapped or read-only; Gone when the address space the file was opened on is gone
// (its process exited or exec'd: the ioctl answers ESRCH, the text is empty); Unknown when the
// file cannot say otherwise (not a maps file). length 0 is Yes.
Writable writable_range(int maps, std::uint64_t address, std::uint64_t length);

// The same question against the text of a maps file ("start-end perms offset dev inode
// path" lines, ascending). Pure, for tests and the fallback; lines it cannot parse are
// skipped, so a range they would have covered is a hole (No).
Writable writable_in_maps_text(std::string_view text, std::uint64_t address, std::uint64_t length);

}  // namespace rrdma::verbs
