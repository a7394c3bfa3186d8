// Runs in the application process (the rdma_cm shim, librrdma_ucma.so).
//
// The C library functions librdmacm reaches the kernel's ucma file through, taken over for
// the one path /dev/infiniband/rdma_cm and the descriptors opened on it; every other call
// goes on to the real function untouched, after one comparison or one bit test. Why each is
// here (docs/RDMA_CM_RESEARCH.md, 1.5):
//   open*, __open*_2     librdmacm's open_cdev opens the path (fortified builds call the _2s);
//   fstat*, __fxstat*,   open_cdev insists on S_ISCHR; older binaries call __fxstat, newer
//   fstatat*, statx      code may ask with AT_EMPTY_PATH;
//   write                each command is one write();
//   close, dup, dup2/3   keep the descriptor bitmap right when numbers are closed or reused;
//   socket               NETLINK_RDMA refused, so librdmacm takes the ABI from sysfs (or
//                        assumes 4) with no device number to compare, and the kernel loads no
//                        RDMA module on our behalf.
//   stat*, lstat*,       /dev/infiniband/uverbsN of the sysfs view exists as a character
//   access, faccessat,   device, and opening it says ENXIO (device_nodes.h: UCX checks the
//   euidaccess, and the  node before it takes a device); asked only after the real call
//   path forms of the    found nothing there.
//   fstatat*/statx/open*
//   getifaddrs,          each vnic named in RRDMA_INTERFACES appended as an interface of its
//   freeifaddrs          own (interfaces.h: libfabric's verbs provider finds RDMA devices so).
// A descriptor made by fcntl(F_DUPFD) is not tracked: a write on it reaches the daemon's end
// of the channel as bytes, which the daemon discards.

// The definitions below must be the plain symbols, not fortified inlines or 64-bit-offset
// redirections of them.
#undef _FORTIFY_SOURCE
#undef _FILE_OFFSET_BITS

#include <fcntl.h>
#include <ifaddrs.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "verbs/app/ucma/channel.h"
#include "verbs/app/ucma/daemon_link.h"
#include "verbs/app/ucma/device_nodes.h"
#include "verbs/app/ucma/fd_table.h"
#include "verbs/app/ucma/interfaces.h"
#include "verbs/app/ucma/real_libc.h"
#include "verbs/contract/ucma_protocol.h"

#define RRDMA_SHIM_EXPORT extern "C" __attribute__((visibility("default")))

// <linux/netlink.h>'s NETLINK_RDMA, without pulling the kernel header in.
constexpr int kNetlinkRdma = 20;

