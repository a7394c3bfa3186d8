// Internal: checks of local and remote memory access (IBA ch. 10: key, PD, access rights,
// bounds) and scatter/gather copies through the Dma port.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include <boost/container/small_vector.hpp>

#include "rocev2/engine/ports.h"

namespace rrdma::rocev2 {

struct ResolvedSge {
  MrFacts mr;
  std::uint64_t addr = 0;
  std::uint32_t length = 0;
};
// The SGEs of a WQE, resolved: kept in the WQE, without an allocation for one or two.
using ResolvedSges = boost::container::small_vector<ResolvedSge, 2>;

// True if [addr, addr + length) lies inside the region; overflow-safe.
bool range_inside(const MrFacts& mr, std::uint64_t addr, std::uint64_t length);

enum class LocalCheck : std::uint8_t { Ok, ProtectionError, LengthError };

// Resolves every SGE through its L_Key: the MR must exist, belong to `pd`, contain the
// range and, if `need_write`, grant local write.
LocalCheck resolve_sges(const MrTable& mrs, std::uint32_t pd, const SgeList& sges,
                        bool need_write, ResolvedSges& out);

std::uint64_t total_length(const ResolvedSges& sges);

// Appends the pieces of [offset, offset + size) of the concatenation of `sges` to `out`
// (a gather list for Dma::read_gather).
bool append_pieces(const ResolvedSges& sges, std::uint64_t offset, std::size_t size,
                   std::vector<DmaPiece>& out);
// Copies a byte span into the concatenation of `sges`, starting `offset` bytes in.
bool scatter(Dma& dma, const ResolvedSges& sges, std::uint64_t offset,
             std::span<const std::uint8_t> in);

// Remote access through an R_Key arriving on QP `qpn` of `pd`: key, PD, access right and
// bounds, and for a type 2 memory window the QP it is bound to, checked before any byte moves
// (IBA ch. 10 memory protection; ch. 9 responder checks; 10.6.7.2.2 type 2 windows).
std::optional<MrFacts> check_remote(const MrTable& mrs, std::uint32_t pd, Qpn qpn, Rkey rkey,
                                    std::uint32_t access, std::uint64_t va, std::uint64_t length);

}  // namespace rrdma::rocev2
