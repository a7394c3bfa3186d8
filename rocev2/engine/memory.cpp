#include "rocev2/engine/memory.h"

#include <algorithm>
#include <cstring>

namespace rrdma::rocev2 {

bool range_inside(const MrFacts& mr, std::uint64_t addr, std::uint64_t length) {
  if (addr < mr.base) return false;
  const std::uint64_t offset = addr - mr.base;
  return offset <= mr.length && length <= mr.length - offset;
}

LocalCheck resolve_sges(const MrTable& mrs, std::uint32_t pd, const SgeList& sges,
                        bool need_write, ResolvedSges& out) {
  out.clear();
  std::uint64_t total = 0;
  for (const Sge& sge : sges) {
    if (sge.length == 0) continue;
    const std::optional<MrFacts> mr = mrs.find_lkey(sge.lkey);
    if (!mr || mr->pd != pd || !range_inside(*mr, sge.addr, sge.length)) return LocalCheck::ProtectionError;
    if (need_write && (mr->access & access::kLocalWrite) == 0) return LocalCheck::ProtectionError;
    total += sge.length;
    // A message is at most 2^31 bytes (IBA ch. 9: RETH DMA length).
    if (total > (std::uint64_t{1} << 31)) return LocalCheck::LengthError;
    out.push_back({*mr, sge.addr, sge.length});
  }
  return LocalCheck::Ok;
}

std::uint64_t total_length(const ResolvedSges& sges) {
  std::uint64_t n = 0;
  for (const ResolvedSge& s : sges) n += s.length;
  return n;
}

namespace {

// Calls fn(sge, address, span offset, length) for each piece of [offset, offset + size).
template <typename Fn>
bool for_each_piece(const ResolvedSges& sges, std::uint64_t offset, std::size_t size,
                    Fn fn) {
  std::size_t done = 0;
  for (const ResolvedSge& s : sges) {
    if (done == size) break;
    if (offset >= s.length) {
      offset -= s.length;
      continue;
    }
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(s.length - offset, size - done));
    if (!fn(s, s.addr + offset, done, n)) return false;
    done += n;
    offset = 0;
  }
  return done == size;
}

}  // namespace

bool Dma::atomic_write(const MrFacts& mr, std::uint64_t addr, std::uint64_t value) {
  std::uint8_t bytes[8];
  std::memcpy(bytes, &value, sizeof bytes);
  return write(mr, addr, bytes);
}

bool Dma::place_writes(const MrFacts&) { return true; }

bool Dma::owner_gone(const MrFacts&) const { return false; }

bool Dma::read_gather(std::span<const DmaPiece> pieces, std::span<std::uint8_t> out) {
  std::size_t at = 0;
  for (const DmaPiece& piece : pieces) {
    if (piece.length > out.size() - at) return false;
    const std::size_t n = static_cast<std::size_t>(piece.length);
    if (!read(piece.mr, piece.addr, out.subspan(at, n))) return false;
    at += n;
  }
  return at == out.size();
}

bool append_pieces(const ResolvedSges& sges, std::uint64_t offset, std::size_t size,
                   std::vector<DmaPiece>& out) {
  return for_each_piece(sges, offset, size, [&](const ResolvedSge& s, std::uint64_t addr, std::size_t,
                                                std::size_t n) {
    out.push_back({s.mr, addr, n});
    return true;
  });
}

bool scatter(Dma& dma, const ResolvedSges& sges, std::uint64_t offset,
             std::span<const std::uint8_t> in) {
  return for_each_piece(sges, offset, in.size(), [&](const ResolvedSge& s, std::uint64_t addr,
                                                     std::size_t at, std::size_t n) {
    return dma.write(s.mr, addr, in.subspan(at, n));
  });
}

std::optional<MrFacts> check_remote(const MrTable& mrs, std::uint32_t pd, Qpn qpn, Rkey rkey,
                                    std::uint32_t access, std::uint64_t va, std::uint64_t length) {
  const std::optional<MrFacts> mr = mrs.find_rkey(rkey);
  if (!mr || mr->pd != pd || (mr->access & access) != access) return std::nullopt;
  if (mr->bound_qp && *mr->bound_qp != qpn) return std::nullopt;
  if (!range_inside(*mr, va, length)) return std::nullopt;
  return mr;
}

}  // namespace rrdma::rocev2