namespace rrdma::ucma_shim {
namespace {

bool is_device_path(const char* path) { return path != nullptr && std::strcmp(path, verbs::ucma::kDevicePath) == 0; }

bool needs_mode(int flags) { return (flags & O_CREAT) != 0 || (flags & O_TMPFILE) == O_TMPFILE; }

int open_device(int flags) {
  try {
    return open_channel(flags);
  } catch (...) {  // std::bad_alloc: nothing may unwind into the C caller
    errno = ENOMEM;
    return -1;
  }
}

ssize_t write_channel(int fd, const void* buffer, std::size_t length) {
  const auto channel = verified_channel(fd);
  if (!channel) return real::write(fd, buffer, length);
  try {
    return write_command(fd, *channel, buffer, length);
  } catch (...) {
    errno = ENOMEM;
    return -1;
  }
}

// What librdmacm checks of the device node: a character device, mode 0666 as udev makes it,
// no device number (it compares one only when netlink gave it one, which we refuse).
template <typename Stat>
int disguise(int fd, int result, Stat* st) {
  if (result == 0 && st != nullptr && maybe_channel(fd) && channel_matching(fd, st->st_dev, st->st_ino)) {
    st->st_mode = S_IFCHR | 0666;
    st->st_rdev = 0;
  }
  return result;
}

bool is_empty_path(const char* path, int flags) { return (flags & AT_EMPTY_PATH) != 0 && (path == nullptr || *path == '\0'); }

int statx_channel(int fd, int flags, unsigned int mask, struct statx* buf) {
  const int result = real::statx(fd, "", flags, mask | STATX_TYPE | STATX_MODE | STATX_INO, buf);
  if (result != 0) return result;
  if (channel_matching(fd, makedev(buf->stx_dev_major, buf->stx_dev_minor), buf->stx_ino)) {
    buf->stx_mode = S_IFCHR | 0666;
    buf->stx_rdev_major = 0;
    buf->stx_rdev_minor = 0;
  }
  return 0;
}

// After a real call on `path` failed: is the missing path a uverbs node of the sysfs view?
// errno is the real call's again when it is not.
std::optional<unsigned> missing_node(const char* path) {
  const int error = errno;
  if (error != ENOENT) return std::nullopt;
  const auto node = uverbs_node(path);
  errno = error;
  return node;
}

// A stat-like call's result, with a missing uverbs node described.
template <typename Stat>
int stat_or_node(int result, const char* path, Stat* buf) {
  if (result == 0 || buf == nullptr) return result;
  const auto node = missing_node(path);
  if (!node) return result;
  describe_node(*node, buf);
  return 0;
}

// An access-like call's result: a uverbs node may be read and written by anyone, not executed.
int access_or_node(int result, const char* path, int mode) {
  if (result == 0 || !missing_node(path)) return result;
  if ((mode & X_OK) != 0) {
    errno = EACCES;
    return -1;
  }
  return 0;
}

// An open's result: a uverbs node has no driver behind it.
int open_or_node(int result, const char* path) {
  if (result < 0 && missing_node(path)) errno = ENXIO;
  return result;
}

// The vnics of RRDMA_INTERFACES, after the C library's interfaces in `*list`.
void append_vnics(ifaddrs** list) {
  const char* text = std::getenv(kInterfacesVariable);
  if (text == nullptr || *text == '\0') return;
  try {
    ifaddrs* vnics = make_entries(parse_interfaces(text));
    if (vnics == nullptr) return;
    ifaddrs** tail = list;
    while (*tail != nullptr) tail = &(*tail)->ifa_next;
    *tail = vnics;
  } catch (...) {  // std::bad_alloc: the list stays the C library's
  }
}

// Frees our block (the tail of the list, or all of it) and gives the rest to the C library.
void free_with_vnics(ifaddrs* list) {
  if (is_vnic_entry(list)) {
    std::free(list);
    return;
  }
  for (ifaddrs* entry = list; entry != nullptr; entry = entry->ifa_next) {
    if (is_vnic_entry(entry->ifa_next)) {
      std::free(entry->ifa_next);
      entry->ifa_next = nullptr;
      break;
    }
  }
  real::freeifaddrs(list);
}

__attribute__((constructor)) void start_shim() {
  real::resolve_all();
  install_fork_handlers();
}

}  // namespace
}  // namespace rrdma::ucma_shim

namespace shim = rrdma::ucma_shim;
namespace real = rrdma::ucma_shim::real;

// --- open --------------------------------------------------------------------------------

RRDMA_SHIM_EXPORT int open(const char* path, int flags, ...) {
  if (shim::is_device_path(path)) return shim::open_device(flags);
  mode_t mode = 0;
  if (shim::needs_mode(flags)) {
    va_list arguments;
    va_start(arguments, flags);
    mode = va_arg(arguments, mode_t);
    va_end(arguments);
  }
  return shim::open_or_node(real::open(path, flags, mode), path);
}

RRDMA_SHIM_EXPORT int open64(const char* path, int flags, ...) {
  if (shim::is_device_path(path)) return shim::open_device(flags);
  mode_t mode = 0;
  if (shim::needs_mode(flags)) {
    va_list arguments;
    va_start(arguments, flags);
    mode = va_arg(arguments, mode_t);
    va_end(arguments);
  }
  return shim::open_or_node(real::open64(path, flags, mode), path);
}

RRDMA_SHIM_EXPORT int openat(int dirfd, const char* path, int flags, ...) {
  if (shim::is_device_path(path)) return shim::open_device(flags);
  mode_t mode = 0;
  if (shim::needs_mode(flags)) {
    va_list arguments;
    va_start(arguments, flags);
    mode = va_arg(arguments, mode_t);
    va_end(arguments);
  }
  return shim::open_or_node(real::openat(dirfd, path, flags, mode), path);
}

