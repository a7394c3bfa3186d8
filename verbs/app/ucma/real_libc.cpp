// Runs in the application process (the rdma_cm shim, librrdma_ucma.so).
#include "verbs/app/ucma/real_libc.h"

#include <dlfcn.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

namespace rrdma::ucma_shim::real {
namespace {

// One looked-up function. Constant-initialised: an interposer may run before any
// constructor of ours, and finds it ready (an atomic rather than a function-local static,
// whose guard would deadlock if dlsym re-entered the interposer).
template <typename Fn>
struct Next {
  const char* name;
  std::atomic<void*> address{nullptr};

  Fn get() {
    void* found = address.load(std::memory_order_acquire);
    if (found == nullptr) {
      found = ::dlsym(RTLD_NEXT, name);
      address.store(found, std::memory_order_release);
    }
    return reinterpret_cast<Fn>(found);
  }
};

// Calls the next definition, or fails with ENOSYS when there is none (a C library without
// that symbol, e.g. a future one without the __fxstat compatibility names).
template <typename Fn, typename... Args>
auto call(Next<Fn>& next, Args... args) {
  const Fn fn = next.get();
  using Result = decltype(fn(args...));
  if (fn == nullptr) {
    errno = ENOSYS;
    return static_cast<Result>(-1);
  }
  return fn(args...);
}

using OpenFn = int (*)(const char*, int, ...);
using OpenatFn = int (*)(int, const char*, int, ...);
using Open2Fn = int (*)(const char*, int);
using Openat2Fn = int (*)(int, const char*, int);

constinit Next<OpenFn> g_open{"open"};
constinit Next<OpenFn> g_open64{"open64"};
constinit Next<OpenatFn> g_openat{"openat"};
constinit Next<OpenatFn> g_openat64{"openat64"};
constinit Next<Open2Fn> g_open_2{"__open_2"};
constinit Next<Open2Fn> g_open64_2{"__open64_2"};
constinit Next<Openat2Fn> g_openat_2{"__openat_2"};
constinit Next<Openat2Fn> g_openat64_2{"__openat64_2"};
constinit Next<int (*)(int, struct stat*)> g_fstat{"fstat"};
constinit Next<int (*)(int, struct stat64*)> g_fstat64{"fstat64"};
constinit Next<int (*)(int, int, struct stat*)> g_fxstat{"__fxstat"};
constinit Next<int (*)(int, int, struct stat64*)> g_fxstat64{"__fxstat64"};
constinit Next<int (*)(int, const char*, struct stat*, int)> g_fstatat{"fstatat"};
constinit Next<int (*)(int, const char*, struct stat64*, int)> g_fstatat64{"fstatat64"};
constinit Next<int (*)(int, const char*, int, unsigned int, struct statx*)> g_statx{"statx"};
constinit Next<int (*)(const char*, struct stat*)> g_stat{"stat"};
constinit Next<int (*)(const char*, struct stat64*)> g_stat64{"stat64"};
constinit Next<int (*)(const char*, struct stat*)> g_lstat{"lstat"};
constinit Next<int (*)(const char*, struct stat64*)> g_lstat64{"lstat64"};
constinit Next<int (*)(int, const char*, struct stat*)> g_xstat{"__xstat"};
constinit Next<int (*)(int, const char*, struct stat64*)> g_xstat64{"__xstat64"};
constinit Next<int (*)(int, const char*, struct stat*)> g_lxstat{"__lxstat"};
constinit Next<int (*)(int, const char*, struct stat64*)> g_lxstat64{"__lxstat64"};
constinit Next<int (*)(const char*, int)> g_access{"access"};
constinit Next<int (*)(int, const char*, int, int)> g_faccessat{"faccessat"};
constinit Next<int (*)(const char*, int)> g_euidaccess{"euidaccess"};
constinit Next<int (*)(struct ifaddrs**)> g_getifaddrs{"getifaddrs"};
constinit Next<void (*)(struct ifaddrs*)> g_freeifaddrs{"freeifaddrs"};
constinit Next<ssize_t (*)(int, const void*, std::size_t)> g_write{"write"};
constinit Next<int (*)(int)> g_close{"close"};
constinit Next<int (*)(int)> g_dup{"dup"};
constinit Next<int (*)(int, int)> g_dup2{"dup2"};
constinit Next<int (*)(int, int, int)> g_dup3{"dup3"};
constinit Next<int (*)(int, int, int)> g_socket{"socket"};

}  // namespace

int open(const char* path, int flags, mode_t mode) { return call(g_open, path, flags, mode); }
int open64(const char* path, int flags, mode_t mode) { return call(g_open64, path, flags, mode); }
int openat(int dirfd, const char* path, int flags, mode_t mode) { return call(g_openat, dirfd, path, flags, mode); }
int openat64(int dirfd, const char* path, int flags, mode_t mode) {
  return call(g_openat64, dirfd, path, flags, mode);
}
int open_2(const char* path, int flags) { return call(g_open_2, path, flags); }
int open64_2(const char* path, int flags) { return call(g_open64_2, path, flags); }
int openat_2(int dirfd, const char* path, int flags) { return call(g_openat_2, dirfd, path, flags); }
int openat64_2(int dirfd, const char* path, int flags) { return call(g_openat64_2, dirfd, path, flags); }

int fstat(int fd, struct stat* buf) { return call(g_fstat, fd, buf); }
int fstat64(int fd, struct stat64* buf) { return call(g_fstat64, fd, buf); }
int fxstat(int version, int fd, struct stat* buf) { return call(g_fxstat, version, fd, buf); }
int fxstat64(int version, int fd, struct stat64* buf) { return call(g_fxstat64, version, fd, buf); }
int fstatat(int dirfd, const char* path, struct stat* buf, int flags) { return call(g_fstatat, dirfd, path, buf, flags); }
int fstatat64(int dirfd, const char* path, struct stat64* buf, int flags) {
  return call(g_fstatat64, dirfd, path, buf, flags);
}
int statx(int dirfd, const char* path, int flags, unsigned int mask, struct statx* buf) {
  return call(g_statx, dirfd, path, flags, mask, buf);
}
int stat(const char* path, struct stat* buf) { return call(g_stat, path, buf); }
int stat64(const char* path, struct stat64* buf) { return call(g_stat64, path, buf); }
int lstat(const char* path, struct stat* buf) { return call(g_lstat, path, buf); }
int lstat64(const char* path, struct stat64* buf) { return call(g_lstat64, path, buf); }
int xstat(int version, const char* path, struct stat* buf) { return call(g_xstat, version, path, buf); }
int xstat64(int version, const char* path, struct stat64* buf) { return call(g_xstat64, version, path, buf); }
int lxstat(int version, const char* path, struct stat* buf) { return call(g_lxstat, version, path, buf); }
int lxstat64(int version, const char* path, struct stat64* buf) { return call(g_lxstat64, version, path, buf); }
int access(const char* path, int mode) { return call(g_access, path, mode); }
int faccessat(int dirfd, const char* path, int mode, int flags) { return call(g_faccessat, dirfd, path, mode, flags); }
int euidaccess(const char* path, int mode) { return call(g_euidaccess, path, mode); }
int getifaddrs(struct ifaddrs** list) { return call(g_getifaddrs, list); }
void freeifaddrs(struct ifaddrs* list) {
  if (const auto fn = g_freeifaddrs.get(); fn != nullptr) fn(list);
}

ssize_t write(int fd, const void* buf, std::size_t count) { return call(g_write, fd, buf, count); }
int close(int fd) { return call(g_close, fd); }
int dup(int fd) { return call(g_dup, fd); }
int dup2(int from, int to) { return call(g_dup2, from, to); }
int dup3(int from, int to, int flags) { return call(g_dup3, from, to, flags); }
int socket(int domain, int type, int protocol) { return call(g_socket, domain, type, protocol); }

void resolve_all() {
  g_open.get(), g_open64.get(), g_openat.get(), g_openat64.get();
  g_open_2.get(), g_open64_2.get(), g_openat_2.get(), g_openat64_2.get();
  g_fstat.get(), g_fstat64.get(), g_fxstat.get(), g_fxstat64.get();
  g_fstatat.get(), g_fstatat64.get(), g_statx.get();
  g_stat.get(), g_stat64.get(), g_lstat.get(), g_lstat64.get();
  g_xstat.get(), g_xstat64.get(), g_lxstat.get(), g_lxstat64.get();
  g_access.get(), g_faccessat.get(), g_euidaccess.get();
  g_getifaddrs.get(), g_freeifaddrs.get();
  g_write.get(), g_close.get(), g_dup.get(), g_dup2.get(), g_dup3.get(), g_socket.get();
}

}  // namespace rrdma::ucma_shim::real
