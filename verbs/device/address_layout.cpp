#include "verbs/device/address_layout.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>
#include <atomic>
#include <charconv>
#include <string>

namespace rrdma::verbs {

namespace {

// <linux/fs.h> of Linux 6.11 (Debian 12's headers predate it): the ABI is fixed by its size.
struct ProcmapQuery {
  std::uint64_t size;
  std::uint64_t query_flags;
  std::uint64_t query_addr;
  std::uint64_t vma_start;
  std::uint64_t vma_end;
  std::uint64_t vma_flags;
  std::uint64_t vma_page_size;
  std::uint64_t vma_offset;
  std::uint64_t inode;
  std::uint32_t dev_major;
  std::uint32_t dev_minor;
  std::uint32_t vma_name_size;
  std::uint32_t build_id_size;
  std::uint64_t vma_name_addr;
  std::uint64_t build_id_addr;
};
static_assert(sizeof(ProcmapQuery) == 104);
constexpr unsigned long kProcmapQuery = _IOWR('f', 17, ProcmapQuery);
constexpr std::uint64_t kQueryVmaWritable = 0x02;
// Reading a maps text: no client has a layout this large that matters (the range check
// gives No for what lies beyond).
constexpr std::size_t kMaxMapsText = std::size_t{4} << 20;

// Whether the kernel knows PROCMAP_QUERY; learnt at the first answer that says.
enum class Query : std::uint8_t { Untried, Works, Missing };
std::atomic<Query> procmap_query{Query::Untried};

// One ioctl per mapping: the mapping that covers `at`, if it is writable.
Writable query_range(int maps, std::uint64_t address, std::uint64_t end) {
  std::uint64_t at = address;
  while (at < end) {
    ProcmapQuery q{};
    q.size = sizeof q;
    q.query_flags = kQueryVmaWritable;
    q.query_addr = at;
    if (::ioctl(maps, kProcmapQuery, &q) != 0) {
      if (errno == ENOENT) return Writable::No;  // unmapped, or mapped without write permission
      if (errno == ESRCH) return Writable::Gone;  // no live mm behind the file
      if (errno == ENOTTY || errno == EINVAL) procmap_query = Query::Missing;
      return Writable::Unknown;
    }
    procmap_query = Query::Works;
    if (q.vma_end <= at) return Writable::Unknown;  // cannot happen; never loop on it
    at = q.vma_end;
  }
  return Writable::Yes;
}

Writable text_range(int maps, std::uint64_t address, std::uint64_t length) {
  std::string text;
  char chunk[16384];
  for (;;) {
    const ssize_t n = ::pread(maps, chunk, sizeof chunk, static_cast<off_t>(text.size()));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Writable::Unknown;
    if (n == 0) break;
    text.append(chunk, static_cast<std::size_t>(n));
    if (text.size() > kMaxMapsText) break;
  }
  if (text.empty()) return Writable::Gone;  // no living address space maps nothing
  return writable_in_maps_text(text, address, length);
}

bool parse_hex(std::string_view text, std::uint64_t& value) {
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value, 16);
  return error == std::errc{} && end == text.data() + text.size() && !text.empty();
}

struct MapsLine {
  std::uint64_t start = 0;
  std::uint64_t end = 0;
  bool writable = false;
};

// "start-end perms ...": false for anything else.
bool parse_line(std::string_view line, MapsLine& out) {
  const std::size_t dash = line.find('-');
  const std::size_t space = line.find(' ');
  if (dash == std::string_view::npos || space == std::string_view::npos || dash > space) return false;
  if (!parse_hex(line.substr(0, dash), out.start) || !parse_hex(line.substr(dash + 1, space - dash - 1), out.end))
    return false;
  if (out.end <= out.start || line.size() < space + 3) return false;
  out.writable = line[space + 2] == 'w';
  return true;
}

}  // namespace

Writable writable_in_maps_text(std::string_view text, std::uint64_t address, std::uint64_t length) {
  if (length == 0) return Writable::Yes;
  if (address > UINT64_MAX - length) return Writable::No;
  const std::uint64_t end = address + length;
  std::uint64_t at = address;
  while (!text.empty() && at < end) {
    const std::size_t newline = text.find('\n');
    const std::string_view line = text.substr(0, newline);
    text = newline == std::string_view::npos ? std::string_view{} : text.substr(newline + 1);
    MapsLine m;
    if (!parse_line(line, m) || m.end <= at) continue;
    if (m.start > at || !m.writable) return Writable::No;  // a hole before it, or read-only
    at = m.end;
  }
  return at >= end ? Writable::Yes : Writable::No;
}

Writable writable_range(int maps, std::uint64_t address, std::uint64_t length) {
  if (length == 0) return Writable::Yes;
  if (maps < 0) return Writable::Unknown;
  if (address > UINT64_MAX - length) return Writable::No;
  if (procmap_query != Query::Missing) {
    const Writable answer = query_range(maps, address, address + length);
    if (procmap_query != Query::Missing) return answer;
  }
  return text_range(maps, address, length);
}

}  // namespace rrdma::verbs