RRDMA_SHIM_EXPORT int openat64(int dirfd, const char* path, int flags, ...) {
  if (shim::is_device_path(path)) return shim::open_device(flags);
  mode_t mode = 0;
  if (shim::needs_mode(flags)) {
    va_list arguments;
    va_start(arguments, flags);
    mode = va_arg(arguments, mode_t);
    va_end(arguments);
  }
  return shim::open_or_node(real::openat64(dirfd, path, flags, mode), path);
}

// The fortified entry points (_FORTIFY_SOURCE builds call these when the flags need no mode).
RRDMA_SHIM_EXPORT int __open_2(const char* path, int flags) {
  return shim::is_device_path(path) ? shim::open_device(flags) : shim::open_or_node(real::open_2(path, flags), path);
}
RRDMA_SHIM_EXPORT int __open64_2(const char* path, int flags) {
  return shim::is_device_path(path) ? shim::open_device(flags) : shim::open_or_node(real::open64_2(path, flags), path);
}
RRDMA_SHIM_EXPORT int __openat_2(int dirfd, const char* path, int flags) {
  return shim::is_device_path(path) ? shim::open_device(flags) : shim::open_or_node(real::openat_2(dirfd, path, flags), path);
}
RRDMA_SHIM_EXPORT int __openat64_2(int dirfd, const char* path, int flags) {
  return shim::is_device_path(path) ? shim::open_device(flags) : shim::open_or_node(real::openat64_2(dirfd, path, flags), path);
}

// --- stat --------------------------------------------------------------------------------

RRDMA_SHIM_EXPORT int fstat(int fd, struct stat* buf) noexcept { return shim::disguise(fd, real::fstat(fd, buf), buf); }
RRDMA_SHIM_EXPORT int fstat64(int fd, struct stat64* buf) noexcept {
  return shim::disguise(fd, real::fstat64(fd, buf), buf);
}
// The names binaries built against glibc before 2.33 call (compatibility symbols today).
RRDMA_SHIM_EXPORT int __fxstat(int version, int fd, struct stat* buf) noexcept {
  return shim::disguise(fd, real::fxstat(version, fd, buf), buf);
}
RRDMA_SHIM_EXPORT int __fxstat64(int version, int fd, struct stat64* buf) noexcept {
  return shim::disguise(fd, real::fxstat64(version, fd, buf), buf);
}
RRDMA_SHIM_EXPORT int fstatat(int dirfd, const char* path, struct stat* buf, int flags) noexcept {
  const int result = real::fstatat(dirfd, path, buf, flags);
  return shim::is_empty_path(path, flags) ? shim::disguise(dirfd, result, buf) : shim::stat_or_node(result, path, buf);
}
RRDMA_SHIM_EXPORT int fstatat64(int dirfd, const char* path, struct stat64* buf, int flags) noexcept {
  const int result = real::fstatat64(dirfd, path, buf, flags);
  return shim::is_empty_path(path, flags) ? shim::disguise(dirfd, result, buf) : shim::stat_or_node(result, path, buf);
}
RRDMA_SHIM_EXPORT int statx(int dirfd, const char* path, int flags, unsigned int mask, struct statx* buf) noexcept {
  if (shim::is_empty_path(path, flags) && shim::maybe_channel(dirfd)) return shim::statx_channel(dirfd, flags, mask, buf);
  return shim::stat_or_node(real::statx(dirfd, path, flags, mask, buf), path, buf);
}

