// Runs in the application process (the shim, librrdma_ucma.so).
#include "verbs/app/ucma/device_nodes.h"

#include <fcntl.h>
#include <sys/sysmacros.h>

#include <cstdio>
#include <cstring>

#include "verbs/app/ucma/real_libc.h"

namespace rrdma::ucma_shim {
namespace {

constexpr char kNodePrefix[] = "/dev/infiniband/uverbs";
constexpr char kDevNull[] = "/dev/null";

// The decimal number that is all of `text`, or nullopt.
std::optional<unsigned> parse_index(const char* text) {
  const std::size_t length = std::strlen(text);
  if (length == 0 || length > 3 || (text[0] == '0' && length > 1)) return std::nullopt;
  unsigned value = 0;
  for (std::size_t i = 0; i < length; ++i) {
    if (text[i] < '0' || text[i] > '9') return std::nullopt;
    value = value * 10 + static_cast<unsigned>(text[i] - '0');
  }
  return value;
}

bool view_has(unsigned n) {
  char class_entry[64];
  std::snprintf(class_entry, sizeof class_entry, "/sys/class/infiniband_verbs/uverbs%u", n);
  struct stat st {};
  return real::fstatat(AT_FDCWD, class_entry, &st, 0) == 0 && S_ISDIR(st.st_mode);
}

dev_t node_number(unsigned n) { return makedev(kUverbsMajor, kUverbsBaseMinor + n); }

// An inode number no real node of /dev is likely to have, distinct per N.
ino_t node_inode(unsigned n) { return static_cast<ino_t>(0x7276'0000u + n); }

template <typename Stat, typename RealStat>
void describe_with(unsigned n, Stat* buf, RealStat real_stat) {
  if (real_stat(AT_FDCWD, kDevNull, buf, 0) != 0) std::memset(buf, 0, sizeof *buf);
  buf->st_mode = S_IFCHR | 0666;
  buf->st_rdev = node_number(n);
  buf->st_ino = node_inode(n);
  buf->st_nlink = 1;
  buf->st_size = 0;
}

}  // namespace

std::optional<unsigned> uverbs_node(const char* path) {
  if (path == nullptr || std::strncmp(path, kNodePrefix, sizeof kNodePrefix - 1) != 0) return std::nullopt;
  const auto n = parse_index(path + sizeof kNodePrefix - 1);
  if (!n || !view_has(*n)) return std::nullopt;
  return n;
}

void describe_node(unsigned n, struct stat* buf) { describe_with(n, buf, real::fstatat); }
void describe_node(unsigned n, struct stat64* buf) { describe_with(n, buf, real::fstatat64); }

void describe_node(unsigned n, struct statx* buf) {
  if (real::statx(AT_FDCWD, kDevNull, 0, STATX_BASIC_STATS, buf) != 0) std::memset(buf, 0, sizeof *buf);
  buf->stx_mask |= STATX_TYPE | STATX_MODE | STATX_INO | STATX_NLINK | STATX_SIZE;
  buf->stx_mode = S_IFCHR | 0666;
  buf->stx_rdev_major = kUverbsMajor;
  buf->stx_rdev_minor = kUverbsBaseMinor + n;
  buf->stx_ino = node_inode(n);
  buf->stx_nlink = 1;
  buf->stx_size = 0;
}

}  // namespace rrdma::ucma_shim