// By path: the uverbs nodes of the sysfs view (device_nodes.h).
RRDMA_SHIM_EXPORT int stat(const char* path, struct stat* buf) noexcept {
  return shim::stat_or_node(real::stat(path, buf), path, buf);
}
RRDMA_SHIM_EXPORT int stat64(const char* path, struct stat64* buf) noexcept {
  return shim::stat_or_node(real::stat64(path, buf), path, buf);
}
RRDMA_SHIM_EXPORT int lstat(const char* path, struct stat* buf) noexcept {
  return shim::stat_or_node(real::lstat(path, buf), path, buf);
}
RRDMA_SHIM_EXPORT int lstat64(const char* path, struct stat64* buf) noexcept {
  return shim::stat_or_node(real::lstat64(path, buf), path, buf);
}
RRDMA_SHIM_EXPORT int __xstat(int version, const char* path, struct stat* buf) noexcept {
  return shim::stat_or_node(real::xstat(version, path, buf), path, buf);
}
RRDMA_SHIM_EXPORT int __xstat64(int version, const char* path, struct stat64* buf) noexcept {
  return shim::stat_or_node(real::xstat64(version, path, buf), path, buf);
}
RRDMA_SHIM_EXPORT int __lxstat(int version, const char* path, struct stat* buf) noexcept {
  return shim::stat_or_node(real::lxstat(version, path, buf), path, buf);
}
RRDMA_SHIM_EXPORT int __lxstat64(int version, const char* path, struct stat64* buf) noexcept {
  return shim::stat_or_node(real::lxstat64(version, path, buf), path, buf);
}

// --- access ------------------------------------------------------------------------------

RRDMA_SHIM_EXPORT int access(const char* path, int mode) noexcept {
  return shim::access_or_node(real::access(path, mode), path, mode);
}
RRDMA_SHIM_EXPORT int faccessat(int dirfd, const char* path, int mode, int flags) noexcept {
  return shim::access_or_node(real::faccessat(dirfd, path, mode, flags), path, mode);
}
RRDMA_SHIM_EXPORT int euidaccess(const char* path, int mode) noexcept {
  return shim::access_or_node(real::euidaccess(path, mode), path, mode);
}
RRDMA_SHIM_EXPORT int eaccess(const char* path, int mode) noexcept {
  return shim::access_or_node(real::euidaccess(path, mode), path, mode);
}

// --- interfaces ----------------------------------------------------------------------------

RRDMA_SHIM_EXPORT int getifaddrs(struct ifaddrs** list) noexcept {
  const int result = real::getifaddrs(list);
  if (result == 0 && list != nullptr) shim::append_vnics(list);
  return result;
}
RRDMA_SHIM_EXPORT void freeifaddrs(struct ifaddrs* list) noexcept { shim::free_with_vnics(list); }

// --- write, close, dup -----------------------------------------------------------------------

RRDMA_SHIM_EXPORT ssize_t write(int fd, const void* buffer, std::size_t length) {
  if (__builtin_expect(!shim::maybe_channel(fd), 1)) return real::write(fd, buffer, length);
  return shim::write_channel(fd, buffer, length);
}

// The bit is cleared before the number is released: once closed, another thread's open may
// get the same number for a new channel, whose bit must stay.
RRDMA_SHIM_EXPORT int close(int fd) {
  shim::forget_channel(fd);
  return real::close(fd);
}

RRDMA_SHIM_EXPORT int dup(int fd) noexcept {
  const int copy = real::dup(fd);
  if (copy >= 0 && (shim::maybe_channel(fd) || shim::maybe_channel(copy))) shim::copy_channel(fd, copy);
  return copy;
}

RRDMA_SHIM_EXPORT int dup2(int from, int to) noexcept {
  const int result = real::dup2(from, to);
  if (result >= 0 && (shim::maybe_channel(from) || shim::maybe_channel(to))) shim::copy_channel(from, to);
  return result;
}

RRDMA_SHIM_EXPORT int dup3(int from, int to, int flags) noexcept {
  const int result = real::dup3(from, to, flags);
  if (result >= 0 && (shim::maybe_channel(from) || shim::maybe_channel(to))) shim::copy_channel(from, to);
  return result;
}

// --- socket ----------------------------------------------------------------------------------

RRDMA_SHIM_EXPORT int socket(int domain, int type, int protocol) noexcept {
  if (domain == AF_NETLINK && protocol == kNetlinkRdma) {
    errno = EPROTONOSUPPORT;
    return -1;
  }
  return real::socket(domain, type, protocol);
}
